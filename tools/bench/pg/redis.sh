# Sourced by run.sh and ../pg.sh: a throwaway redis-server for BullMQ,
# durable per acknowledgement (appendonly yes, appendfsync always), on a
# free port in a temp dir. redis_start sets REDIS_PORT; redis_stop ends it.
redis_dir=
redis_start() {
  if ! command -v redis-server >/dev/null; then
    echo "redis-server is missing: apt-get install -y redis-server (or pass REDIS_PORT)" >&2
    return 1
  fi
  redis_dir=$(mktemp -d "${TMPDIR:-/tmp}/berth-redis.XXXXXX")
  REDIS_PORT=$(node -e "const s=require('net').createServer();s.listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$redis_dir" \
    --appendonly yes --appendfsync always --save '' \
    --daemonize yes --pidfile "$redis_dir/redis.pid" --logfile "$redis_dir/redis.log"
  for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  echo "started redis-server on 127.0.0.1:$REDIS_PORT (appendonly yes, appendfsync always) in $redis_dir" >&2
  export REDIS_PORT
}
redis_stop() {
  if [ -n "$redis_dir" ] && [ -f "$redis_dir/redis.pid" ]; then
    kill "$(cat "$redis_dir/redis.pid")" 2>/dev/null || true
    for _ in $(seq 50); do [ -f "$redis_dir/redis.pid" ] || break; sleep 0.1; done
    rm -rf "$redis_dir"
  fi
}
