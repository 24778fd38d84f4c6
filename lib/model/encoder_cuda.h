#pragma once
// The encoder on the GPU (model/encoder.h's Encoder delegates to it on a CUDA Context):
// sparse_linear (CSR × dense forward; weight gradient of the touched rows from a
// transposed CSR built on the host, no atomics; lazy updates of those rows only, as on
// the CPU), linear (cuBLAS), relu, dropout. Parameters, optimizer state and activations
// stay on the device; forward returns a DEVICE view, backward takes one.
//
// Batches are double-buffered: stage() packs a batch into one of two pinned host slots —
// the sparse input after dropout, its transposed CSR, and the dropout masks of the dense
// layers, all drawn on the host from the caller's Rng in the CPU encoder's order, so both
// devices drop the same entries — and copies the slot to the device on a side stream,
// recording an event; forward_staged() makes the compute stream wait for that event. A
// slot is rewritten only after the compute stream has passed every use of it (an event
// recorded on the compute stream, waited for by the side stream), so the copy of batch
// i+1 overlaps the compute of batch i.
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/context.h"
#include "core/matrix.h"
#include "core/rng.h"
#include "core/tensor_ref.h"
#include "data/batch.h"
#include "model/optimizer.h"

namespace xmc {
namespace gpu {
class CudaStream;
}

struct EncoderLayerConfig;

class EncoderCuda {
 public:
  // Layers validated by Encoder; the same initial weights as the CPU layers for the seed.
  EncoderCuda(Context& ctx, const std::vector<EncoderLayerConfig>& layers, int64_t input_dim,
              bool sparse_input, const OptimizerConfig& optim, uint64_t seed);
  ~EncoderCuda();
  EncoderCuda(const EncoderCuda&) = delete;
  EncoderCuda& operator=(const EncoderCuda&) = delete;

  int64_t output_dim() const { return output_dim_; }
  // At most two batches staged and not yet forwarded. The Batch need not outlive the call.
  void stage(const Batch& batch, bool training, Rng& rng);
  // Forward of the oldest staged batch: h [B×output_dim], a device view valid until the
  // next forward.
  ConstMatrix forward_staged();
  // stage() + forward of THIS batch at once; a batch staged before stays queued for the
  // next forward_staged() (a layer hook may embed points — TrainerView::embed_train —
  // between the trainer's staging of batch i+1 and its forward).
  ConstMatrix forward_now(const Batch& batch, bool training, Rng& rng);
  // dh [B×output_dim] (device) for the last training forward: gradients, then one
  // optimizer step of every layer.
  void backward_update(ConstMatrix dh, double lr, int64_t step);

  // Host copies (sync_state(to_host) first), the CPU encoder's names and shapes.
  std::vector<TensorRef> state();
  void sync_state(StateSync s);

 private:
  struct Layer;
  struct Slot;

  ConstMatrix forward_slot(int idx);

  Context& ctx_;
  int64_t input_dim_;
  bool sparse_input_;
  int64_t output_dim_;
  OptimizerConfig optim_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::array<std::unique_ptr<Slot>, 2> slots_;
  std::unique_ptr<gpu::CudaStream> side_;  // host→device copies
  int next_stage_ = 0;      // slot the next stage() fills
  int staged_count_ = 0;    // staged, not yet forwarded
  int last_slot_ = -1;      // slot of the last forward
  bool last_training_ = false;
  int64_t last_rows_ = 0;
  bool staged_state_ = false;
};

}  // namespace xmc
