#!/usr/bin/env bash
# The README's main command: build the binary (no tests, no CUDA: the quickest build) and
# train configs/quickstart.yaml, which generates its synthetic data on first use. Run again,
# it replaces the run in runs/quickstart (--overwrite), unless given --resume.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh build-quickstart -DXMC_BUILD_TESTS=OFF -DXMC_CUDA=OFF
replace=(--overwrite)
for a in "$@"; do [ "$a" = --resume ] && replace=(); done
./build-quickstart/app/xmctrain train configs/quickstart.yaml "${replace[@]}" "$@"
