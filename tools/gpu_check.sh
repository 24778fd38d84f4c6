#!/usr/bin/env bash
# One command on a GPU machine: build with CUDA for the GPU present
# (-DCMAKE_CUDA_ARCHITECTURES=native), run the CPU-vs-CUDA parity binaries (dense and
# sparse ops; they must PASS: a skip counts as failure here), run the dense-step and the
# sparse-kernel microbenchmarks, write their JSON (to $OUT if set, else the build dir)
# and print short tables last.
#
#   tools/gpu_check.sh [BUILD_DIR]      (default build-gpu-check)
#   BENCH_LABELS=131072,670091,3000000 BENCH_ITERS=5 tools/gpu_check.sh
#   SPARSE_BENCH_LABELS=65536,670091,3000000 tools/gpu_check.sh
#
# Exit: 0 both parity binaries passed and both benches ran; 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build-gpu-check}
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
out_dir=${OUT:-$build_dir}
mkdir -p "$out_dir"

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU visible (nvidia-smi -L failed)" >&2
  exit 1
fi
nvidia-smi -L

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DXMC_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=native -DXMC_WERROR=ON >"$out_dir/gpu_check_configure.log"
cmake --build "$build_dir" -j "$(nproc)" --target test_cuda_parity bench_dense_cuda \
  test_cuda_parity_sparse bench_sparse_cuda \
  >"$out_dir/gpu_check_build.log" 2>&1 || {
  tail -40 "$out_dir/gpu_check_build.log" >&2
  exit 1
}

# Parity: run the binary directly so a skip (77) cannot pass for success.
parity_rc=0
"$build_dir/tests/cuda/test_cuda_parity" | tee "$out_dir/gpu_parity.log" || parity_rc=$?
if [ "$parity_rc" -ne 0 ]; then
  echo "gpu_check: parity FAILED (exit $parity_rc; 77 = no GPU seen by CUDA)" >&2
fi

parity_sparse_rc=0
"$build_dir/tests/cuda/test_cuda_parity_sparse" | tee "$out_dir/gpu_parity_sparse.log" ||
  parity_sparse_rc=$?
if [ "$parity_sparse_rc" -ne 0 ]; then
  echo "gpu_check: sparse parity FAILED (exit $parity_sparse_rc; 77 = no GPU seen by CUDA)" >&2
fi

bench_rc=0
"$build_dir/tests/cuda/bench_dense_cuda" --labels "${BENCH_LABELS:-131072,670091,3000000}" \
  --iters "${BENCH_ITERS:-5}" --json "$out_dir/gpu_bench_dense.json" \
  >"$out_dir/gpu_bench_dense.txt" || bench_rc=$?

sparse_bench_rc=0
"$build_dir/tests/cuda/bench_sparse_cuda" --labels "${SPARSE_BENCH_LABELS:-65536,670091,3000000}" \
  --iters "${BENCH_ITERS:-10}" --json "$out_dir/gpu_bench_sparse.json" \
  >"$out_dir/gpu_bench_sparse.txt" || sparse_bench_rc=$?

echo
echo "== gpu_check summary =="
grep -E "^GPU:|checks," "$out_dir/gpu_parity.log" "$out_dir/gpu_parity_sparse.log" || true
echo "parity: $([ "$parity_rc" -eq 0 ] && echo PASSED || echo "FAILED ($parity_rc)")"
echo "sparse parity: $([ "$parity_sparse_rc" -eq 0 ] && echo PASSED || echo "FAILED ($parity_sparse_rc)")"
echo "bench JSON: $out_dir/gpu_bench_dense.json"
cat "$out_dir/gpu_bench_dense.txt"
echo "sparse bench JSON: $out_dir/gpu_bench_sparse.json (exit $sparse_bench_rc)"
cat "$out_dir/gpu_bench_sparse.txt"
[ "$parity_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] && [ "$parity_sparse_rc" -eq 0 ] &&
  [ "$sparse_bench_rc" -eq 0 ]
