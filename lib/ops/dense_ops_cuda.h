#pragma once
// The dense op family on the GPU: the same operations as ops/dense.h,
// ops/loss.h and ops/optimizer.h (their settings: ops/op_settings.h), on device
// memory and the context's stream. All matrices are row-major views whose data pointers
// are DEVICE pointers; shapes are checked and a mismatch throws xmc::Error with the
// values. Nothing synchronises unless it says so. Implementation in cuda/ (dense_gemm.cpp,
// dense_loss.cu, optimizer.cu); stubs that throw in a build without CUDA
// (XMC_GPU_STUB, core/gpu.h).
#include <cstdint>
#include <cstring>

#include "core/cuda_context.h"
#include "core/matrix.h"
#include "ops/op_settings.h"

XMC_GPU_STUBS_BEGIN
namespace xmc::gpu {

// bfloat16 storage (the bits of __nv_bfloat16); arithmetic happens in fp32 on the device.
struct Bf16 {
  uint16_t bits;
};
// Host conversions: round to nearest even, as the device's __float2bfloat16_rn (NaN stays a
// quiet NaN), and the exact widening back.
inline Bf16 bf16_round(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<uint16_t>(u >> 16)};
}
inline float bf16_widen(Bf16 v) {
  const uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
using Bf16Matrix = MatrixView<Bf16>;
using ConstBf16Matrix = MatrixView<const Bf16>;

// --- GEMMs (cuBLAS; fp32: sgemm without TF32, bf16: GemmEx with fp32 accumulation) ---
// C [m×n] = alpha · A [m×k] · B [n×k]ᵀ + beta · C
XMC_GPU_FN void gemm_nt(const CudaContext& ctx, ConstMatrix a, ConstMatrix b, Matrix c,
                        float alpha = 1.0f, float beta = 0.0f) XMC_GPU_STUB;
XMC_GPU_FN void gemm_nt(const CudaContext& ctx, ConstBf16Matrix a, ConstBf16Matrix b, Matrix c,
                        float alpha = 1.0f, float beta = 0.0f) XMC_GPU_STUB;
// C [m×n] = alpha · A [m×k] · B [k×n] + beta · C
XMC_GPU_FN void gemm_nn(const CudaContext& ctx, ConstMatrix a, ConstMatrix b, Matrix c,
                        float alpha = 1.0f, float beta = 0.0f) XMC_GPU_STUB;
XMC_GPU_FN void gemm_nn(const CudaContext& ctx, ConstBf16Matrix a, ConstBf16Matrix b, Matrix c,
                        float alpha = 1.0f, float beta = 0.0f) XMC_GPU_STUB;
// C [m×n] = alpha · A [k×m]ᵀ · B [k×n] + beta · C
XMC_GPU_FN void gemm_tn(const CudaContext& ctx, ConstMatrix a, ConstMatrix b, Matrix c,
                        float alpha = 1.0f, float beta = 0.0f) XMC_GPU_STUB;
XMC_GPU_FN void gemm_tn(const CudaContext& ctx, ConstBf16Matrix a, ConstBf16Matrix b, Matrix c,
                        float alpha = 1.0f, float beta = 0.0f) XMC_GPU_STUB;

// --- elementwise helpers ---
// out[j] = sum_i a(i, j); out has a.cols entries (device).
XMC_GPU_FN void column_sums(const CudaContext& ctx, ConstMatrix a, float* out) XMC_GPU_STUB;
// Each row of m += bias (bias: m.cols entries, device).
XMC_GPU_FN void add_row_vector(const CudaContext& ctx, Matrix m, const float* bias) XMC_GPU_STUB;
// dst = round-to-nearest-even bf16 of src, same shape.
XMC_GPU_FN void to_bf16(const CudaContext& ctx, ConstMatrix src, Bf16Matrix dst) XMC_GPU_STUB;

// --- loss gradients on a label chunk [lo, lo+c) ---
// Batch targets on the device: CSR [B×L], global label ids, sorted within a row.
struct DeviceCsr {
  const int64_t* indptr = nullptr;    // [rows+1]
  const uint32_t* indices = nullptr;  // [nnz]
  int64_t rows = 0;
  int64_t cols = 0;
};
// Per-step accumulators on the device, so a step reads back one small struct, once.
struct LossAccum {
  double loss = 0.0;                   // summed over entries, not yet divided by B
  unsigned long long zero_grads = 0;   // exactly-zero gradient entries
  unsigned long long zero_labels = 0;  // labels whose whole gradient column was zero
};

// bce / squared_hinge (ops/loss.h semantics): logits [B×c] (without bias) in, on return
// G = dLoss/d(logit + bias) / batch_size; adds the chunk's loss and zero count to *acc
// (device). bias: c entries (device), or nullptr when the logits include it already.
// g_bf16 (optional, [B×c]): a bf16 copy of G for the bf16 GEMMs.
XMC_GPU_FN void elementwise_loss_grad(const CudaContext& ctx, LossType type, Matrix logits,
                                      const float* bias, const DeviceCsr& targets, int64_t lo,
                                      int64_t batch_size, LossAccum* acc,
                                      Bf16Matrix g_bf16 = {}) XMC_GPU_STUB;

// Softmax running statistics per row (online logsumexp), device arrays [B].
struct DeviceSoftmaxStats {
  float* max = nullptr;     // init -inf
  float* sumexp = nullptr;  // relative to max, init 0
};
// Resets the stats of `rows` rows (max = -inf, sumexp = 0).
XMC_GPU_FN void softmax_reset(const CudaContext& ctx, DeviceSoftmaxStats stats,
                              int64_t rows) XMC_GPU_STUB;
// Pass 1 on one chunk: logits [B×c] (+ bias) merged into the running max / sumexp.
XMC_GPU_FN void softmax_accumulate(const CudaContext& ctx, ConstMatrix logits, const float* bias,
                                   DeviceSoftmaxStats stats) XMC_GPU_STUB;
// Pass 2 on one chunk: logits (+ bias) -> (softmax - t) / B with t = 1/|y| on the
// positives (rows without positives: 0); adds -Σ t·log p of the chunk to acc->loss.
XMC_GPU_FN void softmax_loss_grad(const CudaContext& ctx, Matrix logits, const float* bias,
                                  DeviceSoftmaxStats stats, const DeviceCsr& targets, int64_t lo,
                                  int64_t batch_size, LossAccum* acc,
                                  Bf16Matrix g_bf16 = {}) XMC_GPU_STUB;

// --- optimizer updates (ops/optimizer.h semantics) ---
// params[i] -= ... for i in [0, n); grad, state1, state2 as in optimizer_update
// (state arrays nullptr when the optimizer needs none). All device pointers.
XMC_GPU_FN void optimizer_update(const CudaContext& ctx, const OptimizerConfig& cfg, double lr,
                                 int64_t step, float* params, const float* grad, float* state1,
                                 float* state2, int64_t n) XMC_GPU_STUB;
// bf16 weights: the update is computed in fp32 from the bf16 value and written back
// rounded to nearest even, or stochastically (unbiased) when stochastic_seed != 0: the
// random bits depend on (seed, step, i) only, so a run is reproducible.
XMC_GPU_FN void optimizer_update(const CudaContext& ctx, const OptimizerConfig& cfg, double lr,
                                 int64_t step, Bf16* params, const float* grad, float* state1,
                                 float* state2, int64_t n,
                                 uint64_t stochastic_seed = 0) XMC_GPU_STUB;

// Lazy (row-gathered) update of a sparse layer's touched rows: for u in [0, count), row
// rows[u] of params [*×width] (and of state1/state2, same layout) is updated with gradient
// row u of grad [count×width], exactly as OptimizerStep::apply on that row; other rows
// (and their state) are untouched. rows must be distinct. All device pointers.
XMC_GPU_FN void optimizer_update_rows(const CudaContext& ctx, const OptimizerConfig& cfg, double lr,
                                      int64_t step, float* params, const float* grad, float* state1,
                                      float* state2, const uint32_t* rows, int64_t count,
                                      int64_t width) XMC_GPU_STUB;

}  // namespace xmc::gpu
XMC_GPU_STUBS_END
