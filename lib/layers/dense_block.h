#pragma once
// DenseBlock: W [n×d] + bias [n] over n labels, trained in label chunks so that neither a
// B×n logit matrix nor a full dW ever exists: per chunk c, logits Z = h·W_cᵀ + b_c,
// loss gradient in place, dh += G·W_c, dW_c = Gᵀ·h, update W_c. Shared by the dense and
// bottleneck backends. Buffers go through the ledger: weights, optimizer, workspace.
#include <cstdint>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/matrix.h"
#include "core/memory_ledger.h"
#include "core/tensor_ref.h"
#include "layers/output_layer.h"
#include "model/loss.h"
#include "model/optimizer.h"

namespace xmc {

// Per-op wall time of train_step, summed over chunks (benchmarks; off by default).
struct DenseTimings {
  double forward = 0.0;          // logits GEMM + bias (both passes for softmax)
  double loss = 0.0;             // loss gradient in place
  double backward_input = 0.0;   // dh += G·W_c
  double backward_weight = 0.0;  // dW_c = Gᵀ·h, db_c
  double update = 0.0;           // optimizer step of W_c, b_c
};

class DenseBlock {
 public:
  // Labels [lo, lo+n) of the model; inputs of width d; workspace for batches up to
  // max_batch rows and chunks of up to chunk labels. W ~ uniform(±1/sqrt(d)) from seed.
  DenseBlock(Context& ctx, int64_t d, int64_t lo, int64_t n, int64_t max_batch, int64_t chunk,
             LossType loss, const OptimizerConfig& optim, uint64_t seed);

  // targets: batch positives (global ids). Overwrites dh [B×d] with dL/dh.
  StepStats train_step(const CsrMatrix& targets, ConstMatrix h, Matrix dh, const LrState& lr);
  // out [B×c] = scores of labels [lo, lo+c) (global lo within this block's range).
  void scores(ConstMatrix h, int64_t lo, Matrix out) const;

  std::vector<TensorRef> state(const std::string& prefix);
  // Accumulate per-op times into *t (nullptr: off).
  void set_timings(DenseTimings* t) { timings_ = t; }
  int64_t analytic_bytes() const;
  // analytic_bytes() of a block with these sizes, before it is built (a double: hostile
  // sizes must not overflow). The constructor checks it against the memory budget.
  static double planned_bytes(int64_t d, int64_t n, int64_t max_batch, int64_t chunk,
                              const OptimizerConfig& optim);
  int64_t chunk() const { return chunk_; }

 private:
  ConstMatrix weights(int64_t row0, int64_t rows) const {
    return {w_.data() + row0 * d_, rows, d_};
  }
  void update_chunk(int64_t row0, int64_t rows, const LrState& lr);

  int64_t d_, lo_, n_, max_batch_, chunk_;
  LossType loss_;
  OptimizerConfig optim_;
  HostBuffer<float> w_, b_;            // [n×d], [n]
  HostBuffer<float> w_s1_, w_s2_;      // optimizer state of W (empty when not needed)
  HostBuffer<float> b_s1_, b_s2_;      // optimizer state of b
  HostBuffer<float> z_;                // [max_batch×chunk] logits / gradients
  HostBuffer<float> dw_, db_;          // [chunk×d], [chunk]
  DenseTimings* timings_ = nullptr;
};

}  // namespace xmc
