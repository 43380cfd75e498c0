#!/usr/bin/env bash
# pg-ha.sh — a pg_auto_failover formation on this machine, for berthd's
# failover drill (tests/gateway/test_pg_failover.c) and for trying
# `berthd --store` against a primary that fails over.
#
# One monitor, a primary and two standbys, each a PostgreSQL 15 cluster on
# 127.0.0.1 with its own port and its own directory under BASE, each run
# by its own `pg_autoctl run` supervisor as the `postgres` user (PostgreSQL
# refuses root). Replication is synchronous: number_sync_standbys 1, both
# standbys in the replication quorum, fsync and synchronous_commit on, so
# a COMMIT returns only once a standby has its WAL and a promoted standby
# holds every acknowledged transaction. The monitor's health checks are
# tightened so that a failover takes seconds, not the defaults' half a
# minute (see TIMEOUTS below: right for one machine, not for a network
# where a slow check is not a dead node).
#
# Usage: tools/pg-ha.sh [-d BASE] [-p PORT] COMMAND
#   up            create and start the formation, wait until it has a
#                 primary and two secondaries, create the database `berth`
#                 and print berthd's --store URI
#   uri           print the URI: postgresql://postgres@127.0.0.1:P1,...:P3/berth?target_session_attrs=read-write
#   state         pg_autoctl show state
#   primary       the current primary's node name and port
#   kill-primary  make the primary really gone: kill -9 its pg_autoctl
#                 supervisor's process group (the supervisor, its services
#                 and the postmaster it started: nothing restarts it), and
#                 its postmaster were it elsewhere; the backends exit on
#                 their postmaster's death. A kill of the postmaster alone
#                 would see it restarted by its supervisor, still the
#                 primary. The monitor then promotes a standby. Prints the
#                 killed node's name and port.
#   wait-primary  wait until a node other than the one killed last is
#                 primary and accepts writes; prints its name and port
#   down          stop everything and remove BASE
# BASE defaults to $BERTH_HA_DIR or /tmp/berth-ha; the monitor takes PORT
# (default $BERTH_HA_PORT or 6540), the nodes PORT+1..PORT+3. Needs
# postgresql-15-auto-failover (tools/install-deps.sh). Run as root or as
# postgres. For trying and testing on one machine only: every node trusts
# any user from 127.0.0.1, and nothing is encrypted.
set -euo pipefail

BASE=${BERTH_HA_DIR:-/tmp/berth-ha}
PORT=${BERTH_HA_PORT:-6540}
while getopts "d:p:" o; do
    case $o in
    d) BASE=$OPTARG ;;
    p) PORT=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
CMD=${1:-}

PGBIN=/usr/lib/postgresql/15/bin
HOST=127.0.0.1
NODES=(node1 node2 node3)
MONITOR_URI="postgres://autoctl_node@$HOST:$PORT/pg_auto_failover?sslmode=disable"

# TIMEOUTS, in ms unless said: the monitor checks every node each 1 s,
# gives up on a check after 1 s, retries once after 0.5 s, and calls a
# node unhealthy 2 s after its last report; a standby waits 2 s for the
# old primary to demote before taking over (primary_demote_timeout,
# default 30 s). That wait must outlast network_partition_timeout (in s,
# on the nodes; default 20): a primary cut off from the monitor and its
# standbys stops taking writes after it, so that two primaries never
# take writes at once.
MONITOR_SETTINGS=(
    "pgautofailover.health_check_period=1000"
    "pgautofailover.health_check_timeout=1000"
    "pgautofailover.health_check_max_retries=1"
    "pgautofailover.health_check_retry_delay=500"
    "pgautofailover.node_considered_unhealthy_timeout=2000"
    "pgautofailover.primary_demote_timeout=2000"
)
NODE_PARTITION_TIMEOUT_S=1

die() {
    echo "pg-ha.sh: $*" >&2
    exit 1
}

# Everything pg_autoctl keeps (its config, state and pid files) goes under
# BASE too, not under the postgres user's home.
as_pg() {
    local env=(env "XDG_CONFIG_HOME=$BASE/xdg/config" "XDG_DATA_HOME=$BASE/xdg/data"
        "XDG_RUNTIME_DIR=$BASE/xdg/run" "PATH=$PGBIN:/usr/bin:/bin" "PGCONNECT_TIMEOUT=3")
    if [ "$(id -un)" = postgres ]; then
        "${env[@]}" "$@"
    else
        runuser -u postgres -- "${env[@]}" "$@"
    fi
}

