#!/usr/bin/env bash
# berth on PostgreSQL beside the queues people run there, in one session:
# S1 (8 producers + 8 workers, one task a request, fused completions) and
# S2 (4 + 4, batches of 100) through 1 and 3 berthd replicas sharing one
# database, and, on the same PostgreSQL, the competitors of tools/bench/pg/
# (the pgbench floor, graphile-worker, pg-boss, BullMQ on Redis with
# appendfsync always). RUNS rounds (default 3), interleaved so that the
# machine's noise falls on all alike; prints the medians, the ratios the
# targets are stated in, and berth's database commits per task.
#
#   tools/bench/pg.sh [RUNS]          (needs ./build and tools/bench/pg's npm ci)
#
# PGURI    a PostgreSQL to measure on (its databases berth_bench and
#          berth_rivals are dropped and made again). Without it the script
#          starts a throwaway cluster of PostgreSQL 15 (as the postgres user
#          when run as root) with the durable defaults (fsync,
#          synchronous_commit on), shared_buffers 512MB and
#          autovacuum_naptime 1s, and removes it at the end.
# SYSTEMS  competitors (default: floor floor-lock graphile pgboss bullmq;
#          floor-lock is the at-least-once floor, floor.js --lock)
# S1_TASKS / S2_TASKS   berth's and the fast competitors' counts (20000 /
#          200000); pg-boss runs a quarter of them (it is that much slower).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
runs=${1:-3}
b=$root/build
systems=${SYSTEMS:-floor floor-lock graphile pgboss bullmq}
s1_tasks=${S1_TASKS:-20000}
s2_tasks=${S2_TASKS:-200000}
pgbin=/usr/lib/postgresql/15/bin
export PGBENCH=${PGBENCH:-$pgbin/pgbench}
[ -x "$b/berthd" ] && [ -x "$b/berth-bench" ] || { echo "build first (./build)" >&2; exit 1; }
[ -d tools/bench/pg/node_modules ] || (cd tools/bench/pg && npm ci --no-audit --no-fund >&2)

