#pragma once
// Host copies of device-resident parameters for checkpoints: the one state machine behind
// OutputLayer::sync_state on the GPU (output_layer.h). to_host fills the copies that
// state() then refers to; to_device uploads them (after a checkpoint was read into them)
// and frees them; release frees them (after a save).
#include <initializer_list>
#include <vector>

#include "core/cuda_context.h"
#include "core/error.h"
#include "core/tensor_ref.h"

namespace xmc {

template <class State>
class HostStaging {
 public:
  // download() -> State; upload(const State&).
  template <class Download, class Upload>
  void sync(StateSync s, Download&& download, Upload&& upload) {
    switch (s) {
      case StateSync::to_host:
        state_ = download();
        staged_ = true;
        return;
      case StateSync::to_device:
        XMC_CHECK(staged_, "sync_state(to_device) without host copies");
        upload(state_);
        break;
      case StateSync::release:
        break;
    }
    state_ = State{};
    staged_ = false;
  }
  // A device block with `State download()` and `upload(const State&)`.
  template <class Block>
  void sync(StateSync s, Block& block) {
    sync(s, [&] { return block.download(); }, [&](const State& st) { block.upload(st); });
  }

  bool staged() const { return staged_; }
  State& state() { return state_; }

 private:
  State state_{};
  bool staged_ = false;
};

// Host copies of plain device float buffers, one vector per buffer in order.
using BufferCopies = std::vector<std::vector<float>>;

inline BufferCopies download_buffers(const gpu::CudaContext& ctx,
                                     std::initializer_list<const gpu::DeviceBuffer<float>*> bufs) {
  BufferCopies out;
  for (const auto* b : bufs) {
    out.emplace_back(b->size());
    b->download(out.back().data(), b->size(), ctx.stream());
  }
  ctx.synchronize();
  return out;
}

inline void upload_buffers(const gpu::CudaContext& ctx,
                           std::initializer_list<gpu::DeviceBuffer<float>*> bufs,
                           const BufferCopies& copies) {
  size_t i = 0;
  for (auto* b : bufs) {
    const std::vector<float>& v = copies.at(i++);
    b->upload(v.data(), v.size(), ctx.stream());
  }
  ctx.synchronize();
}

}  // namespace xmc
