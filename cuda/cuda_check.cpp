#include "cuda_check.h"

#include <cublas_v2.h>

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
