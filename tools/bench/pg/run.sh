#!/usr/bin/env bash
# Runs berth's competitors on PostgreSQL and Redis in berth's two load shapes
# (S1: 8 producers + 8 workers, one job per call; S2: 4 + 4, batches of 100)
# and prints one table: system, shape, jobs/s, lost, duplicates, latency.
#
#   PGURI=postgresql://user@host:port/db tools/bench/pg/run.sh [REDIS_PORT]
#
# PGURI    the PostgreSQL to measure on. Each run drops and recreates the
#          schemas graphile_worker, pgboss, bullmq and bench_floor there.
# REDIS_PORT (argument or environment) a running redis-server on 127.0.0.1
#          for BullMQ; it is FLUSHDB'd. Without it, this script starts a
#          throwaway redis-server (appendonly yes, appendfsync always) on a
#          free port in a temp dir and stops it at the end.
# SYSTEMS  which to run, in order (default: all):
#          floor floor-lock graphile pgboss pgboss-work bullmq bullmq-pg
# SHAPES   default "s1 s2"
# JOBS_S1 / JOBS_S2            jobs per run (default 20000 / 200000, as
#                              berth's own compare.sh)
# SLOW_JOBS_S1 / SLOW_JOBS_S2  for pgboss-work and bullmq-pg, which are
#                              slower by design (default 1000 / 20000 and
#                              5000 / 50000); see README.md
# TIMEOUT  seconds one run may take (default 900)
# BENCH_LOCK  lock file each run holds (flock), so that runs do not share
#          the machine's cores with other benchmarks (default
#          /tmp/berth-cpu.lock; empty: no lock)
# RESULTS  where the JSON lines go (default: a new file under ${TMPDIR:-/tmp})
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

: "${PGURI:?set PGURI=postgresql://user@host:port/db}"
export PGURI
redis_port=${1:-${REDIS_PORT:-}}
systems=${SYSTEMS:-floor floor-lock graphile pgboss pgboss-work bullmq bullmq-pg}
shapes=${SHAPES:-s1 s2}
timeout_s=${TIMEOUT:-900}
lock=${BENCH_LOCK-/tmp/berth-cpu.lock}
results=${RESULTS:-$(mktemp "${TMPDIR:-/tmp}/berth-pg-competitors.XXXXXX.jsonl")}
: > "$results"

if [ ! -d node_modules ]; then
  echo "installing the pinned packages (npm ci)" >&2
  npm ci --no-audit --no-fund >&2
fi
if [ -z "${PGBENCH:-}" ]; then
  if [ -x /usr/lib/postgresql/15/bin/pgbench ]; then PGBENCH=/usr/lib/postgresql/15/bin/pgbench; else PGBENCH=pgbench; fi
fi
export PGBENCH

# shellcheck source=redis.sh
. "$here/redis.sh"
trap redis_stop EXIT

if [[ " $systems " == *" bullmq "* ]] && [ -z "$redis_port" ]; then
  redis_start
  redis_port=$REDIS_PORT
fi
export REDIS_PORT=${redis_port:-6379}

node -e "
const { Client } = require('pg');
(async () => {
  const c = new Client({ connectionString: process.env.PGURI });
  await c.connect();
  const r = await c.query(\"SELECT version() AS v, current_setting('fsync') AS f, current_setting('synchronous_commit') AS s, current_setting('wal_sync_method') AS w\");
  const x = r.rows[0];
  console.error('PostgreSQL: ' + x.v.split(' on ')[0] + '; fsync ' + x.f + ', synchronous_commit ' + x.s + ', wal_sync_method ' + x.w);
  if (x.f !== 'on' || x.s !== 'on') console.error('WARNING: this PostgreSQL does not fsync each commit: the numbers are not durable ones');
  await c.end();
})().catch((e) => { console.error('cannot reach PGURI: ' + e.message); process.exit(1); });
"

jobs_for() { # system shape
  case "$1:$2" in
    pgboss-work:s1) echo "${SLOW_JOBS_S1:-1000}" ;;
    pgboss-work:s2) echo "${SLOW_JOBS_S2:-20000}" ;;
    bullmq-pg:s1) echo "${SLOW_JOBS_S1:-5000}" ;;
    bullmq-pg:s2) echo "${SLOW_JOBS_S2:-50000}" ;;
    *:s1) echo "${JOBS_S1:-20000}" ;;
    *:s2) echo "${JOBS_S2:-200000}" ;;
  esac
}
cmd_for() { # system
  case "$1" in
    floor) echo "node floor.js" ;;
    floor-lock) echo "node floor.js --lock" ;;
    graphile) echo "node graphile.js" ;;
    pgboss) echo "node pgboss.js --mode fetch" ;;
    pgboss-work) echo "node pgboss.js --mode work" ;;
    bullmq) echo "node bullmq.js --backend redis" ;;
    bullmq-pg) echo "node bullmq.js --backend pg" ;;
    *) echo "unknown system $1" >&2; return 1 ;;
  esac
}

for shape in $shapes; do
  for sys in $systems; do
    n=$(jobs_for "$sys" "$shape")
    cmd=$(cmd_for "$sys")
    echo "$(date +%T) $sys $shape: $n jobs" >&2
    out=$(mktemp)
    set +e
    if [ -n "$lock" ]; then
      flock "$lock" $cmd --shape "$shape" --jobs "$n" --timeout "$timeout_s" --json > "$out"
    else
      $cmd --shape "$shape" --jobs "$n" --timeout "$timeout_s" --json > "$out"
    fi
    rc=$?
    set -e
    if grep -q '^{' "$out"; then
      grep '^{' "$out" | tail -1 >> "$results"
    else
      printf '{"system":"%s","shape":"%s","jobs":%s,"error":"exited %s without a result"}\n' "$sys" "$shape" "$n" "$rc" >> "$results"
    fi
    rm -f "$out"
  done
done

echo
node table.js "$results"
echo
echo "JSON lines (versions, settings, counts): $results"
