#pragma once
// Encoder: an optional small MLP between the input features and the output layer.
// Layers: sparse_linear (CSR input; only the touched weight rows are updated), linear,
// each with activation none|relu and input dropout. An empty encoder on dense input is the
// identity (h = x). Sparse input needs a sparse_linear first layer.
// Layers: model/sparse_linear.h (lazy updates of the touched feature rows only; see there),
// model/linear.h — one path on both devices (Buffers and the Context's ops).
//
// Batches are double-buffered: stage() prepares a batch in one of two slots
// (StagingSlot, in model/encoder.cpp) — the sparse input after dropout, its non-zeros
// grouped by column, the dropout masks of the dense layers, all drawn on the host from the
// caller's Rng in the layers' order — and on a CUDA Context copies the slot to the device
// on a side stream, so the copy of batch i+1 overlaps the compute of batch i;
// forward_staged() runs the layers on the slot.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/field_constraints.h"
#include "core/matrix.h"
#include "core/rng.h"
#include "core/tensor_ref.h"
#include "data/batch.h"
#include "ops/optimizer.h"

namespace xmc {

struct EncoderLayerConfig {
  std::string type = "linear";      // sparse_linear | linear
  int64_t out = 512;                // output width
  std::string activation = "relu";  // none | relu
  double dropout = 0.0;             // input dropout probability in [0, 1)

  template <class V>
  void visit(V& v) {
    v.field("type", type, "Layer type; sparse input needs sparse_linear first",
            Choices{"sparse_linear", "linear"});
    v.field("out", out, "Output width", Range{1, 1 << 24});
    v.field("activation", activation, "Activation after the layer", Choices{"none", "relu"});
    v.field("dropout", dropout, "Input dropout probability", Range::half_open(0, 1));
  }
  bool operator==(const EncoderLayerConfig&) const = default;
};

class Encoder {
 public:
  // input_dim = D; sparse_input: the batches carry sparse_x. Weights initialised with
  // uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) from the seed; buffers go through the ledger
  // (weights, optimizer, activations).
  Encoder(Context& ctx, const std::vector<EncoderLayerConfig>& layers, int64_t input_dim,
          bool sparse_input, const OptimizerConfig& optim, uint64_t seed);
  ~Encoder();
  Encoder(const Encoder&) = delete;
  Encoder& operator=(const Encoder&) = delete;

  int64_t output_dim() const;
  bool empty() const;

  // h [B×output_dim]. training: applies dropout (from rng) and keeps what backward needs.
  // The returned view stays valid until the next forward. On a CUDA Context h is a DEVICE
  // view and backward_update takes a device dh. A batch staged before stays queued for
  // the next forward_staged().
  ConstMatrix forward(const Batch& batch, bool training, Rng& rng);
  // forward() in two halves, for prefetching: stage() prepares a batch (draws its dropout;
  // on the GPU starts its host→device copy on a side stream), forward_staged() runs the
  // forward of the oldest staged batch. At most two batches staged. The Batch need not
  // outlive stage().
  void stage(const Batch& batch, bool training, Rng& rng);
  ConstMatrix forward_staged();
  // Given dL/dh [B×output_dim] for the last training forward: computes the parameter
  // gradients and applies one optimizer step with learning rate lr (step is 1-based).
  void backward_update(ConstMatrix dh, double lr, int64_t step);

  // Parameters and optimizer state, for checkpoints ("encoder/<i>/weight", ".../bias",
  // ".../opt1", ".../opt2"). On a CUDA Context: host copies, sync_state(to_host) first.
  std::vector<TensorRef> state();
  void sync_state(StateSync s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xmc
