#!/usr/bin/env bash
# The conformance suite: one berthd (started with scenarios.json's flags on
# a temp directory and free ports), then each named driver against it.
#
#   tests/conformance/run.sh BERTHD python node c
# (c: build/berth-conformance-c, or $C_DRIVER)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
berthd=$1
shift
dir=$(mktemp -d /tmp/berth-conformance-XXXXXX)
mapfile -t flags < <(/usr/bin/python3 -c \
  'import json, sys; print("\n".join(json.load(open(sys.argv[1]))["berthd"]))' \
  "$here/scenarios.json")
"$berthd" --data "$dir/data" --operate tcp://127.0.0.1:0 --events tcp://127.0.0.1:0 \
  --admin tcp://127.0.0.1:0 --metrics http://127.0.0.1:0 "${flags[@]}" >"$dir/out" 2>/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 400); do
  grep -q "operate=" "$dir/out" && break
  sleep 0.05
done
url=$(grep -o 'operate=[^ ]*' "$dir/out" | cut -d= -f2)
[[ -n $url ]] || { echo "conformance: berthd did not start" >&2; exit 1; }
rc=0
for driver in "$@"; do
  case $driver in
  python) /usr/bin/python3 "$here/python.py" "$url" || rc=1 ;;
  node) node "$here/node.mjs" "$url" || rc=1 ;;
  c) "${C_DRIVER:-$here/../../build/berth-conformance-c}" "$url" || rc=1 ;;
  *) echo "conformance: no driver $driver" >&2; rc=1 ;;
  esac
done
exit $rc
