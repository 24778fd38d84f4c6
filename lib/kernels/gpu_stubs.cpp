// Compiled only when CUDA is off: the kernels-level GPU ops (kernels/*_cuda.h) fail loudly
// (never a silent CPU fallback); core's entry points are stubbed in core/gpu_stubs.cpp.
#include "core/error.h"
#include "core/gpu.h"
#include "kernels/dense_ops_cuda.h"
#include "kernels/encoder_ops_cuda.h"
#include "kernels/sparse_ops_cuda.h"

namespace xmc::gpu {

// kernels/dense_ops_cuda.h
void gemm_nt(const CudaContext&, ConstMatrix, ConstMatrix, Matrix, float, float) { no_cuda(); }
void gemm_nt(const CudaContext&, ConstBf16Matrix, ConstBf16Matrix, Matrix, float, float) {
  no_cuda();
}
void gemm_nn(const CudaContext&, ConstMatrix, ConstMatrix, Matrix, float, float) { no_cuda(); }
void gemm_nn(const CudaContext&, ConstBf16Matrix, ConstBf16Matrix, Matrix, float, float) {
  no_cuda();
}
void gemm_tn(const CudaContext&, ConstMatrix, ConstMatrix, Matrix, float, float) { no_cuda(); }
void gemm_tn(const CudaContext&, ConstBf16Matrix, ConstBf16Matrix, Matrix, float, float) {
  no_cuda();
}
void column_sums(const CudaContext&, ConstMatrix, float*) { no_cuda(); }
void add_row_vector(const CudaContext&, Matrix, const float*) { no_cuda(); }
void to_bf16(const CudaContext&, ConstMatrix, Bf16Matrix) { no_cuda(); }
void elementwise_loss_grad(const CudaContext&, LossType, Matrix, const float*, const DeviceCsr&,
                           int64_t, int64_t, LossAccum*, Bf16Matrix) {
  no_cuda();
}
void softmax_reset(const CudaContext&, DeviceSoftmaxStats, int64_t) { no_cuda(); }
void softmax_accumulate(const CudaContext&, ConstMatrix, const float*, DeviceSoftmaxStats) {
  no_cuda();
}
void softmax_loss_grad(const CudaContext&, Matrix, const float*, DeviceSoftmaxStats,
                       const DeviceCsr&, int64_t, int64_t, LossAccum*, Bf16Matrix) {
  no_cuda();
}
void optimizer_update(const CudaContext&, const OptimizerConfig&, double, int64_t, float*,
                      const float*, float*, float*, int64_t) {
  no_cuda();
}
void optimizer_update(const CudaContext&, const OptimizerConfig&, double, int64_t, Bf16*,
                      const float*, float*, float*, int64_t, uint64_t) {
  no_cuda();
}

// kernels/sparse_ops_cuda.h (fixed fan-in, group-shared, sampled scoring)
void transpose(const CudaContext&, ConstMatrix, Matrix) { no_cuda(); }
void transpose(const CudaContext&, ConstMatrix, Bf16Matrix) { no_cuda(); }
void fixed_fanin_forward(const CudaContext&, const uint32_t*, const float*, const float*, int64_t,
                         int64_t, ConstMatrix, Matrix) {
  no_cuda();
}
void fixed_fanin_weight_grad(const CudaContext&, const uint32_t*, int64_t, int64_t, ConstMatrix,
                             ConstMatrix, float*, float*, unsigned long long*) {
  no_cuda();
}
void fixed_fanin_input_grad(const CudaContext&, const uint32_t*, const float*, int64_t, int64_t,
                            ConstMatrix, Matrix) {
  no_cuda();
}
void group_shared_forward(const CudaContext&, const uint32_t*, const float*, const float*, int64_t,
                          int64_t, int64_t, ConstMatrix, Matrix) {
  no_cuda();
}
void group_shared_forward(const CudaContext&, const uint32_t*, const Bf16*, const float*, int64_t,
                          int64_t, int64_t, ConstBf16Matrix, Matrix) {
  no_cuda();
}
void group_shared_weight_grad(const CudaContext&, const uint32_t*, int64_t, int64_t, int64_t,
                              ConstMatrix, ConstMatrix, float*, float*) {
  no_cuda();
}
void group_shared_weight_grad(const CudaContext&, const uint32_t*, int64_t, int64_t, int64_t,
                              ConstMatrix, ConstBf16Matrix, float*, float*) {
  no_cuda();
}
void group_shared_input_grad(const CudaContext&, const uint32_t*, const float*, int64_t, int64_t,
                             int64_t, ConstMatrix, Matrix) {
  no_cuda();
}
void group_shared_input_grad(const CudaContext&, const uint32_t*, const Bf16*, int64_t, int64_t,
                             int64_t, ConstMatrix, Matrix) {
  no_cuda();
}
void sampled_scores(const CudaContext&, const float*, const float*, int64_t,
                    const kernels::CandidateCsr&, ConstMatrix, float*) {
  no_cuda();
}
void sampled_input_grad(const CudaContext&, const float*, int64_t, const kernels::CandidateCsr&,
                        const float*, Matrix) {
  no_cuda();
}
void sampled_weight_grad(const CudaContext&, const kernels::EntryGroups&, const float*, ConstMatrix,
                         Matrix, float*) {
  no_cuda();
}

// kernels/encoder_ops_cuda.h
void csr_dense_forward(const CudaContext&, const DeviceCsrValues&, const float*, const float*,
                       bool, Matrix) {
  no_cuda();
}
void bias_activation(const CudaContext&, Matrix, const float*, bool) { no_cuda(); }
void activation_grad(const CudaContext&, bool, ConstMatrix, ConstMatrix, Matrix) { no_cuda(); }
void multiply_mask(const CudaContext&, ConstMatrix, const float*, Matrix) { no_cuda(); }
void csr_column_grad(const CudaContext&, const DeviceCsrByColumn&, ConstMatrix, Matrix) {
  no_cuda();
}
void gather_rows(const CudaContext&, const float*, const uint32_t*, int64_t, int64_t, float*) {
  no_cuda();
}

// kernels/dense_ops_cuda.h: the sampled backends' lazy row update
void optimizer_update_rows(const CudaContext&, const OptimizerConfig&, double, int64_t, float*,
                           const float*, float*, float*, const uint32_t*, int64_t, int64_t) {
  no_cuda();
}

}  // namespace xmc::gpu
