#include "model/sparse_linear.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "model/dropout.h"
#include "ops/dense.h"
#include "ops/encoder.h"
#include "ops/optimizer.h"

namespace xmc {

SparseLinear::SparseLinear(Context& ctx, int64_t in, int64_t out, Activation act, double dropout,
                           const OptimizerConfig& optim, Rng& init_rng)
    : EncoderLayerBase(ctx, in, out, act, dropout, optim, init_rng) {
  XMC_CHECK(in <= std::numeric_limits<uint32_t>::max(), "sparse_linear input dim {} > 2^32", in);
  bias_grad_ = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(out));
}

ConstMatrix SparseLinear::forward(const gpu::DeviceCsrValues& x, bool training) {
  XMC_CHECK(x.cols == in_, "sparse_linear expects {} input features, got [{}×{}]", in_, x.rows,
            x.cols);
  const int64_t b = x.rows;
  const Matrix h(ensure_size(h_, *ctx_, MemTag::activations, b * out_), b, out_);
  ops::csr_dense_forward(*ctx_, x, w(), bias_data(), act_ == Activation::relu, h);
  batch_ = b;
  have_forward_ = training;
  have_backward_ = false;
  return h;
}

void SparseLinear::prepare_input(const CsrMatrix& x, bool training, Rng& rng, CsrMatrix& out,
                                 CsrByColumn& xt) const {
  XMC_CHECK(x.cols == in_, "sparse_linear expects {} input features, got [{}×{}]", in_, x.rows,
            x.cols);
  XMC_CHECK(static_cast<int64_t>(x.indptr.size()) == x.rows + 1,
            "sparse input indptr has {} entries for {} rows", x.indptr.size(), x.rows);
  out = x;
  if (!out.has_values()) out.values.assign(out.indices.size(), 1.0f);
  if (training && dropout_ > 0.0) dropout_sparse(out, dropout_, rng);
  for (size_t k = 0; k < out.indices.size(); ++k)
    XMC_CHECK(out.indices[k] < in_, "feature id {} (non-zero {}) >= input dim {}",
              out.indices[k], k, in_);
  if (training) group_by_column(out, xt);
}

void SparseLinear::backward(ConstMatrix dh, const gpu::DeviceCsrByColumn& xt) {
  XMC_CHECK(have_forward_, "sparse_linear backward without a training forward");
  const int64_t b = batch_;
  XMC_CHECK(dh.rows == b && dh.cols == out_, "sparse_linear backward: dh [{}×{}], expected [{}×{}]",
            dh.rows, dh.cols, b, out_);
  const Context& ctx = *ctx_;
  const Matrix dz(ensure_size(dz_, *ctx_, MemTag::workspace, b * out_), b, out_);
  ops::activation_grad(ctx, act_ == Activation::relu, ConstMatrix(h_.data(), b, out_), dh, dz);
  xt_ = xt;
  // Each touched row's gradient summed by one thread in position order (deterministic).
  float* g = ensure_size(row_grad_, *ctx_, MemTag::workspace, xt.count * out_);
  ops::csr_column_grad(ctx, xt, dz, Matrix(g, xt.count, out_));
  ops::column_sums(ctx, dz, bias_grad_.data());
  have_backward_ = true;
}

void SparseLinear::apply_update(double lr, int64_t step) {
  XMC_CHECK(have_backward_, "sparse_linear update without a backward");
  XMC_CHECK(step >= 1, "optimizer step is 1-based, got {}", step);
  const Context& ctx = *ctx_;
  // The touched rows only (lazy), then the dense bias.
  optimizer_update_rows(ctx, optim_, lr, step, w(), row_grad_.data(), opt1_.data(), opt2_.data(),
                        xt_.cols, xt_.count, out_);
  const int64_t boff = in_ * out_;
  optimizer_update(ctx, optim_, lr, step, bias_data(), bias_grad_.data(), data_or_null(opt1_, boff),
                   data_or_null(opt2_, boff), out_);
  step_ = step;
}

void group_by_column(const CsrMatrix& x, CsrByColumn& out) {
  const int64_t nnz = x.nnz();
  XMC_CHECK(nnz <= 0xffffffffLL, "batch has {} non-zeros", nnz);
  // (column << 32 | position) keys, sorted: by column, then by position.
  std::vector<uint64_t> keys(static_cast<size_t>(nnz));
  for (int64_t k = 0; k < nnz; ++k)
    keys[static_cast<size_t>(k)] =
        (static_cast<uint64_t>(x.indices[static_cast<size_t>(k)]) << 32) | static_cast<uint64_t>(k);
  std::sort(keys.begin(), keys.end());
  std::vector<uint32_t> row_of(static_cast<size_t>(nnz));
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t k = x.indptr[static_cast<size_t>(r)]; k < x.indptr[static_cast<size_t>(r) + 1];
         ++k)
      row_of[static_cast<size_t>(k)] = static_cast<uint32_t>(r);
  out.cols.clear();
  out.start.clear();
  out.rows.resize(static_cast<size_t>(nnz));
  out.values.resize(static_cast<size_t>(nnz));
  for (int64_t e = 0; e < nnz; ++e) {
    const uint64_t key = keys[static_cast<size_t>(e)];
    const auto col = static_cast<uint32_t>(key >> 32);
    const auto pos = static_cast<size_t>(key & 0xffffffffu);
    if (out.cols.empty() || out.cols.back() != col) {
      out.cols.push_back(col);
      out.start.push_back(e);
    }
    out.rows[static_cast<size_t>(e)] = row_of[pos];
    out.values[static_cast<size_t>(e)] = x.has_values() ? x.values[pos] : 1.0f;
  }
  out.start.push_back(nnz);
}

}  // namespace xmc
