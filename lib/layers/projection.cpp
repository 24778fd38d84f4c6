#include "layers/projection.h"

#include "core/error.h"
#include "dist/comm.h"
#include "layers/weight_init.h"
#include "ops/dense.h"
#include "ops/encoder.h"
#include "ops/optimizer.h"

namespace xmc {

Projection::Projection(Context& ctx, int64_t in, int64_t out, bool relu,
                       const OptimizerConfig& optim, int64_t max_batch, uint64_t seed)
    : ctx_(&ctx), in_(in), out_(out), max_batch_(max_batch), relu_(relu), optim_(optim) {
  if (out_ <= 0) return;
  const auto pn = static_cast<size_t>(out_ * in_ + out_);
  const auto ub = static_cast<size_t>(max_batch_ * out_);
  p_ = Buffer<float>(ctx, MemTag::weights, pn);
  init_uniform_rows(p_.stage_for_write(), out_, in_, seed);  // c = 0
  p_.commit();
  s1_ = optimizer_state_buffer(ctx, optim_, 1, pn);
  s2_ = optimizer_state_buffer(ctx, optim_, 2, pn);
  dp_ = Buffer<float>(ctx, MemTag::workspace, pn);
  u_ = Buffer<float>(ctx, MemTag::workspace, ub);
  du_ = Buffer<float>(ctx, MemTag::workspace, ub);
}

void Projection::apply(ConstMatrix x, Matrix u) const {
  const float* p = p_.data();
  ops::affine_nt(*ctx_, x, p, p + out_ * in_, relu_, u);
}

ConstMatrix Projection::apply_into(ConstMatrix x, Buffer<float>& buf) const {
  if (!active()) return x;
  buf = Buffer<float>(*ctx_, MemTag::workspace, static_cast<size_t>(x.rows * out_));
  const Matrix u(buf.data(), x.rows, out_);
  apply(x, u);
  return u;
}

Matrix Projection::forward(ConstMatrix x) {
  XMC_CHECK(x.rows <= max_batch_, "projection: batch of {} rows exceeds {}", x.rows, max_batch_);
  Matrix u(u_.data(), x.rows, out_);
  apply(x, u);
  return u;
}

void Projection::backward_update(ConstMatrix x, Matrix dh, float beta, const LrState& lr) {
  const Context& ctx = *ctx_;
  const int64_t rows = x.rows;
  const int64_t pn = out_ * in_ + out_;
  Matrix du(du_.data(), rows, out_);
  if (relu_) ops::activation_grad(ctx, true, ConstMatrix(u_.data(), rows, out_), du, du);
  float* p = p_.data();
  float* dp = dp_.data();
  ops::gemm_nn(ctx, du, ConstMatrix(p, out_, in_), dh, 1.0f, beta);
  ops::gemm_tn(ctx, du, x, Matrix(dp, out_, in_));
  ops::column_sums(ctx, du, dp + out_ * in_);
  if (comm_ != nullptr) comm_->allreduce_sum_in(ctx, std::span<float>(dp, static_cast<size_t>(pn)));
  optimizer_update(ctx, optim_, lr.lr, lr.step, p, dp, data_or_null(s1_), data_or_null(s2_), pn);
}

void Projection::append_state(std::vector<TensorRef>& out, const std::string& prefix) {
  if (out_ <= 0) return;
  const int64_t pn = out_ * in_ + out_;
  float* p = p_.host_data();
  out.push_back({prefix + "/weight", {out_, in_}, p});
  out.push_back({prefix + "/bias", {out_}, p + out_ * in_});
  if (!s1_.empty()) out.push_back({prefix + "/opt1", {pn}, s1_.host_data()});
  if (!s2_.empty()) out.push_back({prefix + "/opt2", {pn}, s2_.host_data()});
}

void Projection::sync_state(StateSync s) {
  for (Buffer<float>* b : {&p_, &s1_, &s2_}) b->sync(s);
}

int64_t Projection::bytes() const {
  if (out_ <= 0) return 0;
  const int64_t pn = out_ * in_ + out_;
  const int64_t ub = max_batch_ * out_;
  return 4 * (pn * (2 + optimizer_state_arrays(optim_)) + 2 * ub);
}

}  // namespace xmc
