#pragma once
// LabelParams: the per-label parameters that dense_block, fixed_fanin, group_shared's tail
// and the sampled block all keep — weights [rows×cols] (WeightArray: fp32, bf16 or fp8),
// bias [rows] and their optimizer state (the weights' state fp32, or bf16 beside
// bf16 weights: optim.state_precision) — on the Context's device, with the one slice
// update, the checkpoint names and the host staging of checkpoints.
#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/context.h"
#include "core/tensor_ref.h"
#include "layers/layer_bytes.h"
#include "layers/weight_array.h"
#include "ops/optimizer.h"

namespace xmc {

// For the layers that update rows lazily or rewire them (fixed_fanin, group_shared, the
// sampled blocks): InputError naming optim.output.rowwise or optim.output.kahan, which are
// the dense label weights' only.
void refuse_dense_only_state(const OptimizerConfig& optim);

struct LabelParams {
  WeightArray w;              // [rows×cols]
  Buffer<float> b;            // [rows]
  WeightArray w_s1, w_s2;     // optimizer state of w (empty when the optimizer keeps none;
                              // rowwise: w_s2 holds one fp32 value per row, [rows])
  WeightArray w_comp;         // optim.kahan: w's Kahan compensation, bf16 [rows×cols]
  Buffer<float> b_s1, b_s2;   // optimizer state of b
  int64_t rows = 0, cols = 0;

  LabelParams() = default;
  // Zero weights (the caller initialises them: w.stage_for_write(), w.commit()), zero bias
  // and state, recorded under MemTag::weights / optimizer. optim.state_precision bf16 needs
  // bf16 weights, optim.rowwise adam/adamw with beta1 = 0, optim.kahan bf16 or fp8 weights
  // (InputError otherwise); the layers that update rows lazily or rewire (fixed_fanin,
  // group_shared, the sampled backends) refuse rowwise and kahan themselves.
  LabelParams(Context& ctx, const OptimizerConfig& optim, int64_t rows, int64_t cols,
              Precision precision = Precision::fp32);

  // Rows [r0, r0+n) take one step: the weights with gradient dw [n×cols] (stochastic
  // rounding key as WeightArray::update), the biases with db [n] and no weight decay.
  void update(const Context& ctx, const OptimizerConfig& optim, double lr, int64_t step,
              int64_t r0, int64_t n, const float* dw, const float* db,
              uint64_t rounding_key = 0);
  // The lazy update of the rows ids[0..count) (distinct; on the Context's device), with
  // gradient rows dw [count×cols] and db [count] (fp32 weights and state only).
  void update_rows(const Context& ctx, const OptimizerConfig& optim, double lr, int64_t step,
                   const uint32_t* ids, int64_t count, const float* dw, const float* db);

  // "<prefix>weight" [rows×cols], "<prefix>bias" [rows], then "<prefix>weight_opt1",
  // "<prefix>bias_opt1", "<prefix>weight_opt2", "<prefix>bias_opt2", "<prefix>weight_kahan"
  // for the state that exists; host arrays: on a CUDA Context after sync(to_host).
  std::vector<TensorRef> refs(const std::string& prefix = "output/");
  void sync(StateSync s);
  // Bytes of the weights and the bias (params) and of their optimizer state, for these
  // sizes (layers/layer_bytes.h).
  static LayerBytes planned_bytes(const OptimizerConfig& optim, int64_t rows, int64_t cols,
                                  Precision precision);
};

}  // namespace xmc
