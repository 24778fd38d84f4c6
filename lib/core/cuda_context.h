#pragma once
// CUDA context and device memory, host side. Nothing here needs the CUDA headers: the
// stream and library handles are forward-declared opaque pointers (the same types
// cuda_runtime.h and cublas_v2.h declare), so host code compiled without CUDA
// includes this file too. Implementation: cuda/runtime.cpp; in a build without CUDA
// every function throws "xmctrain was built without CUDA support" (XMC_GPU_STUB in
// core/gpu.h; the classes' members: core/gpu_stubs.cpp).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/gpu.h"
#include "core/memory_ledger.h"

struct CUstream_st;    // cudaStream_t = CUstream_st*
struct cublasContext;  // cublasHandle_t = cublasContext*

XMC_GPU_STUBS_BEGIN
namespace xmc::gpu {

using Stream = CUstream_st*;

// Raw device memory (cudaMalloc / cudaFree). device_free never throws (destructors).
XMC_GPU_FN void* device_alloc(size_t bytes) XMC_GPU_STUB;
void device_free(void* p) noexcept;
// Page-locked host memory (cudaMallocHost / cudaFreeHost), for asynchronous copies.
XMC_GPU_FN void* pinned_alloc(size_t bytes) XMC_GPU_STUB;
void pinned_free(void* p) noexcept;

// Asynchronous copies and memset on `stream` (nullptr: the legacy default stream).
// Host memory that is not pinned makes the copy synchronous with respect to the host.
XMC_GPU_FN void copy_to_device(void* dst, const void* src, size_t bytes,
                               Stream stream) XMC_GPU_STUB;
XMC_GPU_FN void copy_to_host(void* dst, const void* src, size_t bytes, Stream stream) XMC_GPU_STUB;
XMC_GPU_FN void copy_device(void* dst, const void* src, size_t bytes, Stream stream) XMC_GPU_STUB;
XMC_GPU_FN void memset_device(void* dst, int value, size_t bytes, Stream stream) XMC_GPU_STUB;
XMC_GPU_FN void synchronize(Stream stream) XMC_GPU_STUB;

// The driver's view of the current device's memory (cudaMemGetInfo).
struct DeviceMemInfo {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
  int64_t used_bytes() const { return total_bytes - free_bytes; }
};
XMC_GPU_FN DeviceMemInfo device_mem_info() XMC_GPU_STUB;

// Cross-check of the ledger's device total against the driver: the driver's used bytes
// minus a baseline taken before the buffers were allocated should be the ledger's
// current device total plus allocator rounding and library workspaces (cuBLAS).
struct MemCrossCheck {
  int64_t ledger_bytes = 0;  // ledger total_current(MemSpace::device)
  int64_t driver_bytes = 0;  // device_mem_info().used_bytes() - baseline_used
  // driver_bytes / ledger_bytes - 1 (0 when the ledger is empty).
  double relative_excess() const {
    return ledger_bytes > 0 ? static_cast<double>(driver_bytes) / ledger_bytes - 1.0 : 0.0;
  }
};
XMC_GPU_FN MemCrossCheck memory_cross_check(const MemoryLedger& ledger,
                                            int64_t baseline_used) XMC_GPU_STUB;

// One GPU: the selected device, a non-blocking stream, a cuBLAS handle bound to that
// stream, and cuBLAS's workspace (recorded in the ledger, tag workspace).
// Every op of cuda/ takes the context and runs on its stream.
class CudaContext {
 public:
  // The workspace's size (cublasSetWorkspace, for the cuBLASLt kernels cuBLAS runs): the
  // recommended size for Hopper, plenty for Ampere.
  static constexpr size_t cublas_workspace_bytes() { return size_t{32} << 20; }

  // Selects device `device_index` (InputError if it does not exist).
  CudaContext(MemoryLedger& ledger, int device_index = 0);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device_index() const { return device_; }
  const DeviceInfo& info() const { return info_; }
  MemoryLedger& ledger() const { return *ledger_; }
  Stream stream() const { return stream_; }
  cublasContext* cublas() const { return cublas_; }
  // Waits for everything queued on the stream.
  void synchronize() const { gpu::synchronize(stream_); }

 private:
  void release() noexcept;

  MemoryLedger* ledger_;
  int device_ = 0;
  DeviceInfo info_;
  Stream stream_ = nullptr;
  cublasContext* cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  LedgerEntry cublas_workspace_entry_;
};

// Owning array of n T's in device memory (S = MemSpace::device: cudaMalloc) or page-locked
// host memory (S = MemSpace::host: cudaMallocHost, for asynchronous host<->device copies),
// recorded in the ledger under a tag and that space; freed on destruction. Not
// zero-initialised.
template <class T, MemSpace S>
class GpuArray {
 public:
  GpuArray() = default;
  GpuArray(MemoryLedger& ledger, MemTag tag, size_t n)
      : data_(n ? static_cast<T*>(S == MemSpace::device ? device_alloc(n * sizeof(T))
                                                        : pinned_alloc(n * sizeof(T)))
                : nullptr),
        size_(n),
        entry_(ledger, tag, static_cast<int64_t>(n * sizeof(T)), S) {}

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }

  // Device arrays: host <-> device copies of the first n elements (n <= size()) on
  // `stream`, and zeroing.
  void upload(const T* host, size_t n, Stream stream) requires(S == MemSpace::device) {
    copy_to_device(data_.get(), host, n * sizeof(T), stream);
  }
  void download(T* host, size_t n, Stream stream) const requires(S == MemSpace::device) {
    copy_to_host(host, data_.get(), n * sizeof(T), stream);
  }
  void zero(Stream stream) requires(S == MemSpace::device) {
    memset_device(data_.get(), 0, bytes(), stream);
  }

 private:
  struct Free {
    void operator()(T* p) const noexcept {
      if constexpr (S == MemSpace::device) {
        device_free(p);
      } else {
        pinned_free(p);
      }
    }
  };
  std::unique_ptr<T[], Free> data_;
  size_t size_ = 0;
  LedgerEntry entry_;
};

template <class T>
using DeviceBuffer = GpuArray<T, MemSpace::device>;
template <class T>
using PinnedBuffer = GpuArray<T, MemSpace::host>;

}  // namespace xmc::gpu
XMC_GPU_STUBS_END
