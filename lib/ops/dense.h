#pragma once
// Dense matrix products on the CPU (OpenBLAS sgemm, row-major) — the reference and the CPU
// fast path of the dense op family. All matrices are row-major views with leading
// dimensions; shapes are checked and a mismatch throws xmc::Error with the values.
// The overloads taking a Context dispatch on its device: on a CUDA Context every view is a
// DEVICE view and the op is queued on the context's stream (gpu:: in
// ops/dense_ops_cuda.h; in a build without CUDA a CUDA Context cannot exist).
#include "core/context.h"
#include "core/matrix.h"
#include "ops/dense_ops_cuda.h"  // gpu::Bf16Matrix

namespace xmc::ops {

// C [m×n] = alpha · A [m×k] · B [n×k]ᵀ + beta · C
void gemm_nt(ConstMatrix a, ConstMatrix b, Matrix c, float alpha = 1.0f, float beta = 0.0f);
// C [m×n] = alpha · A [m×k] · B [k×n] + beta · C
void gemm_nn(ConstMatrix a, ConstMatrix b, Matrix c, float alpha = 1.0f, float beta = 0.0f);
// C [m×n] = alpha · A [k×m]ᵀ · B [k×n] + beta · C
void gemm_tn(ConstMatrix a, ConstMatrix b, Matrix c, float alpha = 1.0f, float beta = 0.0f);
// out[j] = sum_i a(i, j), out has a.cols entries.
void column_sums(ConstMatrix a, float* out);
// Each row of m += bias (bias has m.cols entries).
void add_row_vector(Matrix m, const float* bias);
// m = max(m, 0) element-wise (the CPU ReLU of affine_* and csr_dense_forward).
void relu_inplace(Matrix m);

void gemm_nt(const Context& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha = 1.0f,
             float beta = 0.0f);
void gemm_nn(const Context& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha = 1.0f,
             float beta = 0.0f);
void gemm_tn(const Context& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha = 1.0f,
             float beta = 0.0f);
void column_sums(const Context& ctx, ConstMatrix a, float* out);
void add_row_vector(const Context& ctx, Matrix m, const float* bias);
// The GPU context of a CUDA Context for a bf16 op: bf16 exists only on the GPU, so a CPU
// Context throws xmc::Error "<what>: bf16 exists only on device cuda".
const gpu::CudaContext& bf16_device(const Context& ctx, const char* what);
// bf16 operands with fp32 accumulation, and the rounding into bf16: CUDA only (a CPU
// Context throws xmc::Error; bf16 weights exist only on the GPU).
void gemm_nt(const Context& ctx, gpu::ConstBf16Matrix a, gpu::ConstBf16Matrix b, Matrix c,
             float alpha = 1.0f, float beta = 0.0f);
void gemm_nn(const Context& ctx, gpu::ConstBf16Matrix a, gpu::ConstBf16Matrix b, Matrix c,
             float alpha = 1.0f, float beta = 0.0f);
void gemm_tn(const Context& ctx, gpu::ConstBf16Matrix a, gpu::ConstBf16Matrix b, Matrix c,
             float alpha = 1.0f, float beta = 0.0f);
void to_bf16(const Context& ctx, ConstMatrix src, gpu::Bf16Matrix dst);

// Element-wise ops of the layers, with the Context first (CPU: host loops; CUDA: the
// gpu:: ops of ops/dense_ops_cuda.h and ops/encoder_ops_cuda.h).
// m = 0.
void set_zero(const Context& ctx, Matrix m);
// dst = src, src a HOST array [dst.rows×dst.cols] (ld = cols); complete on return.
void copy_from_host(const Context& ctx, const float* src, Matrix dst);
// dst = src ⊙ mask (mask [rows×cols], ld = cols; nullptr: a plain copy); dst may be src.
void multiply_mask(const Context& ctx, ConstMatrix src, const float* mask, Matrix dst);
// out [B×n] = act(x [B×k] · w [n×k]ᵀ + bias [n]), act = relu or identity. CPU: the bias
// rows are copied into out and sgemm adds x·wᵀ (beta 1); CUDA: the GEMM, then the bias
// and the activation in one kernel — the last bits of the two may differ.
void affine_nt(const Context& ctx, ConstMatrix x, const float* w, const float* bias, bool relu,
               Matrix out);
// The same with w [k×n] (a row per input): out [B×n] = act(x [B×k] · w + bias).
void affine_nn(const Context& ctx, ConstMatrix x, const float* w, const float* bias, bool relu,
               Matrix out);

}  // namespace xmc::ops
