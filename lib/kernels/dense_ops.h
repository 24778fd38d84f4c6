#pragma once
// Dense matrix products on the CPU (OpenBLAS sgemm, row-major) — the reference and the CPU
// fast path of the dense op family. All matrices are row-major views with leading
// dimensions; shapes are checked and a mismatch throws xmc::Error with the values.
// The overloads taking a Context dispatch on its device: on a CUDA Context every view is a
// DEVICE view and the op is queued on the context's stream (gpu:: in
// kernels/dense_ops_cuda.h; in a build without CUDA a CUDA Context cannot exist).
#include "core/context.h"
#include "core/matrix.h"

namespace xmc::kernels {

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

void gemm_nt(const Context& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha = 1.0f,
             float beta = 0.0f);
void gemm_nn(const Context& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha = 1.0f,
             float beta = 0.0f);
void gemm_tn(const Context& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha = 1.0f,
             float beta = 0.0f);
void column_sums(const Context& ctx, ConstMatrix a, float* out);
void add_row_vector(const Context& ctx, Matrix m, const float* bias);

}  // namespace xmc::kernels
