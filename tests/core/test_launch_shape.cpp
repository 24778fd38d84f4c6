// Launch shapes of the CUDA kernels (core/launch_shape.h), checked without a GPU: for every
// size a config value or a dataset can reach, the grid stays inside the hardware limits and
// the kernels' grid-stride loops visit every row or tile exactly once.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "core/launch_shape.h"

using namespace xmc;

namespace {

// The loop every strided kernel runs: block b of `blocks` handles b, b + blocks, ...
std::vector<int> strided_visits(int64_t n, unsigned blocks) {
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t i = b; i < n; i += blocks) ++seen[static_cast<size_t>(i)];
  return seen;
}

}  // namespace

TEST_CASE("grid_yz stays within 65535 blocks and its stride covers every row once") {
  // Rows of a batch (up to train.batch_size's bound), label chunks (chunk_size up to 2^24),
  // encoder column tiles (out up to 2^24 / 256).
  for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{65535}, int64_t{65536}, int64_t{70001},
                    launch::kMaxBatchRows, int64_t{1} << 24}) {
    const unsigned blocks = launch::grid_yz(n);
    CHECK(blocks >= 1);
    CHECK(static_cast<int64_t>(blocks) <= launch::kMaxGridYZ);
    const auto seen = strided_visits(n, blocks);
    CHECK(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
  }
  CHECK(launch::grid_yz(0) == 1);  // an empty launch is skipped by the callers; never 0 blocks
}

TEST_CASE("grid_x and block_threads stay within the hardware limits") {
  CHECK(launch::grid_x(1) == 1);
  CHECK(launch::grid_x(int64_t{1} << 40) == launch::kMaxGridX);
  for (int64_t k : {1, 5, 31, 32, 33, 100, 1000, 1024, 1025, 4096}) {
    const int t = launch::block_threads(k);
    CHECK(t >= 32);
    CHECK(t <= launch::kMaxBlockThreads);
    CHECK(t % 32 == 0);
    CHECK((t >= k || t == launch::kMaxBlockThreads));
  }
}

TEST_CASE("batch tiles of the shared-memory kernels fit grid.y for the largest batch") {
  // fixed_fanin (32-row tiles) and group_shared (64-row tiles) do not stride on grid.y.
  CHECK(launch::batch_tiles_fit(32));
  CHECK(launch::batch_tiles_fit(64));
  CHECK_FALSE(launch::batch_tiles_fit(8));  // what a smaller tile would break
}
