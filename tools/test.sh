#!/usr/bin/env bash
# Builds berth twice and runs every suite in both builds:
#   build/       optimised with debug info, -Werror
#   build-asan/  AddressSanitizer + UndefinedBehaviorSanitizer, with the
#                whole-state invariant checks (BERTH_CHECKS) after every turn
# and between the two runs each libFuzzer harness briefly (build-fuzz/,
# clang; a smoke: long runs are tools/fuzz.sh SECONDS).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure

tools/fuzz.sh 15

cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DBERTH_SANITIZE=ON -DBERTH_CHECKS=ON
cmake --build build-asan -j"$jobs"
ctest --test-dir build-asan --output-on-failure
