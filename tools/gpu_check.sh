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
# Then trains a short synthetic run on cpu and on cuda through the CLI (P@1 and P@5 must
# agree within 0.01), and times one epoch of the dense layer at L=670091, d=768 (B=256,
# fp32 and bf16; synthetic data generated here, SYNTH_TRAIN points, default 50000).
#
# Exit: 0 both parity binaries passed, both benches ran and the CLI runs agreed; 1 otherwise.
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
  test_cuda_parity_sparse bench_sparse_cuda xmctrain \
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

# Short synthetic training, cpu vs cuda, through the CLI.
xmc="$build_dir/app/xmctrain"
work="$out_dir/gpu_check_runs"
mkdir -p "$work"
cat >"$work/small.yaml" <<EOF
name: gpu-check-small
seed: 7
data:
  train: {features: $work/small/trn_X.npy, labels: $work/small/trn_X_Y.txt}
  test: {features: $work/small/tst_X.npy, labels: $work/small/tst_X_Y.txt}
  synth: {enabled: true, format: dense, train: 20000, test: 2000, labels: 2000, features: 128, clusters: 50, seed: 3}
model:
  encoder: [{type: linear, out: 128, activation: relu, dropout: 0.1}]
  output: {type: dense, loss: bce}
optim:
  encoder: {type: adam, lr: 0.003}
  output: {type: adam, lr: 0.003}
train: {epochs: 3, batch_size: 256, log_every_s: 100}
eval: {k: 5}
EOF
train_rc=0
for dev in cpu cuda; do
  "$xmc" train "$work/small.yaml" --device "$dev" --out "$work/small_$dev" \
    >"$out_dir/gpu_check_train_$dev.log" 2>&1 || train_rc=$?
done
compare_rc=0
python3 - "$work/small_cpu/results.json" "$work/small_cuda/results.json" <<'PY' || compare_rc=$?
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
bad = [k for k in ("P@1", "P@5") if abs(a["metrics"][k] - b["metrics"][k]) > 0.01]
print("train cpu vs cuda: P@1 %.4f / %.4f, P@5 %.4f / %.4f, epoch %.2f s / %.2f s (%s)" % (
    a["metrics"]["P@1"], b["metrics"]["P@1"], a["metrics"]["P@5"], b["metrics"]["P@5"],
    a["last_epoch_seconds"], b["last_epoch_seconds"], b.get("gpu", "?")))
sys.exit(1 if bad or b["device"] != "cuda" else 0)
PY

# group_shared (HASTE) on the GPU: its parity binary, then the small run cpu vs cuda with
# the same data (semantic grouping, rewiring, tail projection): P@1/P@5 within 0.01.
gs_rc=0
cmake --build "$build_dir" -j "$(nproc)" --target test_cuda_parity_group_shared \
  >>"$out_dir/gpu_check_build.log" 2>&1 || gs_rc=$?
"$build_dir/tests/cuda/test_cuda_parity_group_shared" | tee "$out_dir/gpu_parity_group_shared.log" ||
  gs_rc=$?
sed 's/output: {type: dense, loss: bce}/output: {type: group_shared, group_size: 16, fan_in: 32, head_fraction: 0.05, tail_projection: 256, grouping: semantic, rewire: {interval: 50, fraction: 0.1, until: 0.66}, loss: bce}/' \
  "$work/small.yaml" >"$work/small_gs.yaml"
for dev in cpu cuda; do
  "$xmc" train "$work/small_gs.yaml" --device "$dev" --out "$work/small_gs_$dev" \
    >"$out_dir/gpu_check_train_gs_$dev.log" 2>&1 || gs_rc=$?
done
python3 - "$work/small_gs_cpu/results.json" "$work/small_gs_cuda/results.json" <<'PY' || gs_rc=$?
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
bad = [k for k in ("P@1", "P@5") if abs(a["metrics"][k] - b["metrics"][k]) > 0.01]
print("group_shared train cpu vs cuda: P@1 %.4f / %.4f, P@5 %.4f / %.4f, epoch %.2f s / %.2f s" % (
    a["metrics"]["P@1"], b["metrics"]["P@1"], a["metrics"]["P@5"], b["metrics"]["P@5"],
    a["last_epoch_seconds"], b["last_epoch_seconds"]))
sys.exit(1 if bad or b["device"] != "cuda" else 0)
PY

# One epoch at L=670091, d=768 (identity encoder: the output layer's time).
cat >"$work/l670k.yaml" <<EOF
name: gpu-check-670k
seed: 1
data:
  train: {features: $work/l670k/trn_X.npy, labels: $work/l670k/trn_X_Y.txt}
  test: {features: $work/l670k/tst_X.npy, labels: $work/l670k/tst_X_Y.txt}
  synth: {enabled: true, format: dense, train: ${SYNTH_TRAIN:-50000}, test: 2000, labels: 670091, features: 768, clusters: 2000, seed: 5}
model:
  encoder: []
  output: {type: dense, loss: bce, chunk_size: 16384}
optim:
  encoder: {type: adam, lr: 0.001}
  output: {type: adam, lr: 0.001}
train: {epochs: 1, batch_size: 256, log_every_s: 100}
eval: {k: 5}
EOF
for prec in fp32 bf16; do
  "$xmc" train "$work/l670k.yaml" --device cuda --set model.output.precision=$prec \
    --out "$work/l670k_$prec" >"$out_dir/gpu_check_670k_$prec.log" 2>&1 || train_rc=$?
