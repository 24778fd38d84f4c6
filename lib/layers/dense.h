#pragma once
// Backend `dense`: the one-vs-all baseline, W [L×d] + bias, trained in label chunks, on
// the CPU or the GPU (device views, see output_layer.h), with fp32 or bf16 weights.
#include <limits>
#include <string>

#include "core/field_constraints.h"
#include "layers/dense_block.h"
#include "layers/layer_init.h"
#include "layers/output_layer.h"

namespace xmc {

struct DenseConfig {
  LossType loss = LossType::bce;
  int64_t chunk_size = 8192;
  Precision precision = Precision::fp32;
  bool stochastic_rounding = false;
  double sparse_gradient = 0.0;
  bool lazy_update = false;

  template <class V>
  void visit(V& v) {
    v.field("loss", loss, "Loss over all labels");
    v.field("chunk_size", chunk_size, "Labels processed per chunk (bounds the B×chunk logit workspace)",
            Range{1, int64_t{1} << 24});
    visit_precision(v, precision, stochastic_rounding,
                    "Weight storage: fp32; bf16 (half the weight memory, no fp32 copy); or fp8 "
                    "(e4m3 with a power-of-two scale per label row: a quarter, plus 4 bytes a "
                    "row). fp32 accumulation: bf16 GEMMs on cuda (fp8 chunks widened to bf16 "
                    "first), each chunk widened to fp32 on the cpu. docs/benchmarks.md, \"Lean "
                    "precision on WordNet\"");
    visit_sparse_gradient(v, sparse_gradient, lazy_update);
  }
};

class DenseLayer final : public OutputLayer {
 public:
  DenseLayer(const LayerInit& init, const DenseConfig& cfg);
  // analytic_bytes() of a layer with this config and shape, before it is built
  // (layers/layer_bytes.h).
  static LayerBytes planned_bytes(const LayerShape& shape, const DenseConfig& cfg);
  static StepWork planned_step(const LayerShape& shape, const DenseConfig& cfg);

 private:
  StepStats train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                            const LrState& lr) override;
  void scores_impl(ConstMatrix h, int64_t lo, Matrix out) const override;
  TopK topk_impl(ConstMatrix h, int k) const override;
  std::vector<TensorRef> state_impl() override { return block_.state("output/"); }
  void sync_state_impl(StateSync s) override { block_.sync_state(s); }
  int64_t analytic_bytes_impl() const override { return planned_bytes(shape(), cfg_).rounded(); }

  DenseConfig cfg_;
  DenseBlock block_;
};

}  // namespace xmc
