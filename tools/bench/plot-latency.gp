# Plots tools/bench/latency.sh's CSV for one shape: e2e latency p50 and
# p99 against the offered load, berth (on the disk and on tmpfs) beside
# beanstalkd.
# gnuplot -e "in='latency.csv'; shape='S1'; out='latency-s1.png'" tools/bench/plot-latency.gp
set datafile separator ','
set terminal pngcairo size 1000,600 noenhanced
set output out
set key top left
set logscale y
set xlabel 'offered load (tasks / s, open loop)'
set ylabel 'submit -> completion latency (ms, log)'
set grid
set title sprintf('%s shape: latency at a given load (beanstalkd: %s)', shape, \
                  shape eq 'S1' ? '-b -f 0' : 'in memory')
rows(sys) = sprintf("< awk -F, '$1 == \"%s\" && $4 == \"%s\"' %s", shape, sys, in)
plot rows('berth') using 3:5 with linespoints lw 2 title 'berth p50', \
     rows('berth') using 3:6 with linespoints lw 2 dt 2 title 'berth p99', \
     rows('berth-tmpfs') using 3:5 with linespoints lw 1 title 'berth on tmpfs p50', \
     rows('berth-tmpfs') using 3:6 with linespoints lw 1 dt 2 title 'berth on tmpfs p99', \
     rows('beanstalkd') using 3:5 with linespoints lw 1 title 'beanstalkd p50', \
     rows('beanstalkd') using 3:6 with linespoints lw 1 dt 2 title 'beanstalkd p99'
