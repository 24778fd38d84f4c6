#include "data/stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace xmc {

std::vector<int64_t> label_frequencies(const CsrMatrix& labels) {
  std::vector<int64_t> freq(static_cast<size_t>(labels.cols), 0);
  for (uint32_t l : labels.indices) {
    XMC_CHECK(l < freq.size(), "label {} >= L = {}", l, labels.cols);
    ++freq[l];
  }
  return freq;
}

double rank_frequency_slope(std::vector<int64_t> freq, int64_t min_freq) {
  std::sort(freq.begin(), freq.end(), std::greater<>());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int64_t n = 0;
  for (size_t r = 0; r < freq.size() && freq[r] >= std::max<int64_t>(min_freq, 1); ++r) {
    const double x = std::log(static_cast<double>(r + 1));
    const double y = std::log(static_cast<double>(freq[r]));
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
    ++n;
  }
  if (n < 3) return 0;
  const double den = static_cast<double>(n) * sxx - sx * sx;
  return den == 0 ? 0 : (static_cast<double>(n) * sxy - sx * sy) / den;
}

DatasetStats compute_stats(const Dataset& ds) {
  DatasetStats s;
  s.source = ds.source;
  s.points = ds.num_points();
  s.features = ds.num_features();
  s.labels = ds.num_labels();
  s.sparse = ds.sparse();
  if (ds.sparse()) {
    s.feature_nnz = ds.sparse_features().nnz();
  } else {
    const auto& v = ds.dense_features().values;
    s.feature_nnz = static_cast<int64_t>(v.size()) - std::count(v.begin(), v.end(), 0.0f);
  }
  s.label_nnz = ds.labels.nnz();
  if (s.points > 0) {
    s.avg_features_per_point = static_cast<double>(s.feature_nnz) / static_cast<double>(s.points);
    s.avg_labels_per_point = static_cast<double>(s.label_nnz) / static_cast<double>(s.points);
  }
  if (s.labels > 0)
    s.avg_points_per_label = static_cast<double>(s.label_nnz) / static_cast<double>(s.labels);
  for (int64_t r = 0; r < ds.labels.rows; ++r) s.empty_rows += ds.labels.row_nnz(r) == 0;

  std::vector<int64_t> freq = label_frequencies(ds.labels);
  s.unseen_labels = std::count(freq.begin(), freq.end(), 0);
  s.rank_frequency_slope = rank_frequency_slope(freq, DatasetStats::kSlopeMinFrequency);
  std::sort(freq.begin(), freq.end());
  for (double q : DatasetStats::kQuantiles) {
    // Nearest rank: the smallest value with at least q of the labels at or below it.
    auto k = static_cast<size_t>(std::ceil(q * static_cast<double>(freq.size())));
    s.frequency_quantiles.push_back(freq.empty() ? 0 : freq[k == 0 ? 0 : k - 1]);
  }
  if (!freq.empty()) {
    s.histogram.push_back({0, 0, 0});
    for (int64_t lo = 1; lo <= freq.back(); lo *= 2) s.histogram.push_back({lo, 2 * lo - 1, 0});
    // f = 0 in bin 0, f in [2^(b-1), 2^b - 1] in bin b: the bit width of f.
    for (int64_t f : freq) ++s.histogram[std::bit_width(static_cast<uint64_t>(f))].labels;
  }
  return s;
}

nlohmann::json to_json(const DatasetStats& s) {
  nlohmann::json j;
  j["source"] = s.source;
  j["points"] = s.points;
  j["features"] = s.features;
  j["labels"] = s.labels;
  j["feature_kind"] = s.sparse ? "sparse" : "dense";
  j["feature_nnz"] = s.feature_nnz;
  j["label_nnz"] = s.label_nnz;
  j["avg_features_per_point"] = s.avg_features_per_point;
  j["avg_labels_per_point"] = s.avg_labels_per_point;
  j["avg_points_per_label"] = s.avg_points_per_label;
  j["empty_rows"] = s.empty_rows;
  j["unseen_labels"] = s.unseen_labels;
  static constexpr const char* names[8] = {"min", "p10", "p25", "p50", "p75", "p90", "p99", "max"};
  nlohmann::json q = nlohmann::json::object();
  for (size_t i = 0; i < s.frequency_quantiles.size(); ++i) q[names[i]] = s.frequency_quantiles[i];
  j["label_frequency"] = q;
  nlohmann::json h = nlohmann::json::array();
  for (const auto& b : s.histogram) h.push_back({{"lo", b.lo}, {"hi", b.hi}, {"labels", b.labels}});
  j["label_frequency_histogram"] = h;
  j["rank_frequency_slope"] = s.rank_frequency_slope;
  return j;
}

std::string format_stats(const DatasetStats& s) {
  fmt::memory_buffer buf;
  auto out = std::back_inserter(buf);
  fmt::format_to(out, "source:                 {}\n", s.source);
  fmt::format_to(out, "points (N):             {}\n", s.points);
  fmt::format_to(out, "features (D):           {} ({})\n", s.features,
                 s.sparse ? "sparse" : "dense");
  fmt::format_to(out, "labels (L):             {}\n", s.labels);
  fmt::format_to(out, "feature non-zeros:      {} ({:.2f} per point)\n", s.feature_nnz,
                 s.avg_features_per_point);
  fmt::format_to(out, "label non-zeros:        {}\n", s.label_nnz);
  fmt::format_to(out, "labels per point:       {:.3f}\n", s.avg_labels_per_point);
  fmt::format_to(out, "points per label:       {:.3f}\n", s.avg_points_per_label);
  fmt::format_to(out, "points without labels:  {}\n", s.empty_rows);
  fmt::format_to(out, "labels never seen:      {}\n", s.unseen_labels);
  if (s.frequency_quantiles.size() == 8) {
    const auto& q = s.frequency_quantiles;
    fmt::format_to(
        out,
        "label frequency:        min {}  p10 {}  p25 {}  p50 {}  p75 {}  p90 {}  p99 {}  max {}\n",
        q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]);
  }
  fmt::format_to(out,
                 "rank-frequency slope:   {:.3f} (log-log fit over labels with >= {} points)\n",
                 s.rank_frequency_slope, DatasetStats::kSlopeMinFrequency);
  if (!s.histogram.empty()) {
    fmt::format_to(out, "label frequency histogram (points per label: number of labels):\n");
    int64_t most = 1;
    for (const auto& b : s.histogram) most = std::max(most, b.labels);
    for (const auto& b : s.histogram) {
      const std::string range =
          b.lo == b.hi ? fmt::format("{}", b.lo) : fmt::format("{}-{}", b.lo, b.hi);
      const auto bar = static_cast<size_t>(
          std::ceil(50.0 * static_cast<double>(b.labels) / static_cast<double>(most)));
      fmt::format_to(out, "  {:>15} {:>10} {}\n", range, b.labels, std::string(bar, '#'));
    }
  }
  return fmt::to_string(buf);
}

}  // namespace xmc