done
python3 - "$work/l670k_fp32/results.json" "$work/l670k_bf16/results.json" <<'PY' || true
import json, sys
for p, prec in zip(sys.argv[1:], ("fp32", "bf16")):
    r = json.load(open(p))
    print("epoch L=670091 d=768 B=256 %s: %.2f s (%.0f samples/s), P@1 %.4f, layer %.0f MiB (analytic %.0f MiB)" % (
        prec, r["last_epoch_seconds"], r["samples_per_s"], r["metrics"]["P@1"],
        r["output_layer_bytes"] / 2**20, r["output_layer_analytic_bytes"] / 2**20))
PY

# Sampled backends (lsh_sampled, anns_sampled): their parity binary, then the small run
# above on cpu and cuda for each (P@1/P@5 within 0.01). A failure counts in train_rc.
sampled_rc=0
cmake --build "$build_dir" -j "$(nproc)" --target test_cuda_parity_sampled \
  >>"$out_dir/gpu_check_build.log" 2>&1 || sampled_rc=1
"$build_dir/tests/cuda/test_cuda_parity_sampled" | tee "$out_dir/gpu_parity_sampled.log" ||
  sampled_rc=1
for backend in lsh_sampled anns_sampled; do
  extra=""
  [ "$backend" = anns_sampled ] && extra=", synchronous: true"
  sed "s/type: dense, loss: bce/type: $backend, loss: bce$extra/" "$work/small.yaml" \
    >"$work/small_$backend.yaml"
  for dev in cpu cuda; do
    "$xmc" train "$work/small_$backend.yaml" --device "$dev" --out "$work/${backend}_$dev" \
      >"$out_dir/gpu_check_train_${backend}_$dev.log" 2>&1 || sampled_rc=1
  done
  python3 - "$work/${backend}_cpu/results.json" "$work/${backend}_cuda/results.json" "$backend" <<'PY' || sampled_rc=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
bad = [k for k in ("P@1", "P@5") if abs(a["metrics"][k] - b["metrics"][k]) > 0.01]
print("%s cpu vs cuda: P@1 %.4f / %.4f, P@5 %.4f / %.4f, epoch %.2f s / %.2f s" % (
    sys.argv[3], a["metrics"]["P@1"], b["metrics"]["P@1"], a["metrics"]["P@5"],
    b["metrics"]["P@5"], a["last_epoch_seconds"], b["last_epoch_seconds"]))
sys.exit(1 if bad or b["device"] != "cuda" else 0)
PY
done
echo "sampled backends (parity + cli): $([ "$sampled_rc" -eq 0 ] && echo PASSED || echo FAILED)"
[ "$sampled_rc" -eq 0 ] || train_rc=1

# fixed_fanin: its parity binary (a skip fails here too), then a short CLI training on cpu
# and cuda (intermediate layer, dropout, rewiring); P@1 and P@5 must agree within 0.02.
ff_rc=0
cmake --build "$build_dir" -j "$(nproc)" --target test_cuda_parity_fixed_fanin \
  >>"$out_dir/gpu_check_build.log" 2>&1 || ff_rc=1
"$build_dir/tests/cuda/test_cuda_parity_fixed_fanin" | tee "$out_dir/gpu_parity_fixed_fanin.log" ||
  ff_rc=1
for dev in cpu cuda; do
  "$xmc" train "$work/small.yaml" --device "$dev" --out "$work/ff_$dev" \
    --set model.output.type=fixed_fanin --set model.output.loss=squared_hinge \
    --set model.output.fan_in=32 --set model.output.intermediate=256 \
    --set model.output.dropout=0.1 --set model.output.rewire.interval=50 \
    --set model.output.gpu_timing=true >"$out_dir/gpu_check_ff_$dev.log" 2>&1 || ff_rc=1
done
python3 - "$work/ff_cpu/results.json" "$work/ff_cuda/results.json" <<'PY' || ff_rc=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
bad = [k for k in ("P@1", "P@5") if abs(a["metrics"][k] - b["metrics"][k]) > 0.02]
print("fixed_fanin cli cpu vs cuda: P@1 %.4f / %.4f, P@5 %.4f / %.4f, epoch %.2f s / %.2f s" % (
    a["metrics"]["P@1"], b["metrics"]["P@1"], a["metrics"]["P@5"], b["metrics"]["P@5"],
    a["last_epoch_seconds"], b["last_epoch_seconds"]))
sys.exit(1 if bad or b["device"] != "cuda" else 0)
PY
echo "fixed_fanin (parity + cli): $([ "$ff_rc" -eq 0 ] && echo PASSED || echo FAILED)"

echo
echo "== gpu_check summary =="
grep -E "^GPU:|checks," "$out_dir/gpu_parity.log" "$out_dir/gpu_parity_sparse.log" || true
echo "parity: $([ "$parity_rc" -eq 0 ] && echo PASSED || echo "FAILED ($parity_rc)")"
echo "sparse parity: $([ "$parity_sparse_rc" -eq 0 ] && echo PASSED || echo "FAILED ($parity_sparse_rc)")"
echo "bench JSON: $out_dir/gpu_bench_dense.json"
cat "$out_dir/gpu_bench_dense.txt"
echo "sparse bench JSON: $out_dir/gpu_bench_sparse.json (exit $sparse_bench_rc)"
cat "$out_dir/gpu_bench_sparse.txt"
echo "cli runs: $([ "$train_rc" -eq 0 ] && [ "$compare_rc" -eq 0 ] && echo PASSED || echo "FAILED (train $train_rc, compare $compare_rc)")"
echo "group_shared parity + cli: $([ "$gs_rc" -eq 0 ] && echo PASSED || echo "FAILED ($gs_rc)")"
[ "$parity_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] && [ "$parity_sparse_rc" -eq 0 ] &&
  [ "$sparse_bench_rc" -eq 0 ] && [ "$train_rc" -eq 0 ] && [ "$compare_rc" -eq 0 ] &&
  [ "$ff_rc" -eq 0 ] && [ "$gs_rc" -eq 0 ]
