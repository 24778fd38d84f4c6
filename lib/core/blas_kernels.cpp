#include "core/blas_kernels.h"

#include <algorithm>
#include <array>
#include <cctype>

// OpenBLAS's own query (the project links OpenBLAS: CMakeLists.txt, BLA_VENDOR).
extern "C" char* openblas_get_corename(void);

namespace xmc {

std::string blas_kernels() {
  const char* name = openblas_get_corename();
  return name != nullptr ? std::string(name) : std::string();
}

CpuVectorIsa cpu_vector_isa() {
  CpuVectorIsa isa;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  isa.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  isa.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  isa.avx512_bf16 = isa.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
  return isa;
}

std::string better_blas_kernels(std::string_view detected, const CpuVectorIsa& isa) {
  std::string lower(detected);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  constexpr std::array<std::string_view, 5> good = {"haswell", "zen", "skylakex", "cooperlake",
                                                    "sapphirerapids"};
  if (lower.empty() || std::find(good.begin(), good.end(), lower) != good.end()) return {};
  if (isa.avx512_bf16) return "Cooperlake";
  if (isa.avx512) return "SkylakeX";
  if (isa.avx2_fma) return "Haswell";
  return {};
}

}  // namespace xmc
