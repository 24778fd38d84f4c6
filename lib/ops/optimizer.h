#pragma once
// Optimizers over flat parameter arrays. The state layout follows the parameters (one or
// two float arrays of the same length), so a backend owns it and can update any subset:
// a label chunk, the touched rows of a sparse layer, the structural non-zeros. The forms
// taking a Context check the step and the state arrays, then run on the CPU or the gpu::
// half below.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/enum_names.h"
#include "ops/dense.h"  // gpu::Bf16

namespace xmc {

template <class T>
class Buffer;

XMC_NAMED_ENUM(OptimizerType, sgd, adam, adamw)
// Storage of the state arrays of a layer's label weights: fp32 (4 bytes a slot) or bf16
// (2 bytes, rounded to nearest after each update; with bf16 weights only). Biases,
// projections and the encoder keep fp32 state whatever this says.
XMC_NAMED_ENUM(StatePrecision, fp32, bf16)

struct OptimizerConfig {
  OptimizerType type = OptimizerType::adam;
  double lr = 1e-3;
  double momentum = 0.0;      // sgd
  double weight_decay = 0.0;  // sgd: L2 added to the gradient; adamw: decoupled
  double beta1 = 0.9;         // adam, adamw
  double beta2 = 0.999;
  double eps = 1e-8;
  StatePrecision state_precision = StatePrecision::fp32;
  // adam/adamw with beta1 = 0: one second moment per label row (the mean of the row's
  // squared gradients) instead of one per weight; the label weights of a DenseBlock only.
  bool rowwise = false;
  // bf16 or fp8 label weights of a DenseBlock: Kahan compensation, one bf16 value per
  // weight holding what the last rounding of the weight dropped (the update's compensation
  // argument below).
  bool kahan = false;
  bool operator==(const OptimizerConfig&) const = default;
};

// Whether the optimizer keeps state array `which` (each as long as the parameters): 1 is
// sgd's momentum (momentum != 0) or Adam's first moment (beta1 != 0: with beta1 = 0 the
// first moment is the gradient itself, so it is not stored — Adam becomes RMSprop with
// bias correction and keeps one array); 2 is Adam's second moment.
inline bool optimizer_keeps(const OptimizerConfig& cfg, int which) {
  if (cfg.type == OptimizerType::sgd) return which == 1 && cfg.momentum != 0.0;
  return which == 2 || (which == 1 && cfg.beta1 != 0.0);
}
// How many state arrays the optimizer keeps: sgd 0 (momentum 0) or 1; adam/adamw 2, or 1
// with beta1 = 0 (with rowwise that one is [rows], not as long as the parameters).
inline int optimizer_state_arrays(const OptimizerConfig& cfg) {
  return int{optimizer_keeps(cfg, 1)} + int{optimizer_keeps(cfg, 2)};
}
// Bytes of one state slot of label weights: 4 (fp32) or 2 (bf16).
inline double state_slot_bytes(const OptimizerConfig& cfg) {
  return cfg.state_precision == StatePrecision::bf16 ? 2.0 : 4.0;
}
// State array `which` (1 or 2) of an optimizer over n parameters on the Context's device,
// zero, recorded under MemTag::optimizer; empty when the optimizer does not keep it.
Buffer<float> optimizer_state_buffer(Context& ctx, const OptimizerConfig& optim, int which,
                                     size_t n);
// An optional array (a Buffer or std::vector) at offset o, or null where it is empty (e.g.
// optimizer state the optimizer does not keep).
template <class Buf>
auto* data_or_null(Buf& b, int64_t o = 0) {
  return b.size() ? b.data() + o : nullptr;
}

// One update of params[i] -= ... for i in [0, n), with gradient grad[i].
// state1/state2: the state arrays for the same slots (nullptr where not kept:
// optimizer_keeps).
// step: 1-based count of updates of these parameters (Adam's bias correction).
// lr: the learning rate at this step (schedule applied by the caller).
// Parallelises over i with OpenMP when n is large.
void optimizer_update(const OptimizerConfig& cfg, double lr, int64_t step, float* params,
                      const float* grad, float* state1, float* state2, int64_t n);
// The same on the Context's device: on a CUDA Context every pointer is a DEVICE pointer
// and the update is queued on its stream.
void optimizer_update(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                      float* params, const float* grad, float* state1, float* state2, int64_t n);
// bf16 weights, on either device: updated in fp32 from the bf16 value and rounded back to
// nearest even, or stochastically (unbiased) when stochastic_seed != 0: the random bits
// depend on (seed, step, i) only (gpu::rounding_bits), so a run is reproducible and both
// devices round alike. The state arrays in fp32, or in bf16 (StatePrecision::bf16: widened,
// updated in fp32, rounded back to nearest even).
// Kahan compensation (cfg.kahan; null: none): compensation [n] holds, in bf16, what the
// last rounding of each weight dropped. The update then works on x = p + c (both widened,
// summed in fp32), rounds the new x into p as above and keeps c = bf16(x − p): the pair
// carries about 16 significant bits, so steps far below half a bf16 ulp of the weight
// accumulate instead of vanishing. The GEMMs read p alone.
void optimizer_update(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                      gpu::Bf16* params, const float* grad, float* state1, float* state2, int64_t n,
                      uint64_t stochastic_seed = 0, gpu::Bf16* compensation = nullptr);
void optimizer_update(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                      gpu::Bf16* params, const float* grad, gpu::Bf16* state1, gpu::Bf16* state2,
                      int64_t n, uint64_t stochastic_seed = 0, gpu::Bf16* compensation = nullptr);
// Row-wise Adam (cfg.rowwise: adam/adamw with beta1 = 0, else xmc::Error): rows [0, rows)
// of params [rows×cols] with gradient grad [rows×cols] and one fp32 second moment per row,
// row_v [rows]: with ĝ = g + wd·p (adam; adamw decays p instead), v_r = β2·v_r + (1-β2)·
// mean_j ĝ_rj², then p_rj -= lr·ĝ_rj / (sqrt(v_r / bc2) + eps) — Adam's step with the
// row's one v. On the Context's device; bf16 params rounded as optimizer_update's (the
// rounding counter of element (r, j) is r·cols + j), compensated as its (compensation
// [rows×cols] or null; the weight decay and the L2 term see p + c).
void optimizer_update_rowwise(const Context& ctx, const OptimizerConfig& cfg, double lr,
                              int64_t step, float* params, const float* grad, float* row_v,
                              int64_t rows, int64_t cols);
void optimizer_update_rowwise(const Context& ctx, const OptimizerConfig& cfg, double lr,
                              int64_t step, gpu::Bf16* params, const float* grad, float* row_v,
                              int64_t rows, int64_t cols, uint64_t stochastic_seed = 0,
                              gpu::Bf16* compensation = nullptr);

// fp8 (e4m3) weights with one power-of-two scale per row (gpu::Fp8, ops/dense.h): rows
// [0, rows) of params [rows×cols] and row_scale [rows], gradient grad [rows×cols]. Each row
// is widened (value·scale), takes the fp32 step — OptimizerStep::apply with fp32 state
// state1 / state2 [rows×cols] (those the optimizer keeps; bf16 state is not supported), or
// with cfg.rowwise apply_row with one fp32 v per row in state2 [rows] — gets the scale of
// its new largest |w| (gpu::fp8_row_scale) and is rounded back: to nearest even, or
// stochastically when stochastic_seed != 0 (element (r, j) draws gpu::rounding_bits(stream,
// r·cols + j), the bf16 updates' rule), so both devices round alike. On the Context's
// device: CPU rows in parallel; CUDA a block per row, the row in shared memory (cols ≤
// kFp8MaxRowGpu). Kahan compensation as the bf16 update's (compensation [rows×cols] or
// null): the row widened is value·scale + c, and c keeps bf16(x − value'·scale') after the
// rounding.
// 48 KiB of shared memory a block, less the block's partial sums and a margin.
inline constexpr int64_t kFp8MaxRowGpu = 12256;
void optimizer_update_fp8(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                          gpu::Fp8* params, float* row_scale, const float* grad, float* state1,
                          float* state2, int64_t rows, int64_t cols, uint64_t stochastic_seed = 0,
                          gpu::Bf16* compensation = nullptr);

// The lazy update of a sparse layer's touched rows on the Context's device: for u in
// [0, count), row rows[u] of params [*×width] (and of state1 / state2, same layout) gets
// gradient row u of grad [count×width], as OptimizerStep(cfg, lr, step).apply on that row;
// other rows and their state are untouched; rows distinct. CPU: rows in parallel (OpenMP),
// each on one thread; CUDA: a thread per (row, column) in place (DEVICE pointers, rows
// included).
void optimizer_update_rows(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                           float* params, const float* grad, float* state1, float* state2,
                           const uint32_t* rows, int64_t count, int64_t width);

// One step's update prepared once (Adam's two bias-correction powers, the folded
// constants) and applied to many small slices — the touched rows of a sparse layer —
// on the calling thread: apply() never opens an OpenMP region, so it is cheap inside
// one. optimizer_update(cfg, lr, step, ...) is OptimizerStep(cfg, lr, step).apply(...)
// split over threads; both give bit-identical results. It checks neither the step nor the
// state arrays: the functions above do.
class OptimizerStep {
 public:
  OptimizerStep(const OptimizerConfig& cfg, double lr, int64_t step);
  void apply(float* params, const float* grad, float* state1, float* state2, int64_t n) const;
  // One row of the row-wise update (optimizer_update_rowwise): params [n], grad [n], the
  // row's second moment v.
  void apply_row(float* params, const float* grad, float& v, int64_t n) const;

