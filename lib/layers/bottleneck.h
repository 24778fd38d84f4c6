#pragma once
// Backend `bottleneck`: projection P [b×d] (u = h·Pᵀ), then a dense layer over b.
// The memory-matched baseline: (d + L)·b parameters instead of L·d.
#include <string>

#include "config/field_constraints.h"

#include "core/memory_ledger.h"
#include "layers/dense_block.h"
#include "layers/layer_init.h"
#include "layers/output_layer.h"

namespace xmc {

struct BottleneckConfig {
  int64_t dim = 128;
  std::string loss = "bce";
  int64_t chunk_size = 8192;

  template <class V>
  void visit(V& v) {
    v.field("dim", dim, "Width b of the projection before the dense layer", Range{1, 1 << 20});
    v.field("loss", loss, "Loss over all labels", Choices{"bce", "squared_hinge", "softmax"});
    v.field("chunk_size", chunk_size, "Labels processed per chunk", Range{1, int64_t{1} << 24});
  }
};

class BottleneckLayer final : public OutputLayer {
 public:
  BottleneckLayer(const LayerInit& init, const BottleneckConfig& cfg);

 private:
  StepStats train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                            const LrState& lr) override;
  void scores_impl(ConstMatrix h, int64_t lo, Matrix out) const override;
  TopK topk_impl(ConstMatrix h, int k) const override;
  int64_t chunk_labels() const override { return block_.chunk(); }
  std::vector<TensorRef> state_impl() override;
  int64_t analytic_bytes_impl() const override;
  // u [B×b] = h·Pᵀ into buf.
  Matrix project(ConstMatrix h, std::vector<float>& buf) const;

  int64_t dim_;
  OptimizerConfig optim_;
  HostBuffer<float> p_, p_s1_, p_s2_;  // [b×d] and its optimizer state
  HostBuffer<float> u_, du_, dp_;      // workspace: [B×b], [B×b], [b×d]
  DenseBlock block_;
};

}  // namespace xmc
