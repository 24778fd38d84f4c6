#pragma once
// Host-side interface to the CUDA part (cuda/). In a build without CUDA every function
// here but built_with_cuda() throws "xmctrain was built without CUDA support": there is
// never a silent CPU fallback.
#include <cstdint>
#include <string>
#include <vector>

struct CUstream_st;  // cudaStream_t = CUstream_st*

namespace xmc::gpu {

bool built_with_cuda();
// In a build without CUDA: throws InputError "xmctrain was built without CUDA support"
// (every stub calls it; core/gpu_stubs.cpp).
[[noreturn]] void no_cuda();

// A GPU entry point is declared once, in its header, between XMC_GPU_STUBS_BEGIN and
// XMC_GPU_STUBS_END, as
//   XMC_GPU_FN void op(const CudaContext& ctx, ...) XMC_GPU_STUB;
// With CUDA that is a declaration (the definition is in cuda/); without CUDA it defines
// an inline stub that calls no_cuda() (its parameters unused, hence the two pragmas).
#ifdef XMC_WITH_CUDA
#define XMC_GPU_FN
#define XMC_GPU_STUB
#define XMC_GPU_STUBS_BEGIN
#define XMC_GPU_STUBS_END
#else
#define XMC_GPU_FN inline
#define XMC_GPU_STUB         \
  { ::xmc::gpu::no_cuda(); } \
  static_assert(true)
#define XMC_GPU_STUBS_BEGIN \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wunused-parameter\"")
#define XMC_GPU_STUBS_END _Pragma("GCC diagnostic pop")
#endif
XMC_GPU_STUBS_BEGIN

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int64_t total_bytes = 0;
  int multiprocessors = 0;
};

// Devices visible to the CUDA runtime; empty when the driver finds none.
XMC_GPU_FN std::vector<DeviceInfo> query_devices() XMC_GPU_STUB;

// Largest k of the GPU top-k (the merge stages 2k candidates per row in shared memory).
inline constexpr int kMaxTopK = 4096;

// k of a GPU top-k, from eval.k plus the filter's most labels per point: InputError
// outside [1, kMaxTopK]. Host code (lib/core/context.cpp), in every build.
void check_topk_k(int k);

// Running top-k over label chunks (evaluation, predict), all pointers on the device, on
// `stream`, no synchronisation. run_scores / run_labels [rows×k] hold each row's best k
// so far, best first; topk_reset fills them with (-inf, UINT32_MAX) pads.
// topk_merge_chunk takes the top-k of the chunk scores [rows×cols] (row stride ld,
// labels = column + label_offset) into tmp_* [rows×k] and merges it into run_*. Order:
// ranks_before, the CPU's (eval/topk.h); the pad ranks last. 1 <= k <= kMaxTopK.
XMC_GPU_FN void topk_reset(float* run_scores, uint32_t* run_labels, int64_t rows, int k,
                           CUstream_st* stream) XMC_GPU_STUB;
XMC_GPU_FN void topk_merge_chunk(const float* scores, int64_t rows, int64_t cols, int64_t ld, int k,
                                 int64_t label_offset, float* tmp_scores, uint32_t* tmp_labels,
                                 float* run_scores, uint32_t* run_labels,
                                 CUstream_st* stream) XMC_GPU_STUB;

}  // namespace xmc::gpu
XMC_GPU_STUBS_END
