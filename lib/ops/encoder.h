#pragma once
// The layer ops of the encoder (model/linear.h, model/sparse_linear.h) and of the output
// layers' projections, with the Context first: on a CPU Context host loops (OpenBLAS for
// the GEMMs), on a CUDA Context the gpu:: half below (DEVICE pointers, queued on the
// stream). Shapes are checked before the device branch. The sparse input and its
// by-column grouping use the gpu:: structs on both devices (host arrays on the CPU).
#include <cstdint>

#include "core/context.h"
#include "core/cuda_context.h"
#include "core/matrix.h"

namespace xmc::gpu {
// A batch's sparse input: CSR [rows×cols] with values.
struct DeviceCsrValues {
  const int64_t* indptr = nullptr;    // [rows+1]
  const uint32_t* indices = nullptr;  // [nnz], < cols
  const float* values = nullptr;      // [nnz]
  int64_t rows = 0;
  int64_t cols = 0;
};

// The same non-zeros grouped by column (model/sparse_linear.h): for each touched column u
// (global id cols[u]), entries start[u]..start[u+1]-1 of rows / values, in ascending
// position order.
struct DeviceCsrByColumn {
  const uint32_t* cols = nullptr;  // [U]
  const int64_t* start = nullptr;  // [U+1]
  const uint32_t* rows = nullptr;  // [nnz]
  const float* values = nullptr;   // [nnz]
  int64_t count = 0;               // U
};
}  // namespace xmc::gpu

namespace xmc::ops {

// h [B×out] = bias + x·W (W [cols×out], one row per input feature), then relu when
// `relu`; bias nullptr: h += x·W (h's values in place of the bias). CPU: per row the bias,
// then the row's non-zeros in order; CUDA: one thread per output column, the row's
// non-zeros in order.
void csr_dense_forward(const Context& ctx, const gpu::DeviceCsrValues& x, const float* w,
                       const float* bias, bool relu, Matrix h);
// dz = dh ⊙ (h > 0) when relu, else dz = dh (h: the activation's output); dz may be dh.
void activation_grad(const Context& ctx, bool relu, ConstMatrix h, ConstMatrix dh, Matrix dz);
// g [U×out]: row u = Σ over the entries e of column u of values[e] · dz[rows[e], :], in
// position order (the sparse layer's weight gradient of its touched rows; CUDA: one thread
// per (u, output column), no atomics).
void csr_column_grad(const Context& ctx, const gpu::DeviceCsrByColumn& xt, ConstMatrix dz,
                     Matrix g);
// dh [B×d] += G·w for G grouped by column (xt: column cols[u] of G, i.e. row cols[u] of w
// [*×d], has the entries start[u]..start[u+1]-1, rows ascending): the dense output layer's
// input gradient over a sparse G on the CPU. Each thread owns a block of dh's rows and
// walks the columns in order, reading each w row once for all of its entries in the
// block, so every row of dh sums its terms in ascending column order — the order of
// csr_dense_forward (no bias) on the same G by row, bit for bit, whatever the thread
// count. CPU only (a CUDA Context keeps its GEMMs on G; a CUDA ctx fails the check).
void csc_accumulate(const Context& ctx, const gpu::DeviceCsrByColumn& xt, const float* w,
                    Matrix dh);
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

// The CUDA half (cuda/encoder.cu), called by lib/ops/encoder.cpp after its shape checks;
// nothing synchronises; stubs that throw in a build without CUDA (core/gpu.h).
XMC_GPU_STUBS_BEGIN
namespace xmc::gpu {
XMC_GPU_FN void csr_dense_forward(const CudaContext& ctx, const DeviceCsrValues& x, const float* w,
                                  const float* bias, bool relu, Matrix h) XMC_GPU_STUB;
// h += bias (each row), then relu in place when `relu` (affine_*'s second half).
XMC_GPU_FN void bias_activation(const CudaContext& ctx, Matrix h, const float* bias,
                                bool relu) XMC_GPU_STUB;
XMC_GPU_FN void activation_grad(const CudaContext& ctx, bool relu, ConstMatrix h, ConstMatrix dh,
                                Matrix dz) XMC_GPU_STUB;
XMC_GPU_FN void multiply_mask(const CudaContext& ctx, ConstMatrix src, const float* mask,
                              Matrix dst) XMC_GPU_STUB;
XMC_GPU_FN void csr_column_grad(const CudaContext& ctx, const DeviceCsrByColumn& xt, ConstMatrix dz,
                                Matrix g) XMC_GPU_STUB;
}  // namespace xmc::gpu
XMC_GPU_STUBS_END
