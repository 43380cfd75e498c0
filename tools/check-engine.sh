#!/usr/bin/env bash
# Checks three rules of engine/ that the compiler does not:
#   1. Its files call each other in one direction. Every function is
#      declared in the header of the file that defines it, so a call needs
#      an include: the includes between modules (X.c and X.h are module X)
#      must form no cycle.
#   2. Every global symbol of the engine library carries the prefix of the
#      module that defines it; engine_ is only for the public API (engine.h, clock.h).
#   3. The include map in engine/engine.h (between the lines "include map
#      begin" and "include map end", one "module -> modules it includes"
#      a line) is the include graph exactly: every module has a line, every
#      include between modules is in the map, and every edge of the map is
#      an include.
#
#   tools/check-engine.sh LIBBERTH_ENGINE_MEM.a LIBBERTH_ENGINE.a
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: check-engine.sh path/to/libberth_engine*.a..." >&2; exit 2; }
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
done < <(nm -A -g --defined-only "$@" | awk -F'[: ]+' 'NF>=4 {print $2, $NF}')

# 3. The map: its lines as "module target..." ("(none)": a leaf); a line
# that does not read so comes out as "! line".
map=engine/engine.h
parsed=$(awk '
    /^[ \t]*\*[ \t]*include map begin[ \t]*$/ { inside = 1; begun = 1; next }
    /^[ \t]*\*[ \t]*include map end[ \t]*$/   { inside = 0; ended = 1; next }
    inside {
      sub(/^[ \t]*\*[ \t]*/, "")
      if ($0 == "") next
      if ($2 != "->" || $1 !~ /^[a-z0-9_]+$/) { print "! " $0; next }
      line = $1
      for (i = 3; i <= NF; i++) if ($i != "(none)") line = line " " $i
      print line
    }
    END { if (!begun || !ended) print "! (no \"include map begin\" ... \"include map end\" lines)" }' "$map")
while read -r bad; do
  [ -n "$bad" ] && { echo "$map: include map: cannot read \"${bad#! }\" (module -> modules)" >&2; fail=1; }
done < <(grep '^!' <<<"$parsed" || true)
maplines=$(grep -v '^!' <<<"$parsed" || true)
modules=$(for f in engine/*.c engine/*.h; do basename "${f%.*}"; done | sort -u)
mapped=$(awk 'NF { print $1 }' <<<"$maplines" | sort -u)
mapedges=$(awk '{ for (i = 2; i <= NF; i++) if ($i != $1) print $1, $i }' <<<"$maplines" | sort -u)
while read -r m; do
  [ -n "$m" ] && { echo "$map: include map: module $m (engine/$m.c or .h) has no line (a leaf: \"$m -> (none)\")" >&2; fail=1; }
done < <(comm -23 <(echo "$modules") <(echo "$mapped"))
while read -r m; do
  [ -n "$m" ] && { echo "$map: include map: $m is no engine module (no engine/$m.c or .h)" >&2; fail=1; }
done < <(comm -13 <(echo "$modules") <(echo "$mapped"))
while read -r from to; do
  [ -n "$from" ] && { echo "$map: include map: the map lacks $from -> $to (engine/$from.c or .h includes engine/$to.h)" >&2; fail=1; }
done < <(comm -23 <(echo "$edges") <(echo "$mapedges"))
while read -r from to; do
  [ -n "$from" ] && { echo "$map: include map: $from -> $to is no include (neither engine/$from.c nor .h includes engine/$to.h)" >&2; fail=1; }
done < <(comm -13 <(echo "$edges") <(echo "$mapedges"))

if [ "$fail" = 0 ]; then
  echo "engine/: $(wc -l <<<"$edges") include edges, no cycle, all in engine.h's map and no more; every global symbol prefixed"
fi
exit "$fail"
