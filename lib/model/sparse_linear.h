#pragma once
// First encoder layer for sparse input: h = act(dropout(x)·W + b), x [B×D] CSR (with
// values), W [D×out] stored with one contiguous row per input feature, b [out].
//
// Backward computes dW only for the feature rows the batch touches: the unique feature
// ids of the batch (after dropout) in ascending order, touched_rows() [U], and their
// gradient rows, row_grad() [U×out]. apply_update() updates only those rows and their
// optimizer state — "lazy" semantics as in PyTorch SparseAdam / TF LazyAdam: an untouched
// row's weights, moments and weight decay are left exactly as they were (not decayed), and
// a touched row's Adam bias correction uses the global step passed in. The bias is dense
// and updated every step.
//
// Parameter layout [(D+1)×out]: rows 0..D-1 are W, row D is b; optimizer state has the
// same layout.
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

class SparseLinear {
 public:
  // W ~ uniform(-1/sqrt(D), 1/sqrt(D)) from init_rng, b = 0.
  SparseLinear(Context& ctx, int64_t in, int64_t out, Activation act, double dropout,
               const OptimizerConfig& optim, Rng& init_rng);

  int64_t in_dim() const { return in_; }
  int64_t out_dim() const { return out_; }

  // x [B×D] CSR (values may be absent = all ones) -> h [B×out], valid until the next
  // forward. The input is copied (after dropout when training).
  ConstMatrix forward(const CsrMatrix& x, bool training, Rng& rng);
  // dh [B×out] for the last training forward -> touched rows, their gradient rows, db.
  void backward(ConstMatrix dh);
  // One optimizer step on the touched rows and the bias; step is 1-based.
  void apply_update(double lr, int64_t step);

  Matrix weight() { return {params_.data(), in_, out_}; }  // [D×out]
  std::span<float> bias() { return {params_.data() + in_ * out_, static_cast<size_t>(out_)}; }
  std::span<const uint32_t> touched_rows() const { return touched_; }
  ConstMatrix row_grad() const {  // [U×out]
    return {row_grad_.data(), static_cast<int64_t>(touched_.size()), out_};
  }
  std::span<const float> bias_grad() const { return bias_grad_; }

  // "<prefix>/weight" [D×out], "<prefix>/bias" [out], "<prefix>/opt1", "<prefix>/opt2"
  // [(D+1)×out] as present, "<prefix>/step" [1] int64 (last applied step).
  std::vector<TensorRef> state(const std::string& prefix);

 private:
  int64_t in_;
  int64_t out_;
  Activation act_;
  double dropout_;
  OptimizerConfig optim_;
  HostBuffer<float> params_;  // [(D+1)×out]
  HostBuffer<float> opt1_;    // [(D+1)×out] or empty
  HostBuffer<float> opt2_;
  int64_t step_ = 0;
  // From the last training forward.
  bool have_forward_ = false;
  bool have_backward_ = false;
  CsrMatrix x_;                    // the batch input after dropout
  GrowBuffer<float> h_;            // [B×out]
  GrowBuffer<float> dz_;           // [B×out]
  std::vector<uint32_t> touched_;  // [U] sorted unique feature ids
  GrowBuffer<float> row_grad_;     // [U×out]
  std::vector<float> bias_grad_;   // [out]
  std::vector<uint64_t> keys_;     // (feature << 32 | nz position), sorted
  std::vector<uint32_t> row_of_nz_;
  std::vector<int64_t> group_start_;  // [U+1] into keys_
};

}  // namespace xmc
