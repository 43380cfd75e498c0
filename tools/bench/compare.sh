#!/usr/bin/env bash
# Runs the scenarios of BENCHMARKS.md for berth and beanstalkd in one
# session, RUNS times each (default 5), interleaved so that machine noise
# falls on both alike, and prints the medians and the ratios. berth's S1
# runs twice: its workers completing on their next fetch (the default)
# and with completions of their own (--no-fused).
#
#   tools/bench/compare.sh [RUNS]        (needs ./build and beanstalkd)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-5}
b=./build

field() { grep -o "\"$2\":[0-9.]*" <<<"$1" | head -1 | cut -d: -f2; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

declare -A tput p50 p99
run() { # name, command...
  local name=$1; shift
  local out; out=$("$@")
  tput[$name]+="$(field "$out" tasks_per_s) "
  p50[$name]+="$(field "$out" p50) "
  p99[$name]+="$(field "$out" p99) "
}

for i in $(seq 1 "$runs"); do
  echo "run $i/$runs" >&2
  run s1_berth $b/berth-bench --spawn --tasks 20000 --producers 8 --workers 8 --payload 100 --json
  run s1_berth_separate $b/berth-bench --spawn --tasks 20000 --producers 8 --workers 8 --payload 100 --no-fused --json
  run s1_beanstalkd_binlog $b/beanstalk-bench --spawn-binlog --tasks 20000 --producers 8 --workers 8 --payload 100 --json
  run s2_berth $b/berth-bench --spawn --tasks 200000 --producers 4 --workers 4 --submit-batch 100 --fetch-batch 100 --complete-batch 100 --payload 100 --json
  run s2_beanstalkd_memory $b/beanstalk-bench --spawn-memory --tasks 200000 --producers 8 --workers 8 --payload 100 --json
done

printf '%-24s %14s %12s %12s   (medians of %d runs)\n' scenario tasks/s e2e_p50_ms e2e_p99_ms "$runs"
for k in s1_berth s1_berth_separate s1_beanstalkd_binlog s2_berth s2_beanstalkd_memory; do
  printf '%-24s %14.1f %12.3f %12.3f\n' "$k" \
    "$(tr ' ' '\n' <<<"${tput[$k]}" | grep . | median)" \
    "$(tr ' ' '\n' <<<"${p50[$k]}" | grep . | median)" \
    "$(tr ' ' '\n' <<<"${p99[$k]}" | grep . | median)"
done
m() { tr ' ' '\n' <<<"${tput[$1]}" | grep . | median; }
awk -v a="$(m s1_berth)" -v b="$(m s1_beanstalkd_binlog)" -v c="$(m s2_berth)" -v d="$(m s2_beanstalkd_memory)" \
  -v e="$(m s1_berth_separate)" \
  'BEGIN { printf "S1 ratio berth / beanstalkd -b -f 0:   %.2fx (target 4x, fused)\n", a/b;
           printf "S1 fused / S1 with separate completes: %.2fx (target 1.4x)\n", a/e;
           printf "S2 ratio berth / beanstalkd in memory: %.2fx (target 5x; and 50,000 tasks/s)\n", c/d }'
