// HnswIndex: recall@10 against brute-force inner product on normalised random data at the
// default parameters, ordering and padding of results, and the ledger record.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/rng.h"
#include "sampling/hnsw_index.h"

using namespace xmc;

namespace {

DenseMatrix random_unit_rows(int64_t n, int64_t d, uint64_t seed) {
  DenseMatrix m(n, d);
  Rng rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    double norm = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      const double x = rng.normal();
      m.values[static_cast<size_t>(i * d + j)] = static_cast<float>(x);
      norm += x * x;
    }
    for (int64_t j = 0; j < d; ++j)
      m.values[static_cast<size_t>(i * d + j)] /= static_cast<float>(std::sqrt(norm));
  }
  return m;
}

// Exact top-k row ids of each query by inner product (ties: lower id).
std::vector<uint32_t> brute_force(const DenseMatrix& base, const DenseMatrix& q, int k) {
  std::vector<uint32_t> out(static_cast<size_t>(q.rows * k));
  std::vector<std::pair<float, uint32_t>> s(static_cast<size_t>(base.rows));
  for (int64_t i = 0; i < q.rows; ++i) {
    for (int64_t r = 0; r < base.rows; ++r) {
      float dot = 0.0f;
      for (int64_t j = 0; j < base.cols; ++j)
        dot += base.values[static_cast<size_t>(r * base.cols + j)] *
               q.values[static_cast<size_t>(i * q.cols + j)];
      s[static_cast<size_t>(r)] = {-dot, static_cast<uint32_t>(r)};
    }
    std::partial_sort(s.begin(), s.begin() + k, s.end());
    for (int j = 0; j < k; ++j) out[static_cast<size_t>(i * k + j)] = s[static_cast<size_t>(j)].second;
  }
  return out;
}

}  // namespace

TEST_CASE("hnsw recall@10 against brute force is at least 0.9 at the default parameters") {
  const int64_t n = 5000, d = 32, nq = 300;
  const int k = 10;
  DenseMatrix base = random_unit_rows(n, d, 1);
  DenseMatrix q = random_unit_rows(nq, d, 2);
  MemoryLedger ledger;
  HnswIndex index(base.view(), HnswParams{}, 7, &ledger);
  CHECK(index.size() == n);
  CHECK(index.dim() == d);
  CHECK(index.bytes() > n * d * 4);  // holds at least its copy of the vectors
  CHECK(ledger.current(MemTag::index) == index.bytes());

  std::vector<uint32_t> labels(static_cast<size_t>(nq * k));
  std::vector<float> scores(static_cast<size_t>(nq * k));
  index.search(q.view(), k, labels.data(), scores.data());
  const auto exact = brute_force(base, q, k);
  int64_t hits = 0;
  for (int64_t i = 0; i < nq; ++i) {
    const auto* a = labels.data() + i * k;
    const auto* e = exact.data() + i * k;
    for (int j = 0; j < k; ++j) hits += std::count(a, a + k, e[j]);
    // Best first, and the score is the inner product of that row.
    for (int j = 0; j + 1 < k; ++j) CHECK(scores[static_cast<size_t>(i * k + j)] >= scores[static_cast<size_t>(i * k + j + 1)]);
    float dot = 0.0f;
    for (int64_t t = 0; t < d; ++t)
      dot += base.values[static_cast<size_t>(a[0] * d + t)] * q.values[static_cast<size_t>(i * d + t)];
    CHECK(scores[static_cast<size_t>(i * k)] == Approx(dot).margin(1e-5));
  }
  const double recall = static_cast<double>(hits) / static_cast<double>(nq * k);
  INFO("recall@10 " << recall);
  CHECK(recall >= 0.9);
}

TEST_CASE("hnsw on a tiny index is exact and pads when k exceeds the size") {
  DenseMatrix base = random_unit_rows(6, 4, 3);
  DenseMatrix q = random_unit_rows(5, 4, 4);
  HnswIndex index(base.view(), HnswParams{}, 1);
  const int k = 8;
  std::vector<uint32_t> labels(static_cast<size_t>(q.rows * k));
  std::vector<float> scores(static_cast<size_t>(q.rows * k));
  index.search(q.view(), k, labels.data(), scores.data());
  const auto exact = brute_force(base, q, 6);
  for (int64_t i = 0; i < q.rows; ++i) {
    for (int j = 0; j < 6; ++j)
      CHECK(labels[static_cast<size_t>(i * k + j)] == exact[static_cast<size_t>(i * 6 + j)]);
    for (int j = 6; j < k; ++j) {
      CHECK(labels[static_cast<size_t>(i * k + j)] == std::numeric_limits<uint32_t>::max());
      CHECK(scores[static_cast<size_t>(i * k + j)] == -std::numeric_limits<float>::infinity());
    }
  }
}

TEST_CASE("hnsw rejects mismatched queries and bad parameters") {
  DenseMatrix base = random_unit_rows(10, 4, 3);
  HnswIndex index(base.view(), HnswParams{}, 1);
  DenseMatrix q = random_unit_rows(2, 5, 4);
  std::vector<uint32_t> labels(20);
  CHECK_THROWS_WITH(index.search(q.view(), 3, labels.data(), nullptr),
                    Catch::Contains("5 columns") && Catch::Contains("index has 4"));
  CHECK_THROWS_WITH(HnswIndex(base.view(), HnswParams{1, 200, 64}, 1), Catch::Contains("m=1"));
}

TEST_CASE("hnsw deterministic build gives the same results every time") {
  DenseMatrix base = random_unit_rows(2000, 16, 5);
  DenseMatrix q = random_unit_rows(100, 16, 6);
  HnswParams p;
  p.deterministic = true;
  p.ef = 10;  // low effort: differences between graphs would show in the results
  const int k = 10;
  std::vector<uint32_t> a(static_cast<size_t>(q.rows * k)), b(a.size());
  HnswIndex(base.view(), p, 9).search(q.view(), k, a.data(), nullptr);
  HnswIndex(base.view(), p, 9).search(q.view(), k, b.data(), nullptr);
  CHECK(a == b);
}
