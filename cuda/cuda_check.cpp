#include "cuda_check.h"

#include "core/error.h"

namespace xmc::cuda_detail {

void throw_cuda_error(const char* file, int line, const char* call, cudaError_t err) {
  throw Error(fmt::format("{}:{}: CUDA error {} ({}) in {}", file, line, cudaGetErrorName(err),
                          cudaGetErrorString(err), call));
}

void throw_check(const char* file, int line, const char* what, int64_t value) {
  throw Error(fmt::format("{}:{}: check '{}' failed (value {})", file, line, what, value));
}

}  // namespace xmc::cuda_detail
