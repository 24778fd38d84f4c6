#include "core/context.h"

#include <omp.h>

#include "core/cuda_context.h"
#include "core/error.h"
#include "core/gpu.h"

namespace xmc {

std::string_view to_string(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

Device resolve_device(std::string_view requested) {
  if (requested == "cpu") return Device::cpu;
  if (requested == "auto")
    return gpu::built_with_cuda() && !gpu::query_devices().empty() ? Device::cuda : Device::cpu;
  if (requested == "cuda") {
    if (!gpu::built_with_cuda())
      throw InputError(
          "device 'cuda' requested, but xmctrain was built without CUDA support "
          "(rebuild with -DXMC_CUDA=ON)");
    if (gpu::query_devices().empty())
      throw InputError("device 'cuda' requested, but no CUDA GPU is visible on this machine");
    return Device::cuda;
  }
  throw_input("unknown device '{}': expected cpu, cuda or auto", requested);
}

Context::Context(Device device, int threads, int gpu) : device_(device), threads_(threads) {
  if (threads_ <= 0) threads_ = omp_get_max_threads();
  omp_set_num_threads(threads_);
  if (device_ == Device::cuda) cuda_ = std::make_unique<gpu::CudaContext>(ledger_, gpu);
}

Context::~Context() = default;

void Context::synchronize() const {
  if (cuda_) cuda_->synchronize();
}

gpu::CudaContext& Context::cuda() const {
  XMC_CHECK(cuda_ != nullptr, "the CUDA context of a {} Context was requested", to_string(device_));
  return *cuda_;
}

}  // namespace xmc
