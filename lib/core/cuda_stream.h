#pragma once
// Owning CUDA streams and events, host side (no CUDA headers needed, like
// core/cuda_context.h). Used for the side stream that copies batches host→device while
// the context's stream computes, and for timing with events. Implementation:
// cuda/runtime.cpp; in a build without CUDA every constructor throws "xmctrain was
// built without CUDA support" (core/gpu_stubs.cpp).
#include "core/cuda_context.h"

struct CUevent_st;  // cudaEvent_t = CUevent_st*

namespace xmc::gpu {

// A non-blocking stream of the current device, destroyed (after synchronising) with the
// object.
class CudaStream {
 public:
  CudaStream();
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  Stream get() const { return stream_; }

 private:
  Stream stream_ = nullptr;
};

// A CUDA event. timing = false creates it with cudaEventDisableTiming (cheaper; the kind
// used for stream ordering).
class CudaEvent {
 public:
  explicit CudaEvent(bool timing = false);
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  // Captures the work queued on `stream` so far.
  void record(Stream stream);
  // Makes `stream` wait (on the device, not the host) until the last record completed.
  void make_wait(Stream stream) const;
  // Blocks the host until the last record completed (returns at once if never recorded).
  void synchronize() const;
  // Milliseconds between start's record and this event's record (both timing events,
  // both completed).
  float elapsed_ms_since(const CudaEvent& start) const;

 private:
  CUevent_st* event_ = nullptr;
};

}  // namespace xmc::gpu
