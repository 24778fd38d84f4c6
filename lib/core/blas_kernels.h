#pragma once
// Which kernels OpenBLAS runs, and the fix for the CPUs it does not recognise.
//
// Debian's OpenBLAS is built with DYNAMIC_ARCH: at load time it picks its kernels from the
// CPU's family and model numbers. On a CPU it does not know — a cloud VM that reports a
// generic "Intel Xeon Processor", or a model newer than the library — it falls back to
// Prescott's SSE3 kernels whatever the CPU supports. On a 2-vCPU Sapphire Rapids VM that
// fallback ran sgemm at 56 GFLOP/s against 210-270 with the AVX-512 kernels, and the dense
// layer's WordNet step 2.5x slower (docs/benchmarks.md, "OpenBLAS's kernels"). The
// kernels can only be chosen before the library loads, through the environment variable
// OPENBLAS_CORETYPE, so `xmctrain` restarts itself with it set (app/main.cpp).
#include <string>
#include <string_view>

namespace xmc {

// The core whose kernels OpenBLAS uses ("SkylakeX", "Prescott", ...).
std::string blas_kernels();

// What the CPU supports, as far as the choice below needs it.
struct CpuVectorIsa {
  bool avx2_fma = false;
  bool avx512 = false;       // F, BW, DQ and VL: what OpenBLAS's SkylakeX kernels use
  bool avx512_bf16 = false;  // Cooper Lake and later (OpenBLAS's Cooperlake kernels)
};
CpuVectorIsa cpu_vector_isa();

// The OPENBLAS_CORETYPE to run with instead of `detected`, or empty to keep it: a core
// with AVX2 kernels or better (Haswell, Zen, SkylakeX, Cooperlake, SapphireRapids) is
// kept; below that, the best of Cooperlake / SkylakeX / Haswell that the CPU supports.
std::string better_blas_kernels(std::string_view detected, const CpuVectorIsa& isa);

}  // namespace xmc
