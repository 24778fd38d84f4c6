#include "layers/projection.h"

#include <cmath>

#include "core/error.h"
#include "dist/comm.h"
#include "layers/weight_init.h"
#include "ops/dense.h"
#include "ops/encoder.h"
#include "ops/optimizer.h"

namespace xmc {

Projection::Projection(Context& ctx, int64_t in, int64_t out, Kind kind,
                       const OptimizerConfig& optim, int64_t max_batch, Rng init, float lr_scale)
    : ctx_(&ctx),
      in_(in),
      out_(out),
      max_batch_(max_batch),
      pn_(out * in + (kind == Kind::linear ? 0 : out)),
      kind_(kind),
      optim_(optim),
      lr_scale_(lr_scale) {
  XMC_CHECK(lr_scale >= 0.0f && std::isfinite(lr_scale), "projection lr scale {}", lr_scale);
  if (out_ <= 0) return;
  const auto pn = static_cast<size_t>(pn_);
  const auto ub = static_cast<size_t>(max_batch_ * out_);
  p_ = Buffer<float>(ctx, MemTag::weights, pn);
  float* p = p_.stage_for_write();  // c = 0
  const float scale = 1.0f / std::sqrt(static_cast<float>(in_));
  if (kind_ == Kind::linear)
    for (size_t i = 0; i < pn; ++i) p[i] = (2.0f * init.uniformf() - 1.0f) * scale;
  else
    init_uniform_rows(p, out_, in_, init.next());
  p_.commit();
  if (!fixed(lr_scale_)) {
    s1_ = optimizer_state_buffer(ctx, optim_, 1, pn);
    s2_ = optimizer_state_buffer(ctx, optim_, 2, pn);
    dp_ = Buffer<float>(ctx, MemTag::workspace, pn);
  }
  u_ = Buffer<float>(ctx, MemTag::workspace, ub);
  du_ = Buffer<float>(ctx, MemTag::workspace, ub);
}

void Projection::apply(ConstMatrix x, Matrix u) const {
  const float* p = p_.data();
  if (kind_ == Kind::linear)
    ops::gemm_nt(*ctx_, x, ConstMatrix(p, out_, in_), u);
  else
    ops::affine_nt(*ctx_, x, p, p + out_ * in_, kind_ == Kind::relu, u);
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
  const int64_t rows = x.rows, pn = pn_;
  Matrix du(du_.data(), rows, out_);
  if (kind_ == Kind::relu)
    ops::activation_grad(ctx, true, ConstMatrix(u_.data(), rows, out_), du, du);
  float* p = p_.data();
  ops::gemm_nn(ctx, du, ConstMatrix(p, out_, in_), dh, 1.0f, beta);
  if (fixed(lr_scale_)) return;
  float* dp = dp_.data();
  ops::gemm_tn(ctx, du, x, Matrix(dp, out_, in_));
  if (kind_ != Kind::linear) ops::column_sums(ctx, du, dp + out_ * in_);
  if (comm_ != nullptr) comm_->allreduce_sum_in(ctx, std::span<float>(dp, static_cast<size_t>(pn)));
  optimizer_update(ctx, optim_, lr.lr * lr_scale_, lr.step, p, dp, data_or_null(s1_),
                   data_or_null(s2_), pn);
}

void Projection::append_state(std::vector<TensorRef>& out, const std::string& prefix) {
  if (out_ <= 0) return;
  float* p = p_.host_data();
  out.push_back({prefix + "/weight", {out_, in_}, p});
  if (kind_ != Kind::linear) out.push_back({prefix + "/bias", {out_}, p + out_ * in_});
  const std::vector<int64_t> shape =
      kind_ == Kind::linear ? std::vector{out_, in_} : std::vector{pn_};
  if (!s1_.empty()) out.push_back({prefix + "/opt1", shape, s1_.host_data()});
  if (!s2_.empty()) out.push_back({prefix + "/opt2", shape, s2_.host_data()});
}

void Projection::sync_state(StateSync s) {
  for (Buffer<float>* b : {&p_, &s1_, &s2_}) b->sync(s);
}

int64_t Projection::bytes() const {
  return planned_bytes(in_, out_, kind_, optim_, max_batch_, lr_scale_).rounded();
}

StepWork Projection::planned_step(int64_t in, int64_t out, Kind kind, const OptimizerConfig& optim,
                                  int64_t batch, float lr_scale) {
  if (out <= 0) return {};
  const double b = static_cast<double>(batch),
               io = static_cast<double>(in) * static_cast<double>(out);
  const double pn = io + (kind == Kind::linear ? 0.0 : static_cast<double>(out));
  // u = x·Pᵀ, dh = du·P, dP = duᵀ·x; the update; the ReLU's passes over u and du (fixed:
  // the first two GEMMs, no update)
  const double update = fixed(lr_scale) ? 0.0 : pn * (3.0 + 2.0 * optimizer_state_arrays(optim));
  return StepWork::of(
      (fixed(lr_scale) ? 4.0 : 6.0) * b * io,
      4.0 * (update + (kind == Kind::relu ? 3.0 : 0.0) * b * static_cast<double>(out)));
}

LayerBytes Projection::planned_bytes(int64_t in, int64_t out, Kind kind,
                                     const OptimizerConfig& optim, int64_t max_batch,
                                     float lr_scale) {
  if (out <= 0) return {};
  const double pn = static_cast<double>(out) * static_cast<double>(in) +
                    (kind == Kind::linear ? 0.0 : static_cast<double>(out));
  const double trained = fixed(lr_scale) ? 0.0 : pn;
  // P and c; their state and dP (none when fixed); the batch workspaces u, du [B×out]
  return {.params = 4.0 * pn,
          .optimizer = 4.0 * optimizer_state_arrays(optim) * trained,
          .workspace =
              4.0 * (trained + 2.0 * static_cast<double>(max_batch) * static_cast<double>(out))};
}

}  // namespace xmc
