#pragma once
// The analytic bytes of an output layer's long-lived buffers, computed from its config and
// shape alone, before (or without) building it. Each block and backend has one such
// formula (a static `planned_bytes`); the built layer's analytic_bytes() evaluates the same
// function on its own config and shape, so the tests and results.json that compare
// analytic_bytes() with the memory ledger check the formula `xmctrain plan` predicts with.
// Doubles: hostile sizes must not overflow (exact for integers below 2^53). Beside each
// planned_bytes, a planned_step gives the work of one training step (StepWork).
#include <cmath>
#include <cstdint>

#include "layers/layer_init.h"
#include "ops/optimizer.h"

namespace xmc {

struct LayerBytes {
  double params = 0.0;     // weights, biases, index sets, label maps, LSH tables, hard sets
                           // (ledger tags weights, indices, index)
  double optimizer = 0.0;  // optimizer state (ledger tag optimizer)
  double workspace = 0.0;  // per-step and per-chunk workspaces (ledger tag workspace)

  double total() const { return params + optimizer + workspace; }
  int64_t rounded() const { return std::llround(total()); }
  LayerBytes& operator+=(const LayerBytes& o) {
    params += o.params;
    optimizer += o.optimizer;
    workspace += o.workspace;
    return *this;
  }
  friend LayerBytes operator+(LayerBytes a, const LayerBytes& b) { return a += b; }
};

// The shape of a step's fan-in ops (forward, weight and input gradient): the rate they
// run at depends on it (their gathers of the sets' F rows of uᵀ [m×B] hit the caches or
// not), so `xmctrain plan` measures it at this shape.
struct FaninShape {
  int64_t batch = 0, inputs = 0, fan_in = 0;  // B, m, F
  int64_t group = 1;                          // 1: ops::fixed_fanin_*, else group_shared_*
  auto operator<=>(const FaninShape&) const = default;
};

// The work of one training step, counted as `xmctrain plan` prices it (plan/plan.h):
// FLOPs of dense products at the machine's sgemm ceiling, bytes streamed or gathered at its
// memory bandwidth, and the multiply-adds of the fan-in ops at their rate measured at
// their shape (their gathers of input rows are inside that rate). Each backend's
// planned_step beside its planned_bytes.
struct StepWork {
  double gemm_flops = 0.0;   // dense GEMMs (and the sampled ops' dot products)
  double bytes = 0.0;        // loss passes, optimizer updates, rows of W gathered, transposes
  double fanin_flops = 0.0;  // the fan-in ops' multiply-adds (6·B·n·F)
  FaninShape fanin{};        // their shape (one fan-in part per backend)
  // The step also builds candidate lists on the host (the sampled backends: draws, LSH
  // lookups, grouping by label, the candidate loss), work the counts above leave out;
  // `plan` measures it (Ceilings::measured_step).
  bool host_candidates = false;
  static StepWork of(double gemm_flops, double bytes) {
    StepWork w;
    w.gemm_flops = gemm_flops;
    w.bytes = bytes;
    return w;
  }
  StepWork& operator+=(const StepWork& o) {
    gemm_flops += o.gemm_flops;
    bytes += o.bytes;
    fanin_flops += o.fanin_flops;
    if (o.fanin_flops > 0) fanin = o.fanin;
    host_candidates = host_candidates || o.host_candidates;
    return *this;
  }
  friend StepWork operator+(StepWork a, const StepWork& b) { return a += b; }
};

// What an output layer's buffers depend on besides its own config.
struct LayerShape {
  bool gpu = false;                     // buffers on a CUDA Context (bf16, device-only workspaces)
  int64_t input_dim = 0;                // d
  int64_t num_labels = 0;               // L, all labels of the model
  int64_t label_lo = 0, label_hi = -1;  // the labels this process holds (-1: all)
  int64_t batch = 0;                    // largest training batch
  int64_t num_train = 0;                // training points N
  OptimizerConfig optim;                // the output layer's optimizer
  int shard = 0, shards = 1;
  double labels_per_point = 0.0;  // mean positives per point (planned work only)
  int threads = 1;                // the run's CPU threads (per-thread workspaces on the CPU)

  static LayerShape of(const LayerInit& init) {
    return {.gpu = init.ctx != nullptr && init.ctx->on_gpu(),
            .input_dim = init.input_dim,
            .num_labels = init.num_labels,
            .label_lo = init.label_lo,
            .label_hi = init.label_end(),
            .batch = init.batch_size,
            .num_train = init.num_train,
            .optim = init.optim,
            .shard = init.shard,
            .shards = init.shards,
            .labels_per_point = 0.0,
            .threads = init.ctx != nullptr ? init.ctx->threads() : 1};
  }
  int64_t labels() const { return (label_hi < 0 ? num_labels : label_hi) - label_lo; }
  // LayerInit::shard_share.
  int64_t shard_share(int64_t k) const { return label_share(k, labels(), num_labels); }
};

}  // namespace xmc
