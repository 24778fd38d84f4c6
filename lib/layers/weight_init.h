#pragma once
// The initialisation every one-vs-all label block shares (dense, bottleneck and
// group_shared projections, lsh_sampled, anns_sampled, on both devices): row r of a
// [rows×cols] matrix is uniform(±1/sqrt(cols)) from its own stream (seed, first + r), so
// the values depend neither on the thread count nor on how the rows are chunked.
#include <cmath>
#include <cstdint>

#include "core/rng.h"

namespace xmc {

inline void init_uniform_rows(float* out, int64_t rows, int64_t cols, uint64_t seed,
                              int64_t first = 0) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    Rng rng = Rng::stream(seed, static_cast<uint64_t>(first + r));
    float* row = out + r * cols;
    for (int64_t j = 0; j < cols; ++j) row[j] = (2.0f * rng.uniformf() - 1.0f) * scale;
  }
}

}  // namespace xmc
