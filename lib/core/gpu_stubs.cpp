// Compiled only when CUDA is off: core's GPU entry points fail loudly (never a silent CPU
// fallback; the kernels' ops: kernels/gpu_stubs.cpp). Nothing can have been allocated on a
// device, so the free functions, called from destructors of empty buffers, do nothing.
#include "core/cuda_context.h"
#include "core/cuda_stream.h"
#include "core/error.h"
#include "core/gpu.h"

namespace xmc::gpu {

void no_cuda() {
  throw InputError("xmctrain was built without CUDA support (rebuild with -DXMC_CUDA=ON)");
}

bool built_with_cuda() { return false; }
std::vector<DeviceInfo> query_devices() { no_cuda(); }
void topk_device(const float*, int64_t, int64_t, int, int64_t, float*, uint32_t*) { no_cuda(); }
void topk_host(const float*, int64_t, int64_t, int, int64_t, float*, uint32_t*) { no_cuda(); }
void topk_reset(float*, uint32_t*, int64_t, int, CUstream_st*) { no_cuda(); }
void topk_merge_chunk(const float*, int64_t, int64_t, int64_t, int, int64_t, float*, uint32_t*,
                      float*, uint32_t*, CUstream_st*) {
  no_cuda();
}

// core/cuda_context.h
void* device_alloc(size_t) { no_cuda(); }
void device_free(void*) noexcept {}
void* pinned_alloc(size_t) { no_cuda(); }
void pinned_free(void*) noexcept {}
void copy_to_device(void*, const void*, size_t, Stream) { no_cuda(); }
void copy_to_host(void*, const void*, size_t, Stream) { no_cuda(); }
void copy_device(void*, const void*, size_t, Stream) { no_cuda(); }
void memset_device(void*, int, size_t, Stream) { no_cuda(); }
void synchronize(Stream) { no_cuda(); }
DeviceMemInfo device_mem_info() { no_cuda(); }
MemCrossCheck memory_cross_check(const MemoryLedger&, int64_t) { no_cuda(); }
CudaContext::CudaContext(MemoryLedger& ledger, int) : ledger_(&ledger) { no_cuda(); }
CudaContext::~CudaContext() = default;
void CudaContext::release() noexcept {}

// core/cuda_stream.h
CudaStream::CudaStream() { no_cuda(); }
CudaStream::~CudaStream() = default;
CudaEvent::CudaEvent(bool) { no_cuda(); }
CudaEvent::~CudaEvent() = default;
void CudaEvent::record(Stream) { no_cuda(); }
void CudaEvent::make_wait(Stream) const { no_cuda(); }
void CudaEvent::synchronize() const { no_cuda(); }
float CudaEvent::elapsed_ms_since(const CudaEvent&) const { no_cuda(); }

}  // namespace xmc::gpu
