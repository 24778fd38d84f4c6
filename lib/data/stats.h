#pragma once
// Dataset statistics for `xmctrain info` and run reports: sizes, non-zeros, label
// frequency quantiles and a log-binned histogram.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace xmc {

struct DatasetStats {
  std::string source;
  int64_t points = 0;    // N
  int64_t features = 0;  // D
  int64_t labels = 0;    // L
  bool sparse = true;
  int64_t feature_nnz = 0;  // stored entries (sparse) or non-zero values (dense)
  int64_t label_nnz = 0;    // (point, label) pairs
  double avg_features_per_point = 0;
  double avg_labels_per_point = 0;
  double avg_points_per_label = 0;  // label_nnz / L
  int64_t empty_rows = 0;           // points with no label
  int64_t unseen_labels = 0;        // labels with no point

  // Label frequency (points per label, over all L labels) at these quantiles
  // (nearest rank): min, 10%, 25%, 50%, 75%, 90%, 99%, max.
  static constexpr double kQuantiles[8] = {0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0};
  std::vector<int64_t> frequency_quantiles;  // [8]

  // Log-spaced histogram of label frequencies: bin 0 = [0, 0], then [1, 1], [2, 3],
  // [4, 7], ... up to the bin holding the maximum.
  struct Bin {
    int64_t lo = 0;
    int64_t hi = 0;
    int64_t labels = 0;
  };
  std::vector<Bin> histogram;

  // Least-squares slope of log(frequency) against log(rank) for labels sorted by
  // decreasing frequency, over the labels seen at least kSlopeMinFrequency times (the
  // rarest labels are dominated by sampling noise). About -alpha for a power law
  // frequency ∝ rank^-alpha; 0 when fewer than 3 labels qualify.
  static constexpr int64_t kSlopeMinFrequency = 5;
  double rank_frequency_slope = 0;
};

DatasetStats compute_stats(const Dataset& ds);
nlohmann::json to_json(const DatasetStats& s);
// Multi-line human-readable report with the histogram drawn in '#'.
std::string format_stats(const DatasetStats& s);

// Slope of log f against log rank (rank 1 = most frequent) over frequencies >= min_freq.
double rank_frequency_slope(std::vector<int64_t> freq, int64_t min_freq);

}  // namespace xmc
