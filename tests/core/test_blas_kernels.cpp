#include <catch2/catch.hpp>

#include "core/blas_kernels.h"

using namespace xmc;

TEST_CASE("OpenBLAS's fallback kernels are replaced by the best core the CPU supports") {
  const CpuVectorIsa none{};
  const CpuVectorIsa avx2{.avx2_fma = true};
  const CpuVectorIsa avx512{.avx2_fma = true, .avx512 = true};
  const CpuVectorIsa bf16{.avx2_fma = true, .avx512 = true, .avx512_bf16 = true};
  // The fallback of an unknown CPU, and other pre-AVX2 cores: the best the CPU runs.
  for (const char* old : {"Prescott", "Core2", "Nehalem", "Sandybridge", "Katmai"}) {
    INFO(old);
    CHECK(better_blas_kernels(old, bf16) == "Cooperlake");
    CHECK(better_blas_kernels(old, avx512) == "SkylakeX");
    CHECK(better_blas_kernels(old, avx2) == "Haswell");
    CHECK(better_blas_kernels(old, none).empty());  // nothing better to run
  }
  // A core with AVX2 kernels or better is OpenBLAS's own choice: kept, any spelling.
  for (const char* good : {"Haswell", "Zen", "SkylakeX", "COOPERLAKE", "SapphireRapids"}) {
    INFO(good);
    CHECK(better_blas_kernels(good, bf16).empty());
  }
  // No name: nothing to choose.
  CHECK(better_blas_kernels("", bf16).empty());
}

TEST_CASE("the BLAS linked is OpenBLAS and names its kernels") {
  // The project links OpenBLAS (CMakeLists.txt: BLA_VENDOR OpenBLAS); its core name is
  // what bench's ceilings report.
  CHECK_FALSE(blas_kernels().empty());
}
