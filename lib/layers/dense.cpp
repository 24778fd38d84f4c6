#include "layers/dense.h"

namespace xmc {

DenseLayer::DenseLayer(const LayerInit& init, const DenseConfig& cfg)
    : OutputLayer(init),
      cfg_(cfg),
      block_(*init.ctx, init.input_dim, init.label_lo, init.label_end() - init.label_lo,
             init.batch_size, cfg.chunk_size, cfg.loss, init.optim, init.seed,
             dense_precision(cfg.precision, cfg.stochastic_rounding)) {
  block_.set_sparse_gradient(cfg.sparse_gradient, cfg.lazy_update);
  set_device_views(init.ctx->on_gpu());
  // Softmax normalises over every label: a shard merges its statistics with the others'.
  if (Comm* c = init.shard_comm()) block_.set_comm(c);
}

StepStats DenseLayer::train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                                      const LrState& lr) {
  return block_.train_step(batch.labels, h, dh, lr);
}

void DenseLayer::scores_impl(ConstMatrix h, int64_t lo, Matrix out) const {
  block_.scores(h, lo, out);
}

LayerBytes DenseLayer::planned_bytes(const LayerShape& s, const DenseConfig& cfg) {
  return DenseBlock::planned_bytes(s.gpu, s.input_dim, s.labels(), s.batch, cfg.chunk_size,
                                   cfg.loss, s.optim, cfg.precision, cfg.sparse_gradient > 0.0);
}

StepWork DenseLayer::planned_step(const LayerShape& s, const DenseConfig& cfg) {
  return DenseBlock::planned_step(s.input_dim, s.labels(), s.batch, cfg.loss, s.optim,
                                  cfg.precision, cfg.sparse_gradient > 0.0);
}

TopK DenseLayer::topk_impl(ConstMatrix h, int k) const { return block_.topk(h, k, eval_rows()); }

}  // namespace xmc
