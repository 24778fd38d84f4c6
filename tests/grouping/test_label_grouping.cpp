// Label grouping (lib/grouping): the head/tail split, the three groupings' invariants
// (a partition into groups of G, the last one partial), spherical k-means on separated
// clusters, semantic groups recovering planted clusters, cohesion, determinism.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "grouping/label_grouping.h"
#include "grouping/spherical_kmeans.h"

using namespace xmc;

namespace {

// `clusters` planted directions in D dims; `per` unit rows around each (noise `noise`),
// rows interleaved (row i belongs to cluster i % clusters) so that the input order says
// nothing about the clusters.
DenseMatrix planted(int64_t clusters, int64_t per, int64_t d, double noise, uint64_t seed) {
  Rng rng(seed);
  DenseMatrix dirs(clusters, d);
  for (auto& v : dirs.values) v = static_cast<float>(rng.normal());
  DenseMatrix x(clusters * per, d);
  for (int64_t i = 0; i < x.rows; ++i) {
    const int64_t c = i % clusters;
    double norm = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      const double v = dirs.values[static_cast<size_t>(c * d + j)] + noise * rng.normal();
      x.values[static_cast<size_t>(i * d + j)] = static_cast<float>(v);
      norm += v * v;
    }
    for (int64_t j = 0; j < d; ++j) x.values[static_cast<size_t>(i * d + j)] /= static_cast<float>(std::sqrt(norm));
  }
  return x;
}

void check_permutation(const std::vector<int64_t>& p, int64_t n) {
  REQUIRE(static_cast<int64_t>(p.size()) == n);
  std::vector<int64_t> s = p;
  std::sort(s.begin(), s.end());
  for (int64_t i = 0; i < n; ++i) REQUIRE(s[static_cast<size_t>(i)] == i);
}

}  // namespace

TEST_CASE("frequency order, head size and inverse order") {
  const std::vector<int64_t> freq = {3, 9, 0, 9, 5, 1};
  const auto order = frequency_order(freq);
  CHECK(order == std::vector<uint32_t>{1, 3, 4, 0, 5, 2});  // ties keep the lower id first
  const auto pos = inverse_order(order);
  for (size_t i = 0; i < order.size(); ++i) CHECK(pos[order[i]] == i);
  // head_fraction·L rounded to a multiple of G, at most L.
  CHECK(head_label_count(1000, 0.05, 16) == 48);   // 50 → 3.125 groups → 3
  CHECK(head_label_count(1000, 0.056, 16) == 64);  // 56 → 3.5 groups → 4
  CHECK(head_label_count(1000, 0.0, 16) == 0);
  CHECK(head_label_count(37, 1.0, 8) == 37);       // capped at L
  CHECK(head_label_count(37, 0.1, 8) == 0);        // 3.7 labels → 0.46 groups → 0
  CHECK_THROWS_AS(parse_enum<GroupingType>("kmeans", "grouping"), InputError);
  CHECK(parse_enum<GroupingType>("semantic", "grouping") == GroupingType::semantic);
}

TEST_CASE("spherical k-means recovers well separated clusters") {
  const int64_t clusters = 6, per = 40;
  DenseMatrix x = planted(clusters, per, 16, 0.05, 1);
  const KMeansResult r = spherical_kmeans(x.view(), clusters, 20, 3);
  REQUIRE(r.assign.size() == static_cast<size_t>(clusters * per));
  // Every planted cluster maps to one k-means cluster and the map is one-to-one (a bad
  // initialisation could merge two clusters; the seed is fixed, so this is deterministic).
  std::set<int32_t> seen;
  for (int64_t c = 0; c < clusters; ++c) {
    const int32_t a = r.assign[static_cast<size_t>(c)];
    for (int64_t i = c; i < x.rows; i += clusters) CHECK(r.assign[static_cast<size_t>(i)] == a);
    seen.insert(a);
  }
  CHECK(seen.size() == static_cast<size_t>(clusters));
  for (int64_t c = 0; c < r.centres.rows; ++c) {
    double norm = 0.0;
    for (int64_t j = 0; j < 16; ++j) norm += std::pow(r.centres.values[static_cast<size_t>(c * 16 + j)], 2);
    CHECK(norm == Approx(1.0).epsilon(1e-5));
  }
  // Same seed, same result; k > n is clamped.
  CHECK(spherical_kmeans(x.view(), clusters, 20, 3).assign == r.assign);
  CHECK(spherical_kmeans(x.view().rows_range(0, 3), 10, 5, 1).centres.rows == 3);
  // Two levels: every id used, every row assigned.
  const auto two = two_level_spherical_kmeans(x.view(), 100, 5, 2);
  std::set<int32_t> ids(two.begin(), two.end());
  CHECK(static_cast<int64_t>(ids.size()) == *ids.rbegin() + 1);
  CHECK(ids.size() > 50);
}

