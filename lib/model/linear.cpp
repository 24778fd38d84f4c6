#include "model/linear.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/dropout.h"
#include "model/optimizer_state.h"

namespace xmc {

Linear::Linear(Context& ctx, int64_t in, int64_t out, Activation act, double dropout,
               const OptimizerConfig& optim, Rng& init_rng)
    : in_(in),
      out_(out),
      act_(act),
      dropout_(dropout),
      optim_(optim),
      params_(ctx.ledger(), MemTag::weights, static_cast<size_t>((in + 1) * out)),
      grad_(ctx.ledger(), MemTag::workspace, static_cast<size_t>((in + 1) * out)),
      opt1_(optimizer_state_buffer(ctx.ledger(), optim, 1, static_cast<size_t>((in + 1) * out))),
      opt2_(optimizer_state_buffer(ctx.ledger(), optim, 2, static_cast<size_t>((in + 1) * out))),
      x_(ctx.ledger(), MemTag::activations),
      mask_(ctx.ledger(), MemTag::activations),
      h_(ctx.ledger(), MemTag::activations),
      dz_(ctx.ledger(), MemTag::workspace),
      dx_(ctx.ledger(), MemTag::workspace) {
  XMC_CHECK(in > 0 && out > 0, "linear layer {}×{}", in, out);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  for (int64_t i = 0; i < in * out; ++i)
    params_[static_cast<size_t>(i)] = static_cast<float>((2.0 * init_rng.uniform() - 1.0) * bound);
}

ConstMatrix Linear::forward(ConstMatrix x, bool training, Rng& rng) {
  XMC_CHECK(x.cols == in_, "linear layer expects {} inputs, got [{}×{}]", in_, x.rows, x.cols);
  const int64_t b = x.rows;
  Matrix xc{x_.ensure(static_cast<size_t>(std::max<int64_t>(1, b * in_))), b, in_};
  for (int64_t r = 0; r < b; ++r) std::copy(x.row(r), x.row(r) + in_, xc.row(r));
  if (training && dropout_ > 0.0)
    dropout_dense(xc, mask_.ensure(static_cast<size_t>(b * in_)), dropout_, rng);
  Matrix h{h_.ensure(static_cast<size_t>(std::max<int64_t>(1, b * out_))), b, out_};
  const float* bias_row = params_.data() + in_ * out_;
  for (int64_t r = 0; r < b; ++r) std::copy(bias_row, bias_row + out_, h.row(r));
  if (b > 0)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(b),
                static_cast<int>(out_), static_cast<int>(in_), 1.0f, xc.data, static_cast<int>(in_),
                params_.data(), static_cast<int>(out_), 1.0f, h.data, static_cast<int>(out_));
  activation_forward(act_, h);
  batch_ = b;
  have_forward_ = training;
  return h;
}

ConstMatrix Linear::backward(ConstMatrix dh, bool need_dx) {
  XMC_CHECK(have_forward_, "linear backward without a training forward");
  XMC_CHECK(dh.rows == batch_ && dh.cols == out_, "linear backward: dh [{}×{}], expected [{}×{}]",
            dh.rows, dh.cols, batch_, out_);
  const int64_t b = batch_;
  ConstMatrix h{h_.data(), b, out_};
  Matrix dz{dz_.ensure(static_cast<size_t>(std::max<int64_t>(1, b * out_))), b, out_};
  activation_backward(act_, h, dh, dz);
  // dW [in×out] = x̃ᵀ·dz; db = Σ_rows dz.
  float* dw = grad_.data();
  float* db = grad_.data() + in_ * out_;
  if (b > 0) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(in_),
                static_cast<int>(out_), static_cast<int>(b), 1.0f, x_.data(), static_cast<int>(in_),
                dz.data, static_cast<int>(out_), 0.0f, dw, static_cast<int>(out_));
  } else {
    std::fill(dw, dw + in_ * out_, 0.0f);
  }
  std::fill(db, db + out_, 0.0f);
  for (int64_t r = 0; r < b; ++r) {
    const float* g = dz.row(r);
    for (int64_t j = 0; j < out_; ++j) db[j] += g[j];
  }
  if (!need_dx) return {};
  // dx [B×in] = dz·Wᵀ, then through the dropout mask.
  Matrix dx{dx_.ensure(static_cast<size_t>(std::max<int64_t>(1, b * in_))), b, in_};
  if (b > 0)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(b), static_cast<int>(in_),
                static_cast<int>(out_), 1.0f, dz.data, static_cast<int>(out_), params_.data(),
                static_cast<int>(out_), 0.0f, dx.data, static_cast<int>(in_));
  if (dropout_ > 0.0) {
    const float* m = mask_.data();
    for (int64_t i = 0; i < b * in_; ++i) dx.data[i] *= m[i];
  }
  return dx;
}

void Linear::apply_update(double lr, int64_t step) {
  XMC_CHECK(have_forward_, "linear update without a training forward");
  optimizer_update(optim_, lr, step, params_.data(), grad_.data(), opt1_.data(), opt2_.data(),
                   static_cast<int64_t>(params_.size()));
  step_ = step;
}

std::vector<TensorRef> Linear::state(const std::string& prefix) {
  std::vector<TensorRef> s;
  s.push_back({prefix + "/weight", {in_, out_}, params_.data()});
  s.push_back({prefix + "/bias", {out_}, params_.data() + in_ * out_});
  if (opt1_.size() > 0) s.push_back({prefix + "/opt1", {in_ + 1, out_}, opt1_.data()});
  if (opt2_.size() > 0) s.push_back({prefix + "/opt2", {in_ + 1, out_}, opt2_.data()});
  s.push_back({prefix + "/step", {1}, &step_});
  return s;
}

}  // namespace xmc
