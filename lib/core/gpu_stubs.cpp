// Compiled only when CUDA is off: what the headers cannot stub inline (XMC_GPU_STUB,
// core/gpu.h) fails loudly here (never a silent CPU fallback). Nothing can have been
// allocated on a device, so the free functions, called from destructors of empty buffers,
// do nothing.
#include "core/cuda_context.h"
#include "core/cuda_stream.h"
#include "core/error.h"
#include "core/gpu.h"

namespace xmc::gpu {

void no_cuda() {
  throw InputError("xmctrain was built without CUDA support (rebuild with -DXMC_CUDA=ON)");
}

bool built_with_cuda() { return false; }

// core/cuda_context.h
void device_free(void*) noexcept {}
void pinned_free(void*) noexcept {}
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
