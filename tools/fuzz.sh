#!/usr/bin/env bash
# Fuzzes the readers of untrusted files with libFuzzer (clang, ASan + UBSan):
#   fuzz_xc_text      XC text parser, combined and sparse formats
#   fuzz_npy          .npy reader
#   fuzz_predictions  predictions file read and scored as `eval --predictions` does
# Seeds: tests/fuzz/corpus/<target>/ (read only); new inputs go to build-fuzz/corpus/,
# a crash, hang or sanitizer report to build-fuzz/artifacts/ (and a non-zero exit).
# Usage: tools/fuzz.sh [SECONDS_PER_TARGET] [target...]   (default 200 s, all three)
#   CI runs tools/fuzz.sh 15. Reproduce a finding: build-fuzz/tests/fuzz/fuzz_npy FILE
# Needs clang and libclang-rt-14-dev (tools/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-200}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(xc_text npy predictions)
build_dir=${XMC_FUZZ_BUILD_DIR:-build-fuzz}
# Only the reader sources are compiled (tests/fuzz/CMakeLists.txt); no CUDA, no tests.
# Warnings are not errors here: clang warns about things GCC (the CI compiler) does not.
CC=clang CXX=clang++ XMC_TARGETS="${targets[*]/#/fuzz_}" bash tools/build.sh "$build_dir" \
  -DXMC_CUDA=OFF -DXMC_FUZZ=ON -DXMC_BUILD_TESTS=OFF -DXMC_WERROR=OFF
# The readers check header sizes against the memory budget; keep it below libFuzzer's
# malloc limit so a header's claim is refused, not allocated.
export XMC_MEMORY_LIMIT=${XMC_MEMORY_LIMIT:-1G}
export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
status=0
for t in "${targets[@]}"; do
  mkdir -p "$build_dir/corpus/$t" "$build_dir/artifacts/$t"
  echo "fuzz: $t for ${seconds}s"
  # One process (the machine may be shared); 10 s per input is a hang; 2 GiB RSS or one
  # 2 GiB allocation is a finding.
  if ! "$build_dir/tests/fuzz/fuzz_$t" -max_total_time="$seconds" \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$build_dir/artifacts/$t/" \
      "$build_dir/corpus/$t" "tests/fuzz/corpus/$t" 2>"$build_dir/fuzz_$t.log"; then
    echo "fuzz: $t FOUND A PROBLEM (log $build_dir/fuzz_$t.log, input in $build_dir/artifacts/$t/):"
    tail -n 60 "$build_dir/fuzz_$t.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$build_dir/fuzz_$t.log" |
      sed "s/^/fuzz: $t /"
    grep -E "^#[0-9]+[[:space:]]+DONE" "$build_dir/fuzz_$t.log" | sed "s/^/fuzz: $t /" || true
  fi
done
exit $status
