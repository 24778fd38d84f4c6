#pragma once
// The CUDA runtime's checks, private to cuda/: every CUDA runtime and cuBLAS call is
// checked; failures throw xmc::Error with the file and line of the call (runtime.cpp).
// Kept free of fmt so that .cu files compile under nvcc's front end.
#include <cuda_runtime.h>

#include <cstdint>

namespace xmc::cuda_detail {
[[noreturn]] void throw_cuda_error(const char* file, int line, const char* call, cudaError_t err);
// Argument checks inside .cu code: throws xmc::Error "file:line: what (value)".
[[noreturn]] void throw_check(const char* file, int line, const char* what, int64_t value);
// cuBLAS / cuBLASLt status (cublasStatus_t, passed as int so this header needs no cuBLAS).
[[noreturn]] void throw_cublas_error(const char* file, int line, const char* call, int status);
}  // namespace xmc::cuda_detail

#define XMC_CUDA_CHECK(call)                                                 \
  do {                                                                       \
    cudaError_t err_ = (call);                                               \
    if (err_ != cudaSuccess)                                                 \
      ::xmc::cuda_detail::throw_cuda_error(__FILE__, __LINE__, #call, err_); \
  } while (0)

// A kernel launch, kernel<<<grid, block, smem, stream>>>(args...), and its check:
// launch-configuration errors surface here (with the launch's file and line).
#define XMC_CUDA_LAUNCH(kernel, grid, block, smem, stream, ...) \
  do {                                                          \
    kernel<<<grid, block, smem, stream>>>(__VA_ARGS__);         \
    XMC_CUDA_CHECK(cudaGetLastError());                         \
  } while (0)

#define XMC_CUDA_REQUIRE(cond, value)                                                 \
  do {                                                                                \
    if (!(cond)) ::xmc::cuda_detail::throw_check(__FILE__, __LINE__, #cond, (value)); \
  } while (0)

// Every cuBLAS and cuBLASLt call: status != CUBLAS_STATUS_SUCCESS (0) throws.
#define XMC_CUBLAS_CHECK(call)                                                            \
  do {                                                                                    \
    const int st_ = static_cast<int>(call);                                               \
    if (st_ != 0) ::xmc::cuda_detail::throw_cublas_error(__FILE__, __LINE__, #call, st_); \
  } while (0)
