#pragma once
// Label grouping for the group_shared backend (HASTE): the head/tail split by training
// frequency, and the arrangement of the tail into groups of G labels that share one
// fan-in set — `frequency` (consecutive in frequency order), `random` (a seeded shuffle)
// or `semantic` (label centroids → spherical k-means into about n/(βG) buckets → inside
// each bucket, greedy groups of a random seed and its G−1 nearest unassigned labels).
// Everything is deterministic given the seed.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/enum_names.h"
#include "core/matrix.h"

namespace xmc {

XMC_NAMED_ENUM(GroupingType, frequency, random, semantic);

// Labels by training frequency, most frequent first; equal counts keep the lower id first.
std::vector<uint32_t> frequency_order(std::span<const int64_t> freq);

// Number of head labels: head_fraction·L rounded to the nearest multiple of G, at most L.
int64_t head_label_count(int64_t num_labels, double head_fraction, int64_t group);

// The inverse permutation: pos[order[i]] = i.
std::vector<uint32_t> inverse_order(std::span<const uint32_t> order);

// Label centroids [labels.size()×D]: row i = the normalised mean of the rows of x [N×D]
// of the points that carry label labels[i] in point_labels [N×L] (summed in point order);
// a zero row for a label without training points. Parallel over labels.
DenseMatrix label_centroids(ConstMatrix x, const CsrMatrix& point_labels,
                            std::span<const uint32_t> labels);

struct SemanticGroupingParams {
  int64_t group = 16;      // G
  double beta = 4.0;       // buckets ≈ n/(β·G)
  int kmeans_iters = 10;
  uint64_t seed = 0;
};

// An arrangement of the n rows of `centroids` (unit or zero rows): a permutation p of
// [0, n) such that rows p[kG .. kG+G) form group k (the last group may be partial).
// Buckets are visited in order; a group left incomplete at the end of a bucket is
// completed with the labels of the next bucket nearest to its seed, so at most one group
// per bucket boundary mixes buckets and only the very last group can be partial.
std::vector<int64_t> semantic_arrangement(ConstMatrix centroids, const SemanticGroupingParams& p);

// Mean over all rows of the cosine between a row and its group's centroid (normalised sum
// of the group's rows); groups = consecutive runs of G rows of `arrangement`. A zero row
// counts 0.
double group_cohesion(ConstMatrix centroids, std::span<const int64_t> arrangement, int64_t group);

}  // namespace xmc
