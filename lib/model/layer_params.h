#pragma once
// The parameter block both encoder layers keep (model/linear.h, model/sparse_linear.h):
// [(in+1)×out] on the Context's device — rows 0..in-1 are W (a row per input feature),
// row `in` is the bias — with optimizer state in the same layout, the count of applied
// steps and the checkpoint names.
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/context.h"
#include "core/error.h"
#include "core/matrix.h"
#include "core/rng.h"
#include "core/tensor_ref.h"
#include "model/activation.h"
#include "model/optimizer.h"
#include "model/optimizer_state.h"

namespace xmc {

struct LayerParams {
  int64_t in = 0, out = 0;
  Buffer<float> params;      // [(in+1)×out]
  Buffer<float> opt1, opt2;  // [(in+1)×out] or empty
  int64_t step = 0;          // last applied step

  LayerParams() = default;
  // W ~ uniform(-1/sqrt(in), 1/sqrt(in)) from init_rng (drawn on the host), b = 0.
  LayerParams(Context& ctx, int64_t in_, int64_t out_, const OptimizerConfig& optim,
              Rng& init_rng)
      : in(in_), out(out_) {
    XMC_CHECK(in > 0 && out > 0, "encoder layer of {} inputs × {} outputs", in, out);
    const auto n = static_cast<size_t>((in + 1) * out);
    params = Buffer<float>(ctx, MemTag::weights, n);
    opt1 = optimizer_state_buffer(ctx, optim, 1, n);
    opt2 = optimizer_state_buffer(ctx, optim, 2, n);
    float* p = params.stage_for_write();
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    for (int64_t i = 0; i < in * out; ++i)
      p[static_cast<size_t>(i)] = static_cast<float>((2.0 * init_rng.uniform() - 1.0) * bound);
    std::fill(p + in * out, p + n, 0.0f);
    params.commit();
  }
  float* w() { return params.data(); }
  const float* w() const { return params.data(); }
  float* bias() { return params.data() + in * out; }

  // "<prefix>/weight" [in×out], "<prefix>/bias" [out], "<prefix>/opt1", "<prefix>/opt2"
  // [(in+1)×out] as present, "<prefix>/step" [1] int64. Host arrays: on a CUDA Context
  // after sync(to_host).
  std::vector<TensorRef> state(const std::string& prefix) {
    std::vector<TensorRef> s;
    float* p = params.host_data();
    s.push_back({prefix + "/weight", {in, out}, p});
    s.push_back({prefix + "/bias", {out}, p + in * out});
    if (!opt1.empty()) s.push_back({prefix + "/opt1", {in + 1, out}, opt1.host_data()});
    if (!opt2.empty()) s.push_back({prefix + "/opt2", {in + 1, out}, opt2.host_data()});
    s.push_back({prefix + "/step", {1}, &step});
    return s;
  }
  void sync(StateSync s) {
    for (Buffer<float>* b : {&params, &opt1, &opt2}) b->sync(s);
  }
};

// What both encoder layers hold and show: sizes, activation, input dropout, optimizer
// settings and the parameter block (W ~ uniform(±1/sqrt(in)) from init_rng, b = 0).
class EncoderLayerBase {
 public:
  int64_t in_dim() const { return in_; }
  double dropout() const { return dropout_; }
  // Host views on a CPU Context (tests): W [in×out], b [out].
  Matrix weight() { return {p_.w(), in_, out_}; }
  std::span<float> bias() { return {p_.bias(), static_cast<size_t>(out_)}; }
  // LayerParams::state's names; host arrays: on a CUDA Context after sync_state(to_host).
  std::vector<TensorRef> state(const std::string& prefix) { return p_.state(prefix); }
  void sync_state(StateSync s) { p_.sync(s); }

 protected:
  EncoderLayerBase(Context& ctx, int64_t in, int64_t out, Activation act, double dropout,
                   const OptimizerConfig& optim, Rng& init_rng)
      : ctx_(&ctx), in_(in), out_(out), act_(act), dropout_(dropout), optim_(optim),
        p_(ctx, in, out, optim, init_rng) {}

  Context* ctx_;
  int64_t in_;
  int64_t out_;
  Activation act_;
  double dropout_;
  OptimizerConfig optim_;
  LayerParams p_;  // W and b [(in+1)×out], optimizer state, step
};

}  // namespace xmc
