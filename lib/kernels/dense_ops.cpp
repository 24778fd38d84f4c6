#include "kernels/dense_ops.h"

#include <cblas.h>

#include "core/error.h"
#include "kernels/dense_ops_cuda.h"

namespace xmc::kernels {
namespace {
int to_int(int64_t v) {
  XMC_CHECK(v >= 0 && v < (int64_t{1} << 31), "dimension {} out of BLAS int range", v);
  return static_cast<int>(v);
}

// C [m×n] = alpha · op(A) · op(B) + beta · C, op = transpose where asked (sgemm).
void sgemm(const char* name, bool trans_a, bool trans_b, ConstMatrix a, ConstMatrix b, Matrix c,
           float alpha, float beta) {
  const int64_t m = trans_a ? a.cols : a.rows, k = trans_a ? a.rows : a.cols;
  const int64_t kb = trans_b ? b.cols : b.rows, n = trans_b ? b.rows : b.cols;
  XMC_CHECK(k == kb && c.rows == m && c.cols == n, "{} shapes A[{}×{}] B[{}×{}] C[{}×{}]", name,
            a.rows, a.cols, b.rows, b.cols, c.rows, c.cols);
  if (c.empty()) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, to_int(m), to_int(n), to_int(k), alpha, a.data,
              to_int(a.ld), b.data, to_int(b.ld), beta, c.data, to_int(c.ld));
}
}  // namespace

void gemm_nt(ConstMatrix a, ConstMatrix b, Matrix c, float alpha, float beta) {
  sgemm("gemm_nt", false, true, a, b, c, alpha, beta);
}
void gemm_nn(ConstMatrix a, ConstMatrix b, Matrix c, float alpha, float beta) {
  sgemm("gemm_nn", false, false, a, b, c, alpha, beta);
}
void gemm_tn(ConstMatrix a, ConstMatrix b, Matrix c, float alpha, float beta) {
  sgemm("gemm_tn", true, false, a, b, c, alpha, beta);
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

void gemm_nt(const Context& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha, float beta) {
  ctx.on_gpu() ? gpu::gemm_nt(ctx.cuda(), a, b, c, alpha, beta) : gemm_nt(a, b, c, alpha, beta);
}
void gemm_nn(const Context& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha, float beta) {
  ctx.on_gpu() ? gpu::gemm_nn(ctx.cuda(), a, b, c, alpha, beta) : gemm_nn(a, b, c, alpha, beta);
}
void gemm_tn(const Context& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha, float beta) {
  ctx.on_gpu() ? gpu::gemm_tn(ctx.cuda(), a, b, c, alpha, beta) : gemm_tn(a, b, c, alpha, beta);
}
void column_sums(const Context& ctx, ConstMatrix a, float* out) {
  ctx.on_gpu() ? gpu::column_sums(ctx.cuda(), a, out) : column_sums(a, out);
}
void add_row_vector(const Context& ctx, Matrix m, const float* bias) {
  ctx.on_gpu() ? gpu::add_row_vector(ctx.cuda(), m, bias) : add_row_vector(m, bias);
}

}  // namespace xmc::kernels
