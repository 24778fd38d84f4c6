#pragma once
// A named, shaped, non-owning reference to a parameter or state array. Components list
// their state as TensorRefs; checkpoints write and read them by name (HDF5 datasets).
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <variant>
#include <vector>

namespace xmc {

// Checkpoint staging of device-resident state (OutputLayer::sync_state, Encoder::sync_state).
enum class StateSync {
  to_host,    // allocate the host copies state() refers to and fill them from the device
  to_device,  // upload the host copies (after a checkpoint was read into them), free them
  release,    // free the host copies (after a save)
};

struct TensorRef {
  std::string name;            // e.g. "encoder/0/weight", "output/dense/adam_m"
  std::vector<int64_t> shape;  // row-major
  std::variant<float*, uint32_t*, int64_t*> data;

  int64_t numel() const {
    return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  }
};

}  // namespace xmc
