#pragma once
// Host-side interface to the CUDA runtime (cuda/runtime.cpp) and the stub mechanism of
// every gpu:: entry point. In a build without CUDA every function here but
// built_with_cuda() throws "xmctrain was built without CUDA support": there is never a
// silent CPU fallback.
#include <cstdint>
#include <string>
#include <vector>

namespace xmc::gpu {

bool built_with_cuda();
// In a build without CUDA: throws InputError "xmctrain was built without CUDA support"
// (every stub calls it; core/gpu_stubs.cpp).
[[noreturn]] void no_cuda();

// A GPU entry point is declared once, in its header, between XMC_GPU_STUBS_BEGIN and
// XMC_GPU_STUBS_END, as
//   XMC_GPU_FN void op(const CudaContext& ctx, ...) XMC_GPU_STUB;
// With CUDA that is a declaration (the definition is in cuda/); without CUDA it defines
// an inline stub that calls no_cuda() (its parameters unused, hence the two pragmas).
#ifdef XMC_WITH_CUDA
#define XMC_GPU_FN
#define XMC_GPU_STUB
#define XMC_GPU_STUBS_BEGIN
#define XMC_GPU_STUBS_END
#else
#define XMC_GPU_FN inline
#define XMC_GPU_STUB         \
  { ::xmc::gpu::no_cuda(); } \
  static_assert(true)
#define XMC_GPU_STUBS_BEGIN \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wunused-parameter\"")
#define XMC_GPU_STUBS_END _Pragma("GCC diagnostic pop")
#endif
XMC_GPU_STUBS_BEGIN

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int64_t total_bytes = 0;
  int multiprocessors = 0;
};

// Devices visible to the CUDA runtime; empty when the driver finds none.
XMC_GPU_FN std::vector<DeviceInfo> query_devices() XMC_GPU_STUB;
}  // namespace xmc::gpu
XMC_GPU_STUBS_END
