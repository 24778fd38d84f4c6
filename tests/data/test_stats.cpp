#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>

#include "data/stats.h"
#include "io/io.h"

using namespace xmc;

TEST_CASE("label_frequencies counts points per label") {
  Dataset ds = io::parse_xc_combined("4 3 5\n0,2 0:1\n2 1:1\n 2:1\n2,4 0:1\n", "mem");
  CHECK(label_frequencies(ds.labels) == std::vector<int64_t>{1, 0, 3, 0, 1});
}

TEST_CASE("stats on a hand-computed dataset") {
  // 5 points, L = 6: frequencies {0: 3, 1: 1, 2: 0, 3: 2, 4: 0, 5: 1}, one unlabeled point.
  Dataset ds =
      io::parse_xc_combined("5 4 6\n0,3 0:1 1:2\n0 2:1\n0,1,3,5 3:1\n 0:1\n 1:1 2:1 3:1\n", "mem");
  DatasetStats s = compute_stats(ds);
  CHECK(s.points == 5);
  CHECK(s.features == 4);
  CHECK(s.labels == 6);
  CHECK(s.feature_nnz == 8);
  CHECK(s.label_nnz == 7);
  CHECK(s.avg_labels_per_point == Approx(7.0 / 5));
  CHECK(s.avg_points_per_label == Approx(7.0 / 6));
  CHECK(s.avg_features_per_point == Approx(8.0 / 5));
  CHECK(s.empty_rows == 2);
  CHECK(s.unseen_labels == 2);
  // sorted frequencies 0 0 1 1 2 3; nearest rank ceil(q·6): p10 -> 1st, p25 -> 2nd,
  // p50 -> 3rd, p75 -> 5th, p90 -> 6th, p99 -> 6th.
  CHECK(s.frequency_quantiles == std::vector<int64_t>{0, 0, 0, 1, 2, 3, 3, 3});
  // bins [0,0] [1,1] [2,3]
  REQUIRE(s.histogram.size() == 3);
  CHECK(s.histogram[0].labels == 2);
  CHECK(s.histogram[1].labels == 2);
  CHECK(s.histogram[2].lo == 2);
  CHECK(s.histogram[2].hi == 3);
  CHECK(s.histogram[2].labels == 2);

  auto j = to_json(s);
  CHECK(j["label_frequency"]["p75"] == 2);
  CHECK(j["label_frequency_histogram"].size() == 3);
  const std::string text = format_stats(s);
  CHECK(text.find("labels never seen:      2") != std::string::npos);
  CHECK(text.find("2-3") != std::string::npos);
}

TEST_CASE("histogram bins cover powers of two exactly") {
  // One label each with frequency 1, 2, 3, 4, 7, 8.
  std::vector<int> f = {1, 2, 3, 4, 7, 8};
  CsrMatrix y;
  y.cols = static_cast<int64_t>(f.size());
  for (size_t l = 0; l < f.size(); ++l)
    for (int k = 0; k < f[l]; ++k) {
      y.indices.push_back(static_cast<uint32_t>(l));
      y.indptr.push_back(static_cast<int64_t>(y.indices.size()));
    }
  y.rows = static_cast<int64_t>(y.indptr.size()) - 1;
  Dataset ds;
  ds.features = CsrMatrix{y.rows, 1, std::vector<int64_t>(y.indptr.size(), 0), {}, {}};
  ds.labels = y;
  DatasetStats s = compute_stats(ds);
  REQUIRE(s.histogram.size() == 5);  // [0] [1] [2,3] [4,7] [8,15]
  CHECK(s.histogram[0].labels == 0);
  CHECK(s.histogram[1].labels == 1);
  CHECK(s.histogram[2].labels == 2);
  CHECK(s.histogram[3].labels == 2);
  CHECK(s.histogram[4].labels == 1);
  CHECK(s.histogram[4].lo == 8);
}

TEST_CASE("rank-frequency slope recovers an exact power law") {
  std::vector<int64_t> f;
  for (int r = 1; r <= 200; ++r) f.push_back(std::llround(1e5 * std::pow(r, -1.3)));
  CHECK(rank_frequency_slope(f, 5) == Approx(-1.3).margin(0.01));
  CHECK(rank_frequency_slope({7, 7}, 5) == 0.0);  // too few labels
}
