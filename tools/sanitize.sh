#!/usr/bin/env bash
# Builds the no-CUDA test suite with AddressSanitizer + UndefinedBehaviorSanitizer
# (-DXMC_SANITIZE=ON) in build-asan and runs it with CTest. Any ASan or UBSan report
# aborts the test that triggers it, so a green run means no report.
# Usage: tools/sanitize.sh [ctest args...]   e.g. tools/sanitize.sh -R 'io:|cli:'
# Environment: XMC_JOBS (build and test parallelism, default: all cores),
#              XMC_BUILD_DIR (default build-asan).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${XMC_BUILD_DIR:-build-asan}
# -O1 -g: readable reports (stack traces name the source lines) at a fraction of the -O3
# build time. Warnings are the normal builds' business, not this one's.
bash tools/build.sh "$build_dir" -DXMC_CUDA=OFF -DXMC_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DXMC_NATIVE=OFF -DXMC_WERROR=OFF
# detect_leaks: leaks fail too.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
ctest --test-dir "$build_dir" --output-on-failure -j "${XMC_JOBS:-$(nproc)}" --timeout 1800 "$@"
