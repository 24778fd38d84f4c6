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
#include <vector>

#include "core/matrix.h"
#include "model/layer_params.h"
#include "ops/encoder.h"  // gpu::DeviceCsrValues, gpu::DeviceCsrByColumn

namespace xmc {

// The non-zeros of a CSR batch grouped by column: what the sparse-input layer's weight
// gradient needs on the GPU (a transposed CSR over the touched columns only, built on the
// host where the batch already is; no atomics on the device).
struct CsrByColumn {
  std::vector<uint32_t> cols;  // [U] the columns present, ascending
  std::vector<int64_t> start;  // [U+1] column u's entries: [start[u], start[u+1])
  std::vector<uint32_t> rows;  // [nnz] row of each entry
  std::vector<float> values;   // [nnz] value of each entry (1 when x has no values)
  int64_t count() const { return static_cast<int64_t>(cols.size()); }
};

// Entries of a column in ascending position (= row-major) order, the order in which
// SparseLinear::backward sums them on the CPU. Reuses out's storage.
void group_by_column(const CsrMatrix& x, CsrByColumn& out);

class SparseLinear : public EncoderLayerBase {
 public:
  // W ~ uniform(-1/sqrt(D), 1/sqrt(D)) from init_rng (drawn on the host), b = 0.
  SparseLinear(Context& ctx, int64_t in, int64_t out, Activation act, double dropout,
               const OptimizerConfig& optim, Rng& init_rng);

  // x [B×D]: the batch input after dropout, on the Context's device (the Encoder stages
  // it) -> h [B×out], valid until the next forward.
  ConstMatrix forward(const gpu::DeviceCsrValues& x, bool training);
  // dh [B×out] for the last training forward; xt: that input's non-zeros grouped by
  // column, on the Context's device (its columns are the touched rows) -> their gradient
  // rows and db.
  void backward(ConstMatrix dh, const gpu::DeviceCsrByColumn& xt);
  // The host side of a batch's input (the Encoder's staging): x checked against the input
  // dimension, copied into out (values filled with ones when absent), dropped out from rng
  // and, when training, grouped by column into xt.
  void prepare_input(const CsrMatrix& x, bool training, Rng& rng, CsrMatrix& out,
                     CsrByColumn& xt) const;
  // One optimizer step on the touched rows and the bias; step is 1-based.
  void apply_update(double lr, int64_t step);

  // Host views on a CPU Context (tests).
  std::span<const uint32_t> touched_rows() const {
    return {xt_.cols, static_cast<size_t>(xt_.count)};
  }
  ConstMatrix row_grad() const { return {row_grad_.data(), xt_.count, out_}; }  // [U×out]
  std::span<const float> bias_grad() const {
    return {bias_grad_.data(), static_cast<size_t>(out_)};
  }

  // state() / sync_state(): "<prefix>/weight" [D×out], "<prefix>/bias" [out],
  // "<prefix>/opt1", "<prefix>/opt2" [(D+1)×out] as present, "<prefix>/step" [1] int64.

 private:
  // From the last training forward / backward.
  bool have_forward_ = false;
  bool have_backward_ = false;
  int64_t batch_ = 0;
  gpu::DeviceCsrByColumn xt_{};  // the last backward's grouping (touched rows)
  Buffer<float> h_;              // [B×out]
  Buffer<float> dz_;             // [B×out]
  Buffer<float> row_grad_;       // [U×out]
  Buffer<float> bias_grad_;      // [out]
};

}  // namespace xmc
