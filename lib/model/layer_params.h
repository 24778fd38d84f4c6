#pragma once
// What both encoder layers (model/linear.h, model/sparse_linear.h) hold and show: sizes,
// activation, input dropout, optimizer settings and the parameter block [(in+1)×out] on
// the Context's device — rows 0..in-1 are W (a row per input feature, uniform(±1/sqrt(in))
// from init_rng, drawn on the host), row `in` is the bias (0) — with optimizer state in the
// same layout, the count of applied steps and the checkpoint names.
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/context.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "core/matrix.h"
#include "core/rng.h"
#include "core/tensor_ref.h"
#include "ops/optimizer.h"

namespace xmc {

// The activation after an encoder layer (applied by the ops of ops/encoder.h and
// ops/dense.h).
XMC_NAMED_ENUM(Activation, none, relu);

class EncoderLayerBase {
 public:
  int64_t in_dim() const { return in_; }
  double dropout() const { return dropout_; }
  // Host views on a CPU Context (tests): W [in×out], b [out].
  Matrix weight() { return {w(), in_, out_}; }
  std::span<float> bias() { return {bias_data(), static_cast<size_t>(out_)}; }
  // "<prefix>/weight" [in×out], "<prefix>/bias" [out], "<prefix>/opt1", "<prefix>/opt2"
  // [(in+1)×out] as present, "<prefix>/step" [1] int64. Host arrays: on a CUDA Context
  // after sync_state(to_host).
  std::vector<TensorRef> state(const std::string& prefix) {
    std::vector<TensorRef> s;
    float* p = params_.host_data();
    s.push_back({prefix + "/weight", {in_, out_}, p});
    s.push_back({prefix + "/bias", {out_}, p + in_ * out_});
    if (!opt1_.empty()) s.push_back({prefix + "/opt1", {in_ + 1, out_}, opt1_.host_data()});
    if (!opt2_.empty()) s.push_back({prefix + "/opt2", {in_ + 1, out_}, opt2_.host_data()});
    s.push_back({prefix + "/step", {1}, &step_});
    return s;
  }
  void sync_state(StateSync s) {
    for (Buffer<float>* b : {&params_, &opt1_, &opt2_}) b->sync(s);
  }

 protected:
  EncoderLayerBase(Context& ctx, int64_t in, int64_t out, Activation act, double dropout,
                   const OptimizerConfig& optim, Rng& init_rng)
      : ctx_(&ctx), in_(in), out_(out), act_(act), dropout_(dropout), optim_(optim) {
    XMC_CHECK(in > 0 && out > 0, "encoder layer of {} inputs × {} outputs", in, out);
    const auto n = static_cast<size_t>((in + 1) * out);
    params_ = Buffer<float>(ctx, MemTag::weights, n);
    opt1_ = optimizer_state_buffer(ctx, optim, 1, n);
    opt2_ = optimizer_state_buffer(ctx, optim, 2, n);
    float* p = params_.stage_for_write();
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    for (int64_t i = 0; i < in * out; ++i)
      p[static_cast<size_t>(i)] = static_cast<float>((2.0 * init_rng.uniform() - 1.0) * bound);
    std::fill(p + in * out, p + n, 0.0f);
    params_.commit();
  }
  float* w() { return params_.data(); }
  float* bias_data() { return params_.data() + in_ * out_; }

  Context* ctx_;
  int64_t in_;
  int64_t out_;
  Activation act_;
  double dropout_;
  OptimizerConfig optim_;
  Buffer<float> params_;       // [(in+1)×out]: W, then b
  Buffer<float> opt1_, opt2_;  // [(in+1)×out] or empty
  int64_t step_ = 0;           // last applied step
};

}  // namespace xmc
