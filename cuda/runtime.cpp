// The CUDA runtime, host side (cudart, cuBLAS): the checks' errors (runtime.h), the
// devices, CudaContext and device memory (core/cuda_context.h), streams and events
// (core/cuda_stream.h). Compiled by g++, so it may use fmt for its messages.
#include "runtime.h"

#include <cublas_v2.h>

#include "core/cuda_stream.h"
#include "core/error.h"

namespace xmc::cuda_detail {

void throw_cuda_error(const char* file, int line, const char* call, cudaError_t err) {
  throw Error(fmt::format("{}:{}: CUDA error {} ({}) in {}", file, line, cudaGetErrorName(err),
                          cudaGetErrorString(err), call));
}

void throw_check(const char* file, int line, const char* what, int64_t value) {
  throw Error(fmt::format("{}:{}: check '{}' failed (value {})", file, line, what, value));
}

void throw_cublas_error(const char* file, int line, const char* call, int status) {
  throw Error(fmt::format("{}:{}: cuBLAS error {} ({}) in {}", file, line, status,
                          cublasGetStatusString(static_cast<cublasStatus_t>(status)), call));
}

}  // namespace xmc::cuda_detail

namespace xmc::gpu {

bool built_with_cuda() { return true; }

std::vector<DeviceInfo> query_devices() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  // No driver or no device: the machine has no usable GPU, which is not an error here.
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();
    return {};
  }
  XMC_CUDA_CHECK(err);
  std::vector<DeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    XMC_CUDA_CHECK(cudaGetDeviceProperties(&p, i));
    out.push_back({i, p.name, p.major, p.minor, static_cast<int64_t>(p.totalGlobalMem),
                   p.multiProcessorCount});
  }
  return out;
}

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

CudaStream::CudaStream() { XMC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }

CudaStream::~CudaStream() {
  if (stream_) {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
}

CudaEvent::CudaEvent(bool timing) {
  XMC_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_) (void)cudaEventDestroy(event_);
}

void CudaEvent::record(Stream stream) { XMC_CUDA_CHECK(cudaEventRecord(event_, stream)); }

void CudaEvent::make_wait(Stream stream) const {
  XMC_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}

void CudaEvent::synchronize() const { XMC_CUDA_CHECK(cudaEventSynchronize(event_)); }

float CudaEvent::elapsed_ms_since(const CudaEvent& start) const {
  float ms = 0.0f;
  XMC_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

}  // namespace xmc::gpu
