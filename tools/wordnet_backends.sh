#!/usr/bin/env bash
# Every backend on the WordNet dataset (real data, tools/build_wordnet.py), on both inputs:
#   tf-idf: configs/wordnet_<backend>.yaml as they are (sparse_linear encoder; dense is the
#           winning config, 768 units; bottleneck 768, the others 256 units);
#   LSA:    the same configs on the 256-d LSA embeddings (trn_X.npy / tst_X.npy + XC label
#           files) with a 512-unit ReLU linear encoder instead of the sparse_linear layer.
# One run directory per (input, backend) under OUT, then `xmctrain report` of each input's
# runs (P@k, PSP@k, output-layer memory, epoch time) and the curves (tools/plot_curves.py).
# The peers' rows come from tools/peers.py on the same files (docs/benchmarks.md).
#
#   bash tools/wordnet_backends.sh [OUT] [BACKEND ...]     (default: runs/wordnet-backends, all)
#   INPUTS=tfidf bash tools/wordnet_backends.sh ...        (one input only: tfidf or lsa)
#
# Runs one after the other (each uses both cores); about 40 minutes on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/wordnet-backends}
shift || true
backends=("$@")
[ ${#backends[@]} -gt 0 ] || backends=(dense bottleneck fixed_fanin group_shared lsh anns)
bin=build-nocuda/app/xmctrain
[ -x "$bin" ] || bin=build/app/xmctrain
[ -f datasets/wordnet/train.txt ] || /usr/bin/python3 tools/build_wordnet.py
lsa=(--set 'data.train={features: datasets/wordnet/trn_X.npy, labels: datasets/wordnet/trn_X_Y.txt}'
     --set 'data.test={features: datasets/wordnet/tst_X.npy, labels: datasets/wordnet/tst_X_Y.txt}'
     --set 'model.encoder=[{type: linear, out: 512, activation: relu}]')
inputs=(${INPUTS:-tfidf lsa})
for input in "${inputs[@]}"; do
  case $input in tfidf | lsa) ;; *) echo "wordnet_backends.sh: INPUTS: tfidf or lsa, not '$input'" >&2; exit 2;; esac
done
for b in "${backends[@]}"; do
  cfg=configs/wordnet_$b.yaml
  [ -f "$cfg" ] || { echo "wordnet_backends.sh: no $cfg" >&2; exit 2; }
  for input in "${inputs[@]}"; do
    if [ "$input" = tfidf ]; then
      "$bin" train "$cfg" --out "$out/tfidf/$b" --overwrite
    else
      "$bin" train "$cfg" "${lsa[@]}" --out "$out/lsa/$b" --overwrite
    fi
  done
done
for input in "${inputs[@]}"; do
  echo "## WordNet, $input input"
  "$bin" report --sort P@1 "$out/$input"
  /usr/bin/python3 tools/plot_curves.py --out "$out/$input.png" --metric P@1 "$out/$input" >/dev/null
done
