#!/usr/bin/env bash
# Configures and builds xmctrain. Usage: tools/build.sh [BUILD_DIR] [extra cmake args...]
# Default BUILD_DIR=build, CUDA auto-detected (-DXMC_CUDA=OFF to skip it). Environment:
# XMC_JOBS (parallel jobs, default: all cores), XMC_TARGETS (space-separated targets to
# build, default: all); CC / CXX pick the compilers on the first configure.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# ccache, when installed, shares objects between build dirs and git worktrees (paths are
# rewritten relative to the parent of the checkout, so two checkouts hit the same entries).
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd .. && pwd)}"
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$build_dir" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DXMC_WERROR="$werror" "$@"
targets=()
[ -n "${XMC_TARGETS:-}" ] && read -r -a targets <<<"$XMC_TARGETS" && targets=(--target "${targets[@]}")
cmake --build "$build_dir" -j "${XMC_JOBS:-$(nproc)}" "${targets[@]}"
