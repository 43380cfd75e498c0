#!/usr/bin/env bash
# berth beside a backlog (BENCHMARKS.md, "A backlog"): S2 beside none and
# beside N preloaded 100-byte tasks that no worker fetches, interleaved
# RUNS times, medians printed with the resident memory after the preload;
# then RESTARTS times: N tasks preloaded, berthd killed -9, and the time
# from its start to the first fetch answered.
#
#   tools/bench/backlog.sh [RUNS] [N] [RESTARTS]     (needs ./build)
#   defaults: 5 runs, N = 10,000,000, 3 restarts
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-5}
n=${2:-10000000}
restarts=${3:-3}
b=./build
secs=${SECS:-10}
dir=$(mktemp -d /tmp/berth-backlog.XXXXXX)
trap 'pkill -f "berthd --data $dir" 2>/dev/null || true; rm -rf "$dir"' EXIT

field() { grep -o "\"$2\":[0-9.]*" <<<"$1" | head -1 | cut -d: -f2; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

none="" beside="" rss=""
for i in $(seq 1 "$runs"); do
  for pre in 0 "$n"; do
    echo "run $i/$runs, backlog $pre" >&2
    out=$("$b/berth-bench" --spawn --preload "$pre" --duration "$secs" --producers 4 --workers 4 \
      --submit-batch 100 --fetch-batch 100 --complete-batch 100 --payload 100 --json)
    if [[ $(field "$out" lost) != 0 || $(field "$out" errors) != 0 ]]; then
      echo "lost or failed tasks: $out" >&2
      exit 1
    fi
    if [[ $pre == 0 ]]; then
      none+="$(field "$out" tasks_per_s) "
    else
      beside+="$(field "$out" tasks_per_s) "
      rss+="$(field "$out" preloaded) "
    fi
  done
done
m() { tr ' ' '\n' <<<"$1" | grep . | median; }
printf 'S2 beside no backlog   %10.1f tasks/s (median of %d)\n' "$(m "$none")" "$runs"
printf 'S2 beside %d  %10.1f tasks/s, %.2f of none; berthd %.0f MiB after the preload\n' "$n" \
  "$(m "$beside")" "$(awk -v a="$(m "$beside")" -v b="$(m "$none")" 'BEGIN { print a / b }')" \
  "$(m "$rss")"

for i in $(seq 1 "$restarts"); do
  rm -rf "$dir/data"
  "$b/berthd" --data "$dir/data" >/dev/null 2>&1 &
  pid=$!
  until "$b/berth" stats >/dev/null 2>&1; do sleep 0.2; done
  "$b/berth-bench" --operate tcp://127.0.0.1:7450 --preload "$n" --tasks 1 --json >/dev/null
  kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  start=$(date +%s.%N)
  "$b/berthd" --data "$dir/data" >/dev/null 2>"$dir/err" &
  pid=$!
  until "$b/berth" fetch bench-backlog --worker w --wait-ms 0 --max 1 >/dev/null 2>&1; do
    sleep 0.1
  done
  printf 'restart %d: %.1f s to the first fetch; %s\n' "$i" \
    "$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { print e - s }')" "$(grep recovered "$dir/err")"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
done
