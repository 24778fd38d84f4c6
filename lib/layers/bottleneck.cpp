#include "layers/bottleneck.h"

#include <algorithm>
#include <cmath>

#include "core/rng.h"
#include "ops/topk.h"

namespace xmc {

BottleneckLayer::BottleneckLayer(const LayerInit& init, const BottleneckConfig& cfg)
    : OutputLayer(init),
      ctx_(init.ctx),
      cfg_(cfg),
      block_(*init.ctx, cfg.dim, init.label_lo, init.label_end() - init.label_lo, init.batch_size,
             cfg.chunk_size, cfg.loss, init.optim, init.seed,
             dense_precision(cfg.precision, cfg.stochastic_rounding)),
      // The same initial P on both devices: drawn on the host (uploaded on the GPU).
      proj_(*init.ctx, init.input_dim, cfg.dim, Projection::Kind::linear, init.optim,
            init.batch_size, Rng::stream(init.seed, 0xb0771e),
            static_cast<float>(cfg.projection_lr)) {
  block_.set_sparse_gradient(cfg.sparse_gradient, cfg.lazy_update);
  // Label-sharded: every process holds all of P (the same initial values: same seed) and
  // its own labels' dense rows; dP is summed over the processes before each update, so
  // the copies of P stay identical, and softmax normalises over every label.
  if (Comm* c = init.shard_comm()) {
    block_.set_comm(c);
    proj_.set_comm(c);
  }
  if (init.ctx->on_gpu()) set_device_views(true);
}

LayerBytes BottleneckLayer::planned_bytes(const LayerShape& s, const BottleneckConfig& cfg) {
  return DenseBlock::planned_bytes(s.gpu, cfg.dim, s.labels(), s.batch, cfg.chunk_size, cfg.loss,
                                   s.optim, cfg.precision, cfg.sparse_gradient > 0.0) +
         Projection::planned_bytes(s.input_dim, cfg.dim, Projection::Kind::linear, s.optim, s.batch,
                                   static_cast<float>(cfg.projection_lr));
}

StepWork BottleneckLayer::planned_step(const LayerShape& s, const BottleneckConfig& cfg) {
  return DenseBlock::planned_step(cfg.dim, s.labels(), s.batch, cfg.loss, s.optim, cfg.precision,
                                  cfg.sparse_gradient > 0.0) +
         Projection::planned_step(s.input_dim, cfg.dim, Projection::Kind::linear, s.optim, s.batch,
                                  static_cast<float>(cfg.projection_lr));
}

StepStats BottleneckLayer::train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                                           const LrState& lr) {
  const Matrix u = proj_.forward(h);
  StepStats s = block_.train_step(batch.labels, u, proj_.grad_workspace(h.rows), lr);
  // dh = du·P (before P's update), dP = duᵀ·h, then P's update (none when P is fixed).
  proj_.backward_update(h, dh, 0.0f, lr);
  return s;
}

void BottleneckLayer::scores_impl(ConstMatrix h, int64_t lo, Matrix out) const {
  Buffer<float> u;
  block_.scores(proj_.apply_into(h, u), lo, out);
  ctx_->synchronize();  // before u is freed
}

TopK BottleneckLayer::topk_impl(ConstMatrix h, int k) const {
  // Project a block of rows once, then stream the dense block's chunks.
  Buffer<float> u;
  ConstMatrix hu;
  return xmc::stream_topk(
      *ctx_, h.rows, k, eval_rows(), shard_labels(), block_.chunk(), label_lo(),
      [&](int64_t r0, int64_t rows) { hu = proj_.apply_into(h.rows_range(r0, rows), u); },
      [&](int64_t c0, Matrix z) { block_.scores(hu, label_lo() + c0, z); });
}

std::vector<TensorRef> BottleneckLayer::state_impl() {
  auto out = block_.state("output/dense/");
  proj_.append_state(out, "output/projection");
  return out;
}

void BottleneckLayer::sync_state_impl(StateSync s) {
  block_.sync_state(s);
  proj_.sync_state(s);
}

}  // namespace xmc
