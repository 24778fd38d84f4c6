#pragma once
// The encoder's ops on the GPU (model/linear.h, model/sparse_linear.h, model/layer_params.h,
// model/dropout.h semantics), on device memory and the context's stream. Matrix views and
// raw pointers are DEVICE pointers; nothing synchronises. The GEMMs of the dense layers
// and the optimizer updates are the dense op family's (ops/dense_ops_cuda.h).
// Implementation: cuda/encoder.cu; stubs that throw in a build without CUDA.
#include <cstdint>

#include "core/cuda_context.h"
#include "core/matrix.h"

XMC_GPU_STUBS_BEGIN
namespace xmc::gpu {

// A batch's sparse input on the device: CSR [rows×cols] with values.
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

// h [B×out] = bias + x·W, W [cols×out] row-major (one row per input feature), bias [out];
// then relu in place when `relu`. The sparse-input layer's forward: one thread per output
// column, the row's non-zeros in order.
XMC_GPU_FN void csr_dense_forward(const CudaContext& ctx, const DeviceCsrValues& x, const float* w,
                                  const float* bias, bool relu, Matrix h) XMC_GPU_STUB;

// h += bias (each row), then relu in place when `relu`.
XMC_GPU_FN void bias_activation(const CudaContext& ctx, Matrix h, const float* bias,
                                bool relu) XMC_GPU_STUB;

// dz = dh ⊙ (h > 0) when relu, else dz = dh (h: the activation's output). dz may be dh.
XMC_GPU_FN void activation_grad(const CudaContext& ctx, bool relu, ConstMatrix h, ConstMatrix dh,
                                Matrix dz) XMC_GPU_STUB;

// dst = src ⊙ mask (mask [rows×cols] dense, ld = cols; nullptr: plain copy). dst may be src.
XMC_GPU_FN void multiply_mask(const CudaContext& ctx, ConstMatrix src, const float* mask,
                              Matrix dst) XMC_GPU_STUB;

// g [U×out]: row u = Σ over the entries e of column u of values[e] · dz[rows[e], :] — the
// sparse layer's weight gradient of the touched rows, without atomics (one thread per
// (u, output column), the entries summed in position order as on the CPU).
XMC_GPU_FN void csr_column_grad(const CudaContext& ctx, const DeviceCsrByColumn& xt, ConstMatrix dz,
                                Matrix g) XMC_GPU_STUB;

// dst [U×width] = rows `rows[u]` of src [*×width] (gather).
XMC_GPU_FN void gather_rows(const CudaContext& ctx, const float* src, const uint32_t* rows,
                            int64_t count, int64_t width, float* dst) XMC_GPU_STUB;

}  // namespace xmc::gpu
XMC_GPU_STUBS_END
