#include "model/linear.h"

#include "core/error.h"
#include "ops/dense.h"
#include "ops/encoder.h"

namespace xmc {

Linear::Linear(Context& ctx, int64_t in, int64_t out, Activation act, double dropout,
               const OptimizerConfig& optim, Rng& init_rng)
    : EncoderLayerBase(ctx, in, out, act, dropout, optim, init_rng) {
  grad_ = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>((in + 1) * out));
}

ConstMatrix Linear::forward(ConstMatrix x, const float* mask, bool training) {
  XMC_CHECK(x.cols == in_, "linear layer expects {} inputs, got [{}×{}]", in_, x.rows, x.cols);
  const Context& ctx = *ctx_;
  const int64_t b = x.rows;
  const Matrix xc(ensure_size(x_, *ctx_, MemTag::activations, b * in_), b, in_);
  mask_ = training ? mask : nullptr;
  ops::multiply_mask(ctx, x, mask_, xc);
  const Matrix h(ensure_size(h_, *ctx_, MemTag::activations, b * out_), b, out_);
  ops::affine_nn(ctx, xc, w(), bias_data(), act_ == Activation::relu, h);
  batch_ = b;
  have_forward_ = training;
  return h;
}

ConstMatrix Linear::backward(ConstMatrix dh, bool need_dx) {
  XMC_CHECK(have_forward_, "linear backward without a training forward");
  XMC_CHECK(dh.rows == batch_ && dh.cols == out_, "linear backward: dh [{}×{}], expected [{}×{}]",
            dh.rows, dh.cols, batch_, out_);
  const Context& ctx = *ctx_;
  const int64_t b = batch_;
  const Matrix dz(ensure_size(dz_, *ctx_, MemTag::workspace, b * out_), b, out_);
  ops::activation_grad(ctx, act_ == Activation::relu, ConstMatrix(h_.data(), b, out_), dh, dz);
  // dW [in×out] = x̃ᵀ·dz; db = Σ_rows dz.
  ops::gemm_tn(ctx, ConstMatrix(x_.data(), b, in_), dz, Matrix(grad_.data(), in_, out_));
  ops::column_sums(ctx, dz, grad_.data() + in_ * out_);
  if (!need_dx) return {};
  // dx [B×in] = dz·Wᵀ, then through the dropout mask.
  const Matrix dx(ensure_size(dx_, *ctx_, MemTag::workspace, b * in_), b, in_);
  ops::gemm_nt(ctx, dz, ConstMatrix(w(), in_, out_), dx);
  if (mask_) ops::multiply_mask(ctx, dx, mask_, dx);
  return dx;
}

void Linear::apply_update(double lr, int64_t step) {
  XMC_CHECK(have_forward_, "linear update without a training forward");
  optimizer_update(*ctx_, optim_, lr, step, params_.data(), grad_.data(), opt1_.data(),
                   opt2_.data(), static_cast<int64_t>(params_.size()));
  step_ = step;
}

}  // namespace xmc
