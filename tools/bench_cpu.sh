#!/usr/bin/env bash
# Reproduces the CPU figures of docs/benchmarks.md. Usage:
#   tools/bench_cpu.sh [BUILD_DIR] [WORK_DIR]     (defaults: build, /tmp/xmc-bench)
# Prints each measurement; JSON results are left in WORK_DIR. Needs ~4 GB of disk and
# several minutes on 2 cores. Not a test: timings depend on the machine and its load.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-build}")/app/xmctrain
work=${2:-/tmp/xmc-bench}
mkdir -p "$work"
timefmt='%e s wall, %U s user, %S s sys, %M KiB max RSS'

echo "== machine"
nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2

echo "== load: first (text parse + cache write) and second (cache) load of a sparse XC file"
"$bin" synth --out "$work/load" --format sparse --train 300000 --test 1000 --seed 1 >/dev/null
ls -l "$work/load/train.txt"
rm -f "$work/load/train.txt.xmccache"
/usr/bin/time -f "first load:  $timefmt" "$bin" info "$work/load/train.txt" --json >/dev/null
/usr/bin/time -f "cached load: $timefmt" "$bin" info "$work/load/train.txt" --json >/dev/null

echo "== dense and bottleneck: 100k labels, 256-d embeddings, 1 epoch"
cat > "$work/d100k.yaml" <<YAML
name: d100k
device: cpu
data:
  train: {features: $work/d100k/trn_X.npy, labels: $work/d100k/trn_X_Y.txt}
  test: {features: $work/d100k/tst_X.npy, labels: $work/d100k/tst_X_Y.txt}
  synth: {enabled: true, format: dense, train: 30000, test: 5000, labels: 100000, features: 256, clusters: 500}
model:
  encoder: []
  output: {type: dense, loss: bce, chunk_size: 8192}
optim:
  output: {type: adam, lr: 0.01}
train: {epochs: 1, batch_size: 256, log_every_s: 60}
eval: {k: 5}
YAML
"$bin" train "$work/d100k.yaml" --out "$work/run-dense" --overwrite --json > "$work/dense.json"
"$bin" train "$work/d100k.yaml" --out "$work/run-bottleneck" --overwrite --set model.output.type=bottleneck \
  --set model.output.dim=64 --json > "$work/bottleneck.json"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
print(f"{'backend':<12}{'epoch s':>9}{'samples/s':>11}{'P@1':>7}{'P@5':>7}{'PSP@1':>7}"
      f"{'ledger MiB':>12}{'analytic MiB':>14}{'peak RSS MiB':>14}")
for name in ("dense", "bottleneck"):
    r = json.load(open(f"{w}/{name}.json"))
    m = r["metrics"]
    print(f"{name:<12}{r['last_epoch_seconds']:>9.1f}{r['samples_per_s']:>11.0f}"
          f"{m['P@1']:>7.3f}{m['P@5']:>7.3f}{m['PSP@1']:>7.3f}"
          f"{r['output_layer_bytes']/2**20:>12.1f}{r['output_layer_analytic_bytes']/2**20:>14.1f}"
          f"{r['peak_rss_bytes']/2**20:>14.1f}")
PY

echo "== bench dense (B=256, d=768, L=131072, adam, fp32)"
"$bin" bench dense --labels 131072 --iters 2
