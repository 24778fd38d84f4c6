#!/usr/bin/env bash
# Builds and runs the whole test suite with CTest: once with CUDA auto-detected (nvcc
# compiles the .cu files when present; GPU tests skip without a GPU), once with
# -DXMC_CUDA=OFF; then fuzzes each reader of tests/fuzz for a short while (15 s each).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

bash tools/build.sh build
ctest --test-dir build --output-on-failure -j "$jobs"

bash tools/build.sh build-nocuda -DXMC_CUDA=OFF
ctest --test-dir build-nocuda --output-on-failure -j "$jobs"

bash tools/fuzz.sh "${XMC_FUZZ_SECONDS:-15}"