TEST_CASE("semantic arrangement is a partition into groups of G that recovers planted clusters") {
  // 12 clusters of exactly G = 8 near-identical labels: a good arrangement puts each
  // cluster into one group, cohesion close to 1, far above random groups.
  const int64_t g = 8, clusters = 12;
  DenseMatrix x = planted(clusters, g, 24, 0.02, 5);
  SemanticGroupingParams p;
  p.group = g;
  p.beta = 2.0;
  p.seed = 9;
  const auto arr = semantic_arrangement(x.view(), p);
  check_permutation(arr, x.rows);
  int64_t pure = 0;
  for (int64_t k = 0; k < clusters; ++k) {
    std::set<int64_t> c;
    for (int64_t i = 0; i < g; ++i) c.insert(arr[static_cast<size_t>(k * g + i)] % clusters);
    pure += c.size() == 1;
  }
  INFO("groups equal to one planted cluster: " << pure);
  CHECK(pure >= clusters - 2);  // a bucket boundary may split at most a couple of them
  const double coh = group_cohesion(x.view(), arr, g);
  std::vector<int64_t> ident(static_cast<size_t>(x.rows));
  std::iota(ident.begin(), ident.end(), int64_t{0});  // interleaved rows: mixed groups
  const double coh_mixed = group_cohesion(x.view(), ident, g);
  INFO("cohesion " << coh << " vs " << coh_mixed);
  CHECK(coh > 0.95);
  CHECK(coh > coh_mixed + 0.3);
  CHECK(semantic_arrangement(x.view(), p) == arr);  // deterministic

  // Odd sizes: 101 rows, G = 8 — still a permutation; only the last group is partial by
  // construction (groups are consecutive runs), and a different seed changes the result.
  DenseMatrix y = planted(7, 15, 10, 0.3, 2);
  DenseMatrix y101(101, 10);
  std::copy(y.values.begin(), y.values.begin() + 101 * 10, y101.values.begin());
  const auto a1 = semantic_arrangement(y101.view(), p);
  check_permutation(a1, 101);
  p.seed = 10;
  CHECK(semantic_arrangement(y101.view(), p) != a1);
  // G larger than every bucket: still a partition.
  p.group = 64;
  check_permutation(semantic_arrangement(y101.view(), p), 101);
}

TEST_CASE("label centroids are normalised means of the labels' points") {
  // 3 points in 2-D; labels: p0 {0, 2}, p1 {2}, p2 {1}; label 3 has no point.
  const std::vector<float> xv = {1, 0, 0, 2, 3, 4};
  ConstMatrix x(xv.data(), 3, 2);
  CsrMatrix y;
  y.rows = 3;
  y.cols = 4;
  y.indptr = {0, 2, 3, 4};
  y.indices = {0, 2, 2, 1};
  const std::vector<uint32_t> labels = {2, 1, 3, 0};
  const DenseMatrix c = label_centroids(x, y, labels);
  REQUIRE(c.rows == 4);
  // label 2: (1,0) + (0,2) = (1,2)/sqrt(5); label 1: (3,4)/5; label 3: 0; label 0: (1,0).
  CHECK(c.values[0] == Approx(1 / std::sqrt(5.0)));
  CHECK(c.values[1] == Approx(2 / std::sqrt(5.0)));
  CHECK(c.values[2] == Approx(0.6));
  CHECK(c.values[3] == Approx(0.8));
  CHECK(c.values[4] == 0.0f);
  CHECK(c.values[5] == 0.0f);
  CHECK(c.values[6] == Approx(1.0));
  CHECK(c.values[7] == 0.0f);
  // Cohesion: identical rows → 1; a zero row counts 0.
  std::vector<int64_t> arr = {3, 0, 1, 2};
  const double coh = group_cohesion(c.view(), arr, 4);
  CHECK(coh > 0.0);
  CHECK(coh < 1.0);
}
