#pragma once
// Spherical k-means over unit (or zero) rows: the cluster of a row is the centre with the
// largest dot product; a centre is the normalised sum of its rows. Used by the semantic
// label grouping (label centroids into buckets).
#include <cstdint>
#include <vector>

#include "core/matrix.h"

namespace xmc {

struct KMeansResult {
  std::vector<int32_t> assign;  // [n], cluster of each row, in [0, k)
  DenseMatrix centres;          // [k×D], the unit centres the final assignment used
};

// x [n×D]; 1 <= k (k > n is clamped to n). Initial centres: k-means++ seeding on the
// cosine distance, drawn from `seed`; up to max(iters, 1) assignment rounds (sgemm in row blocks, argmax with ties to
// the lower cluster), each but the last followed by new centres (normalised sum over the
// cluster's rows in row order). Clusters left empty take the rows worst served by their
// own centres (one per tight group of rows). Deterministic given the
// seed: no step depends on thread scheduling.
KMeansResult spherical_kmeans(ConstMatrix x, int64_t k, int iters, uint64_t seed);

// Dot product of two rows of length d, accumulated in double in index order.
inline double dot_double(const float* a, const float* b, int64_t d) {
  double s = 0.0;
  for (int64_t j = 0; j < d; ++j) s += static_cast<double>(a[j]) * b[j];
  return s;
}

// k clusters in two levels when k is large (k > 64): ceil(sqrt(k)) top clusters, then each
// top cluster split into a number of clusters proportional to its size (at least 1), so
// the cost per round is O(n·(sqrt(k) + k_c)·D) instead of O(n·k·D). Returns [n] cluster
// ids in [0, k') with k' close to k (every id used).
std::vector<int32_t> two_level_spherical_kmeans(ConstMatrix x, int64_t k, int iters,
                                                uint64_t seed);

}  // namespace xmc
