#include "model/sparse_linear.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "model/dropout.h"
#include "model/optimizer_state.h"

namespace xmc {

SparseLinear::SparseLinear(Context& ctx, int64_t in, int64_t out, Activation act, double dropout,
                           const OptimizerConfig& optim, Rng& init_rng)
    : in_(in),
      out_(out),
      act_(act),
      dropout_(dropout),
      optim_(optim),
      params_(ctx.ledger(), MemTag::weights, static_cast<size_t>((in + 1) * out)),
      opt1_(optimizer_state_buffer(ctx.ledger(), optim, 1, static_cast<size_t>((in + 1) * out))),
      opt2_(optimizer_state_buffer(ctx.ledger(), optim, 2, static_cast<size_t>((in + 1) * out))),
      h_(ctx.ledger(), MemTag::activations),
      dz_(ctx.ledger(), MemTag::workspace),
      row_grad_(ctx.ledger(), MemTag::workspace),
      bias_grad_(static_cast<size_t>(out), 0.0f) {
  XMC_CHECK(in > 0 && out > 0, "sparse_linear layer {}×{}", in, out);
  XMC_CHECK(in <= std::numeric_limits<uint32_t>::max(), "sparse_linear input dim {} > 2^32", in);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  for (int64_t i = 0; i < in * out; ++i)
    params_[static_cast<size_t>(i)] = static_cast<float>((2.0 * init_rng.uniform() - 1.0) * bound);
}

ConstMatrix SparseLinear::forward(const CsrMatrix& x, bool training, Rng& rng) {
  XMC_CHECK(x.cols == in_, "sparse_linear expects {} input features, got [{}×{}]", in_, x.rows,
            x.cols);
  XMC_CHECK(static_cast<int64_t>(x.indptr.size()) == x.rows + 1,
            "sparse input indptr has {} entries for {} rows", x.indptr.size(), x.rows);
  x_ = x;
  if (!x_.has_values()) x_.values.assign(x_.indices.size(), 1.0f);
  if (training && dropout_ > 0.0) dropout_sparse(x_, dropout_, rng);
  // Checked here, not inside the parallel loop (an exception must not leave an OpenMP
  // region).
  for (size_t k = 0; k < x_.indices.size(); ++k)
    XMC_CHECK(x_.indices[k] < in_, "feature id {} (non-zero {}) >= input dim {}", x_.indices[k], k,
              in_);
  const int64_t b = x_.rows;
  Matrix h{h_.ensure(static_cast<size_t>(std::max<int64_t>(1, b * out_))), b, out_};
  const float* bias_row = params_.data() + in_ * out_;
  const float* w = params_.data();
  const int64_t out = out_;
#pragma omp parallel for schedule(dynamic, 8) if (x_.nnz() * out > 65536)
  for (int64_t r = 0; r < b; ++r) {
    float* hr = h.row(r);
    std::copy(bias_row, bias_row + out, hr);
    const uint32_t* idx = x_.row_indices(r);
    const float* val = x_.row_values(r);
    for (int64_t k = 0; k < x_.row_nnz(r); ++k) {
      const float* wr = w + static_cast<int64_t>(idx[k]) * out;
      const float v = val[k];
      for (int64_t j = 0; j < out; ++j) hr[j] += v * wr[j];
    }
  }
  activation_forward(act_, h);
  have_forward_ = training;
  have_backward_ = false;
  return h;
}

void SparseLinear::backward(ConstMatrix dh) {
  XMC_CHECK(have_forward_, "sparse_linear backward without a training forward");
  const int64_t b = x_.rows;
  XMC_CHECK(dh.rows == b && dh.cols == out_, "sparse_linear backward: dh [{}×{}], expected [{}×{}]",
            dh.rows, dh.cols, b, out_);
  Matrix dz{dz_.ensure(static_cast<size_t>(std::max<int64_t>(1, b * out_))), b, out_};
  activation_backward(act_, ConstMatrix{h_.data(), b, out_}, dh, dz);

  // Group the batch's non-zeros by feature: sort (feature, position) keys, so each
  // touched row's gradient is summed by one thread, in a fixed order (deterministic).
  const int64_t nnz = x_.nnz();
  XMC_CHECK(nnz <= std::numeric_limits<uint32_t>::max(), "batch has {} non-zeros", nnz);
  keys_.resize(static_cast<size_t>(nnz));
  row_of_nz_.resize(static_cast<size_t>(nnz));
  for (int64_t r = 0; r < b; ++r)
    for (int64_t k = x_.indptr[static_cast<size_t>(r)]; k < x_.indptr[static_cast<size_t>(r) + 1];
         ++k) {
      keys_[static_cast<size_t>(k)] =
          (static_cast<uint64_t>(x_.indices[static_cast<size_t>(k)]) << 32) |
          static_cast<uint64_t>(k);
      row_of_nz_[static_cast<size_t>(k)] = static_cast<uint32_t>(r);
    }
  std::sort(keys_.begin(), keys_.end());
  touched_.clear();
  group_start_.clear();
  for (int64_t k = 0; k < nnz; ++k) {
    const auto f = static_cast<uint32_t>(keys_[static_cast<size_t>(k)] >> 32);
    if (touched_.empty() || touched_.back() != f) {
      touched_.push_back(f);
      group_start_.push_back(k);
    }
  }
  group_start_.push_back(nnz);

  const int64_t u_count = static_cast<int64_t>(touched_.size());
  float* g = row_grad_.ensure(static_cast<size_t>(std::max<int64_t>(1, u_count * out_)));
  const int64_t out = out_;
#pragma omp parallel for schedule(dynamic, 16) if (nnz * out > 65536)
  for (int64_t u = 0; u < u_count; ++u) {
    float* gu = g + u * out;
    std::fill(gu, gu + out, 0.0f);
    for (int64_t k = group_start_[static_cast<size_t>(u)];
         k < group_start_[static_cast<size_t>(u) + 1]; ++k) {
      const auto pos = static_cast<size_t>(keys_[static_cast<size_t>(k)] & 0xffffffffu);
      const float v = x_.values[pos];
      const float* dzr = dz.row(row_of_nz_[pos]);
      for (int64_t j = 0; j < out; ++j) gu[j] += v * dzr[j];
    }
  }
  std::fill(bias_grad_.begin(), bias_grad_.end(), 0.0f);
  for (int64_t r = 0; r < b; ++r) {
    const float* dzr = dz.row(r);
    for (int64_t j = 0; j < out; ++j) bias_grad_[static_cast<size_t>(j)] += dzr[j];
  }
  have_backward_ = true;
}

void SparseLinear::apply_update(double lr, int64_t step) {
  XMC_CHECK(have_backward_, "sparse_linear update without a backward");
  XMC_CHECK(step >= 1, "optimizer step is 1-based, got {}", step);
  const int64_t out = out_;
  const int64_t u_count = static_cast<int64_t>(touched_.size());
  float* p = params_.data();
  float* s1 = opt1_.data();
  float* s2 = opt2_.data();
  const float* g = row_grad_.data();
  const OptimizerStep row_step(optim_, lr, step);  // prepared once for all touched rows
#pragma omp parallel for schedule(static) if (u_count * out > 65536)
  for (int64_t u = 0; u < u_count; ++u) {
    const int64_t off = static_cast<int64_t>(touched_[static_cast<size_t>(u)]) * out;
    row_step.apply(p + off, g + u * out, s1 ? s1 + off : nullptr, s2 ? s2 + off : nullptr, out);
  }
  const int64_t boff = in_ * out;
  optimizer_update(optim_, lr, step, p + boff, bias_grad_.data(), s1 ? s1 + boff : nullptr,
                   s2 ? s2 + boff : nullptr, out);
  step_ = step;
}

std::vector<TensorRef> SparseLinear::state(const std::string& prefix) {
  std::vector<TensorRef> s;
  s.push_back({prefix + "/weight", {in_, out_}, params_.data()});
  s.push_back({prefix + "/bias", {out_}, params_.data() + in_ * out_});
  if (opt1_.size() > 0) s.push_back({prefix + "/opt1", {in_ + 1, out_}, opt1_.data()});
  if (opt2_.size() > 0) s.push_back({prefix + "/opt2", {in_ + 1, out_}, opt2_.data()});
  s.push_back({prefix + "/step", {1}, &step_});
  return s;
}

}  // namespace xmc
