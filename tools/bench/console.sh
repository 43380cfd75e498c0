#!/usr/bin/env bash
# S2 with the console's overview open in a headless chromium against S2
# without it, in pairs (one order, then the other) RUNS times (default 5)
# on one berthd, medians printed (BENCHMARKS.md, "The console under
# load"): of each, and of each pair's ratio (a pair runs back to back, so
# the machine's slower minutes fall on both). The page reads the overview
# once a second as an operator's would; each loaded run says how many
# reads it made and that none failed. Throughput here moves by 20% from
# run to run; CPU per task (the machine's, berthd's, its engine thread's,
# as tools/bench/cpu.sh counts it) moves far less and says what the page
# costs: the machine's includes chromium's own.
#
#   tools/bench/console.sh [RUNS]          (needs ./build and tests/console's npm ci)
#   SHOT=overview.png tools/bench/console.sh 0
#       no comparison: 60 s of a mixed load (four topics, a rate, a few
#       failures) with the page open, and a screenshot of it near the end
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-5}
secs=${SECS:-10}
b=./build
dir=$(mktemp -d)
"$b/berthd" --data "$dir/data" --operate tcp://127.0.0.1:0 --admin tcp://127.0.0.1:0 \
  --events tcp://127.0.0.1:0 --metrics http://127.0.0.1:0 >"$dir/ready" 2>"$dir/stderr" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do grep -q ready "$dir/ready" && break; sleep 0.1; done
operate=$(grep -o 'operate=[^ ]*' "$dir/ready" | cut -d= -f2)
metrics=$(grep -o 'metrics=[^ ]*' "$dir/ready" | cut -d= -f2)

field() { grep -o "\"$2\":[0-9.]*" <<<"$1" | head -1 | cut -d: -f2; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
# machine, proc, thread, hz: CPU ticks
source tools/bench/ticks.sh
# One S2 run: "tasks/s machine_us berthd_us engine_us" (CPU per task, µs)
s2() {
  local out m0 p0 e0 m1 p1 e1
  m0=$(machine) p0=$(proc "$pid") e0=$(thread "$pid" berth-engine)
  out=$("$b/berth-bench" --operate "$operate" --duration "$secs" --producers 4 --workers 4 \
    --submit-batch 100 --fetch-batch 100 --complete-batch 100 --payload 100 --json "$@")
  m1=$(machine) p1=$(proc "$pid") e1=$(thread "$pid" berth-engine)
  if [[ $(field "$out" lost) != 0 || $(field "$out" errors) != 0 ]]; then
    echo "lost or failed tasks: $out" >&2; exit 1
  fi
  awk -v r="$(field "$out" tasks_per_s)" -v n="$(field "$out" tasks)" -v hz="$hz" \
    -v m=$((m1 - m0)) -v p=$((p1 - p0)) -v e=$((e1 - e0)) \
    'BEGIN { printf "%.0f %.3f %.3f %.3f", r, m / hz * 1e6 / n, p / hz * 1e6 / n, e / hz * 1e6 / n }'
}
page_open() { # [shot after_ms]: starts the page, waits until it shows
  node tools/bench/console-page.mjs "$metrics" "$@" >"$dir/page.out" 2>"$dir/page.err" &
  page=$!
  for _ in $(seq 200); do grep -q open "$dir/page.err" && return; sleep 0.1; done
  echo "the page did not open: $(cat "$dir/page.err")" >&2; exit 1
}
page_close() { # (not in a subshell: wait needs the page's own parent)
  kill -TERM "$page"
  wait "$page" || true
  echo "  page: $(cat "$dir/page.out")" >&2
}


if [[ -n ${SHOT:-} ]]; then
  # A few tasks failed for good, one delayed topic, then a steady load.
  for i in 1 2 3; do
    id=$("$b/berth" --operate "$operate" submit invoices "inv-$i")
    tok=$("$b/berth" --operate "$operate" --json fetch invoices --worker billing-1 --max 1 |
      grep -o '"lock_token":"[0-9a-f]*"' | cut -d'"' -f4)
    "$b/berth" --operate "$operate" fail "$id" --worker billing-1 --token "$tok" \
      --code UPSTREAM_DOWN --message "payment provider answered 503" --retries-left 0 >/dev/null
  done
  for i in $(seq 40); do "$b/berth" --operate "$operate" submit reports "r$i" --delay 1h >/dev/null; done
  page_open "$SHOT" 58000
  "$b/berth-bench" --operate "$operate" --duration 60 --producers 4 --workers 2 --rate 30000 \
    --submit-batch 20 --fetch-batch 50 --complete-batch 50 --topics 4 --json >/dev/null
  page_close
  exit 0
fi

# Per pair: S2 without the page and with it, back to back (the order
# alternating); each a line "tasks/s machine_us berthd_us engine_us".
: >"$dir/without" >"$dir/with"
for i in $(seq 1 "$runs"); do
  echo "run $i/$runs" >&2
  if ((i % 2)); then s2 >>"$dir/without"; echo >>"$dir/without"; fi
  page_open
  sleep 3 # (a page that has been open a while: not the browser starting)
  s2 >>"$dir/with"; echo >>"$dir/with"
  page_close
  if ((i % 2 == 0)); then s2 >>"$dir/without"; echo >>"$dir/without"; fi
done
col() { awk -v c="$2" '{print $c}' "$dir/$1" | median; }
echo "without the page (tasks/s machine_us berthd_us engine_us):"; cat "$dir/without"
echo "with the page:"; cat "$dir/with"
pairs=$(paste "$dir/with" "$dir/without" | awk '{print $1 / $5}' | median)
printf '%-8s %10s %12s %10s %10s   (medians of %d pairs of %d s runs)\n' "" tasks/s machine_us \
  berthd_us engine_us "$runs" "$secs"
for k in without with; do
  printf '%-8s %10.0f %12.3f %10.3f %10.3f\n' "$k" "$(col $k 1)" "$(col $k 2)" "$(col $k 3)" "$(col $k 4)"
done
awk -v a="$(col with 1)" -v b="$(col without 1)" -v p="$pairs" -v ma="$(col with 2)" \
  -v mb="$(col without 2)" -v ea="$(col with 4)" -v eb="$(col without 4)" 'BEGIN {
  printf "with/without: throughput %.3f (pairs %.3f); machine CPU per task %.3f; engine CPU per task %.3f\n",
    a / b, p, ma / mb, ea / eb }'
