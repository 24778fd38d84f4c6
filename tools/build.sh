#!/usr/bin/env bash
# Configures and builds xmctrain. Usage: tools/build.sh [BUILD_DIR] [extra cmake args...]
# Default BUILD_DIR=build, CUDA auto-detected (-DXMC_CUDA=OFF to skip it).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DXMC_WERROR="$werror" "$@"
cmake --build "$build_dir" -j "$(nproc)"
