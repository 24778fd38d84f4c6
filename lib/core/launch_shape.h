#pragma once
// Launch shapes of the CUDA kernels, as host code without CUDA headers, so that a test
// without a GPU checks them against the hardware limits (grid.x <= 2^31-1, grid.y/z <=
// 65535, block <= 1024 threads) for every size a config value or a dataset can reach.
//
// Rule: a kernel whose grid.y counts rows or column tiles launches grid_yz(n) blocks
// there and strides over the rest:  for (i = blockIdx.y; i < n; i += gridDim.y).
// Kernels that keep a batch tile in shared memory on grid.y do not stride; for those,
// batch_tiles_fit(tile) holds for the largest batch a config can ask for (a
// static_assert next to the kernel).
#include <cstdint>

namespace xmc::launch {

inline constexpr int64_t kMaxGridX = 2147483647;
inline constexpr int64_t kMaxGridYZ = 65535;
inline constexpr int64_t kMaxBlockThreads = 1024;

// The largest number of rows of one batch: the bound of train.batch_size and
// eval.batch_size (lib/config/experiment_config.h uses this constant).
inline constexpr int64_t kMaxBatchRows = int64_t{1} << 20;
// The largest fan-in F: the bound of model.output.fan_in (layers/fanin_block.h) and of the
// fan-in kernels' argument checks.
inline constexpr int64_t kMaxFanIn = int64_t{1} << 16;

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks on grid.y or grid.z for n rows or tiles: at least 1, at most 65535 (the kernel
// strides over the rest).
constexpr unsigned grid_yz(int64_t n) {
  return static_cast<unsigned>(n < 1 ? 1 : (n < kMaxGridYZ ? n : kMaxGridYZ));
}

// Blocks on grid.x for n items: at least 1, at most 2^31-1 (the kernel strides).
constexpr unsigned grid_x(int64_t n) {
  return static_cast<unsigned>(n < 1 ? 1 : (n < kMaxGridX ? n : kMaxGridX));
}

// Does a grid.y of batch tiles of `tile` rows fit for the largest batch?
constexpr bool batch_tiles_fit(int64_t tile) { return ceil_div(kMaxBatchRows, tile) <= kMaxGridYZ; }

// Threads of a block that handles n items of one row (at most kMaxBlockThreads, a
// multiple of 32, at least 32).
constexpr int block_threads(int64_t n) {
  const int64_t w = ceil_div(n < 1 ? 1 : n, 32) * 32;
  return static_cast<int>(w < kMaxBlockThreads ? w : kMaxBlockThreads);
}

}  // namespace xmc::launch
