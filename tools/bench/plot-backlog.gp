# Plots tools/bench/backlog.sh's results at several backlogs (a CSV of
# backlog,s2_tasks_per_s,rss_mib,restart_s): S2 beside the backlog, berthd's
# resident memory after the preload, and the restart (kill -9 to the first
# fetch), each against the backlog.
# gnuplot -e "in='backlog.csv'; out='backlog.png'" tools/bench/plot-backlog.gp
set datafile separator ','
set terminal pngcairo size 1200,400 noenhanced
set output out
set multiplot layout 1,3 title 'berth beside a backlog of 100-byte tasks nobody fetches'
set grid
set key off
set xlabel 'backlog (million tasks)'
set xtics (0, 1, 10)
set xrange [-0.3:10.3]
set yrange [0:*]
set ylabel 'tasks / s'
set title 'S2 beside it (medians)'
plot in using ($1/1e6):2 with linespoints lw 2 pt 7
set ylabel 'MiB'
set title 'berthd resident after the preload'
plot in using ($1/1e6):3 with linespoints lw 2 pt 7
set ylabel 's'
set title 'restart: kill -9 to the first fetch'
plot in using ($1/1e6):4 with linespoints lw 2 pt 7
unset multiplot
