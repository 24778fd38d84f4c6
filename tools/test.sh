#!/usr/bin/env bash
# Builds and runs the whole test suite with CTest twice, and fuzzes in between:
# - with CUDA when nvcc is present: that build is the GPU kit's (tools/gpu_kit.sh build:
#   sm_90, libxmc shared, -march=x86-64-v3), so the tests run the binaries the kit ships;
#   the kit is then packed and, as root, its selftest proves it needs nothing from the
#   Debian dev packages (GPU tests exit 77 = skipped without a GPU). Without nvcc, a
#   plain build.
# - each reader of tests/fuzz for a short while (15 s each, tools/fuzz.sh);
# - with -DXMC_CUDA=OFF (last, so CTest's summary closes the output).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  bash tools/gpu_kit.sh build build
  ctest --test-dir build --output-on-failure -j "$jobs"
  bash tools/gpu_kit.sh pack build
  if [ "$(id -u)" -eq 0 ]; then
    bash tools/gpu_kit.sh selftest
  else
    echo "test.sh: GPU kit selftest NOT run (needs root for unshare/chroot)"
  fi
else
  bash tools/build.sh build
  ctest --test-dir build --output-on-failure -j "$jobs"
fi

bash tools/fuzz.sh "${XMC_FUZZ_SECONDS:-15}"

bash tools/build.sh build-nocuda -DXMC_CUDA=OFF
ctest --test-dir build-nocuda --output-on-failure -j "$jobs"
