#pragma once
// Backend `dense`: the one-vs-all baseline, W [L×d] + bias, trained in label chunks.
#include <memory>
#include <string>

#include "config/field_constraints.h"

#include "layers/dense_block.h"
#include "layers/layer_init.h"
#include "layers/output_layer.h"

namespace xmc {

struct DenseConfig {
  std::string loss = "bce";
  int64_t chunk_size = 8192;

  template <class V>
  void visit(V& v) {
    v.field("loss", loss, "Loss over all labels", Choices{"bce", "squared_hinge", "softmax"});
    v.field("chunk_size", chunk_size, "Labels processed per chunk (bounds the B×chunk logit workspace)",
            Range{1, int64_t{1} << 24});
  }
};

class DenseLayer final : public OutputLayer {
 public:
  DenseLayer(const LayerInit& init, const DenseConfig& cfg);

 private:
  StepStats train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                            const LrState& lr) override;
  void scores_impl(ConstMatrix h, int64_t lo, Matrix out) const override;
  int64_t chunk_labels() const override { return block_.chunk(); }
  std::vector<TensorRef> state_impl() override { return block_.state("output/"); }
  int64_t analytic_bytes_impl() const override { return block_.analytic_bytes(); }

  DenseBlock block_;
};

}  // namespace xmc
