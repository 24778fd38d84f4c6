#pragma once
// Backend `fixed_fanin` (Schultheis & Babbar 2023; the sparse layer of SPARTEX): every
// label l reads exactly F inputs, indices [L×F] uint32 (no duplicates within a label),
// weights [L×F], bias [L]. An optional intermediate dense layer (m units, ReLU) before it
// restores capacity; input dropout on h. Dynamic sparse training: every `interval` steps
// until fraction `until` of the run, the globally smallest fraction ρ of |w| is pruned and
// the same number of slots is regrown in the same labels with random inputs the label does
// not use yet (weights 0, optimizer moments reset), so the fan-in stays F.
// Squared hinge (the default) makes most output gradients exactly zero; the backward
// kernels skip them (StepStats::zero_grads counts them).
// The sparse layer, its intermediate layer, dropout and rewiring are a FaninBlock
// (layers/fanin_block.h: one path on both devices); the layer draws the initial index sets
// and weights (on the host, so both devices start alike) and scores the slots to prune.
#include <cstdint>
#include <vector>

#include "layers/fanin_block.h"
#include "layers/layer_init.h"
#include "layers/output_layer.h"

namespace xmc {

struct FixedFaninConfig : FaninConfig {
  bool gpu_timing = false;  // GPU: synchronise after each op to time it (the CPU always times)

  template <class V>
  void visit(V& v) {
    v.field("fan_in", fan_in, "Inputs read by every label (F, constant per label)",
            Range{1, launch::kMaxFanIn});
    v.field("intermediate", projection,
            "Width of the dense ReLU layer before the sparse layer (0 = none: on tf-idf input "
            "through a sparse_linear encoder, none was 3.5 (WordNet) and 5.5 (GCIDE) P@1 ahead "
            "of 1024 units on both validation splits; docs/benchmarks.md, \"Per-backend "
            "configs chosen on both datasets\")",
            Range{0, 65536});
    v.field("dropout", dropout, "Dropout probability on the layer's input h",
            Range::half_open(0.0, 1.0));
    v.field("loss", loss, "Loss over all labels (squared_hinge skips zero gradients)",
            Choices{LossType::squared_hinge, LossType::bce});
    v.field("rewire", rewire, "Prune-and-regrow schedule (dynamic sparse training)");
    v.field("chunk_size", chunk_size, "Labels processed per block", Range{1, int64_t{1} << 24});
    v.field("gpu_timing", gpu_timing,
            "Device cuda: synchronise after each op of a step to time it for the epoch log "
            "(slower; the CPU always times them)");
  }
};

class FixedFaninLayer final : public OutputLayer {
 public:
  FixedFaninLayer(const LayerInit& init, const FixedFaninConfig& cfg);
  // analytic_bytes() of a layer with this config and shape, before it is built
  // (layers/layer_bytes.h).
  static LayerBytes planned_bytes(const LayerShape& shape, const FixedFaninConfig& cfg);
  static StepWork planned_step(const LayerShape& shape, const FixedFaninConfig& cfg);

  // The sparse layer: F, its input width m (the intermediate size, or d), timings, rewiring.
  const FaninBlock& fanin() const { return block_; }
  // Prune and regrow now, as the schedule does at `step` (deterministic given seed, step).
  RewireStats rewire(int64_t step);

 private:
  StepStats train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                            const LrState& lr) override;
  void scores_impl(ConstMatrix h, int64_t lo, Matrix out) const override;
  TopK topk_impl(ConstMatrix h, int k) const override;
  void on_step_impl(const TrainerView& t) override;
  void on_epoch_impl(const TrainerView& t) override;
  std::vector<TensorRef> state_impl() override;
  void sync_state_impl(StateSync s) override;
  int64_t analytic_bytes_impl() const override { return planned_bytes(shape(), cfg_).rounded(); }

  FixedFaninConfig cfg_;
  FaninBlock block_;
};

}  // namespace xmc
