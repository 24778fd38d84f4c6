#include "core/staging_slot.h"

#include <algorithm>

namespace xmc {

StagingSlot::StagingSlot(Context& ctx) : ctx_(&ctx) {
  if (!ctx.on_gpu()) return;
  side_ = std::make_unique<gpu::CudaStream>();
  ready_ = std::make_unique<gpu::CudaEvent>();
  done_ = std::make_unique<gpu::CudaEvent>();
}

unsigned char* StagingSlot::host(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  if (!ctx_->on_gpu()) {
    if (cpu_.size() < bytes)
      cpu_ = HostBuffer<unsigned char>(ctx_->ledger(), MemTag::activations, 2 * bytes);
    return cpu_.data();
  }
  ready_->synchronize();
  if (pinned_.size() < bytes)
    pinned_ = gpu::PinnedBuffer<unsigned char>(ctx_->ledger(), MemTag::activations, 2 * bytes);
  return pinned_.data();
}

void StagingSlot::upload(size_t bytes) {
  if (!ctx_->on_gpu()) return;
  gpu::CudaContext& cuda = ctx_->cuda();
  if (dev_.size() < bytes) {
    cuda.synchronize();  // the old twin may still be read by queued work
    dev_ = gpu::DeviceBuffer<unsigned char>(ctx_->ledger(), MemTag::activations, 2 * bytes);
  }
  done_->record(cuda.stream());
  done_->make_wait(side_->get());
  gpu::copy_to_device(dev_.data(), pinned_.data(), bytes, side_->get());
  ready_->record(side_->get());
}

void StagingSlot::wait_ready() {
  if (ctx_->on_gpu()) ready_->make_wait(ctx_->cuda().stream());
}

const unsigned char* StagingSlot::data() const {
  return ctx_->on_gpu() ? dev_.data() : cpu_.data();
}

}  // namespace xmc
