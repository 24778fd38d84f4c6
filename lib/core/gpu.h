#pragma once
// Host-side interface to the CUDA part (cuda/). In a build without CUDA every function
// here but built_with_cuda() throws "xmctrain was built without CUDA support"
// (lib/core/gpu_stubs.cpp): there is never a silent CPU fallback.
#include <cstdint>
#include <string>
#include <vector>

namespace xmc::gpu {

bool built_with_cuda();

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int64_t total_bytes = 0;
  int multiprocessors = 0;
};

// Devices visible to the CUDA runtime; empty when the driver finds none.
std::vector<DeviceInfo> query_devices();

// Row-wise top-k of a device matrix scores [rows×cols] (row-major, device pointer).
// Writes out_scores [rows×k] and out_labels [rows×k] (device pointers), each row in
// descending score order, labels = column + label_offset. 1 <= k <= 64. Ties: the lower
// column wins. Runs on the default stream and synchronises.
void topk_device(const float* scores, int64_t rows, int64_t cols, int k, int64_t label_offset,
                 float* out_scores, uint32_t* out_labels);

// Host convenience for tests: copies host scores to the device, runs topk_device, copies
// back. out_* have rows*k elements.
void topk_host(const float* scores, int64_t rows, int64_t cols, int k, int64_t label_offset,
               float* out_scores, uint32_t* out_labels);

}  // namespace xmc::gpu
