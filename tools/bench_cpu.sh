#!/usr/bin/env bash
# Reproduces the CPU figures of docs/benchmarks.md. Usage:
#   tools/bench_cpu.sh [BUILD_DIR] [WORK_DIR]     (defaults: build, /tmp/xmc-bench)
# Prints each measurement; JSON results are left in WORK_DIR. Needs ~4 GB of disk and
# about ten minutes on 2 cores (PEERS=1: a few more, and PyPI). Not a test: timings depend on the machine and its load.
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

echo "== bench dense (B=256, d=768, L=131072, adam, fp32): five runs, min / median / max"
for i in 1 2 3 4 5; do "$bin" bench dense --labels 131072 --iters 3 --json > "$work/bench-dense-$i.json"; done
python3 - "$work" <<'PY'
import json, statistics, sys
w = sys.argv[1]
rs = [json.load(open(f"{w}/bench-dense-{i}.json")) for i in range(1, 6)]
def row(name, get, f="{:.1f}"):
    v = sorted(get(r) for r in rs)
    print(f"{name:<28}" + " / ".join(f.format(x) for x in (v[0], statistics.median(v), v[-1])))
row("full step ms", lambda r: 1e3 * r["step"]["seconds"])
row("full step % of sgemm", lambda r: 100 * r["step"]["gemm_ratio"])
for op in ("forward", "loss", "backward_input", "backward_weight", "update"):
    row(f"{op} ms", lambda r: 1e3 * r["ops"][op]["seconds"])
row("sgemm ceiling GFLOP/s", lambda r: r["ceilings"]["sgemm_gflops"])
row("memory ceiling GB/s", lambda r: r["ceilings"]["memory_gbps"])
PY
echo "== bench dense: the other losses and optimizers (one run each)"
for v in "--loss squared_hinge" "--loss softmax" "--optimizer sgd" "--optimizer adamw"; do
  echo "-- $v"; "$bin" bench dense --labels 131072 --iters 3 $v | tail -7
done

# Real data (issue 19): needs datasets/wordnet (/usr/bin/python3 tools/build_wordnet.py).
if [ -f datasets/wordnet/train.txt ]; then
  echo "== WordNet: the dense step at the winning config's shapes (B=256, d=768, L=17133)"
  "$bin" bench dense --batch 256 --dim 768 --labels 17133 --chunk 4096 --iters 20 | tail -8
  echo "== WordNet: one epoch of configs/wordnet_dense.yaml, split by phase"
  "$bin" train configs/wordnet_dense.yaml --out "$work/wn-dense" --overwrite --set train.epochs=1 >/dev/null
  echo "== WordNet: fixed_fanin vs dense with the same encoder (256) and batch (128), one epoch each"
  "$bin" train configs/wordnet_dense.yaml --out "$work/wn-dense256" --overwrite --set train.epochs=1 \
    --set train.batch_size=128 --set 'model.encoder=[{type: sparse_linear, out: 256, activation: none}]' >/dev/null
  "$bin" train configs/wordnet_fixed_fanin.yaml --out "$work/wn-fixed-fanin" --overwrite --set train.epochs=1 >/dev/null
  python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
print(f"{'run':<16}{'epoch s':>9}" + "".join(f"{k:>18}" for k in (
    "data", "encoder_forward", "output", "encoder_backward", "output_refresh")) +
    f"{'eval s':>9}{'P@1':>8}{'output MiB':>12}")
for name in ("wn-dense", "wn-dense256", "wn-fixed-fanin"):
    line = [json.loads(x) for x in open(f"{w}/{name}/metrics.jsonl")][-1]
    res = json.load(open(f"{w}/{name}/results.json"))
    ph = line["phase_seconds"]
    print(f"{name:<16}{line['epoch_seconds']:>9.2f}" + "".join(f"{ph[k]:>18.2f}" for k in (
        "data", "encoder_forward", "output", "encoder_backward", "output_refresh")) +
        f"{line.get('eval_seconds', 0):>9.2f}{100 * line['metrics']['P@1']:>8.2f}"
        f"{res['output_layer_bytes'] / 2**20:>12.1f}")
PY
  if [ "${PEERS:-0}" = 1 ]; then
    echo "== WordNet: time to the best peer's P@1 (peers from PyPI into .peers-venv; one sitting)"
    /usr/bin/python3 tools/peers.py --train datasets/wordnet/train.txt --test datasets/wordnet/test.txt \
      --binary "$bin" --json "$work/peers.json" --out "$work/peers"
    "$bin" train configs/wordnet_dense.yaml --out "$work/t2p-dense" --overwrite >/dev/null
    /usr/bin/python3 tools/peers.py --train datasets/wordnet/train.txt --test datasets/wordnet/test.txt \
      --binary "$bin" --reuse "$work/peers.json" --out "$work/peers" "$work/t2p-dense"
  else
    echo "== (PEERS=1 adds the time to the best peer's P@1: installs the peers from PyPI)"
  fi
else
  echo "== no datasets/wordnet: the real-data figures need /usr/bin/python3 tools/build_wordnet.py"
fi
