#!/usr/bin/env bash
# berthd under ThreadSanitizer (build-tsan/), driven over real sockets by
# the load tool and the hostile clients: every data race TSan sees between
# berthd's threads fails the run. (The engine, the commit thread, the
# servers' loops and the push sender share connections and queues; the
# suites cannot run under TSan with the Criterion runner, so this drives
# the daemon itself.) RocksDB, nng and mbed TLS are not instrumented: what
# races inside them is not seen, what berth's code does around them is.
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

"${norand[@]}" build-tsan/berthd --data "$dir/data" --operate "$op" --admin "$adm" \
  --events "tcp://127.0.0.1:$((port + 2))" --metrics "http://127.0.0.1:$((port + 3))" \
  >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q "berthd ready" "$dir/log" && break; sleep 0.1; done
grep -q "berthd ready" "$dir/log" || { cat "$dir/log" >&2; exit 1; }

bench() { "${norand[@]}" build-tsan/berth-bench --operate "$op" --duration "$secs" "$@" >/dev/null; }
bench --producers 4 --workers 4 --submit-batch 100 --fetch-batch 100 --payload 100
bench --producers 8 --workers 8
bench --producers 2 --workers 2 --submit-batch 20 --fetch-batch 20 --priorities 3 --delay-ms 300
bench --producers 4 --workers 2 --calls
# A scrape of /metrics (no curl on a bare machine: bash's /dev/tcp)
exec 3<>"/dev/tcp/127.0.0.1/$((port + 3))"
printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
head -1 <&3 | grep -q " 200 "
exec 3<&-
"${norand[@]}" build-tsan/berth-hostile --operate "$op" --pid "$pid" --attack all \
  --seconds "$secs" --settle 1 >/dev/null
# Last: it deploys the bench's topics as push channels.
bench --producers 2 --workers 2 --push --admin "$adm"

kill "$pid"
rc=0
wait "$pid" || rc=$?
pid=""
if compgen -G "$dir/tsan.*" >/dev/null; then
  cat "$dir"/tsan.* >&2
  echo "tsan-smoke: ThreadSanitizer reported the above" >&2
  exit 1
fi
if [[ $rc != 0 ]]; then
  cat "$dir/log" >&2
  echo "tsan-smoke: berthd exited $rc" >&2
  exit 1
fi
echo "tsan-smoke: no data race reported"
