#pragma once
// Dense encoder layer: h = act(dropout(x)·W + b), x [B×in], W [in×out], b [out].
// Parameters live in one array [(in+1)×out]: rows 0..in-1 are W (a row per input
// feature, as in SparseLinear), row `in` is b; gradients and optimizer state use the same
// layout, so one optimizer call updates everything.
// forward / backward (gradients into buffers) / apply_update are separate so gradients
// can be checked; Encoder composes them.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/matrix.h"
#include "core/memory_ledger.h"
#include "core/rng.h"
#include "core/tensor_ref.h"
#include "model/activation.h"
#include "model/grow_buffer.h"
#include "model/optimizer.h"

namespace xmc {

class Linear {
 public:
  // W ~ uniform(-1/sqrt(in), 1/sqrt(in)) from init_rng, b = 0.
  Linear(Context& ctx, int64_t in, int64_t out, Activation act, double dropout,
         const OptimizerConfig& optim, Rng& init_rng);

  int64_t in_dim() const { return in_; }
  int64_t out_dim() const { return out_; }

  // x [B×in] -> h [B×out], valid until the next forward. The input is copied (after
  // dropout when training), so x need not outlive the call.
  ConstMatrix forward(ConstMatrix x, bool training, Rng& rng);
  // dh [B×out] for the last training forward -> dW, db into grad buffers (overwritten);
  // returns dL/dx [B×in] when need_dx (else an empty view), valid until the next backward.
  ConstMatrix backward(ConstMatrix dh, bool need_dx);
  // One optimizer step with the last gradients; step is 1-based.
  void apply_update(double lr, int64_t step);

  Matrix weight() { return {params_.data(), in_, out_}; }  // [in×out]
  std::span<float> bias() { return {params_.data() + in_ * out_, static_cast<size_t>(out_)}; }
  ConstMatrix weight_grad() const { return {grad_.data(), in_, out_}; }
  std::span<const float> bias_grad() const {
    return {grad_.data() + in_ * out_, static_cast<size_t>(out_)};
  }

  // "<prefix>/weight" [in×out], "<prefix>/bias" [out], "<prefix>/opt1", "<prefix>/opt2"
  // [(in+1)×out] as present, "<prefix>/step" [1] int64 (last applied step).
  std::vector<TensorRef> state(const std::string& prefix);

 private:
  int64_t in_;
  int64_t out_;
  Activation act_;
  double dropout_;
  OptimizerConfig optim_;
  HostBuffer<float> params_;  // [(in+1)×out]
  HostBuffer<float> grad_;    // [(in+1)×out]
  HostBuffer<float> opt1_;    // [(in+1)×out] or empty
  HostBuffer<float> opt2_;
  int64_t step_ = 0;
  // What backward needs from the last training forward.
  int64_t batch_ = 0;
  bool have_forward_ = false;
  GrowBuffer<float> x_;     // [B×in] input after dropout
  GrowBuffer<float> mask_;  // [B×in] dropout multipliers
  GrowBuffer<float> h_;     // [B×out]
  GrowBuffer<float> dz_;    // [B×out]
  GrowBuffer<float> dx_;    // [B×in]
};

}  // namespace xmc
