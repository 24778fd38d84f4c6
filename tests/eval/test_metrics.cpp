#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "eval/metrics.h"
#include "ops/topk.h"

using namespace xmc;
using Catch::Matchers::Contains;

namespace {

constexpr uint32_t kPad = TopK::kNoLabel;

CsrMatrix make_labels(int64_t cols, const std::vector<std::vector<uint32_t>>& rows) {
  return CsrMatrix::from_rows(rows, cols);
}

TopK make_topk(int k, const std::vector<std::vector<uint32_t>>& rows) {
  TopK t;
  t.rows = static_cast<int64_t>(rows.size());
  t.k = k;
  for (const auto& r : rows) {
    REQUIRE(static_cast<int>(r.size()) == k);
    t.labels.insert(t.labels.end(), r.begin(), r.end());
    for (size_t j = 0; j < r.size(); ++j)
      t.scores.push_back(static_cast<float>(k - static_cast<int>(j)));
  }
  return t;
}

const double d2 = 1.0 / std::log2(3.0);  // discount of rank 2
const double d3 = 1.0 / std::log2(4.0);  // = 0.5
const double I2 = 1.0 + d2;              // ideal DCG with 2 relevant labels

}  // namespace

// L = 4, k = 2, q = [1, 2, 4, 8].
//   point 0: y = {1, 3}, top-2 = [3, 0]   -> hits 1, 0
//   point 1: y = {},     top-2 = [0, 1]   -> no labels: contributes 0 everywhere
//   point 2: y = {2},    top-2 = [0, 2]   -> hits 0, 1
// P@1 = (1 + 0 + 0)/3 = 1/3;            P@2 = (1/2 + 0 + 1/2)/3 = 1/3
// nDCG@1 = (1/1 + 0 + 0)/3 = 1/3;       nDCG@2 = (1/I2 + 0 + d2/1)/3
//   (point 2 has |y| = 1, so its ideal at k = 2 is I1 = 1)
// R@1 = (1/2 + 0 + 0)/3 = 1/6;          R@2 = (1/2 + 0 + 1/1)/3 = 1/2
// PSP@1:   num = 8 (point 0 hits label 3);  den = max(q1,q3) + 0 + q2 = 8 + 4 = 12 -> 2/3
// PSP@2:   num = (8+0)/2 + (0+4)/2 = 6;     den = (8+2)/2 + 4/2 = 7              -> 6/7
// PSnDCG@1: num = 8/1; den = 8/1 + 4/1                                          -> 2/3
// PSnDCG@2: num = 8/I2 + 4·d2/1;  den = (8 + 2·d2)/I2 + 4/1
//   (each point's DCG and ideal are divided by its plain ideal DCG, as pyxclib's psndcg;
//   without that division it would be (8 + 4·d2)/(8 + 2·d2 + 4) = 0.7935..., not 0.7675...)
TEST_CASE("metrics on a hand-computed case with an unlabeled point") {
  CsrMatrix truth = make_labels(4, {{1, 3}, {}, {2}});
  TopK pred = make_topk(2, {{3, 0}, {0, 1}, {0, 2}});
  std::vector<double> q = {1, 2, 4, 8};
  MetricsResult m = compute_metrics(pred, truth, q, 2);
  REQUIRE(m.k == 2);
  CHECK(m.points == 3);
  REQUIRE(m.p.size() == 2);
  REQUIRE(m.psp.size() == 2);
  CHECK(m.p[0] == Approx(1.0 / 3).epsilon(1e-12));
  CHECK(m.p[1] == Approx(1.0 / 3).epsilon(1e-12));
  CHECK(m.ndcg[0] == Approx(1.0 / 3).epsilon(1e-12));
  CHECK(m.ndcg[1] == Approx((1.0 / I2 + d2) / 3).epsilon(1e-12));
  CHECK(m.ndcg[1] == Approx(0.41469).epsilon(1e-4));
  CHECK(m.recall[0] == Approx(1.0 / 6).epsilon(1e-12));
  CHECK(m.recall[1] == Approx(0.5).epsilon(1e-12));
  CHECK(m.psp[0] == Approx(2.0 / 3).epsilon(1e-12));
  CHECK(m.psp[1] == Approx(6.0 / 7).epsilon(1e-12));
  CHECK(m.psndcg[0] == Approx(2.0 / 3).epsilon(1e-12));
  CHECK(m.psndcg[1] == Approx((8 / I2 + 4 * d2) / ((8 + 2 * d2) / I2 + 4)).epsilon(1e-12));
  CHECK(m.psndcg[1] == Approx(0.76754).epsilon(1e-4));
}

