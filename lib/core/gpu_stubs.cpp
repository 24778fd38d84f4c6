// Compiled only when CUDA is off: every GPU entry point fails loudly.
#include "core/error.h"
#include "core/gpu.h"

namespace xmc::gpu {
namespace {
[[noreturn]] void no_cuda() {
  throw InputError("xmctrain was built without CUDA support (rebuild with -DXMC_CUDA=ON)");
}
}  // namespace

bool built_with_cuda() { return false; }
std::vector<DeviceInfo> query_devices() { no_cuda(); }
void topk_device(const float*, int64_t, int64_t, int, int64_t, float*, uint32_t*) { no_cuda(); }
void topk_host(const float*, int64_t, int64_t, int, int64_t, float*, uint32_t*) { no_cuda(); }

}  // namespace xmc::gpu
