#include "core/gpu.h"
#include "cuda_check.h"

namespace xmc::gpu {

bool built_with_cuda() { return true; }

std::vector<DeviceInfo> query_devices() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  // No driver or no device: the machine has no usable GPU, which is not an error here.
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();
    return {};
  }
  XMC_CUDA_CHECK(err);
  std::vector<DeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    XMC_CUDA_CHECK(cudaGetDeviceProperties(&p, i));
    out.push_back({i, p.name, p.major, p.minor, static_cast<int64_t>(p.totalGlobalMem),
                   p.multiProcessorCount});
  }
  return out;
}

}  // namespace xmc::gpu
