#pragma once
// Optimizers over flat parameter arrays. The state layout follows the parameters (one or
// two float arrays of the same length), so a backend owns it and can update any subset:
// a label chunk, the touched rows of a sparse layer, the structural non-zeros.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "ops/dense_ops_cuda.h"  // gpu::Bf16
#include "ops/op_settings.h"     // OptimizerType, OptimizerConfig

namespace xmc {

class Context;

OptimizerType parse_optimizer(std::string_view name);
std::string_view to_string(OptimizerType t);

// One update of params[i] -= ... for i in [0, n), with gradient grad[i].
// state1/state2: the state arrays for the same slots (nullptr when not needed).
// step: 1-based count of updates of these parameters (Adam's bias correction).
// lr: the learning rate at this step (schedule applied by the caller).
// Parallelises over i with OpenMP when n is large.
void optimizer_update(const OptimizerConfig& cfg, double lr, int64_t step, float* params,
                      const float* grad, float* state1, float* state2, int64_t n);
// The same on the Context's device: on a CUDA Context every pointer is a DEVICE pointer
// and the update is queued on its stream (gpu::optimizer_update, ops/dense_ops_cuda.h).
void optimizer_update(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                      float* params, const float* grad, float* state1, float* state2, int64_t n);
// bf16 weights (GPU only; a CPU Context throws xmc::Error): rounded to nearest even, or
// stochastically when stochastic_seed != 0 (gpu::optimizer_update's bf16 form).
void optimizer_update(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                      gpu::Bf16* params, const float* grad, float* state1, float* state2, int64_t n,
                      uint64_t stochastic_seed = 0);
// The lazy update of a sparse layer's touched rows on the Context's device: for u in
// [0, count), row rows[u] of params [*×width] (and of state1 / state2, same layout) gets
// gradient row u of grad [count×width], as OptimizerStep(cfg, lr, step).apply on that row;
// other rows and their state are untouched; rows distinct. CPU: rows in parallel (OpenMP),
// each on one thread; CUDA: gpu::optimizer_update_rows (DEVICE pointers, rows included).
void optimizer_update_rows(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                           float* params, const float* grad, float* state1, float* state2,
                           const uint32_t* rows, int64_t count, int64_t width);

// One step's update prepared once (Adam's two bias-correction powers, the folded
// constants) and applied to many small slices — the touched rows of a sparse layer —
// on the calling thread: apply() never opens an OpenMP region, so it is cheap inside
// one. optimizer_update(cfg, lr, step, ...) is OptimizerStep(cfg, lr, step).apply(...)
// split over threads; both give bit-identical results.
class OptimizerStep {
 public:
  OptimizerStep(const OptimizerConfig& cfg, double lr, int64_t step);
  void apply(float* params, const float* grad, float* state1, float* state2, int64_t n) const;

 private:
  OptimizerType type_;
  bool momentum_;
  float lr_, wd_, mu_;                        // sgd
  float step_size_, inv_sqrt_bc2_, b1_, b2_;  // adam, adamw
  float one_minus_b1_, one_minus_b2_, eps_, l2_, decay_;
};

}  // namespace xmc
