// Host-side checks of the GPU entry points' limits, in every build (with or without CUDA),
// so the error a user sees does not depend on how the binary was built.
#include "core/error.h"
#include "core/gpu.h"

namespace xmc::gpu {

void check_topk_k(int k) {
  if (k < 1 || k > kMaxTopK)
    throw_input(
        "the GPU top-k takes 1 <= k <= {} (eval.k plus the filter's most labels per point), "
        "got {}",
        kMaxTopK, k);
}

}  // namespace xmc::gpu
