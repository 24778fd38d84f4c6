// LSH families and tables (lib/sampling/lsh.h) and the candidate sampler
// (lib/sampling/lsh_candidates.h): collision probability against similarity, bucket
// policies, parallel vs serial builds, re-insertion, candidate-set invariants.
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>
#include <vector>

#include "core/memory_ledger.h"
#include "core/rng.h"
#include "sampling/lsh.h"
#include "sampling/lsh_candidates.h"

using namespace xmc;

namespace {

std::vector<float> random_vec(Rng& rng, int64_t d) {
  std::vector<float> v(static_cast<size_t>(d));
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// y = cos(θ)·x̂ + sin(θ)·u, u a unit vector orthogonal to x̂: angle θ to x.
std::vector<float> at_angle(const std::vector<float>& x, double theta, Rng& rng) {
  const auto d = static_cast<int64_t>(x.size());
  double nx = 0;
  for (float v : x) nx += double{v} * v;
  nx = std::sqrt(nx);
  auto u = random_vec(rng, d);
  double proj = 0;
  for (int64_t j = 0; j < d; ++j) proj += u[j] * x[j] / nx;
  double nu = 0;
  for (int64_t j = 0; j < d; ++j) {
    u[j] = static_cast<float>(u[j] - proj * x[j] / nx);
    nu += double{u[j]} * u[j];
  }
  nu = std::sqrt(nu);
  std::vector<float> y(static_cast<size_t>(d));
  for (int64_t j = 0; j < d; ++j)
    y[j] = static_cast<float>(std::cos(theta) * x[j] / nx + std::sin(theta) * u[j] / nu);
  return y;
}

// Fraction of (pairs × tables) where x and its rotated copy land in the same bucket.
double collision_rate(const LshParams& p, int64_t d, double theta, int pairs) {
  LshHasher hasher(d, p);
  Rng rng(99);
  std::vector<uint32_t> a(static_cast<size_t>(p.tables)), b(a.size());
  int64_t same = 0;
  for (int q = 0; q < pairs; ++q) {
    auto x = random_vec(rng, d);
    auto y = at_angle(x, theta, rng);
    hasher.hash(x.data(), a.data());
    hasher.hash(y.data(), b.data());
    for (int t = 0; t < p.tables; ++t) same += a[t] == b[t];
  }
  return static_cast<double>(same) / (static_cast<double>(pairs) * p.tables);
}

// Table contents as (table, bucket) -> sorted labels.
std::vector<std::vector<uint32_t>> contents(const LshTables& t, bool sorted) {
  std::vector<std::vector<uint32_t>> out;
  for (int tb = 0; tb < t.tables(); ++tb)
    for (int64_t b = 0; b < t.buckets_per_table(); ++b) {
      auto s = t.bucket(tb, static_cast<uint32_t>(b));
      std::vector<uint32_t> v(s.begin(), s.end());
      if (sorted) std::sort(v.begin(), v.end());
      out.push_back(v);
    }
  return out;
}

std::vector<float> random_matrix(int64_t n, int64_t d, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> w(static_cast<size_t>(n * d));
  for (auto& x : w) x = static_cast<float>(rng.normal());
  return w;
}

CsrMatrix labels_csr(int64_t num_labels, const std::vector<std::vector<uint32_t>>& rows) {
  return CsrMatrix::from_rows(rows, num_labels);
}

}  // namespace

TEST_CASE("simhash collision probability falls with the angle as (1 - θ/π)^K") {
  for (bool sparse : {false, true}) {
    DYNAMIC_SECTION((sparse ? "sparse ±1" : "dense Gaussian") << " projections") {
      LshParams p;
      p.family = LshFamily::simhash;
      p.k = 4;
      p.tables = 64;
      p.sparse_projection = sparse;
      p.seed = 5;
      const int64_t d = 48;
      double prev = 1.1;
      for (double theta : {0.1, 0.4, 0.8, 1.2, 1.6}) {
        const double rate = collision_rate(p, d, theta, 300);
        const double expect = std::pow(1.0 - theta / std::numbers::pi, p.k);
        INFO("theta " << theta << " rate " << rate << " expected " << expect);
        CHECK(rate < prev);  // strictly more collisions for more similar vectors
        // Dense Gaussian projections follow the formula closely; sparse ±1 approximately.
        CHECK(std::abs(rate - expect) < (sparse ? 0.08 : 0.04));
        prev = rate;
      }
    }
  }
}

TEST_CASE("dwta collision probability falls with the angle and every bucket is reachable") {
  LshParams p;
  p.family = LshFamily::dwta;
  p.k = 2;
  p.bin = 4;  // 2 bits per code: 16 buckets
  p.tables = 64;
  p.seed = 8;
  const int64_t d = 32;
  LshHasher hasher(d, p);
  CHECK(hasher.bits() == 4);
  double prev = 1.1;
  for (double theta : {0.1, 0.5, 1.0, 1.5}) {
    const double rate = collision_rate(p, d, theta, 300);
    INFO("theta " << theta << " rate " << rate);
    CHECK(rate < prev);
    prev = rate;
  }
  CHECK(prev > 0.0);
  // All 16 buckets of table 0 are hit by random vectors; codes stay below 2^bits.
  Rng rng(3);
  std::set<uint32_t> seen;
  std::vector<uint32_t> codes(static_cast<size_t>(p.tables));
  for (int q = 0; q < 2000; ++q) {
    auto x = random_vec(rng, d);
    hasher.hash(x.data(), codes.data());
    for (uint32_t c : codes) REQUIRE(c < 16u);
    seen.insert(codes[0]);
  }
  CHECK(seen.size() == 16);
  // bin of 5 -> 3 bits per code.
  p.bin = 5;
  CHECK(LshHasher(d, p).bits() == 6);
}

TEST_CASE("dwta densification: empty bins borrow codes, an all-zero vector still hashes") {
  LshParams p;
  p.family = LshFamily::dwta;
  p.k = 8;
  p.bin = 2;
  p.tables = 16;
  p.seed = 2;
  const int64_t d = 400;
  LshHasher hasher(d, p);
  // A very sparse vector: most bins see only zeros and must borrow from a non-empty one.
  std::vector<float> x(static_cast<size_t>(d), 0.0f), y = x;
  for (int64_t j = 0; j < d; j += 40) x[j] = y[j] = 1.0f + static_cast<float>(j);
  y[0] += 0.5f;  // nearly the same vector
  std::vector<uint32_t> a(16), b(16), z(16);
  hasher.hash(x.data(), a.data());
  hasher.hash(y.data(), b.data());
  int same = 0;
  for (int t = 0; t < 16; ++t) same += a[t] == b[t];
  CHECK(same >= 12);
  std::vector<float> zero(static_cast<size_t>(d), 0.0f);
  hasher.hash(zero.data(), z.data());
  for (uint32_t c : z) CHECK(c == 0u);
}

TEST_CASE("bad LSH parameters are input errors with the values") {
  LshParams p;
  p.k = 30;
  CHECK_THROWS_WITH(LshHasher(8, p), Catch::Contains("30") && Catch::Contains("24 bits"));
  p.k = 4;
  p.family = LshFamily::dwta;
  p.bin = 1;
  CHECK_THROWS_WITH(LshHasher(8, p), Catch::Contains("bin must be >= 2; got 1"));
  CHECK_THROWS_WITH(parse_enum<LshFamily>("minhash", "LSH family"), Catch::Contains("'minhash'"));
}

TEST_CASE("a built table holds every label in its own bucket of every table") {
  MemoryLedger ledger;
  const int64_t n = 500, d = 16;
  auto w = random_matrix(n, d, 1);
  LshParams p;
  p.k = 5;
  p.tables = 6;
  p.capacity = static_cast<int>(n);  // nothing overflows
  LshTables tables(ledger, d, n, p);
  tables.build(ConstMatrix(w.data(), n, d));
  CHECK(ledger.current(MemTag::index) == tables.bytes());
  std::vector<uint32_t> codes(6);
  for (int64_t l = 0; l < n; ++l) {
    tables.hash(w.data() + l * d, codes.data());
    for (int t = 0; t < 6; ++t) {
      CHECK(tables.label_bucket(static_cast<uint32_t>(l), t) == codes[t]);
      auto b = tables.bucket(t, codes[t]);
      REQUIRE(std::count(b.begin(), b.end(), static_cast<uint32_t>(l)) == 1);
    }
  }
  for (int t = 0; t < 6; ++t) {
    int64_t total = 0;
    for (int64_t b = 0; b < tables.buckets_per_table(); ++b)
      total += static_cast<int64_t>(tables.bucket(t, static_cast<uint32_t>(b)).size());
    CHECK(total == n);
  }
}

TEST_CASE("full buckets: FIFO keeps the newest labels, reservoir a distinct sample") {
  MemoryLedger ledger;
  const int64_t n = 50, d = 4;
  // Identical vectors: every label goes to the same bucket in each table.
  std::vector<float> w(static_cast<size_t>(n * d), 1.0f);
  LshParams p;
  p.k = 2;
  p.tables = 3;
  p.capacity = 8;
  LshTables fifo(ledger, d, n, p);
  fifo.build(ConstMatrix(w.data(), n, d));
  std::vector<uint32_t> codes(3);
  fifo.hash(w.data(), codes.data());
  for (int t = 0; t < 3; ++t) {
    auto b = fifo.bucket(t, codes[t]);
    std::vector<uint32_t> expect;
    for (uint32_t l = 42; l < 50; ++l) expect.push_back(l);
    CHECK(std::vector<uint32_t>(b.begin(), b.end()) == expect);
  }
  p.policy = BucketPolicy::reservoir;
  LshTables res(ledger, d, n, p);
  res.build(ConstMatrix(w.data(), n, d));
  int64_t early = 0;
  for (int t = 0; t < 3; ++t) {
    auto b = res.bucket(t, codes[t]);
    REQUIRE(b.size() == 8);
    std::set<uint32_t> s(b.begin(), b.end());
    CHECK(s.size() == 8);
    for (uint32_t l : b) {
      CHECK(l < n);
      early += l < 42;  // FIFO would keep none of these
    }
  }
  CHECK(early > 0);
}

TEST_CASE("parallel table builds equal a serial build (FIFO and reservoir)") {
  const int64_t n = 3000, d = 24;
  auto w = random_matrix(n, d, 4);
  for (auto policy : {BucketPolicy::fifo, BucketPolicy::reservoir}) {
    for (auto family : {LshFamily::simhash, LshFamily::dwta}) {
      MemoryLedger ledger;
      LshParams p;
      p.family = family;
      p.k = family == LshFamily::dwta ? 2 : 6;
      p.bin = 8;
      p.tables = 8;
      p.capacity = 16;  // many buckets overflow
      p.policy = policy;
      const int saved = omp_get_max_threads();
      omp_set_num_threads(1);
      LshTables serial(ledger, d, n, p);
      serial.build(ConstMatrix(w.data(), n, d));
      omp_set_num_threads(4);
      LshTables parallel(ledger, d, n, p);
      parallel.build(ConstMatrix(w.data(), n, d));
      omp_set_num_threads(saved);
      CHECK(contents(serial, false) == contents(parallel, false));
    }
  }
}

TEST_CASE("re-inserting the updated labels gives the tables of a fresh build") {
  MemoryLedger ledger;
  const int64_t n = 800, d = 12;
  auto w = random_matrix(n, d, 6);
  LshParams p;
  p.k = 4;
  p.tables = 5;
  p.capacity = static_cast<int>(n);
  LshTables tables(ledger, d, n, p);
  tables.build(ConstMatrix(w.data(), n, d));
  // Move every third label to a new random vector.
  Rng rng(17);
  std::vector<uint32_t> moved;
  for (int64_t l = 0; l < n; l += 3) {
    for (int64_t j = 0; j < d; ++j) w[l * d + j] = static_cast<float>(rng.normal());
    moved.push_back(static_cast<uint32_t>(l));
  }
  tables.reinsert(moved, ConstMatrix(w.data(), n, d));
  LshTables fresh(ledger, d, n, p);
  fresh.build(ConstMatrix(w.data(), n, d));
  CHECK(contents(tables, true) == contents(fresh, true));
  // No label missing, none duplicated.
  for (int t = 0; t < p.tables; ++t) {
    std::vector<int> hits(static_cast<size_t>(n), 0);
    for (int64_t b = 0; b < tables.buckets_per_table(); ++b)
      for (uint32_t l : tables.bucket(t, static_cast<uint32_t>(b))) ++hits[l];
    CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
  }
}

TEST_CASE("candidate sets: positives first, distinct, within the size bounds") {
  MemoryLedger ledger;
  const int64_t n = 400, d = 16, batch = 6;
  auto w = random_matrix(n, d, 9);
  auto h = random_matrix(batch, d, 10);
  LshParams p;
  p.k = 3;  // few buckets: retrieval returns many labels, so the cap binds
  p.tables = 8;
  p.capacity = 64;
  LshTables tables(ledger, d, n, p);
  tables.build(ConstMatrix(w.data(), n, d));
  const CsrMatrix y = labels_csr(n, {{3}, {}, {5, 7, 9}, {399}, {0, 1}, {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}});
  for (auto query : {LshQuery::embedding, LshQuery::label, LshQuery::none}) {
    for (bool shared : {false, true}) {
      DYNAMIC_SECTION("query " << static_cast<int>(query) << " shared " << shared) {
        CandidateParams cp;
        cp.query = query;
        cp.max_candidates = 10;
        cp.min_candidates = 20;
        cp.shared = shared;
        cp.seed = 1;
        CandidateSampler sampler(n, cp);
        CsrMatrix c = sampler.sample(&tables, ConstMatrix(h.data(), batch, d),
                                     LabelVectors{ConstMatrix(w.data(), n, d), {}}, y, 5);
        REQUIRE(c.rows == (shared ? 1 : batch));
        for (int64_t r = 0; r < c.rows; ++r) {
          std::vector<uint32_t> row(c.row_indices(r), c.row_indices(r) + c.row_nnz(r));
          std::set<uint32_t> s(row.begin(), row.end());
          CHECK(s.size() == row.size());  // no duplicates
          for (uint32_t l : row) CHECK(l < n);
          std::vector<uint32_t> pos;
          for (int64_t i = 0; i < batch; ++i)
            if (shared || i == r)
              pos.insert(pos.end(), y.row_indices(i), y.row_indices(i) + y.row_nnz(i));
          std::set<uint32_t> ps(pos.begin(), pos.end());
          // Positives first, all of them, even beyond the cap.
          for (size_t q = 0; q < ps.size(); ++q) CHECK(ps.count(row[q]) == 1);
          const auto np = static_cast<int64_t>(ps.size());
          CHECK(static_cast<int64_t>(row.size()) >= 20);
          // Above min_candidates only when the positives alone exceed the cap.
          CHECK(static_cast<int64_t>(row.size()) <= std::max<int64_t>(20, np));
        }
        // Same result for a different thread count.
        const int saved = omp_get_max_threads();
        omp_set_num_threads(1);
        CandidateSampler one(n, cp);
        CsrMatrix c1 = one.sample(&tables, ConstMatrix(h.data(), batch, d),
                                  LabelVectors{ConstMatrix(w.data(), n, d), {}}, y, 5);
        omp_set_num_threads(saved);
        CHECK(c1.indices == c.indices);
        CHECK(c1.indptr == c.indptr);
      }
    }
  }
}

TEST_CASE("embedding queries retrieve the labels most similar to the point") {
  MemoryLedger ledger;
  const int64_t n = 2000, d = 32;
  auto w = random_matrix(n, d, 12);
  LshParams p;
  p.k = 8;
  p.tables = 16;
  p.capacity = 32;
  LshTables tables(ledger, d, n, p);
  tables.build(ConstMatrix(w.data(), n, d));
  CandidateParams cp;
  cp.max_candidates = 50;
  cp.min_candidates = 0;
  CandidateSampler sampler(n, cp);
  // Query with slightly perturbed copies of labels' own weight vectors: that label should
  // come back ranked first (it collides in nearly every table).
  Rng rng(4);
  int first = 0, found = 0;
  const int trials = 100;
  std::vector<uint32_t> got;
  for (int q = 0; q < trials; ++q) {
    const auto l = static_cast<uint32_t>(rng.below(n));
    std::vector<float> x(w.begin() + l * d, w.begin() + (l + 1) * d);
    for (auto& v : x) v += 0.05f * static_cast<float>(rng.normal());
    sampler.retrieve(tables, x.data(), 50, 0, got);
    CHECK(got.size() <= 50);
    found += std::find(got.begin(), got.end(), l) != got.end();
    first += !got.empty() && got[0] == l;
  }
  CHECK(found >= 95);
  CHECK(first >= 85);
}

TEST_CASE("re-inserting from the moved rows alone equals re-inserting from the full matrix") {
  // What a device-resident layer does: it downloads only the rows it re-inserts.
  MemoryLedger ledger;
  const int64_t n = 300, d = 11;
  auto w = random_matrix(n, d, 21);
  LshParams p;
  p.k = 4;
  p.tables = 6;
  p.capacity = 8;  // full buckets: FIFO order matters
  LshTables full(ledger, d, n, p), rows(ledger, d, n, p);
  full.build(ConstMatrix(w.data(), n, d));
  rows.build(ConstMatrix(w.data(), n, d));
  Rng rng(22);
  std::vector<uint32_t> moved;
  std::vector<float> moved_rows;
  for (int64_t l = 1; l < n; l += 4) {
    for (int64_t j = 0; j < d; ++j) w[l * d + j] = static_cast<float>(rng.normal());
    moved.push_back(static_cast<uint32_t>(l));
    moved_rows.insert(moved_rows.end(), w.begin() + l * d, w.begin() + (l + 1) * d);
  }
  full.reinsert(moved, ConstMatrix(w.data(), n, d));
  rows.reinsert_rows(moved, ConstMatrix(moved_rows.data(), static_cast<int64_t>(moved.size()), d));
  CHECK(contents(rows, false) == contents(full, false));
  for (uint32_t l = 0; l < n; ++l)
    for (int t = 0; t < p.tables; ++t) CHECK(rows.label_bucket(l, t) == full.label_bucket(l, t));
  // Shapes are checked: one row short, or the wrong width.
  CHECK_THROWS(rows.reinsert_rows(moved, ConstMatrix(moved_rows.data(),
                                                     static_cast<int64_t>(moved.size()) - 1, d)));
  CHECK_THROWS(rows.reinsert_rows(moved, ConstMatrix(moved_rows.data(), 1, d - 1)));
}

TEST_CASE("label queries from the positives' rows alone equal queries over the full matrix") {
  MemoryLedger ledger;
  const int64_t n = 400, d = 16, batch = 5;
  auto w = random_matrix(n, d, 31);
  auto h = random_matrix(batch, d, 32);
  LshParams p;
  p.k = 3;
  p.tables = 8;
  p.capacity = 32;
  LshTables tables(ledger, d, n, p);
  tables.build(ConstMatrix(w.data(), n, d));
  const CsrMatrix y = labels_csr(n, {{3, 17}, {}, {5, 7, 9}, {399}, {3, 250}});
  // The distinct positives, sorted, and their rows of w.
  std::vector<uint32_t> ids(y.indices.begin(), y.indices.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::vector<float> sub;
  for (uint32_t l : ids) sub.insert(sub.end(), w.begin() + l * d, w.begin() + (l + 1) * d);
  const LabelVectors lv{ConstMatrix(sub.data(), static_cast<int64_t>(ids.size()), d), ids};
  CHECK(lv.has(250));
  CHECK_FALSE(lv.has(251));
  CHECK(lv.row(399) == sub.data() + (ids.size() - 1) * d);
  for (bool shared : {false, true}) {
    DYNAMIC_SECTION("shared " << shared) {
      CandidateParams cp;
      cp.query = LshQuery::label;
      cp.max_candidates = 12;
      cp.min_candidates = 15;
      cp.shared = shared;
      cp.seed = 4;
      CandidateSampler sampler(n, cp);
      const CsrMatrix a = sampler.sample(&tables, ConstMatrix(h.data(), batch, d),
                                         LabelVectors{ConstMatrix(w.data(), n, d), {}}, y, 9);
      const CsrMatrix b = sampler.sample(&tables, ConstMatrix(h.data(), batch, d), lv, y, 9);
      CHECK(a.indptr == b.indptr);
      CHECK(a.indices == b.indices);
      // A positive without its vector is an error before any retrieval.
      const std::vector<uint32_t> fewer(ids.begin(), ids.end() - 1);
      const LabelVectors missing{
          ConstMatrix(sub.data(), static_cast<int64_t>(fewer.size()), d), fewer};
      CHECK_THROWS_WITH(sampler.sample(&tables, ConstMatrix(h.data(), batch, d), missing, y, 9),
                        Catch::Matchers::Contains("399"));
    }
  }
}
