#!/usr/bin/env bash
# Latency at a given load (BENCHMARKS.md, "Latency at a given load"):
# measures berth's flat-out S1 and S2 (medians of 3), then offers 10, 25,
# 50, 75 and 90 % of each, open loop (--rate: latency from each task's
# intended send time), to berth and to beanstalkd (S1 shape: -b -f 0; S2
# shape: in memory) at the same rates, and plots p50/p99 against the
# offered load. berth runs twice at each point: on the disk, and with its
# data directory on tmpfs (TMPDIR=/dev/shm, "berth-tmpfs": its fsyncs cost
# nothing), which tells berth's own latency from the disk's.
#
#   tools/bench/latency.sh [SECONDS_PER_POINT] [OUT_DIR]   (needs ./build,
#                                                           beanstalkd, gnuplot)
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-5}
out=${2:-tools/bench/plots}
b=./build
field() { grep -o "\"$2\":[0-9.]*" <<<"$1" | head -1 | cut -d: -f2; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
s1=(--producers 8 --workers 8 --payload 100)
s2=(--producers 4 --workers 4 --submit-batch 100 --fetch-batch 100 --complete-batch 100 --payload 100)
flat() { # shape flags...
  for i in 1 2 3; do field "$($b/berth-bench --spawn --json "$@")" tasks_per_s; done | median
}
t1=$(flat --tasks 20000 "${s1[@]}")
t2=$(flat --tasks 200000 "${s2[@]}")
echo "flat out: S1 $t1 tasks/s, S2 $t2 tasks/s" >&2
csv=$out/latency.csv
echo "shape,percent,rate,system,p50_ms,p99_ms,tasks_per_s" >"$csv"
point() { # shape percent rate system json
  local o=$5
  if [[ $(field "$o" lost) != 0 || $(field "$o" errors) != 0 ]]; then
    echo "$1 $2% $4: lost or failed: $o" >&2; exit 1
  fi
  echo "$1,$2,$3,$4,$(field "$o" p50),$(field "$o" p99),$(field "$o" tasks_per_s)" >>"$csv"
}
for pct in 10 25 50 75 90; do
  r1=$(awk -v t="$t1" -v p="$pct" 'BEGIN { printf "%d", t * p / 100 }')
  r2=$(awk -v t="$t2" -v p="$pct" 'BEGIN { printf "%d", t * p / 100 }')
  echo "$pct%: S1 at $r1/s, S2 at $r2/s" >&2
  point S1 "$pct" "$r1" berth "$($b/berth-bench --spawn --json --rate "$r1" --tasks $((r1 * secs)) "${s1[@]}")"
  point S1 "$pct" "$r1" berth-tmpfs "$(TMPDIR=/dev/shm $b/berth-bench --spawn --json --rate "$r1" --tasks $((r1 * secs)) "${s1[@]}")"
  point S1 "$pct" "$r1" beanstalkd "$($b/beanstalk-bench --spawn-binlog --json --rate "$r1" --tasks $((r1 * secs)) --producers 8 --workers 8 --payload 100)"
  point S2 "$pct" "$r2" berth "$($b/berth-bench --spawn --json --rate "$r2" --tasks $((r2 * secs)) "${s2[@]}")"
  point S2 "$pct" "$r2" berth-tmpfs "$(TMPDIR=/dev/shm $b/berth-bench --spawn --json --rate "$r2" --tasks $((r2 * secs)) "${s2[@]}")"
  point S2 "$pct" "$r2" beanstalkd "$($b/beanstalk-bench --spawn-memory --json --rate "$r2" --tasks $((r2 * secs)) --producers 8 --workers 8 --payload 100)"
done
column -s, -t "$csv" >&2
for shape in S1 S2; do
  gnuplot -e "in='$csv'; shape='$shape'; out='$out/latency-$(tr 'S' 's' <<<"$shape").png'" tools/bench/plot-latency.gp
done
