# Plots a berth-bench --csv series: throughput and end-to-end latency over
# time. gnuplot -e "in='run.csv'; out='run.png'" tools/bench/plot-bench.gp
if (!exists("in")) in = 'bench.csv'
if (!exists("out")) out = 'bench.png'
set datafile separator ','
set terminal pngcairo size 1000,600 noenhanced
set output out
set key top left
set xlabel 'second'
set ylabel 'tasks / s'
set y2label 'e2e latency (ms)'
set ytics nomirror
set y2tics
set grid
set title sprintf('berth-bench: %s', in)
plot in using 1:3 skip 1 with lines lw 2 title 'completed / s', \
     in using 1:2 skip 1 with lines lw 1 dt 2 title 'submitted / s', \
     in using 1:4 skip 1 axes x1y2 with lines lw 1 title 'e2e p50 (ms)', \
     in using 1:5 skip 1 axes x1y2 with lines lw 1 dt 3 title 'e2e p99 (ms)'
