// Owning streams and events (core/cuda_stream.h). Host code only, compiled by g++.
#include "core/cuda_stream.h"

#include <cuda_runtime.h>

#include "cuda_check.h"

namespace xmc::gpu {

CudaStream::CudaStream() { XMC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }

CudaStream::~CudaStream() {
  if (stream_) {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
}

CudaEvent::CudaEvent(bool timing) {
  XMC_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_) (void)cudaEventDestroy(event_);
}

void CudaEvent::record(Stream stream) { XMC_CUDA_CHECK(cudaEventRecord(event_, stream)); }

void CudaEvent::make_wait(Stream stream) const {
  XMC_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}

void CudaEvent::synchronize() const { XMC_CUDA_CHECK(cudaEventSynchronize(event_)); }

float CudaEvent::elapsed_ms_since(const CudaEvent& start) const {
  float ms = 0.0f;
  XMC_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

}  // namespace xmc::gpu
