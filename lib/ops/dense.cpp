#include "ops/dense.h"

#include <cblas.h>

#include <algorithm>

#include "core/error.h"

namespace xmc::ops {
namespace {
int to_int(int64_t v) {
  XMC_CHECK(v >= 0 && v < (int64_t{1} << 31), "dimension {} out of BLAS int range", v);
  return static_cast<int>(v);
}

// The shapes of C [m×n] = op(A) · op(B), op = transpose where asked, on either device.
template <class T>
void check_gemm(const char* name, bool trans_a, bool trans_b, MatrixView<const T> a,
                MatrixView<const T> b, Matrix c) {
  const int64_t m = trans_a ? a.cols : a.rows, k = trans_a ? a.rows : a.cols;
  const int64_t kb = trans_b ? b.cols : b.rows, n = trans_b ? b.rows : b.cols;
  XMC_CHECK(k == kb && c.rows == m && c.cols == n, "{} shapes A[{}×{}] B[{}×{}] C[{}×{}]", name,
            a.rows, a.cols, b.rows, b.cols, c.rows, c.cols);
}

// C [m×n] = alpha · op(A) · op(B) + beta · C on the CPU (sgemm).
void sgemm(const char* name, bool trans_a, bool trans_b, ConstMatrix a, ConstMatrix b, Matrix c,
           float alpha, float beta) {
  check_gemm(name, trans_a, trans_b, a, b, c);
  if (c.empty()) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, to_int(c.rows), to_int(c.cols),
              to_int(trans_a ? a.rows : a.cols), alpha, a.data, to_int(a.ld), b.data, to_int(b.ld),
              beta, c.data, to_int(c.ld));
}
}  // namespace

const gpu::CudaContext& bf16_device(const Context& ctx, const char* what) {
  XMC_CHECK(ctx.on_gpu(), "{}: bf16 exists only on device cuda", what);
  return ctx.cuda();
}

// Each product on the CPU, on the Context's device, and in bf16 (CUDA only).
#define XMC_GEMM_OPS(name, ta, tb)                                                               \
  void gemm_##name(ConstMatrix a, ConstMatrix b, Matrix c, float alpha, float beta) {            \
    sgemm("gemm_" #name, ta, tb, a, b, c, alpha, beta);                                          \
  }                                                                                              \
  void gemm_##name(const Context& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha,      \
                   float beta) {                                                                 \
    if (!ctx.on_gpu()) return sgemm("gemm_" #name, ta, tb, a, b, c, alpha, beta);                \
    check_gemm("gemm_" #name, ta, tb, a, b, c);                                                  \
    gpu::gemm_##name(ctx.cuda(), a, b, c, alpha, beta);                                          \
  }                                                                                              \
  void gemm_##name(const Context& ctx, gpu::ConstBf16Matrix a, gpu::ConstBf16Matrix b, Matrix c, \
                   float alpha, float beta) {                                                    \
    check_gemm("gemm_" #name, ta, tb, a, b, c);                                                  \
    gpu::gemm_##name(bf16_device(ctx, "bf16 gemm_" #name), a, b, c, alpha, beta);                \
  }
XMC_GEMM_OPS(nt, false, true)
XMC_GEMM_OPS(nn, false, false)
XMC_GEMM_OPS(tn, true, false)
#undef XMC_GEMM_OPS

void column_sums(ConstMatrix a, float* out) {
  std::fill(out, out + a.cols, 0.0f);
  for (int64_t i = 0; i < a.rows; ++i) {
    const float* r = a.row(i);
    for (int64_t j = 0; j < a.cols; ++j) out[j] += r[j];
  }
}

void widen_bf16(gpu::ConstBf16Matrix src, Matrix dst) {
  XMC_CHECK(src.rows == dst.rows && src.cols == dst.cols, "widen_bf16: [{}×{}] into [{}×{}]",
            src.rows, src.cols, dst.rows, dst.cols);
#pragma omp parallel for schedule(static) if (src.rows * src.cols > 65536)
  for (int64_t i = 0; i < src.rows; ++i) {
    const gpu::Bf16* s = src.row(i);
    float* d = dst.row(i);
    for (int64_t j = 0; j < src.cols; ++j) d[j] = gpu::bf16_widen(s[j]);
  }
}

void widen_fp8(gpu::ConstFp8Matrix src, const float* row_scale, Matrix dst) {
  XMC_CHECK(src.rows == dst.rows && src.cols == dst.cols, "widen_fp8: [{}×{}] into [{}×{}]",
            src.rows, src.cols, dst.rows, dst.cols);
#pragma omp parallel for schedule(static) if (src.rows * src.cols > 65536)
  for (int64_t i = 0; i < src.rows; ++i) {
    const gpu::Fp8* s = src.row(i);
    float* d = dst.row(i);
    const float scale = row_scale[i];
    for (int64_t j = 0; j < src.cols; ++j) d[j] = gpu::fp8_value(s[j].bits) * scale;
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

void column_sums(const Context& ctx, ConstMatrix a, float* out) {
  ctx.on_gpu() ? gpu::column_sums(ctx.cuda(), a, out) : column_sums(a, out);
}
void add_row_vector(const Context& ctx, Matrix m, const float* bias) {
  ctx.on_gpu() ? gpu::add_row_vector(ctx.cuda(), m, bias) : add_row_vector(m, bias);
}

void to_bf16(const Context& ctx, ConstMatrix src, gpu::Bf16Matrix dst) {
  XMC_CHECK(src.rows == dst.rows && src.cols == dst.cols, "to_bf16: [{}×{}] into [{}×{}]", src.rows,
            src.cols, dst.rows, dst.cols);
  gpu::to_bf16(bf16_device(ctx, "to_bf16"), src, dst);
}

void widen_fp8(const Context& ctx, gpu::ConstFp8Matrix src, const float* row_scale,
               gpu::Bf16Matrix dst) {
  XMC_CHECK(src.rows == dst.rows && src.cols == dst.cols, "widen_fp8: [{}×{}] into [{}×{}]",
            src.rows, src.cols, dst.rows, dst.cols);
  gpu::widen_fp8(bf16_device(ctx, "widen_fp8 into bf16"), src, row_scale, dst);
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

}  // namespace xmc::ops