 private:
  OptimizerType type_;
  bool momentum_;
  float lr_, wd_, mu_;                        // sgd
  float step_size_, inv_sqrt_bc2_, b1_, b2_;  // adam, adamw
  float one_minus_b1_, one_minus_b2_, eps_, l2_, decay_;
};

}  // namespace xmc

// The CUDA half (cuda/optimizer.cu), called by lib/ops/optimizer.cpp after its checks: the
// same fp32 formulas as the CPU in one fused pass, queued on the context's stream; stubs
// that throw in a build without CUDA (core/gpu.h).
XMC_GPU_STUBS_BEGIN
namespace xmc::gpu {
XMC_GPU_FN void optimizer_update(const CudaContext& ctx, const OptimizerConfig& cfg, double lr,
                                 int64_t step, float* params, const float* grad, float* state1,
                                 float* state2, int64_t n) XMC_GPU_STUB;
XMC_GPU_FN void optimizer_update(const CudaContext& ctx, const OptimizerConfig& cfg, double lr,
                                 int64_t step, Bf16* params, const float* grad, float* state1,
                                 float* state2, int64_t n, uint64_t stochastic_seed = 0,
                                 Bf16* compensation = nullptr) XMC_GPU_STUB;
XMC_GPU_FN void optimizer_update(const CudaContext& ctx, const OptimizerConfig& cfg, double lr,
                                 int64_t step, Bf16* params, const float* grad, Bf16* state1,
                                 Bf16* state2, int64_t n, uint64_t stochastic_seed = 0,
                                 Bf16* compensation = nullptr) XMC_GPU_STUB;
XMC_GPU_FN void optimizer_update_rowwise(const CudaContext& ctx, const OptimizerConfig& cfg,
                                         double lr, int64_t step, float* params, const float* grad,
                                         float* row_v, int64_t rows, int64_t cols) XMC_GPU_STUB;
XMC_GPU_FN void optimizer_update_rowwise(const CudaContext& ctx, const OptimizerConfig& cfg,
                                         double lr, int64_t step, Bf16* params, const float* grad,
                                         float* row_v, int64_t rows, int64_t cols,
                                         uint64_t stochastic_seed,
                                         Bf16* compensation = nullptr) XMC_GPU_STUB;
XMC_GPU_FN void optimizer_update_fp8(const CudaContext& ctx, const OptimizerConfig& cfg, double lr,
                                     int64_t step, Fp8* params, float* row_scale, const float* grad,
                                     float* state1, float* state2, int64_t rows, int64_t cols,
                                     uint64_t stochastic_seed,
                                     Bf16* compensation = nullptr) XMC_GPU_STUB;
XMC_GPU_FN void optimizer_update_rows(const CudaContext& ctx, const OptimizerConfig& cfg, double lr,
                                      int64_t step, float* params, const float* grad, float* state1,
                                      float* state2, const uint32_t* rows, int64_t count,
                                      int64_t width) XMC_GPU_STUB;
}  // namespace xmc::gpu
XMC_GPU_STUBS_END
