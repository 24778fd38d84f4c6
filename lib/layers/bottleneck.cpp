#include "layers/bottleneck.h"

#include <cmath>

#include "core/rng.h"
#include "kernels/dense_ops.h"
#include "model/optimizer_state.h"

namespace xmc {

BottleneckLayer::BottleneckLayer(const LayerInit& init, const BottleneckConfig& cfg)
    : OutputLayer(init.input_dim, init.num_labels, 0, init.num_labels),
      dim_(cfg.dim),
      optim_(init.optim),
      block_(*init.ctx, cfg.dim, 0, init.num_labels, init.batch_size, cfg.chunk_size,
             parse_loss(cfg.loss), init.optim, init.seed) {
  auto& ledger = init.ctx->ledger();
  const int64_t d = init.input_dim;
  const auto pn = static_cast<size_t>(dim_ * d);
  p_ = HostBuffer<float>(ledger, MemTag::weights, pn);
  p_s1_ = optimizer_state_buffer(ledger, optim_, 1, pn);
  p_s2_ = optimizer_state_buffer(ledger, optim_, 2, pn);
  const auto ub = static_cast<size_t>(init.batch_size * dim_);
  u_ = HostBuffer<float>(ledger, MemTag::workspace, ub);
  du_ = HostBuffer<float>(ledger, MemTag::workspace, ub);
  dp_ = HostBuffer<float>(ledger, MemTag::workspace, pn);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Rng rng = Rng::stream(init.seed, 0xb0771e);
  for (auto& x : p_.span()) x = (2.0f * rng.uniformf() - 1.0f) * scale;
}

StepStats BottleneckLayer::train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                                           const LrState& lr) {
  const int64_t b = h.rows;
  ConstMatrix p(p_.data(), dim_, input_dim());
  Matrix u(u_.data(), b, dim_);
  kernels::gemm_nt(h, p, u);
  Matrix du(du_.data(), b, dim_);
  StepStats s = block_.train_step(batch.labels, u, du, lr);
  // dh = du·P (before P's update), dP = duᵀ·h.
  kernels::gemm_nn(du, p, dh);
  Matrix dp(dp_.data(), dim_, input_dim());
  kernels::gemm_tn(du, h, dp);
  auto state = [](HostBuffer<float>& buf) { return buf.size() ? buf.data() : nullptr; };
  optimizer_update(optim_, lr.lr, lr.step, p_.data(), dp_.data(), state(p_s1_), state(p_s2_),
                   dim_ * input_dim());
  return s;
}

Matrix BottleneckLayer::project(ConstMatrix h, std::vector<float>& buf) const {
  buf.resize(static_cast<size_t>(h.rows * dim_));
  Matrix u(buf.data(), h.rows, dim_);
  kernels::gemm_nt(h, ConstMatrix(p_.data(), dim_, input_dim()), u);
  return u;
}

void BottleneckLayer::scores_impl(ConstMatrix h, int64_t lo, Matrix out) const {
  std::vector<float> buf;
  block_.scores(project(h, buf), lo, out);
}

TopK BottleneckLayer::topk_impl(ConstMatrix h, int k) const {
  // Project once, then stream the dense block's chunks.
  std::vector<float> buf;
  ConstMatrix u = project(h, buf);
  return stream_topk(h.rows, k, block_.chunk(),
                     [&](int64_t lo, Matrix out) { block_.scores(u, lo, out); });
}

std::vector<TensorRef> BottleneckLayer::state_impl() {
  auto out = block_.state("output/dense/");
  out.push_back({"output/projection", {dim_, input_dim()}, p_.data()});
  if (p_s1_.size()) out.push_back({"output/projection_opt1", {dim_, input_dim()}, p_s1_.data()});
  if (p_s2_.size()) out.push_back({"output/projection_opt2", {dim_, input_dim()}, p_s2_.data()});
  return out;
}

int64_t BottleneckLayer::analytic_bytes_impl() const {
  const int64_t pn = dim_ * input_dim();
  const int64_t states = optimizer_state_arrays(optim_);
  return block_.analytic_bytes() + 4 * (pn * (1 + states) + 2 * static_cast<int64_t>(u_.size()) + pn);
}

}  // namespace xmc
