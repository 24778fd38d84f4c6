#include "kernels/dense_ops.h"

#include <cblas.h>

#include "core/error.h"

namespace xmc::kernels {
namespace {
int to_int(int64_t v) {
  XMC_CHECK(v >= 0 && v < (int64_t{1} << 31), "dimension {} out of BLAS int range", v);
  return static_cast<int>(v);
}
}  // namespace

void gemm_nt(ConstMatrix a, ConstMatrix b, Matrix c, float alpha, float beta) {
  XMC_CHECK(a.cols == b.cols && c.rows == a.rows && c.cols == b.rows,
            "gemm_nt shapes A[{}×{}] B[{}×{}] C[{}×{}]", a.rows, a.cols, b.rows, b.cols, c.rows,
            c.cols);
  if (c.empty()) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, to_int(c.rows), to_int(c.cols),
              to_int(a.cols), alpha, a.data, to_int(a.ld), b.data, to_int(b.ld), beta, c.data,
              to_int(c.ld));
}

void gemm_nn(ConstMatrix a, ConstMatrix b, Matrix c, float alpha, float beta) {
  XMC_CHECK(a.cols == b.rows && c.rows == a.rows && c.cols == b.cols,
            "gemm_nn shapes A[{}×{}] B[{}×{}] C[{}×{}]", a.rows, a.cols, b.rows, b.cols, c.rows,
            c.cols);
  if (c.empty()) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, to_int(c.rows), to_int(c.cols),
              to_int(a.cols), alpha, a.data, to_int(a.ld), b.data, to_int(b.ld), beta, c.data,
              to_int(c.ld));
}

void gemm_tn(ConstMatrix a, ConstMatrix b, Matrix c, float alpha, float beta) {
  XMC_CHECK(a.rows == b.rows && c.rows == a.cols && c.cols == b.cols,
            "gemm_tn shapes A[{}×{}] B[{}×{}] C[{}×{}]", a.rows, a.cols, b.rows, b.cols, c.rows,
            c.cols);
  if (c.empty()) return;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, to_int(c.rows), to_int(c.cols),
              to_int(a.rows), alpha, a.data, to_int(a.ld), b.data, to_int(b.ld), beta, c.data,
              to_int(c.ld));
}

void column_sums(ConstMatrix a, float* out) {
  for (int64_t j = 0; j < a.cols; ++j) out[j] = 0.0f;
  for (int64_t i = 0; i < a.rows; ++i) {
    const float* r = a.row(i);
    for (int64_t j = 0; j < a.cols; ++j) out[j] += r[j];
  }
}

void add_row_vector(Matrix m, const float* bias) {
#pragma omp parallel for schedule(static) if (m.rows * m.cols > 65536)
  for (int64_t i = 0; i < m.rows; ++i) {
    float* r = m.row(i);
    for (int64_t j = 0; j < m.cols; ++j) r[j] += bias[j];
  }
}

}  // namespace xmc::kernels
