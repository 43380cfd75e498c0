#!/usr/bin/env bash
# Checks two rules of engine/ that the compiler does not:
#   1. Its files call each other in one direction. Every function is
#      declared in the header of the file that defines it, so a call needs
#      an include: the includes between modules (X.c and X.h are module X)
#      must form no cycle.
#   2. Every global symbol of the engine library carries the prefix of the
#      module that defines it; engine_ is only for the public API (engine.h, clock.h).
#
#   tools/check-engine.sh LIBBERTH_ENGINE.a
set -euo pipefail
cd "$(dirname "$0")/.."
lib=${1:?usage: check-engine.sh path/to/libberth_engine.a}
fail=0

edges=$(for f in engine/*.c engine/*.h; do
  from=$(basename "${f%.*}")
  { grep -o '#include "engine/[a-z0-9_]*\.h"' "$f" || true; } | sed 's|.*engine/||; s|\.h"||' |
    while read -r to; do [ "$to" != "$from" ] && echo "$from $to"; done
done | sort -u)
if ! order=$(tsort <<<"$edges" 2>&1) || grep -q loop <<<"$order"; then
  echo "engine/: the includes between modules form a cycle:" >&2
  grep -v '^[a-z_]*$' <<<"$order" >&2 || true
  fail=1
fi

public=$(grep -hoE '\bengine_[a-z_]+\(' engine/engine.h engine/clock.h | tr -d '(' | sort -u)
while read -r obj sym; do
  mod=${obj%.c.o}
  case $sym in
    engine_*) grep -qx "$sym" <<<"$public" || { echo "$obj: $sym is not declared in engine.h or clock.h" >&2; fail=1; } ;;
    "$mod"_*) ;;
    __odr_asan."$mod"_*) ;; # AddressSanitizer's mark of a global variable
    *) echo "$obj: $sym does not carry its module's prefix ${mod}_" >&2; fail=1 ;;
  esac
done < <(nm -A -g --defined-only "$lib" | awk -F'[: ]+' 'NF>=4 {print $2, $NF}')

if [ "$fail" = 0 ]; then
  echo "engine/: $(wc -l <<<"$edges") include edges, no cycle; every global symbol prefixed"
fi
exit "$fail"