// k = 3 larger than the 2 labels that exist: the top-3 lists are padded.
//   point 0: y = {0, 1}, top-3 = [1, 0, pad] -> hits 1, 1, 0
//   point 1: y = {1},    top-3 = [0, pad, pad] -> hits 0, 0, 0
// P@3 = (2/3 + 0)/2 = 1/3; nDCG@3 = ((1 + d2)/I2 + 0)/2 = 1/2; R@3 = (2/2 + 0/1)/2 = 1/2
// With q = [3, 5]: PSP@3 = ((5 + 3)/3) / ((5 + 3)/3 + 5/3) = 8/13
TEST_CASE("metrics with k larger than the number of labels (padding is never relevant)") {
  std::vector<float> label0 = {0.2f, 0.7f};  // [2×1]: label 0's score in rows 0 and 1
  TopKAccumulator acc(2, 3);
  acc.add_chunk(ConstMatrix(label0.data(), 2, 1), 0);
  acc.add(0, 1, 0.9f);  // label 1 is a candidate of row 0 only
  TopK pred = acc.result();
  REQUIRE(pred.labels == std::vector<uint32_t>{1, 0, kPad, 0, kPad, kPad});
  CsrMatrix truth = make_labels(2, {{0, 1}, {1}});
  MetricsResult m = compute_metrics(pred, truth, {3, 5}, 3);
  CHECK(m.p[2] == Approx(1.0 / 3).epsilon(1e-12));
  CHECK(m.ndcg[2] == Approx(0.5).epsilon(1e-12));
  CHECK(m.recall[2] == Approx(0.5).epsilon(1e-12));
  CHECK(m.psp[2] == Approx(8.0 / 13).epsilon(1e-12));
  // P@1: point 0's best (label 1) is relevant, point 1's (label 0) is not.
  CHECK(m.p[0] == Approx(0.5).epsilon(1e-12));
}

TEST_CASE("metrics use only the first k of wider top-k lists") {
  CsrMatrix truth = make_labels(5, {{4}});
  TopK pred = make_topk(3, {{0, 1, 4}});
  MetricsResult m2 = compute_metrics(pred, truth, {}, 2);
  CHECK(m2.k == 2);
  CHECK(m2.p == std::vector<double>{0.0, 0.0});
  MetricsResult m3 = compute_metrics(pred, truth, {}, 3);
  CHECK(m3.p[2] == Approx(1.0 / 3).epsilon(1e-12));
  CHECK(m3.recall[2] == 1.0);
}

TEST_CASE("metrics without propensities leave PSP and PSnDCG out") {
  CsrMatrix truth = make_labels(3, {{0}, {2}});
  TopK pred = make_topk(2, {{0, 1}, {1, 2}});
  MetricsResult m = compute_metrics(pred, truth, {}, 2);
  CHECK_FALSE(m.has_ps());
  CHECK(m.psp.empty());
  CHECK(m.psndcg.empty());
  auto j = m.to_json();
  CHECK(j.contains("P@1"));
  CHECK(j.contains("nDCG@2"));
  CHECK(j.contains("R@2"));
  CHECK_FALSE(j.contains("PSP@1"));
  CHECK_FALSE(j.contains("PSnDCG@1"));
  CHECK(j["points"] == 2);
  CHECK(j["P@1"].get<double>() == Approx(0.5));
  CHECK_THAT(m.table(), !Contains("PSP"));
}