node_port() { # node1 -> PORT+1
    echo $((PORT + ${1#node}))
}

uri() {
    echo "postgresql://postgres@$HOST:$((PORT + 1)),$HOST:$((PORT + 2)),$HOST:$((PORT + 3))/berth?target_session_attrs=read-write"
}

# Starts the supervisor of the cluster in dir, in a session of its own,
# its output in dir.log.
supervise() {
    as_pg setsid pg_autoctl run --pgdata "$1" >>"$1.log" 2>&1 </dev/null &
}

psql_at() { # port db sql
    as_pg psql -X -q -t -A -h "$HOST" -p "$1" -U postgres -d "$2" -c "$3"
}

# "name port state" of every node the monitor knows, one a line.
states() {
    psql_at "$PORT" pg_auto_failover \
        "SELECT nodename, nodeport, reportedstate, goalstate FROM pgautofailover.node ORDER BY nodeid" \
        2>/dev/null | tr '|' ' '
}

wait_until() { # seconds what test...
    local t=$1 what=$2
    shift 2
    local end=$((SECONDS + t))
    until "$@" 2>/dev/null; do
        [ $SECONDS -lt $end ] || {
            as_pg pg_autoctl show state --pgdata "$BASE/monitor" >&2 || true
            die "no $what within ${t}s (logs: $BASE/*.log)"
        }
        sleep 0.2
    done
}

settled() { # one primary (single, alone) and n secondaries, each in its goal state
    local want=$1 p s
    p=$(states | awk '$3 == $4 && ($3 == "primary" || $3 == "single")' | wc -l)
    s=$(states | awk '$3 == "secondary" && $4 == "secondary"' | wc -l)
    [ "$p" -eq 1 ] && [ "$s" -eq "$want" ]
}

primary() {
    states | awk '$3 == "primary" || $3 == "wait_primary" {print $1, $2; exit}'
}

writable() { # port
    [ "$(psql_at "$1" berth "SELECT NOT pg_is_in_recovery()" 2>/dev/null)" = t ]
}

cmd_up() {
    [ ! -e "$BASE/monitor" ] || die "$BASE/monitor exists: tools/pg-ha.sh down first"
    command -v pg_autoctl >/dev/null || die "pg_autoctl not found: tools/install-deps.sh"
    mkdir -p "$BASE/xdg/config" "$BASE/xdg/data" "$BASE/xdg/run"
    chmod 700 "$BASE/xdg/run"
    [ "$(id -un)" = postgres ] || chown -R postgres: "$BASE"

    as_pg pg_autoctl create monitor --pgdata "$BASE/monitor" --pgport "$PORT" \
        --hostname "$HOST" --pgctl "$PGBIN/pg_ctl" --auth trust --no-ssl \
        >"$BASE/monitor.log" 2>&1 || die "creating the monitor failed: $BASE/monitor.log"
    for kv in "${MONITOR_SETTINGS[@]}"; do
        echo "${kv%%=*} = ${kv#*=}" >>"$BASE/monitor/postgresql.auto.conf"
    done
    supervise "$BASE/monitor"
    wait_until 30 "monitor" psql_at "$PORT" pg_auto_failover "SELECT 1" >/dev/null

    # One node at a time: the first becomes the primary, the others its
    # standbys (each a pg_basebackup of it).
    local n=0
    for node in "${NODES[@]}"; do
        local dir="$BASE/$node" port
        port=$(node_port "$node")
        as_pg pg_autoctl create postgres --pgdata "$dir" --pgport "$port" --pghost "$HOST" \
            --hostname "$HOST" --name "$node" --pgctl "$PGBIN/pg_ctl" --monitor "$MONITOR_URI" \
            --dbname berth --auth trust --no-ssl --replication-quorum true \
            >"$dir.log" 2>&1 || die "creating $node failed: $dir.log"
        as_pg pg_autoctl config set --pgdata "$dir" timeout.network_partition_timeout \
            "$NODE_PARTITION_TIMEOUT_S" >/dev/null
        # Durable whatever the defaults become; clients on 127.0.0.1 as
        # any user, as the replication and monitor rules already are.
        printf '%s\n' "fsync = on" "synchronous_commit = on" >>"$dir/postgresql.auto.conf"
        echo "host all all $HOST/32 trust" >>"$dir/pg_hba.conf"
        supervise "$dir"
        wait_until 120 "$node in its goal state" settled "$n"
        n=$((n + 1))
    done
    # (pg_autoctl 2.0's `set formation number-sync-standbys 1` refuses
    # its own argument: the monitor's function it would call.)
    [ "$(psql_at "$PORT" pg_auto_failover "SELECT number_sync_standbys FROM pgautofailover.formation WHERE formationid = 'default'")" = 1 ] ||
        psql_at "$PORT" pg_auto_failover \
            "SELECT pgautofailover.set_formation_number_sync_standbys('default', 1)" >/dev/null ||
        die "number_sync_standbys 1 refused"
    wait_until 60 "primary with two secondaries" settled 2
    local p
    p=$(primary)
    [ "$(psql_at "${p#* }" berth "SHOW synchronous_standby_names")" != "" ] ||
        die "the primary ${p% *} has no synchronous standby"
    uri
}

# The supervisor's pid (the leader of its session and process group: its
# services and the postmaster it started are in that group).
supervisor() { # dir
    local f="$BASE/xdg/run/pg_autoctl$1/pg_autoctl.pid"
    [ -f "$f" ] && head -1 "$f"
}

cmd_kill_primary() {
    local p name dir sup pm
    p=$(primary)
    [ -n "$p" ] || die "no primary"
    name=${p% *}
    dir="$BASE/$name"
    # The supervisor and its services at once: killed after its postmaster,
    # the supervisor would start it again, still the primary, before the
    # monitor decided. Then the postmaster, should it not be in that
    # group; its backends exit on their postmaster's death, breaking every
    # client connection as a crash of the host's PostgreSQL would.
    sup=$(supervisor "$dir")
    pm=$(head -1 "$dir/postmaster.pid" 2>/dev/null || true)
    [ -n "$sup" ] || die "no supervisor pid for $name"
    kill -9 -- "-$sup" 2>/dev/null || kill -9 "$sup" 2>/dev/null || true
    [ -z "$pm" ] || kill -9 "$pm" 2>/dev/null || true
    echo "$name" >"$BASE/killed"
    echo "$name $(node_port "$name")"
}

cmd_wait_primary() {
    local killed p
    killed=$(cat "$BASE/killed" 2>/dev/null || true)
    new_primary() {
        p=$(states | awk -v k="$killed" '$1 != k && $3 == $4 && ($3 == "primary" || $3 == "wait_primary") {print $1, $2; exit}')
        [ -n "$p" ] && writable "${p#* }"
    }
    wait_until 120 "new primary" new_primary
    echo "$p"
}

cmd_down() {
    [ -d "$BASE" ] || return 0
    local dir pid pms=()
    # Nothing here is kept, so nothing is stopped gently: each supervisor's
    # process group (its services and the postmaster it started), then
    # each postmaster (its backends exit on its death), killed -9. A
    # graceful pg_autoctl stop took seconds a node, longer for a node
    # whose supervisor was killed.
    for dir in "$BASE"/node* "$BASE/monitor"; do
        pid=$(supervisor "$dir" || true)
        [ -z "$pid" ] || kill -9 -- "-$pid" 2>/dev/null || true
        [ -f "$dir/postmaster.pid" ] || continue
        pid=$(head -1 "$dir/postmaster.pid")
        [ -z "$pid" ] || { kill -9 "$pid" 2>/dev/null && pms+=("$pid"); } || true
    done
    # Gone once dead, reaped or not: the killed supervisor's children may
    # wait a while as zombies for whoever inherits them.
    running() {
        local st
        st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ "$st" != Z ]
    }
    local end=$((SECONDS + 10))
    for pid in "${pms[@]}"; do
        while running "$pid" && [ $SECONDS -lt $end ]; do
            sleep 0.1
        done
    done
    rm -rf "$BASE"
}

case $CMD in
up) cmd_up ;;
uri) uri ;;
state) as_pg pg_autoctl show state --pgdata "$BASE/monitor" ;;
primary) primary ;;
kill-primary) cmd_kill_primary ;;
wait-primary) cmd_wait_primary ;;
down) cmd_down ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
