#!/usr/bin/env bash
# tls+tcp:// served by berth's own server (mbed TLS) against nng's REP
# socket (--operate-nng), the same nng REQ clients on both, RUNS times each
# (default 5), interleaved; prints medians.
#
#   S1   8 producers + 8 workers, batch 1, 20,000 tasks
#   S2   4 + 4, batches of 100, 200,000 tasks
#   R    400 tasks/s offered (open loop, 2 + 2) for 8 s, alone and while
#        two `openssl s_time -new` make new TLS connections as fast as
#        they can (a handshake flood): p50/p99 submit -> completion
#
#   tools/bench/tls.sh [RUNS]        (needs ./build and openssl)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-5}
b=$PWD/build
dir=$(mktemp -d "${TMPDIR:-/tmp}/berth-bench-tls-XXXXXX")
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj /CN=localhost -addext subjectAltName=DNS:localhost \
  -keyout "$dir/key.pem" -out "$dir/cert.pem" >/dev/null 2>&1

field() { grep -o "\"$2\":[0-9.]*" <<<"$1" | head -1 | cut -d: -f2; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

# berthd on a fresh store, tls+tcp:// on a free port; sets $pid and $url.
start() {
  rm -rf "$dir/data"
  "$b/berthd" --data "$dir/data" --operate tls+tcp://127.0.0.1:0 --admin "ipc://$dir/admin" \
    --events tcp://127.0.0.1:0 --metrics http://127.0.0.1:0 \
    --tls-cert "$dir/cert.pem" --tls-key "$dir/key.pem" "$@" >"$dir/out" 2>"$dir/err" &
  pid=$!
  for _ in $(seq 1 100); do grep -q ready "$dir/out" 2>/dev/null && break; sleep 0.05; done
  url=$(grep -o 'operate=[^ ]*' "$dir/out" | cut -d= -f2 | sed 's/127.0.0.1/localhost/')
}
stop() { kill "$pid"; wait "$pid" || true; pid=; }

declare -A tput p50 p99
run() { # name, berthd flags..., -- bench flags...
  local name=$1; shift
  local flags=()
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  start "${flags[@]}"
  if [ "${FLOOD:-0}" = 1 ]; then flood; sleep 0.5; fi
  local out; out=$("$b/berth-bench" --operate "$url" --tls-ca "$dir/cert.pem" --json "$@" 2>/dev/null)
  stop
  tput[$name]+="$(field "$out" tasks_per_s) "
  p50[$name]+="$(grep -o '"e2e_ms":{"p50":[0-9.]*' <<<"$out" | grep -o '[0-9.]*$') "
  p99[$name]+="$(grep -o '"e2e_ms":{[^}]*' <<<"$out" | grep -o '"p99":[0-9.]*' | cut -d: -f2) "
}
flood() { # run, with new TLS connections made meanwhile
  local port=${url##*:}
  for _ in 1 2; do
    timeout 12 openssl s_time -connect "127.0.0.1:$port" -new -time 10 >/dev/null 2>&1 &
  done
}

s1=(--tasks 20000 --producers 8 --workers 8 --payload 100)
s2=(--tasks 200000 --producers 4 --workers 4 --submit-batch 100 --fetch-batch 100
    --complete-batch 100 --payload 100)
r=(--rate 400 --duration 8 --producers 2 --workers 2 --payload 100)
for i in $(seq 1 "$runs"); do
  echo "run $i/$runs" >&2
  run s1_own -- "${s1[@]}"
  run s1_nng --operate-nng -- "${s1[@]}"
  run s2_own -- "${s2[@]}"
  run s2_nng --operate-nng -- "${s2[@]}"
  run r_own -- "${r[@]}"
  run r_nng --operate-nng -- "${r[@]}"
  FLOOD=1 run r_own_flood -- "${r[@]}"
  FLOOD=1 run r_nng_flood --operate-nng -- "${r[@]}"
  wait
done

printf '%-12s %12s %10s %10s   (medians of %d runs over tls+tcp://; e2e ms)\n' \
  scenario per_s p50_ms p99_ms "$runs"
for k in s1_own s1_nng s2_own s2_nng r_own r_nng r_own_flood r_nng_flood; do
  printf '%-12s %12.1f %10.3f %10.3f\n' "$k" \
    "$(tr ' ' '\n' <<<"${tput[$k]}" | grep . | median)" \
    "$(tr ' ' '\n' <<<"${p50[$k]}" | grep . | median)" \
    "$(tr ' ' '\n' <<<"${p99[$k]}" | grep . | median)"
done