TEST_CASE("metrics json keys and table") {
  CsrMatrix truth = make_labels(3, {{0}, {2}});
  TopK pred = make_topk(2, {{0, 1}, {1, 2}});
  MetricsResult m = compute_metrics(pred, truth, {1.0, 1.0, 1.0}, 2);
  auto j = m.to_json();
  for (const char* key :
       {"P@1", "P@2", "nDCG@1", "nDCG@2", "PSP@1", "PSP@2", "PSnDCG@1", "PSnDCG@2", "R@1", "R@2"})
    CHECK(j.contains(key));
  CHECK(j.size() == 11);  // 10 metrics + "points"
  // With all q = 1, PSP@k = P@k / (mean of min(k,|y|)/k) = (1/2) / 1 at k = 1.
  CHECK(j["PSP@1"].get<double>() == Approx(0.5));
  std::string t = m.table();
  CHECK_THAT(t, Contains("PSnDCG"));
  CHECK_THAT(t, Contains("50.00"));  // P@1 = 0.5 in percent
  CHECK_THAT(t, Contains("points: 2"));
}

TEST_CASE("metrics reject mismatched inputs with the numbers in the message") {
  CsrMatrix truth = make_labels(3, {{0}, {2}});
  TopK pred = make_topk(2, {{0, 1}});
  CHECK_THROWS_WITH(compute_metrics(pred, truth, {}, 2), Contains("1 points") && Contains("2"));
  CHECK_THROWS_AS(compute_metrics(pred, truth, {}, 2), InputError);
  TopK pred2 = make_topk(2, {{0, 1}, {1, 2}});
  CHECK_THROWS_AS(compute_metrics(pred2, truth, {}, 3), Error);  // lists narrower than k
  CHECK_THROWS_AS(compute_metrics(pred2, truth, {}, 0), InputError);
  CHECK_THROWS_WITH(compute_metrics(pred2, truth, {1.0, 2.0}, 2),
                    Contains("2 propensities") && Contains("3 labels"));
}

TEST_CASE("metrics do not depend on the thread count") {
  // 5000 points (several blocks), 200 labels, random truth and predictions.
  const int64_t n = 5000, labels = 200;
  const int k = 5;
  Rng rng(99);
  std::vector<std::vector<uint32_t>> y(static_cast<size_t>(n)), p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    auto& yi = y[static_cast<size_t>(i)];
    const auto ny = rng.below(4);  // 0..3 labels; some points unlabeled
    for (uint64_t t = 0; t < ny; ++t) yi.push_back(static_cast<uint32_t>(rng.below(8)));
    std::sort(yi.begin(), yi.end());
    yi.erase(std::unique(yi.begin(), yi.end()), yi.end());
    auto& pi = p[static_cast<size_t>(i)];
    for (int j = 0; j < k; ++j) pi.push_back(static_cast<uint32_t>(rng.below(10)));
  }
  CsrMatrix truth = make_labels(labels, y);
  TopK pred = make_topk(k, p);
  std::vector<double> q(static_cast<size_t>(labels));
  for (auto& v : q) v = 1.0 + 3.0 * rng.uniform();

  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  MetricsResult one = compute_metrics(pred, truth, q, k);
  omp_set_num_threads(4);
  MetricsResult four = compute_metrics(pred, truth, q, k);
  omp_set_num_threads(saved);
  CHECK(one.p == four.p);
  CHECK(one.ndcg == four.ndcg);
  CHECK(one.psp == four.psp);
  CHECK(one.psndcg == four.psndcg);
  CHECK(one.recall == four.recall);
  // Sanity: metrics are fractions and P@1 is the hit rate of the first column.
  double hits1 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto& yi = y[static_cast<size_t>(i)];
    hits1 += std::binary_search(yi.begin(), yi.end(), p[static_cast<size_t>(i)][0]) ? 1 : 0;
  }
  CHECK(one.p[0] == Approx(hits1 / n).epsilon(1e-12));
  for (int j = 0; j < k; ++j) {
    CHECK(one.ndcg[static_cast<size_t>(j)] >= 0);
    CHECK(one.ndcg[static_cast<size_t>(j)] <= 1);
    CHECK(one.psp[static_cast<size_t>(j)] <= 1 + 1e-12);
  }
}
