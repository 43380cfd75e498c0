#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, ASan + UBSan) in build-fuzz/ and
# runs each for SECONDS (default 60), starting from the seeds checked in
# under tests/fuzz/corpus/NAME/. What a run adds to the corpus stays in
# build-fuzz/corpus/NAME/; a crash leaves its input in build-fuzz/ and
# fails the script.
#
#   tools/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DBERTH_FUZZ=ON \
  -DBERTH_SANITIZE=ON -DBERTH_TESTS=OFF -DBERTH_TCMALLOC=OFF > /dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_operate fuzz_admin fuzz_sp fuzz_records fuzz_recover
for h in operate admin sp records recover; do
  mkdir -p "build-fuzz/corpus/$h"
  echo "fuzz_$h: ${secs} s" >&2
  rc=0
  ASAN_OPTIONS=detect_leaks=0 "build-fuzz/fuzz_$h" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=4096 -artifact_prefix="build-fuzz/$h-" -print_final_stats=1 \
    "build-fuzz/corpus/$h" "tests/fuzz/corpus/$h" > "build-fuzz/$h.log" 2>&1 || rc=$?
  grep -E "^(stat::number_of_executed_units|stat::new_units_added|==[0-9]+==ERROR|SUMMARY)" \
    "build-fuzz/$h.log" || true
  if [ "$rc" != 0 ]; then
    tail -40 "build-fuzz/$h.log" >&2
    echo "fuzz_$h: exit $rc; input and log in build-fuzz/" >&2
    echo "fuzz: 0 passed, 1 failed"
    exit 1
  fi
done
echo "fuzz: 5 harnesses, ${secs} s each, no finding"
echo "fuzz: 5 passed, 0 failed"
