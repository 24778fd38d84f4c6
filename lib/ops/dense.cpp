#include "ops/dense.h"

#include <cblas.h>

#include <algorithm>

#include "core/error.h"
#include "ops/dense_ops_cuda.h"
#include "ops/encoder_ops_cuda.h"

namespace xmc::ops {
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
  std::fill(out, out + a.cols, 0.0f);
  for (int64_t i = 0; i < a.rows; ++i) {
    const float* r = a.row(i);
    for (int64_t j = 0; j < a.cols; ++j) out[j] += r[j];
  }
}

void relu_inplace(Matrix m) {
#pragma omp parallel for schedule(static) if (m.rows * m.cols > 65536)
  for (int64_t i = 0; i < m.rows; ++i) {
    float* r = m.row(i);
    for (int64_t j = 0; j < m.cols; ++j) r[j] = std::max(r[j], 0.0f);
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

const gpu::CudaContext& bf16_device(const Context& ctx, const char* what) {
  XMC_CHECK(ctx.on_gpu(), "{}: bf16 exists only on device cuda", what);
  return ctx.cuda();
}

void gemm_nt(const Context& ctx, gpu::ConstBf16Matrix a, gpu::ConstBf16Matrix b, Matrix c,
             float alpha, float beta) {
  gpu::gemm_nt(bf16_device(ctx, "bf16 gemm_nt"), a, b, c, alpha, beta);
}
void gemm_nn(const Context& ctx, gpu::ConstBf16Matrix a, gpu::ConstBf16Matrix b, Matrix c,
             float alpha, float beta) {
  gpu::gemm_nn(bf16_device(ctx, "bf16 gemm_nn"), a, b, c, alpha, beta);
}
void gemm_tn(const Context& ctx, gpu::ConstBf16Matrix a, gpu::ConstBf16Matrix b, Matrix c,
             float alpha, float beta) {
  gpu::gemm_tn(bf16_device(ctx, "bf16 gemm_tn"), a, b, c, alpha, beta);
}
void to_bf16(const Context& ctx, ConstMatrix src, gpu::Bf16Matrix dst) {
  gpu::to_bf16(bf16_device(ctx, "to_bf16"), src, dst);
}

void set_zero(const Context& ctx, Matrix m) {
  if (m.empty()) return;
  if (ctx.on_gpu()) {
    const auto st = ctx.cuda().stream();
    if (m.ld == m.cols) {
      gpu::memset_device(m.data, 0, static_cast<size_t>(m.rows * m.cols) * sizeof(float), st);
      return;
    }
    for (int64_t r = 0; r < m.rows; ++r)
      gpu::memset_device(m.row(r), 0, static_cast<size_t>(m.cols) * sizeof(float), st);
    return;
  }
  for (int64_t r = 0; r < m.rows; ++r) std::fill(m.row(r), m.row(r) + m.cols, 0.0f);
}

void copy_from_host(const Context& ctx, const float* src, Matrix dst) {
  for (int64_t r = 0; r < dst.rows; ++r) {
    const float* row = src + r * dst.cols;
    if (ctx.on_gpu())
      gpu::copy_to_device(dst.row(r), row, static_cast<size_t>(dst.cols) * sizeof(float),
                          ctx.cuda().stream());
    else
      std::copy(row, row + dst.cols, dst.row(r));
  }
  if (ctx.on_gpu()) ctx.cuda().synchronize();
}

void multiply_mask(const Context& ctx, ConstMatrix src, const float* mask, Matrix dst) {
  XMC_CHECK(src.rows == dst.rows && src.cols == dst.cols, "multiply_mask: [{}×{}] into [{}×{}]",
            src.rows, src.cols, dst.rows, dst.cols);
  if (ctx.on_gpu()) {
    gpu::multiply_mask(ctx.cuda(), src, mask, dst);
    return;
  }
  for (int64_t r = 0; r < src.rows; ++r) {
    const float* s = src.row(r);
    float* d = dst.row(r);
    if (mask == nullptr) {
      if (d != s) std::copy(s, s + src.cols, d);
      continue;
    }
    const float* mk = mask + r * src.cols;
    for (int64_t j = 0; j < src.cols; ++j) d[j] = s[j] * mk[j];
  }
}

namespace {
// out = act(bias + x·op(w)), op(w) = wᵀ when w_rows_out (w [n×k]) else w (w [k×n]).
void affine(const Context& ctx, ConstMatrix x, const float* w, bool w_rows_out, const float* bias,
            bool relu, Matrix out) {
  const ConstMatrix wm =
      w_rows_out ? ConstMatrix(w, out.cols, x.cols) : ConstMatrix(w, x.cols, out.cols);
  if (ctx.on_gpu()) {
    w_rows_out ? gpu::gemm_nt(ctx.cuda(), x, wm, out) : gpu::gemm_nn(ctx.cuda(), x, wm, out);
    gpu::bias_activation(ctx.cuda(), out, bias, relu);
    return;
  }
  for (int64_t r = 0; r < out.rows; ++r) std::copy(bias, bias + out.cols, out.row(r));
  w_rows_out ? gemm_nt(x, wm, out, 1.0f, 1.0f) : gemm_nn(x, wm, out, 1.0f, 1.0f);
  if (relu) relu_inplace(out);
}
}  // namespace

void affine_nt(const Context& ctx, ConstMatrix x, const float* w, const float* bias, bool relu,
               Matrix out) {
  affine(ctx, x, w, true, bias, relu, out);
}

void affine_nn(const Context& ctx, ConstMatrix x, const float* w, const float* bias, bool relu,
               Matrix out) {
  affine(ctx, x, w, false, bias, relu, out);
}

}  // namespace xmc::ops
