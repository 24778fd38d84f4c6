#include "layers/dense.h"

namespace xmc {

DenseLayer::DenseLayer(const LayerInit& init, const DenseConfig& cfg)
    : OutputLayer(init.input_dim, init.num_labels, 0, init.num_labels),
      block_(*init.ctx, init.input_dim, 0, init.num_labels, init.batch_size, cfg.chunk_size,
             parse_loss(cfg.loss), init.optim, init.seed,
             dense_precision_options(*init.ctx, cfg.precision, cfg.stochastic_rounding)) {
  set_device_views(block_.on_gpu());
}

StepStats DenseLayer::train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                                      const LrState& lr) {
  return block_.train_step(batch.labels, h, dh, lr);
}

void DenseLayer::scores_impl(ConstMatrix h, int64_t lo, Matrix out) const {
  block_.scores(h, lo, out);
}

TopK DenseLayer::topk_impl(ConstMatrix h, int k) const {
  if (block_.on_gpu()) return block_.topk_gpu(h, k);
  return stream_topk(h.rows, k, block_.chunk(),
                     [&](int64_t lo, Matrix out) { block_.scores(h, lo, out); });
}

}  // namespace xmc
