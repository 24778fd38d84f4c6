#include "layers/bottleneck.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "dist/comm.h"
#include "ops/dense.h"
#include "ops/optimizer.h"
#include "ops/topk.h"

namespace xmc {

BottleneckLayer::BottleneckLayer(const LayerInit& init, const BottleneckConfig& cfg)
    : OutputLayer(init),
      ctx_(init.ctx),
      comm_(init.shard_comm()),
      dim_(cfg.dim),
      optim_(init.optim),
      block_(*init.ctx, cfg.dim, init.label_lo, init.label_end() - init.label_lo,
             init.batch_size, cfg.chunk_size, cfg.loss, init.optim, init.seed,
             dense_precision(*init.ctx, cfg.precision, cfg.stochastic_rounding)) {
  Context& ctx = *init.ctx;
  // Label-sharded: every process holds all of P (the same initial values: same seed) and
  // its own labels' dense rows; dP is summed over the processes before each update, so
  // the copies of P stay identical, and softmax normalises over every label.
  if (comm_ != nullptr) block_.set_comm(comm_);
  if (ctx.on_gpu()) set_device_views(true);
  const int64_t d = init.input_dim;
  const auto pn = static_cast<size_t>(dim_ * d);
  const auto ub = static_cast<size_t>(init.batch_size * dim_);
  // The same initial P on both devices: drawn on the host (uploaded on the GPU).
  p_ = Buffer<float>(ctx, MemTag::weights, pn);
  float* p0 = p_.stage_for_write();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Rng rng = Rng::stream(init.seed, 0xb0771e);
  for (size_t i = 0; i < pn; ++i) p0[i] = (2.0f * rng.uniformf() - 1.0f) * scale;
  p_.commit();
  p_s1_ = optimizer_state_buffer(ctx, optim_, 1, pn);
  p_s2_ = optimizer_state_buffer(ctx, optim_, 2, pn);
  u_ = Buffer<float>(ctx, MemTag::workspace, ub);
  du_ = Buffer<float>(ctx, MemTag::workspace, ub);
  dp_ = Buffer<float>(ctx, MemTag::workspace, pn);
}

StepStats BottleneckLayer::train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                                           const LrState& lr) {
  const Context& ctx = *ctx_;
  const int64_t b = h.rows;
  const int64_t d = input_dim();
  const ConstMatrix p(p_.data(), dim_, d);
  const Matrix u(u_.data(), b, dim_);
  ops::gemm_nt(ctx, h, p, u);
  const Matrix du(du_.data(), b, dim_);
  StepStats s = block_.train_step(batch.labels, u, du, lr);
  // dh = du·P (before P's update), dP = duᵀ·h.
  ops::gemm_nn(ctx, du, p, dh);
  ops::gemm_tn(ctx, du, h, Matrix(dp_.data(), dim_, d));
  if (comm_ != nullptr)
    comm_->allreduce_sum_in(ctx, std::span<float>(dp_.data(), static_cast<size_t>(dim_ * d)));
  optimizer_update(ctx, optim_, lr.lr, lr.step, p_.data(), dp_.data(), data_or_null(p_s1_),
                   data_or_null(p_s2_), dim_ * d);
  return s;
}

Buffer<float> BottleneckLayer::project(ConstMatrix h) const {
  Buffer<float> buf(*ctx_, MemTag::workspace, static_cast<size_t>(h.rows * dim_));
  ops::gemm_nt(*ctx_, h, ConstMatrix(p_.data(), dim_, input_dim()),
               Matrix(buf.data(), h.rows, dim_));
  return buf;
}

void BottleneckLayer::scores_impl(ConstMatrix h, int64_t lo, Matrix out) const {
  for (int64_t r0 = 0; r0 < h.rows; r0 += eval_rows()) {
    const int64_t rows = std::min(eval_rows(), h.rows - r0);
    const Buffer<float> u = project(h.rows_range(r0, rows));
    block_.scores(ConstMatrix(u.data(), rows, dim_), lo, out.rows_range(r0, rows));
    ctx_->synchronize();  // u is freed at the end of the iteration
  }
}

TopK BottleneckLayer::topk_impl(ConstMatrix h, int k) const {
  // Project a block of rows once, then stream the dense block's chunks.
  Buffer<float> u;
  return xmc::stream_topk(
      *ctx_, h.rows, k, eval_rows(), shard_labels(), block_.chunk(), label_lo(),
      [&](int64_t r0, int64_t rows) { u = project(h.rows_range(r0, rows)); },
      [&](int64_t c0, Matrix z) {
        block_.scores(ConstMatrix(u.data(), z.rows, dim_), label_lo() + c0, z);
      });
}

std::vector<TensorRef> BottleneckLayer::state_impl() {
  auto out = block_.state("output/dense/");
  out.push_back({"output/projection", {dim_, input_dim()}, p_.host_data()});
  if (!p_s1_.empty())
    out.push_back({"output/projection_opt1", {dim_, input_dim()}, p_s1_.host_data()});
  if (!p_s2_.empty())
    out.push_back({"output/projection_opt2", {dim_, input_dim()}, p_s2_.host_data()});
  return out;
}

void BottleneckLayer::sync_state_impl(StateSync s) {
  block_.sync_state(s);
  for (Buffer<float>* b : {&p_, &p_s1_, &p_s2_}) b->sync(s);
}

int64_t BottleneckLayer::analytic_bytes_impl() const {
  const int64_t pn = dim_ * input_dim();
  const int64_t states = optimizer_state_arrays(optim_);
  const auto ub = static_cast<int64_t>(u_.size());
  return block_.analytic_bytes() + 4 * (pn * (1 + states) + 2 * ub + pn);
}

}  // namespace xmc