field() { grep -o "\"$2\":[0-9.]*" <<<"$1" | head -1 | cut -d: -f2; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
free_port() { node -e "const s=require('net').createServer();s.listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})"; }

work=$(mktemp -d "${TMPDIR:-/tmp}/berth-pg-bench.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ -z "${PGURI:-}" ] && [ -f "$work/data/postmaster.pid" ]; then
    as_pg "$pgbin/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true
  fi
  redis_stop
  rm -rf "$work"
}
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
# shellcheck source=pg/redis.sh
. tools/bench/pg/redis.sh
trap cleanup EXIT

if [ -z "${PGURI:-}" ]; then
  port=$(free_port)
  [ "$(id -u)" = 0 ] && chown postgres "$work"
  as_pg "$pgbin/initdb" -D "$work/data" -U berth --auth=trust --locale=C >/dev/null
  as_pg "$pgbin/pg_ctl" -D "$work/data" -l "$work/pg.log" -w -o \
    "-p $port -k $work -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on \
     -c shared_buffers=512MB -c autovacuum_naptime=1s -c max_connections=200" start >/dev/null
  base=postgresql://berth@127.0.0.1:$port
  echo "started PostgreSQL 15 on 127.0.0.1:$port in $work" >&2
else
  base=${PGURI%/*}
fi
admin=$base/postgres
export PGOPTIONS="-c client_min_messages=warning"
psql -qAt "$admin" -c "SELECT 'PostgreSQL: fsync ' || current_setting('fsync') ||
  ', synchronous_commit ' || current_setting('synchronous_commit') ||
  ', autovacuum_naptime ' || current_setting('autovacuum_naptime')" >&2
fresh_db() { psql -q "$admin" -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1"; }

shape_args() {
  case $1 in
    s1) echo "--tasks $s1_tasks --producers 8 --workers 8 --payload 100" ;;
    s2) echo "--tasks $s2_tasks --producers 4 --workers 4 --submit-batch 100 --fetch-batch 100 --complete-batch 100 --payload 100" ;;
  esac
}

declare -A tput commits
# berth: replicas, shape. Its own database each run; the commits the run
# made are read once the replicas have exited (a backend reports its
# counters when it ends; PostgreSQL 15 holds them up to 10 s otherwise).
berth_run() {
  local n=$1 shape=$2 urls=() rp=() i
  fresh_db berth_bench
  for i in $(seq 1 "$n"); do
    local out=$work/berthd.$i
    "$b/berthd" --store "$base/berth_bench" --operate tcp://127.0.0.1:0 --admin tcp://127.0.0.1:0 \
      --events tcp://127.0.0.1:0 --metrics http://127.0.0.1:0 > "$out" 2> "$out.err" &
    rp+=($!)
    pids+=($!)
    for _ in $(seq 200); do grep -q '^berthd ready' "$out" && break; sleep 0.05; done
    urls+=("$(grep -o 'operate=[^ ]*' "$out" | cut -d= -f2)")
  done
  local csv
  csv=$(IFS=,; echo "${urls[*]}")
  # shellcheck disable=SC2046
  local res
  res=$(flock /tmp/berth-cpu.lock "$b/berth-bench" --operate "$csv" $(shape_args "$shape") --json)
  kill "${rp[@]}"
  wait "${rp[@]}" 2>/dev/null || true
  local key=berth${n}_$shape
  local lost dups
  lost=$(field "$res" lost)
  dups=$(field "$res" duplicates)
  [ "$lost" = 0 ] && [ "$dups" = 0 ] || echo "$key: lost $lost, duplicates $dups" >&2
  tput[$key]+="$(field "$res" tasks_per_s) "
  local c
  c=$(psql -qAt "$admin" -c "SELECT xact_commit FROM pg_stat_database WHERE datname = 'berth_bench'")
  commits[$key]+="$(awk -v c="$c" -v t="$(field "$res" tasks)" 'BEGIN {printf "%.4f", c / t}') "
}

rival_run() { # system shape
  local sys=$1 shape=$2 n cmd
  n=$([ "$shape" = s1 ] && echo "$s1_tasks" || echo "$s2_tasks")
  case $sys in
    floor) cmd="node floor.js" ;;
    floor-lock) cmd="node floor.js --lock" ;;
    graphile) cmd="node graphile.js" ;;
    pgboss) cmd="node pgboss.js --mode fetch"; n=$((n / 4)) ;;
    bullmq) cmd="node bullmq.js --backend redis" ;;
  esac
  [ "$sys" != bullmq ] || redis-cli -p "$REDIS_PORT" flushdb >/dev/null
  local res
  # shellcheck disable=SC2086
  res=$(cd tools/bench/pg && PGURI=$base/berth_rivals flock /tmp/berth-cpu.lock $cmd --shape "$shape" \
    --jobs "$n" --json | grep '^{' | tail -1) || true
  local lost dups
  lost=$(field "$res" lost)
  dups=$(field "$res" duplicates)
  [ "$lost" = 0 ] && [ "$dups" = 0 ] || echo "${sys}_$shape: lost ${lost:-?}, duplicates ${dups:-?}" >&2
  tput[${sys}_$shape]+="$(field "$res" jobs_per_s) "
}

[[ " $systems " != *" bullmq "* ]] || redis_start
fresh_db berth_rivals
for i in $(seq 1 "$runs"); do
  for shape in s1 s2; do
    echo "$(date +%T) round $i/$runs $shape" >&2
    berth_run 1 "$shape"
    berth_run 3 "$shape"
    for sys in $systems; do rival_run "$sys" "$shape"; done
  done
done

med() { tr ' ' '\n' <<<"${tput[$1]:-}" | grep . | median; }
printf '\n%-12s %14s %14s   (medians of %d interleaved rounds; jobs/s)\n' system S1 S2 "$runs"
for k in berth1 berth3 $systems; do
  printf '%-12s %14.1f %14.1f\n' "$k" "$(med "${k}_s1")" "$(med "${k}_s2")"
done
echo
echo "each round (jobs/s):"
for k in berth1 berth3 $systems; do
  printf '%-12s S1: %s  S2: %s\n' "$k" "${tput[${k}_s1]:-}" "${tput[${k}_s2]:-}"
done
best() { # shape: the best PostgreSQL queue's median (not the floor, not Redis)
  for s in graphile pgboss; do [[ " $systems " == *" $s "* ]] && med "${s}_$1"; done | sort -g | tail -1
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}'; }
echo
echo "berth S1 (1 replica) / best PostgreSQL queue S1:   $(ratio "$(med berth1_s1)" "$(best s1)")   (target >= 5)"
[[ " $systems " != *" bullmq "* ]] ||
  echo "berth S1 (1 replica) / BullMQ on Redis S1:        $(ratio "$(med berth1_s1)" "$(med bullmq_s1)")   (target >= 1)"
echo "berth S2 (1 replica) / best PostgreSQL queue S2:   $(ratio "$(med berth1_s2)" "$(best s2)")   (target >= 5)"
[[ " $systems " != *" floor-lock "* ]] ||
  echo "berth S2 (1 replica) / at-least-once floor S2:     $(ratio "$(med berth1_s2)" "$(med floor-lock_s2)");   best PostgreSQL queue S2 / it: $(ratio "$(best s2)" "$(med floor-lock_s2)")"
echo "3 replicas / 1, S1: $(ratio "$(med berth3_s1)" "$(med berth1_s1)"); S2: $(ratio "$(med berth3_s2)" "$(med berth1_s2)")   (target >= 0.9)"
echo "berth S2 database commits per task (1 replica): $(tr ' ' '\n' <<<"${commits[berth1_s2]}" | grep . | median)   (target <= 0.05)"
