#!/usr/bin/env bash
# Checks that two xmctrain binaries train bit-identically on the CPU: every shipped small
# config (and a few variants that reach other code paths) for 2 epochs on 1 thread, then
# every per-epoch loss, step count, zero-gradient fraction, metric and ledger figure
# compared exactly. Timings and RSS are left out. Refactors that must not change results
# run it before they land.
#
# Usage: tools/bitcheck.sh REF_BINARY NEW_BINARY [CASE...]
#   CASE: a name from the list below (default: all the synthetic ones). The real-data
#   cases run only when named: wordnet_dense, wordnet_bottleneck, wordnet_fixed_fanin,
#   wordnet_group_shared, wordnet_lsh, wordnet_anns, wordnet_anns_wide (the shipped
#   configs/wordnet_*.yaml, which need datasets/wordnet: tools/build_wordnet.py), or
#   `wordnet` for all seven. Environment: XMC_BITCHECK_DIR (work folder, default
#   /tmp/xmc-bitcheck; the synthetic data is generated there once), OPENBLAS_CORETYPE
#   (default Prescott, which every x86-64 CPU runs: both binaries must run the same BLAS
#   kernels, and a binary from before the kernel check of app/main.cpp keeps OpenBLAS's
#   own choice; docs/design-notes.md, "OpenBLAS's kernels").
# Exit 0 when every case is identical, 1 otherwise (the differing fields are printed).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 REF_BINARY NEW_BINARY [CASE...]" >&2; exit 2; }
ref=$(realpath "$1")
new=$(realpath "$2")
shift 2
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${XMC_BITCHECK_DIR:-/tmp/xmc-bitcheck}
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Prescott}
mkdir -p "$work"
cd "$work"

sparse=(--set data.train.path=datasets/synth-sparse/train.txt
  --set data.test.path=datasets/synth-sparse/test.txt --set data.synth.enabled=false)
declare -A cases=(
  [quickstart]="quickstart.yaml"
  [dense]="dense.yaml"
  [bottleneck]="bottleneck.yaml"
  [fixed_fanin]="fixed_fanin.yaml"
  [fixed_fanin_bce]="fixed_fanin.yaml --set model.output.loss=bce --set model.output.dropout=0.2 --set model.output.rewire.interval=20"
  [group_shared]="group_shared.yaml"
  [group_shared_random]="group_shared.yaml --set model.output.grouping=random --set model.output.rewire.interval=20 --set model.output.loss=bce"
  [anns_sampled]="anns_sampled.yaml"
  [anns_hnsw]="anns_sampled.yaml --set model.output.search=hnsw --set model.output.loss=squared_hinge"
  [lsh_sampled]="lsh_sampled.yaml ${sparse[*]}"
  [lsh_dwta_bce]="lsh_sampled.yaml ${sparse[*]} --set model.output.hash=dwta --set model.output.k=4 --set model.output.loss=bce"
  [dense_softmax]="dense.yaml --set model.output.loss=softmax --set optim.output.type=sgd --set optim.output.momentum=0.9"
)
wordnet=(wordnet_dense wordnet_bottleneck wordnet_fixed_fanin wordnet_group_shared wordnet_lsh
  wordnet_anns wordnet_anns_wide)
for c in "${wordnet[@]}"; do cases[$c]="$c.yaml"; done
names=()
for c in "$@"; do
  if [ "$c" = wordnet ]; then names+=("${wordnet[@]}"); else names+=("$c"); fi
done
for c in "${names[@]}"; do
  if [[ $c == wordnet_* ]]; then
    [ -f "$repo/datasets/wordnet/train.txt" ] ||
      { echo "$c needs $repo/datasets/wordnet (tools/build_wordnet.py)" >&2; exit 2; }
    mkdir -p datasets && ln -sfn "$(realpath "$repo/datasets/wordnet")" datasets/wordnet
  fi
done
[ ${#names[@]} -gt 0 ] || names=(quickstart dense bottleneck fixed_fanin fixed_fanin_bce group_shared
  group_shared_random anns_sampled anns_hnsw lsh_sampled lsh_dwta_bce dense_softmax)

# The synthetic inputs, once (made by the reference binary).
[ -f datasets/synth-sparse/train.txt ] ||
  "$ref" synth --out datasets/synth-sparse --format sparse >/dev/null 2>&1
[ -f datasets/quickstart/trn_X.npy ] ||
  "$ref" train "$repo/configs/quickstart.yaml" --set train.epochs=1 --out runs/warmup --overwrite >/dev/null 2>&1

run() {  # binary tag case
  local args
  read -r -a args <<<"${cases[$3]}"
  local cfg="$repo/configs/${args[0]}"
  "$1" train "$cfg" "${args[@]:1}" --set train.epochs=2 --set threads=1 --set device=cpu \
    --out "runs/$2-$3" --overwrite >"runs/$2-$3.log" 2>&1 || { echo "$3: $2 run failed (runs/$2-$3.log)"; return 1; }
}

fail=0
for c in "${names[@]}"; do
  [ -n "${cases[$c]:-}" ] || { echo "unknown case $c" >&2; exit 2; }
  mkdir -p runs
  run "$ref" ref "$c" & p1=$!
  run "$new" new "$c" & p2=$!
  wait $p1 || { fail=1; continue; }
  wait $p2 || { fail=1; continue; }
  if /usr/bin/python3 - "runs/ref-$c" "runs/new-$c" "$c" <<'EOF'; then :; else fail=1; fi
import json, sys
a, b, name = sys.argv[1:]
skip = {"epoch_seconds", "eval_seconds", "peak_rss_bytes", "phase_seconds", "samples_per_s",
        "seconds", "train_seconds", "total_seconds", "wall_seconds"}
def strip(o):
    if isinstance(o, dict):
        return {k: strip(v) for k, v in o.items() if k not in skip and "seconds" not in k and "rss" not in k}
    if isinstance(o, list):
        return [strip(v) for v in o]
    return o
def epochs(d):
    return [strip(json.loads(l)) for l in open(f"{d}/metrics.jsonl") if l.strip()]
ra, rb = epochs(a), epochs(b)
diffs = []
if len(ra) != len(rb):
    diffs.append(f"{len(ra)} vs {len(rb)} epochs")
def walk(x, y, path):
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y)):
            if k not in x or k not in y:
                diffs.append(f"{path}.{k}: only in {'ref' if k in x else 'new'}")
            else:
                walk(x[k], y[k], f"{path}.{k}")
    elif x != y:
        diffs.append(f"{path}: {x!r} vs {y!r}")
for i, (x, y) in enumerate(zip(ra, rb)):
    walk(x, y, f"epoch{i + 1}")
walk(strip(json.load(open(f"{a}/results.json")).get("metrics", {})),
     strip(json.load(open(f"{b}/results.json")).get("metrics", {})), "results.metrics")
if diffs:
    print(f"{name}: DIFFERENT")
    for d in diffs[:20]:
        print("   ", d)
    sys.exit(1)
print(f"{name}: IDENTICAL (losses {[e.get('loss') for e in ra]})")
EOF
done
exit $fail
