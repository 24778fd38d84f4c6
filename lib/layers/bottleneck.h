#pragma once
// Backend `bottleneck`: projection P [b×d] (u = h·Pᵀ, a linear Projection without bias),
// then a dense layer over b. The memory-matched baseline: (d + L)·b parameters instead of
// L·d. On a CUDA Context the projection (fp32) and the dense block (fp32 or bf16) live on
// the GPU and every matrix argument is a device view (output_layer.h); the layer's code is
// the same on both devices (Buffers and Context ops, issue 21). Label-sharded (mpirun):
// each process holds all of P and its labels' rows of the dense layer; dP is summed over
// the processes. Checkpoint: output/dense/..., output/projection/{weight, opt1, opt2} (no
// opt1, opt2 with projection_lr 0: P fixed) (format 1, before issue 38: output/projection,
// output/projection_opt1, _opt2).
#include <string>
#include <vector>

#include "core/field_constraints.h"
#include "layers/dense_block.h"
#include "layers/layer_init.h"
#include "layers/output_layer.h"
#include "layers/projection.h"

namespace xmc {

struct BottleneckConfig {
  int64_t dim = 128;
  LossType loss = LossType::bce;
  int64_t chunk_size = 8192;
  Precision precision = Precision::fp32;
  bool stochastic_rounding = false;
  double sparse_gradient = 0.0;
  bool lazy_update = false;
  double projection_lr = 1.0;

  template <class V>
  void visit(V& v) {
    v.field("dim", dim, "Width b of the projection before the dense layer", Range{1, 1 << 20});
    v.field("projection_lr", projection_lr,
            "Multiplier of optim.output.lr for the projection P; 0 keeps P at its random start "
            "(no gradient, update or optimizer state). Behind a trainable encoder, 0 was chosen on "
            "the validation splits of both real datasets (WordNet +3.4 P@1, GCIDE level: "
            "docs/benchmarks.md, \"The bottleneck's projection\"); without one, P is the only "
            "trained map in front of the dense layer",
            Range{0.0, 1000.0});
    v.field("loss", loss, "Loss over all labels");
    v.field("chunk_size", chunk_size, "Labels processed per chunk", Range{1, int64_t{1} << 24});
    visit_precision(v, precision, stochastic_rounding,
                    "Weight storage of the dense part: fp32, bf16 or fp8, as dense's (the "
                    "projection stays fp32)");
    visit_sparse_gradient(v, sparse_gradient, lazy_update);
  }
};

class BottleneckLayer final : public OutputLayer {
 public:
  BottleneckLayer(const LayerInit& init, const BottleneckConfig& cfg);
  // analytic_bytes() of a layer with this config and shape, before it is built
  // (layers/layer_bytes.h): the dense block over b and the projection.
  static LayerBytes planned_bytes(const LayerShape& shape, const BottleneckConfig& cfg);
  static StepWork planned_step(const LayerShape& shape, const BottleneckConfig& cfg);

 private:
  StepStats train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                            const LrState& lr) override;
  void scores_impl(ConstMatrix h, int64_t lo, Matrix out) const override;
  TopK topk_impl(ConstMatrix h, int k) const override;
  std::vector<TensorRef> state_impl() override;
  void sync_state_impl(StateSync s) override;
  int64_t analytic_bytes_impl() const override { return planned_bytes(shape(), cfg_).rounded(); }

  Context* ctx_;
  BottleneckConfig cfg_;
  DenseBlock block_;
  Projection proj_;  // P [b×d], its optimizer state and workspaces
};

}  // namespace xmc
