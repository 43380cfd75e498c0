#!/usr/bin/env bash
# README.md's worker examples (C, Python, Node), run as written: each is
# taken out of README.md, built or run against a berthd on the README's
# address (tcp://127.0.0.1:7450, on a temp directory), and must work the
# task it finds on "emails" and complete it.
#
#   tests/readme/examples.sh            (at the checkout's root, after the build)
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d /tmp/berth-readme-XXXXXX)
berthd_pid=
trap '[[ -n $berthd_pid ]] && kill $berthd_pid 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT

block() { # language: the first ``` block of it in the Clients section
  awk -v lang="$1" '/^## Clients/ { on = 1 } /^## Running berthd/ { on = 0 }
    on && $0 == "```" lang { grab = 1; next } grab && /^```/ { exit } grab { print }' README.md
}

./build/berthd --data "$tmp/data" >"$tmp/berthd.out" 2>&1 &
berthd_pid=$!
for _ in $(seq 100); do grep -q ready "$tmp/berthd.out" && break; sleep 0.1; done
if ! grep -q ready "$tmp/berthd.out"; then
  echo "berthd did not start on the README's address:" >&2
  cat "$tmp/berthd.out" >&2
  exit 1
fi

check() { # name, log: the worker said it sent the task, and nothing is left
  if ! grep -q '^sending .*ada@example.com' "$2"; then
    echo "README's $1 worker did not work its task:" >&2
    cat "$2" >&2
    exit 1
  fi
  if [[ -n $(./build/berth fetch emails --worker check --wait-ms 0) ]]; then
    echo "README's $1 worker left its task uncompleted" >&2
    exit 1
  fi
  echo "ok      README's $1 worker"
}

# run CMD...: for 3 s (the examples work until stopped), stdout line-buffered
run() { timeout -s TERM 3 stdbuf -oL "$@" || [[ $? == 124 ]]; }

block c >"$tmp/worker.c"
cc -std=c11 -I. -Ibuild/proto "$tmp/worker.c" build/libberth_client.a build/libberth_proto.a \
  -lnng -lprotobuf-c -lsodium -lpthread -o "$tmp/worker"
./build/berth submit emails '{"to": "ada@example.com"}' >/dev/null
run "$tmp/worker" >"$tmp/c.log"
check C "$tmp/c.log"

block python >"$tmp/worker.py"
PYTHONPATH=tools/clients/python run /usr/bin/python3 "$tmp/worker.py" >"$tmp/py.log"
check Python "$tmp/py.log"

mkdir -p "$tmp/node/node_modules"
ln -s "$PWD/tools/clients/node" "$tmp/node/node_modules/berth-client"
block js >"$tmp/node/worker.mjs"
run node "$tmp/node/worker.mjs" >"$tmp/node.log"
check Node "$tmp/node.log"

# The console API's signing recipe ("The console's API"), against a berthd
# with a key file on the README's addresses (the key file's path swapped
# for a temp one).
kill "$berthd_pid"; wait "$berthd_pid" 2>/dev/null || true
head -c 48 /dev/urandom | base64 >"$tmp/admin.key"
./build/berthd --data "$tmp/data" --admin-key-file "$tmp/admin.key" >"$tmp/berthd2.out" 2>&1 &
berthd_pid=$!
for _ in $(seq 100); do grep -q ready "$tmp/berthd2.out" && break; sleep 0.1; done
awk '/^### The console.s API/ { on = 1 } on && $0 == "```sh" { grab = 1; next }
  grab && /^```/ { exit } grab { print }' README.md |
  sed "s|/etc/berth/admin.key|$tmp/admin.key|" >"$tmp/sign.sh"
if ! bash "$tmp/sign.sh" | grep -q '"shared":false'; then
  echo "README's console API recipe was not answered:" >&2
  bash "$tmp/sign.sh" >&2
  exit 1
fi
echo "ok      README's console API recipe"
