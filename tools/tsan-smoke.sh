#!/usr/bin/env bash
# berthd under ThreadSanitizer (build-tsan/), driven over real sockets by
# the load tool and the hostile clients: every data race TSan sees between
# berthd's threads fails the run: the engine, the commit thread, the
# servers' loops, the TLS handshake thread and the push sender share
# connections and queues. Over tcp:// first, then tls+tcp:// (openssl makes
# a certificate and floods new handshakes). RocksDB, nng and mbed TLS are
# not instrumented: what races inside them is not seen, what berth's code
# does around them is.
#
#   tools/tsan-smoke.sh [SECONDS]      (each load and attack; default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-3}
jobs=$(nproc)

cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DBERTH_TESTS=OFF -DBERTH_TCMALLOC=OFF \
  -DCMAKE_C_FLAGS="-fsanitize=thread -O1" -DCMAKE_CXX_FLAGS="-fsanitize=thread -O1" \
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread >/dev/null
cmake --build build-tsan -j"$jobs" --target berthd berth-bench berth-hostile

dir=$(mktemp -d /tmp/berth-tsan.XXXXXX)
pid=""
trap '[[ -n $pid ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
port=${PORT:-7490}
op="tcp://127.0.0.1:$port" adm="tcp://127.0.0.1:$((port + 1))"
# Without address randomisation: TSan's shadow memory needs fixed ranges
# that some kernels' randomisation overlaps.
norand=(setarch "$(uname -m)" -R)
export TSAN_OPTIONS="halt_on_error=0 report_signal_unsafe=0 log_path=$dir/tsan"

# berthd on a fresh store with the operate URL $1 (and any flags after
# it); sets $pid.
serve() {
  local url=$1
  shift
  rm -rf "$dir/data"
  "${norand[@]}" build-tsan/berthd --data "$dir/data" --operate "$url" --admin "$adm" \
    --events "tcp://127.0.0.1:$((port + 2))" --metrics "http://127.0.0.1:$((port + 3))" "$@" \
    >"$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do grep -q "berthd ready" "$dir/log" && break; sleep 0.1; done
  grep -q "berthd ready" "$dir/log" || { cat "$dir/log" >&2; exit 1; }
}

# Stops berthd; fails on any report (berthd's or the clients') or exit.
verdict() {
  kill "$pid"
  local rc=0
  wait "$pid" || rc=$?
  pid=""
  if compgen -G "$dir/tsan.*" >/dev/null; then
    cat "$dir"/tsan.* >&2
    echo "tsan-smoke: ThreadSanitizer reported the above ($1)" >&2
    exit 1
  fi
  if [[ $rc != 0 ]]; then
    cat "$dir/log" >&2
    echo "tsan-smoke: berthd exited $rc ($1)" >&2
    exit 1
  fi
}

bench() { "${norand[@]}" build-tsan/berth-bench --duration "$secs" "$@" >/dev/null; }

# tcp://: loads of every shape, /metrics, every hostile attack, push.
serve "$op"
bench --operate "$op" --producers 4 --workers 4 --submit-batch 100 --fetch-batch 100 --payload 100
bench --operate "$op" --producers 8 --workers 8
bench --operate "$op" --producers 2 --workers 2 --submit-batch 20 --fetch-batch 20 \
  --priorities 3 --delay-ms 300
bench --operate "$op" --producers 4 --workers 2 --calls
# A scrape of /metrics (no curl on a bare machine: bash's /dev/tcp)
exec 3<>"/dev/tcp/127.0.0.1/$((port + 3))"
printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
head -1 <&3 | grep -q " 200 "
exec 3<&-
"${norand[@]}" build-tsan/berth-hostile --operate "$op" --pid "$pid" --attack all \
  --seconds "$secs" --settle 1 >/dev/null
# Last: it deploys the bench's topics as push channels.
bench --operate "$op" --producers 2 --workers 2 --push --admin "$adm"
verdict "tcp://"

# tls+tcp://: the handshake thread beside the loop (a flood of new
# handshakes while the load runs), TLS output written by the commit
# thread (large answers, pipelined batches).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj /CN=localhost -addext subjectAltName=DNS:localhost \
  -keyout "$dir/key.pem" -out "$dir/cert.pem" >/dev/null 2>&1
tls="tls+tcp://localhost:$port"
serve "$tls" --tls-cert "$dir/cert.pem" --tls-key "$dir/key.pem"
timeout $((secs * 2 + 10)) openssl s_time -connect "127.0.0.1:$port" -new -time $((secs * 2)) \
  >/dev/null 2>&1 &
flood=$!
bench --operate "$tls" --tls-ca "$dir/cert.pem" --producers 4 --workers 4 --submit-batch 100 \
  --fetch-batch 100 --payload 100
bench --operate "$tls" --tls-ca "$dir/cert.pem" --producers 2 --workers 2 --submit-batch 10 \
  --fetch-batch 10 --payload 200000
wait "$flood" || true
verdict "tls+tcp://"

echo "tsan-smoke: no data race reported"
