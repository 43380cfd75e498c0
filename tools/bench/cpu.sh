#!/usr/bin/env bash
# What a task costs in CPU (BENCHMARKS.md, "Later, and first"): S2's shape
# (4 producers, 4 workers, batches of 100, 100-byte payloads, 10 s of
# submitting, as tools/bench/later.sh runs it), plain, with 10 priorities
# and with every other task delayed 0-1 s, interleaved RUNS times; medians
# of the CPU each task took, in microseconds: the whole machine's,
# berthd's, and berthd's engine thread's alone. Throughput on this shared machine moves by 20%
# from run to run; CPU per task moves far less, and it bounds throughput
# whatever the threads: two cores at the machine's CPU per task is the
# most any arrangement of berthd's work could reach.
#
#   tools/bench/cpu.sh [RUNS]      (needs ./build; default 5; SECS=10)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-5}
secs=${SECS:-10}
b=./build
port=${PORT:-7470}
dir=$(mktemp -d /tmp/berth-cpu.XXXXXX)
pid=""
trap '[[ -n $pid ]] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT

field() { grep -o "\"$2\":[0-9.]*" <<<"$1" | head -1 | cut -d: -f2; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
# machine, proc, thread, hz: CPU ticks
source tools/bench/ticks.sh

declare -A tput mach bd eng
names=()
run() { # name, berth-bench flags...
  local name=$1; shift
  [[ " ${names[*]} " == *" $name "* ]] || names+=("$name")
  rm -rf "$dir/data"
  "$b/berthd" --data "$dir/data" --operate "tcp://127.0.0.1:$port" \
    --admin "tcp://127.0.0.1:$((port + 1))" --events "tcp://127.0.0.1:$((port + 2))" \
    --metrics "http://127.0.0.1:$((port + 3))" >"$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q "berthd ready" "$dir/log" && break; sleep 0.1; done
  grep -q "berthd ready" "$dir/log" || { cat "$dir/log" >&2; exit 1; }
  local m0 p0 e0 m1 p1 e1 out
  m0=$(machine) p0=$(proc "$pid") e0=$(thread "$pid" berth-engine)
  out=$("$b/berth-bench" --operate "tcp://127.0.0.1:$port" --duration "$secs" --producers 4 \
    --workers 4 --submit-batch 100 --fetch-batch 100 --complete-batch 100 --payload 100 \
    --json "$@")
  m1=$(machine) p1=$(proc "$pid") e1=$(thread "$pid" berth-engine)
  kill "$pid"
  wait "$pid" || true
  pid=""
  if [[ $(field "$out" lost) != 0 || $(field "$out" errors) != 0 ]]; then
    echo "$name: lost or failed tasks: $out" >&2
    exit 1
  fi
  local n
  n=$(field "$out" tasks)
  us() { awk -v t="$1" -v n="$n" -v hz="$hz" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }'; }
  tput[$name]+="$(field "$out" tasks_per_s) "
  mach[$name]+="$(us $((m1 - m0))) "
  bd[$name]+="$(us $((p1 - p0))) "
  eng[$name]+="$(us $((e1 - e0))) "
}

for i in $(seq 1 "$runs"); do
  echo "run $i/$runs" >&2
  run s2_plain
  run s2_10_priorities --priorities 10
  run s2_half_delayed_0_1s --delay-ms 1000
done

m() { tr ' ' '\n' <<<"$1" | grep . | median; }
printf '%-24s %10s %12s %10s %10s %14s   (medians of %d runs of %d s)\n' scenario tasks/s \
  machine_us berthd_us engine_us bound_tasks/s "$runs" "$secs"
for k in "${names[@]}"; do
  printf '%-24s %10.0f %12.2f %10.2f %10.2f %14.0f   %.2f of plain\n' "$k" \
    "$(m "${tput[$k]}")" "$(m "${mach[$k]}")" "$(m "${bd[$k]}")" "$(m "${eng[$k]}")" \
    "$(awk -v u="$(m "${mach[$k]}")" 'BEGIN { print 2e6 / u }')" \
    "$(awk -v a="$(m "${mach[$k]}")" -v b="$(m "${mach[s2_plain]}")" 'BEGIN { print b / a }')"
done
