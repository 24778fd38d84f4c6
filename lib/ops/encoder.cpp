#include "ops/encoder.h"

#include <omp.h>

#include <algorithm>

#include "core/error.h"
#include "ops/dense.h"

namespace xmc::ops {

void csr_dense_forward(const Context& ctx, const gpu::DeviceCsrValues& x, const float* w,
                       const float* bias, bool relu, Matrix h) {
  XMC_CHECK(h.rows == x.rows, "sparse forward: {} input rows, h [{}×{}]", x.rows, h.rows, h.cols);
  if (ctx.on_gpu()) {
    gpu::csr_dense_forward(ctx.cuda(), x, w, bias, relu, h);
    return;
  }
  const int64_t out = h.cols;
  const int64_t nnz = x.rows > 0 ? x.indptr[x.rows] - x.indptr[0] : 0;
#pragma omp parallel for schedule(dynamic, 8) if (nnz * out > 65536)
  for (int64_t r = 0; r < x.rows; ++r) {
    float* hr = h.row(r);
    if (bias) std::copy(bias, bias + out, hr);  // no bias: accumulate into h
    for (int64_t k = x.indptr[r]; k < x.indptr[r + 1]; ++k) {
      const float* wr = w + static_cast<int64_t>(x.indices[k]) * out;
      const float v = x.values[k];
      for (int64_t j = 0; j < out; ++j) hr[j] += v * wr[j];
    }
  }
  if (relu) relu_inplace(h);
}

void activation_grad(const Context& ctx, bool relu, ConstMatrix h, ConstMatrix dh, Matrix dz) {
  XMC_CHECK(h.rows == dh.rows && h.cols == dh.cols && dz.rows == dh.rows && dz.cols == dh.cols,
            "activation backward shapes h [{}×{}], dh [{}×{}], dz [{}×{}]", h.rows, h.cols, dh.rows,
            dh.cols, dz.rows, dz.cols);
  if (ctx.on_gpu()) {
    gpu::activation_grad(ctx.cuda(), relu, h, dh, dz);
    return;
  }
#pragma omp parallel for schedule(static) if (h.rows * h.cols > 65536)
  for (int64_t r = 0; r < h.rows; ++r) {
    const float* hr = h.row(r);
    const float* g = dh.row(r);
    float* o = dz.row(r);
    if (relu) {
      for (int64_t j = 0; j < h.cols; ++j) o[j] = hr[j] > 0.0f ? g[j] : 0.0f;
    } else if (o != g) {
      std::copy(g, g + h.cols, o);
    }
  }
}

void csr_column_grad(const Context& ctx, const gpu::DeviceCsrByColumn& xt, ConstMatrix dz,
                     Matrix g) {
  XMC_CHECK(g.rows == xt.count && g.cols == dz.cols,
            "sparse weight gradient: g [{}×{}] for {} touched columns, dz [{}×{}]", g.rows, g.cols,
            xt.count, dz.rows, dz.cols);
  if (ctx.on_gpu()) {
    gpu::csr_column_grad(ctx.cuda(), xt, dz, g);
    return;
  }
  const int64_t out = dz.cols;
  const int64_t nnz = xt.count > 0 ? xt.start[xt.count] : 0;
#pragma omp parallel for schedule(dynamic, 16) if (nnz * out > 65536)
  for (int64_t u = 0; u < xt.count; ++u) {
    float* gu = g.row(u);
    std::fill(gu, gu + out, 0.0f);
    for (int64_t e = xt.start[u]; e < xt.start[u + 1]; ++e) {
      const float v = xt.values[e];
      const float* dzr = dz.row(xt.rows[e]);
      for (int64_t j = 0; j < out; ++j) gu[j] += v * dzr[j];
    }
  }
}

void csc_accumulate(const Context& ctx, const gpu::DeviceCsrByColumn& xt, const float* w,
                    Matrix dh) {
  XMC_CHECK(!ctx.on_gpu(), "csc_accumulate runs on the cpu only");
  const int64_t d = dh.cols;
  const int64_t nnz = xt.count > 0 ? xt.start[xt.count] - xt.start[0] : 0;
#pragma omp parallel if (nnz * d > 65536)
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const auto r0 = static_cast<uint32_t>(dh.rows * t / threads);
    const auto r1 = static_cast<uint32_t>(dh.rows * (t + 1) / threads);
    for (int64_t u = 0; u < xt.count; ++u) {
      const uint32_t* end = xt.rows + xt.start[u + 1];
      const float* wu = w + static_cast<int64_t>(xt.cols[u]) * d;
      for (const uint32_t* e = std::lower_bound(xt.rows + xt.start[u], end, r0);
           e != end && *e < r1; ++e) {
        const float v = xt.values[e - xt.rows];
        float* hr = dh.row(*e);
        for (int64_t j = 0; j < d; ++j) hr[j] += v * wu[j];
      }
    }
  }
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
    w_rows_out ? gemm_nt(ctx, x, wm, out) : gemm_nn(ctx, x, wm, out);
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
