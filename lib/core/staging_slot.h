#pragma once
// StagingSlot: one slot of a double-buffered batch staging. The host fills a block; on a
// CUDA Context the block is pinned and copied to a device twin on a side stream (so the
// copy of batch i+1 overlaps the compute of batch i), and the ops read the twin; on a CPU
// Context the ops read the host block itself. Both blocks grow with the batch and are in
// the ledger as activations.
#include <cstddef>
#include <memory>

#include "core/context.h"
#include "core/cuda_context.h"
#include "core/cuda_stream.h"
#include "core/memory_ledger.h"

namespace xmc {

class StagingSlot {
 public:
  StagingSlot() = default;
  explicit StagingSlot(Context& ctx);
  // The host block, at least `bytes` long (contents unspecified). GPU: waits until the
  // previous copy out of it finished.
  unsigned char* host(size_t bytes);
  // GPU: once the compute stream has passed every queued use of the previous contents,
  // copies the first `bytes` of the host block to the device twin on the side stream.
  // CPU: nothing.
  void upload(size_t bytes);
  // GPU: the compute stream waits for the copy. CPU: nothing.
  void wait_ready();
  // What the ops read: the device twin (GPU) or the host block (CPU).
  const unsigned char* data() const;

 private:
  Context* ctx_ = nullptr;
  HostBuffer<unsigned char> cpu_;                 // CPU
  gpu::PinnedBuffer<unsigned char> pinned_;       // GPU
  gpu::DeviceBuffer<unsigned char> dev_;          // GPU
  std::unique_ptr<gpu::CudaStream> side_;         // GPU: host→device copies
  std::unique_ptr<gpu::CudaEvent> ready_, done_;  // GPU: copy finished / uses finished
};

}  // namespace xmc
