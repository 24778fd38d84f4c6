#pragma once
// The encoder's ops (model/linear.h, model/sparse_linear.h; its dense layers use
// ops::affine_nn of ops/dense.h) with the Context first: on a
// CPU Context host loops (OpenBLAS for the GEMM), on a CUDA Context the gpu:: ops of
// ops/encoder_ops_cuda.h (DEVICE pointers, queued on the stream). The sparse input
// and its by-column grouping use the gpu:: structs on both devices (host arrays on the
// CPU).
#include <cstdint>

#include "core/context.h"
#include "core/matrix.h"
#include "ops/encoder_ops_cuda.h"

namespace xmc::ops {

// h [B×out] = bias + x·W (W [cols×out], one row per input feature), then relu when
// `relu`. CPU: per row the bias, then the row's non-zeros in order.
void csr_dense_forward(const Context& ctx, const gpu::DeviceCsrValues& x, const float* w,
                       const float* bias, bool relu, Matrix h);
// dz = dh ⊙ (h > 0) when relu, else dz = dh (h: the activation's output).
void activation_grad(const Context& ctx, bool relu, ConstMatrix h, ConstMatrix dh, Matrix dz);
// g [U×out]: row u = Σ over the entries e of column u of values[e] · dz[rows[e], :], in
// position order (the sparse layer's weight gradient of its touched rows).
void csr_column_grad(const Context& ctx, const gpu::DeviceCsrByColumn& xt, ConstMatrix dz,
                     Matrix g);

}  // namespace xmc::ops
