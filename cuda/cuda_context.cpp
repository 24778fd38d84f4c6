// CudaContext and device memory. Host code only (cudart, cuBLAS), compiled by
// g++ so it may use fmt for its messages.
#include "core/cuda_context.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/error.h"
#include "cuda_check.h"

namespace xmc::gpu {

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    const DeviceMemInfo m = device_mem_info();
    throw_error("cudaMalloc of {} bytes failed: {} ({} of {} bytes free)", bytes,
                cudaGetErrorString(err), m.free_bytes, m.total_bytes);
  }
  return p;
}

void device_free(void* p) noexcept {
  if (p) (void)cudaFree(p);
}

void* pinned_alloc(size_t bytes) {
  void* p = nullptr;
  XMC_CUDA_CHECK(cudaMallocHost(&p, bytes));
  return p;
}

void pinned_free(void* p) noexcept {
  if (p) (void)cudaFreeHost(p);
}

void copy_to_device(void* dst, const void* src, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  XMC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}

void copy_to_host(void* dst, const void* src, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  XMC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
}

void copy_device(void* dst, const void* src, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  XMC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

void memset_device(void* dst, int value, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  XMC_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream));
}

void synchronize(Stream stream) { XMC_CUDA_CHECK(cudaStreamSynchronize(stream)); }

DeviceMemInfo device_mem_info() {
  size_t free_b = 0;
  size_t total_b = 0;
  XMC_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return {static_cast<int64_t>(free_b), static_cast<int64_t>(total_b)};
}

MemCrossCheck memory_cross_check(const MemoryLedger& ledger, int64_t baseline_used) {
  return {ledger.total_current(MemSpace::device), device_mem_info().used_bytes() - baseline_used};
}

CudaContext::CudaContext(MemoryLedger& ledger, int device_index)
    : ledger_(&ledger), device_(device_index) {
  const std::vector<DeviceInfo> devices = query_devices();
  if (devices.empty()) throw InputError("CUDA requested, but no CUDA GPU is visible");
  if (device_index < 0 || device_index >= static_cast<int>(devices.size()))
    throw_input("CUDA device {} does not exist ({} visible)", device_index, devices.size());
  info_ = devices[static_cast<size_t>(device_index)];
  XMC_CUDA_CHECK(cudaSetDevice(device_index));
  // Handles are released in the destructor; a throw half-way releases what exists.
  try {
    XMC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    XMC_CUBLAS_CHECK(cublasCreate(&cublas_));
    XMC_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    // fp32 GEMMs stay fp32 (no TF32) unless an op asks otherwise: parity with the CPU.
    XMC_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
    cublas_workspace_ = device_alloc(cublas_workspace_bytes());
    cublas_workspace_entry_ =
        LedgerEntry(ledger, MemTag::workspace, static_cast<int64_t>(cublas_workspace_bytes()),
                    MemSpace::device);
    XMC_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, cublas_workspace_bytes()));
  } catch (...) {
    release();
    throw;
  }
}

CudaContext::~CudaContext() { release(); }

void CudaContext::release() noexcept {
  if (stream_) (void)cudaStreamSynchronize(stream_);
  if (cublas_) (void)cublasDestroy(cublas_);
  device_free(cublas_workspace_);
  if (stream_) (void)cudaStreamDestroy(stream_);
  cublas_ = nullptr;
  cublas_workspace_ = nullptr;
  stream_ = nullptr;
}

}  // namespace xmc::gpu
