#!/usr/bin/env bash
# S2 with priorities and delays beside plain S2, interleaved RUNS times
# (default 5) in one session, medians printed (BENCHMARKS.md, "Later, and
# first"). A second build directory (OTHER=DIR) adds its plain S2 to each
# round: how two builds compare on the same machine at the same time.
#
#   tools/bench/later.sh [RUNS]            (needs ./build)
#   OTHER=/path/to/other/build tools/bench/later.sh 5
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-5}
b=./build
secs=${SECS:-10}

field() { grep -o "\"$2\":[0-9.]*" <<<"$1" | head -1 | cut -d: -f2; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

declare -A tput p50 p99
names=()
run() { # name, bench binary, extra flags...
  local name=$1 bench=$2; shift 2
  [[ " ${names[*]} " == *" $name "* ]] || names+=("$name")
  local out; out=$("$bench" --spawn --duration "$secs" --producers 4 --workers 4 --submit-batch 100 \
    --fetch-batch 100 --complete-batch 100 --payload 100 --json "$@")
  if [[ $(field "$out" lost) != 0 || $(field "$out" errors) != 0 ]]; then
    echo "$name: lost or failed tasks: $out" >&2; exit 1
  fi
  tput[$name]+="$(field "$out" tasks_per_s) "
  p50[$name]+="$(field "$out" p50) "
  p99[$name]+="$(field "$out" p99) "
}

for i in $(seq 1 "$runs"); do
  echo "run $i/$runs" >&2
  run s2_plain $b/berth-bench
  run s2_10_priorities $b/berth-bench --priorities 10
  run s2_half_delayed_0_1s $b/berth-bench --delay-ms 1000
  if [[ -n ${OTHER:-} ]]; then run s2_plain_other "$OTHER/berth-bench"; fi
done

printf '%-24s %14s %12s %12s   (medians of %d runs of %s s)\n' scenario tasks/s e2e_p50_ms \
  e2e_p99_ms "$runs" "$secs"
m() { tr ' ' '\n' <<<"${tput[$1]}" | grep . | median; }
for k in "${names[@]}"; do
  printf '%-24s %14.1f %12.3f %12.3f   %.2f of plain\n' "$k" "$(m "$k")" \
    "$(tr ' ' '\n' <<<"${p50[$k]}" | grep . | median)" \
    "$(tr ' ' '\n' <<<"${p99[$k]}" | grep . | median)" \
    "$(awk -v a="$(m "$k")" -v b="$(m s2_plain)" 'BEGIN { print a / b }')"
done
