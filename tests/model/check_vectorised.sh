#!/usr/bin/env bash
# check_vectorised.sh LIBXMC: the CPU optimizer update (OptimizerStep::apply, every
# dense and lazy-row update of every backend) is vectorised: its disassembly holds a packed
# square root (sqrtps / vsqrtps) and no call to sqrtf. With GCC's default -fmath-errno the
# loop stays scalar and the Adam update of `bench dense` ran 8-12x slower (issue 19,
# docs/design-notes.md "-fno-math-errno"). Not a timing: an instruction check.
# Exit 77 (ctest: skipped, not passed) when objdump is missing.
set -euo pipefail
lib=$1
command -v objdump >/dev/null || { echo "objdump not found: check not run"; exit 77; }
sym=_ZNK3xmc13OptimizerStep5applyEPfPKfS1_S1_l
asm=$(objdump -dr --no-show-raw-insn --disassemble="$sym" "$lib")
grep -q "<$sym>:" <<<"$asm" || { echo "FAIL: $sym not found in $lib"; exit 1; }
packed=$(grep -cE "\s(v?sqrtps)\s" <<<"$asm" || true)
calls=$(grep -cE "(call.*<sqrtf|R_X86_64_PLT32\s+sqrtf)" <<<"$asm" || true)
echo "OptimizerStep::apply: $packed packed sqrt, $calls calls to sqrtf"
[ "$packed" -ge 1 ] && [ "$calls" -eq 0 ] || { echo "FAIL: the optimizer update is not vectorised"; exit 1; }
