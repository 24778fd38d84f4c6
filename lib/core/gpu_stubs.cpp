// Compiled only when CUDA is off: every GPU entry point fails loudly (never a silent CPU
// fallback). Nothing can have been allocated on a device, so the free functions, called
// from destructors of empty buffers, do nothing.
#include "core/cuda_context.h"
#include "core/cuda_stream.h"
#include "core/error.h"
#include "core/gpu.h"
#include "kernels/dense_block_cuda.h"
#include "kernels/dense_ops_cuda.h"
#include "kernels/sparse_ops_cuda.h"
#include "kernels/encoder_ops_cuda.h"

namespace xmc::gpu {
namespace {
[[noreturn]] void no_cuda() {
  throw InputError("xmctrain was built without CUDA support (rebuild with -DXMC_CUDA=ON)");
}
}  // namespace

bool built_with_cuda() { return false; }
std::vector<DeviceInfo> query_devices() { no_cuda(); }
void topk_device(const float*, int64_t, int64_t, int, int64_t, float*, uint32_t*) { no_cuda(); }
void topk_host(const float*, int64_t, int64_t, int, int64_t, float*, uint32_t*) { no_cuda(); }
void topk_reset(float*, uint32_t*, int64_t, int, CUstream_st*) { no_cuda(); }
void topk_merge_chunk(const float*, int64_t, int64_t, int64_t, int, int64_t, float*, uint32_t*,
                      float*, uint32_t*, CUstream_st*) {
  no_cuda();
}

// core/cuda_context.h
void* device_alloc(size_t) { no_cuda(); }
void device_free(void*) noexcept {}
void* pinned_alloc(size_t) { no_cuda(); }
void pinned_free(void*) noexcept {}
void copy_to_device(void*, const void*, size_t, Stream) { no_cuda(); }
void copy_to_host(void*, const void*, size_t, Stream) { no_cuda(); }
void copy_device(void*, const void*, size_t, Stream) { no_cuda(); }
void memset_device(void*, int, size_t, Stream) { no_cuda(); }
void synchronize(Stream) { no_cuda(); }
DeviceMemInfo device_mem_info() { no_cuda(); }
MemCrossCheck memory_cross_check(const MemoryLedger&, int64_t) { no_cuda(); }
CudaContext::CudaContext(MemoryLedger& ledger, int) : ledger_(&ledger) { no_cuda(); }
CudaContext::~CudaContext() = default;
void CudaContext::release() noexcept {}

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
void from_bf16(const CudaContext&, const Bf16*, float*, int64_t) { no_cuda(); }
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

// kernels/dense_block_cuda.h
DenseBlockCuda::DenseBlockCuda(CudaContext& ctx, int64_t, int64_t, int64_t, int64_t, int64_t,
                               LossType loss, const OptimizerConfig& optim, uint64_t,
                               DenseCudaOptions opts)
    : ctx_(&ctx),
      d_(0),
      lo_(0),
      n_(0),
      max_batch_(0),
      chunk_(0),
      loss_(loss),
      optim_(optim),
      opts_(opts),
      seed_(0) {
  no_cuda();
}
StepStats DenseBlockCuda::train_step(const CsrMatrix&, ConstMatrix, Matrix, const LrState&) {
  no_cuda();
}
StepStats DenseBlockCuda::train_step_host(const CsrMatrix&, ConstMatrix, Matrix, const LrState&) {
  no_cuda();
}
void DenseBlockCuda::scores(ConstMatrix, int64_t, Matrix) { no_cuda(); }
TopK DenseBlockCuda::topk(ConstMatrix, int) { no_cuda(); }
DenseBlockCuda::HostState DenseBlockCuda::download() const { no_cuda(); }
void DenseBlockCuda::upload(const HostState&) { no_cuda(); }
int64_t DenseBlockCuda::analytic_bytes() const { no_cuda(); }

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
// --- CUDA wiring (H2): core/cuda_stream.h, kernels/encoder_ops_cuda.h ---
CudaStream::CudaStream() { no_cuda(); }
CudaStream::~CudaStream() = default;
CudaEvent::CudaEvent(bool) { no_cuda(); }
CudaEvent::~CudaEvent() = default;
void CudaEvent::record(Stream) { no_cuda(); }
void CudaEvent::make_wait(Stream) const { no_cuda(); }
void CudaEvent::synchronize() const { no_cuda(); }
float CudaEvent::elapsed_ms_since(const CudaEvent&) const { no_cuda(); }
void csr_dense_forward(const CudaContext&, const DeviceCsrValues&, const float*, const float*, bool,
                       Matrix) {
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
void scatter_rows(const CudaContext&, const float*, const uint32_t*, int64_t, int64_t, float*) {
  no_cuda();
}

// --- sampled backends (lsh_sampled, anns_sampled): kernels/dense_ops_cuda.h ---
void optimizer_update_rows(const CudaContext&, const OptimizerConfig&, double, int64_t, float*,
                           const float*, float*, float*, const uint32_t*, int64_t, int64_t) {
  no_cuda();
}

}  // namespace xmc::gpu
