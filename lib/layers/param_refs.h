#pragma once
// Checkpoint names of an output layer's per-label weights, bias and their optimizer state,
// shared by every backend that keeps them as separate arrays (fixed_fanin, group_shared's
// tail, lsh_sampled, anns_sampled), so that the names cannot drift apart; and the
// optional-array pointer (null where the optimizer keeps no state) every layer passes on.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor_ref.h"

namespace xmc {

// An optional array (HostBuffer, std::vector or DeviceBuffer) at offset o, or null where
// it is empty (e.g. optimizer state the optimizer does not keep).
template <class Buf>
auto* data_or_null(Buf& b, int64_t o = 0) {
  return b.size() ? b.data() + o : nullptr;
}
// The host array of an optional Buffer (core/buffer.h; staged on a CUDA Context), or null.
template <class Buf>
auto* host_or_null(Buf& b) {
  return b.size() ? b.host_data() : nullptr;
}

// Appends "<prefix>weight" [rows×cols], "<prefix>bias" [rows], then "<prefix>weight_opt1",
// "<prefix>bias_opt1", "<prefix>weight_opt2", "<prefix>bias_opt2" for the state arrays
// that exist (w1 / w2 null = no such state); prefix "output/" unless given.
inline void append_weight_bias_refs(std::vector<TensorRef>& out, int64_t rows, int64_t cols,
                                    float* w, float* b, float* w1, float* b1, float* w2,
                                    float* b2, const std::string& prefix = "output/") {
  out.push_back({prefix + "weight", {rows, cols}, w});
  out.push_back({prefix + "bias", {rows}, b});
  if (w1) {
    out.push_back({prefix + "weight_opt1", {rows, cols}, w1});
    out.push_back({prefix + "bias_opt1", {rows}, b1});
  }
  if (w2) {
    out.push_back({prefix + "weight_opt2", {rows, cols}, w2});
    out.push_back({prefix + "bias_opt2", {rows}, b2});
  }
}

}  // namespace xmc
