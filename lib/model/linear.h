#pragma once
// Dense encoder layer: h = act(dropout(x)·W + b), x [B×in], W [in×out], b [out], on the
// Context's device (every view a DEVICE view on a CUDA Context; the ops of
// ops/encoder.h and ops/dense.h).
// Parameters live in one array [(in+1)×out]: rows 0..in-1 are W (a row per input
// feature, as in SparseLinear), row `in` is b; gradients and optimizer state use the same
// layout, so one optimizer call updates everything.
// forward / backward (gradients into buffers) / apply_update are separate so gradients
// can be checked; Encoder composes them.
#include <cstdint>

#include "core/matrix.h"
#include "model/layer_params.h"

namespace xmc {

class Linear : public EncoderLayerBase {
 public:
  // W ~ uniform(-1/sqrt(in), 1/sqrt(in)) from init_rng (drawn on the host), b = 0.
  Linear(Context& ctx, int64_t in, int64_t out, Activation act, double dropout,
         const OptimizerConfig& optim, Rng& init_rng);

  // x [B×in] -> h [B×out], valid until the next forward. The input is copied (times the
  // dropout mask [B×in] when training and mask is not null: 0 or 1/(1-p) per entry, from
  // dropout_mask), so x need not outlive the call.
  ConstMatrix forward(ConstMatrix x, const float* mask, bool training);
  // dh [B×out] for the last training forward -> dW, db into grad buffers (overwritten);
  // returns dL/dx [B×in] when need_dx (else an empty view), valid until the next backward.
  ConstMatrix backward(ConstMatrix dh, bool need_dx);
  // One optimizer step with the last gradients; step is 1-based.
  void apply_update(double lr, int64_t step);

  // Host views on a CPU Context (tests): the gradients of W and b.
  ConstMatrix weight_grad() const { return {grad_.data(), in_, out_}; }
  std::span<const float> bias_grad() const {
    return {grad_.data() + in_ * out_, static_cast<size_t>(out_)};
  }

  // state() / sync_state(): "<prefix>/weight" [in×out], "<prefix>/bias" [out],
  // "<prefix>/opt1", "<prefix>/opt2" [(in+1)×out] as present, "<prefix>/step" [1] int64.

 private:
  Buffer<float> grad_;    // [(in+1)×out]
  // What backward needs from the last training forward.
  int64_t batch_ = 0;
  bool have_forward_ = false;
  const float* mask_ = nullptr;  // the last training forward's mask (null: none)
  Buffer<float> x_;              // [B×in] input after dropout
  Buffer<float> h_;              // [B×out]
  Buffer<float> dz_;             // [B×out]
  Buffer<float> dx_;             // [B×in]
};

}  // namespace xmc
