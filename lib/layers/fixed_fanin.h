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
// Devices: the same code on both (issue 21): parameters, optimizer state and workspaces
// are Buffers on the Context's device and every op takes the Context; on a CUDA Context
// h, dh and the scores are device views. Initialisation, the dropout masks and rewiring
// run on the host (rewiring on staged host copies of the indices, weights and moments:
// a round trip on the GPU), so both devices make the same draws.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/field_constraints.h"
#include "core/resources.h"  // Stopwatch
#include "layers/layer_init.h"
#include "layers/output_layer.h"
#include "layers/projection.h"
#include "layers/rewire.h"

namespace xmc {

struct FixedFaninConfig {
  int64_t fan_in = 64;        // F (paper: 32 or 64)
  int64_t intermediate = 0;   // m, width of the ReLU layer before the sparse layer (0 = none)
  double dropout = 0.0;       // input dropout on h
  LossType loss = LossType::squared_hinge;
  RewireConfig rewire;
  int64_t chunk_size = 8192;  // labels per block (bounds the B×chunk logit workspace)
  bool gpu_timing = false;    // GPU: synchronise after each op to time it (the CPU always times)

  template <class V>
  void visit(V& v) {
    v.field("fan_in", fan_in, "Inputs read by every label (F, constant per label)",
            Range{1, 65536});
    v.field("intermediate", intermediate,
            "Width of the dense ReLU layer before the sparse layer (0 = none)", Range{0, 65536});
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

class FixedFaninLayer final : public FaninLayer {
 public:
  FixedFaninLayer(const LayerInit& init, const FixedFaninConfig& cfg);

  // Width of the sparse layer's input: the intermediate size, or d without one.
  int64_t sparse_input_dim() const { return m_; }
  RewireStats rewire(int64_t step) override;
  const FaninTimings& timings() const { return timings_; }

 private:
  StepStats train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                            const LrState& lr) override;
  void scores_impl(ConstMatrix h, int64_t lo, Matrix out) const override;
  TopK topk_impl(ConstMatrix h, int k) const override;
  void on_step_impl(const TrainerView& t) override;
  void on_epoch_impl(const TrainerView& t) override;
  std::vector<TensorRef> state_impl() override;
  void sync_state_impl(StateSync s) override;
  int64_t analytic_bytes_impl() const override;

  // Evaluation path: ut [m×rows] (transposed sparse-layer input) of h [rows×d].
  Buffer<float> eval_input_t(ConstMatrix h) const;
  // The chunk's forward, labels [l0, l0+z.cols) on ut [m×rows], bias included.
  void forward(int64_t l0, const float* ut, Matrix z) const;
  // Per-op timing: with time_ops_, synchronise (GPU) and charge the interval to `field`.
  void mark(Stopwatch& sw, double FaninTimings::*field);

  bool time_ops_ = true;
  Projection inter_;  // u = relu(x·Pᵀ + c) [B×m], or none
};

}  // namespace xmc
