#!/usr/bin/env bash
# Calls against tasks, in one session, RUNS times each (default 5),
# interleaved so that machine noise falls on all alike; prints medians.
#
#   S1 tasks   8 producers + 8 workers, batch 1, 20,000 tasks (BENCHMARKS.md's S1)
#   S1 calls   8 callers (each calls, then awaits its outcome) + 8 workers, 20,000 calls
#   C1 idle    1 caller + 1 waiting worker, 2,000 calls one after another:
#              the latency of a call on an idle berthd
#
#   tools/bench/calls.sh [RUNS]        (needs ./build)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-5}
b=./build

field() { grep -o "\"$2\":[0-9.]*" <<<"$1" | head -1 | cut -d: -f2; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

declare -A tput p50 p99
run() { # name, rate field, command...
  local name=$1 rate=$2; shift 2
  local out; out=$("$@" 2>/dev/null)
  tput[$name]+="$(field "$out" "$rate") "
  p50[$name]+="$(field "$out" p50) "
  p99[$name]+="$(field "$out" p99) "
}

for i in $(seq 1 "$runs"); do
  echo "run $i/$runs" >&2
  run s1_tasks tasks_per_s $b/berth-bench --spawn --tasks 20000 --producers 8 --workers 8 --json
  run s1_calls calls_per_s $b/berth-bench --spawn --calls --tasks 20000 --producers 8 --workers 8 --json
  run c1_idle calls_per_s $b/berth-bench --spawn --calls --tasks 2000 --producers 1 --workers 1 --json
done

printf '%-10s %12s %10s %10s   (medians of %d runs; latency: e2e for tasks, accepted -> outcome for calls)\n' \
  scenario per_s p50_ms p99_ms "$runs"
for k in s1_tasks s1_calls c1_idle; do
  printf '%-10s %12.1f %10.3f %10.3f\n' "$k" \
    "$(tr ' ' '\n' <<<"${tput[$k]}" | grep . | median)" \
    "$(tr ' ' '\n' <<<"${p50[$k]}" | grep . | median)" \
    "$(tr ' ' '\n' <<<"${p99[$k]}" | grep . | median)"
done
