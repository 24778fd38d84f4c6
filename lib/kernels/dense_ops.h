#pragma once
// Dense matrix products on the CPU (OpenBLAS sgemm, row-major) — the reference and the CPU
// fast path of the dense op family. All matrices are row-major views with leading
// dimensions; shapes are checked and a mismatch throws xmc::Error with the values.
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

}  // namespace xmc::kernels
