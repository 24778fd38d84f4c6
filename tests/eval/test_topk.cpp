#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/gpu.h"
#include "core/rng.h"
#include "ops/topk.h"

using namespace xmc;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Reference: full sort of one row by (score desc, label asc), best k, padded.
std::vector<uint32_t> naive_topk(const float* s, int64_t n, int k) {
  std::vector<uint32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0u);
  std::stable_sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) { return s[a] > s[b]; });
  idx.resize(static_cast<size_t>(std::min<int64_t>(n, k)));
  idx.resize(static_cast<size_t>(k), TopK::kNoLabel);
  return idx;
}

}  // namespace

TEST_CASE("topk breaks score ties towards the lower label id") {
  // Scores of labels 0..4: 0.5 0.7 0.5 0.7 0.1. Best 3: the two 0.7s (1 before 3), then
  // the first 0.5 by id (0, not 2).
  std::vector<float> s = {0.5f, 0.7f, 0.5f, 0.7f, 0.1f};
  TopKAccumulator acc(1, 3);
  acc.add_chunk(ConstMatrix(s.data(), 1, 5), 0);
  TopK t = acc.result();
  CHECK(t.rows == 1);
  CHECK(t.k == 3);
  CHECK(t.labels == std::vector<uint32_t>{1, 3, 0});
  CHECK(t.scores == std::vector<float>{0.7f, 0.7f, 0.5f});

  // The same candidates fed in reverse order give the same answer.
  TopKAccumulator rev(1, 3);
  for (int l = 4; l >= 0; --l) rev.add(0, static_cast<uint32_t>(l), s[static_cast<size_t>(l)]);
  CHECK(rev.result().labels == t.labels);
}

TEST_CASE("topk pads rows with fewer candidates than k") {
  // 2 labels, k = 4: two real entries, then (kNoLabel, -inf) twice.
  std::vector<float> s = {1.0f, 3.0f, -2.0f, -1.0f};
  TopKAccumulator acc(2, 4);
  acc.add_chunk(ConstMatrix(s.data(), 2, 2), 0);
  TopK t = acc.result();
  CHECK(t.labels == std::vector<uint32_t>{1, 0, TopK::kNoLabel, TopK::kNoLabel,  //
                                          1, 0, TopK::kNoLabel, TopK::kNoLabel});
  CHECK(t.scores == std::vector<float>{3.0f, 1.0f, kNegInf, kNegInf,  //
                                       -1.0f, -2.0f, kNegInf, kNegInf});
}

TEST_CASE("topk ranks NaN scores last and -inf scores above padding") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> s = {nan, kNegInf, 0.0f};
  TopKAccumulator acc(1, 4);
  acc.add_chunk(ConstMatrix(s.data(), 1, 3), 10);  // labels 10, 11, 12
  TopK t = acc.result();
  // 12 (0.0) first; 10 (NaN, ranked as -inf) and 11 (-inf) tie -> lower id first.
  CHECK(t.labels == std::vector<uint32_t>{12, 10, 11, TopK::kNoLabel});
  CHECK(std::isnan(t.scores[1]));
}

TEST_CASE("topk over label chunks equals topk over the whole matrix") {
  const int64_t rows = 37, labels = 1000;
  Rng rng(123);
  std::vector<float> s(static_cast<size_t>(rows * labels));
  // Scores on a coarse grid (64 values) so that many ties cross chunk boundaries.
  for (auto& v : s) v = static_cast<float>(rng.below(64)) / 8.0f;
  ConstMatrix all(s.data(), rows, labels);
  for (int k : {1, 5, 17}) {
    TopKAccumulator whole(rows, k);
    whole.add_chunk(all, 0);
    TopK ref = whole.result();
    for (int64_t r = 0; r < rows; ++r) {
      auto expect = naive_topk(s.data() + r * labels, labels, k);
      REQUIRE(std::equal(expect.begin(), expect.end(), ref.row_labels(r)));
    }
    for (int64_t chunk : {1, 7, 64, 333, 999}) {
      TopKAccumulator acc(rows, k);
      for (int64_t lo = 0; lo < labels; lo += chunk) {
        int64_t c = std::min(chunk, labels - lo);
        // A column slice of the full matrix: ld stays `labels`.
        acc.add_chunk(ConstMatrix(s.data() + lo, rows, c, labels), lo);
      }
      TopK t = acc.result();
      INFO("k = " << k << ", chunk = " << chunk);
      CHECK(t.labels == ref.labels);
      CHECK(t.scores == ref.scores);
    }
  }
}

TEST_CASE("topk rejects k < 1 and chunks with the wrong row count") {
  CHECK_THROWS_AS(TopKAccumulator(3, 0), InputError);
  TopKAccumulator acc(3, 2);
  std::vector<float> s(4);
  CHECK_THROWS_AS(acc.add_chunk(ConstMatrix(s.data(), 2, 2), 0), Error);
}

TEST_CASE("merge_topk of two label shards equals topk over all labels") {
  const int64_t rows = 20, labels = 300;
  Rng rng(7);
  std::vector<float> s(static_cast<size_t>(rows * labels));
  for (auto& v : s) v = static_cast<float>(rng.below(32));
  const int64_t split = 130;
  const int k = 8;
  TopKAccumulator whole(rows, k), left(rows, k), right(rows, k);
  whole.add_chunk(ConstMatrix(s.data(), rows, labels), 0);
  left.add_chunk(ConstMatrix(s.data(), rows, split, labels), 0);
  right.add_chunk(ConstMatrix(s.data() + split, rows, labels - split, labels), split);
  TopK m = merge_topk(left.result(), right.result());
  TopK ref = whole.result();
  CHECK(m.k == k);
  CHECK(m.labels == ref.labels);
  CHECK(m.scores == ref.scores);
  // Either order of the arguments.
  CHECK(merge_topk(right.result(), left.result()).labels == ref.labels);
}

TEST_CASE("merge_topk keeps a label present in both lists once and pads") {
  // a: [5:0.9, 2:0.4, pad], b: [2:0.8, 7:0.1]. Union best-first: 5 (0.9), 2 (0.8), 2 (0.4,
  // dropped: already kept), 7 (0.1). k = max(3, 2) = 3.
  TopK a{1, 3, {5, 2, TopK::kNoLabel}, {0.9f, 0.4f, kNegInf}};
  TopK b{1, 2, {2, 7}, {0.8f, 0.1f}};
  TopK m = merge_topk(a, b);
  CHECK(m.k == 3);
  CHECK(m.labels == std::vector<uint32_t>{5, 2, 7});
  CHECK(m.scores == std::vector<float>{0.9f, 0.8f, 0.1f});
  // Only two distinct labels in total -> the third slot is padding.
  TopK c{1, 3, {4, TopK::kNoLabel, TopK::kNoLabel}, {1.0f, kNegInf, kNegInf}};
  TopK d{1, 3, {4, TopK::kNoLabel, TopK::kNoLabel}, {1.0f, kNegInf, kNegInf}};
  TopK m2 = merge_topk(c, d);
  CHECK(m2.labels == std::vector<uint32_t>{4, TopK::kNoLabel, TopK::kNoLabel});
  CHECK_THROWS_AS(merge_topk(a, TopK{2, 2, std::vector<uint32_t>(4), std::vector<float>(4)}),
                  Error);
}

TEST_CASE("topk_from_csr sorts label:score rows and handles empty rows") {
  // Row 0: 3:0.2 1:0.9 4:0.5 7:0.9 (unsorted; 1 and 7 tie -> 1 first); row 1: empty;
  // row 2: 6:-1.0.
  CsrMatrix p;
  p.rows = 3;
  p.cols = 8;
  p.indptr = {0, 4, 4, 5};
  p.indices = {3, 1, 4, 7, 6};
  p.values = {0.2f, 0.9f, 0.5f, 0.9f, -1.0f};
  TopK t = topk_from_csr(p, 3);
  CHECK(t.labels == std::vector<uint32_t>{1, 7, 4,  //
                                          TopK::kNoLabel, TopK::kNoLabel, TopK::kNoLabel, 6,
                                          TopK::kNoLabel, TopK::kNoLabel});
  CHECK(t.scores[0] == 0.9f);
  CHECK(t.scores[2] == 0.5f);
  CHECK(t.scores[6] == -1.0f);

  // Pattern only: every entry scores 1, so the lowest ids win.
  CsrMatrix q;
  q.rows = 1;
  q.cols = 10;
  q.indptr = {0, 4};
  q.indices = {9, 2, 5, 0};
  TopK u = topk_from_csr(q, 2);
  CHECK(u.labels == std::vector<uint32_t>{0, 2});
  CHECK(u.scores == std::vector<float>{1.0f, 1.0f});
}

// --- the order and merge shared with the GPU top-k (ops/topk.h) ---------------------

TEST_CASE("ranks_before: score desc, label asc, NaN as -inf, pads last") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(ranks_before(2.0f, 9, 1.0f, 0));
  CHECK(ranks_before(1.0f, 3, 1.0f, 4));
  CHECK_FALSE(ranks_before(1.0f, 4, 1.0f, 4));
  CHECK(ranks_before(kNegInf, 5, nan, 6));  // NaN ranks as -inf: the label decides
  CHECK(ranks_before(nan, 5, kNegInf, 6));
  CHECK(ranks_before(-1e30f, 7, nan, 0));
  CHECK(ranks_before(nan, 3, kNegInf, TopK::kNoLabel));  // every real candidate before a pad
}

TEST_CASE("merged positions of two sorted top-k lists equal a sequential merge") {
  Rng rng(5);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int k : {1, 2, 5, 64, 100, 257}) {
    for (int trial = 0; trial < 20; ++trial) {
      // Two lists over disjoint labels (two chunks), sorted, with ties, NaN, -inf and pads.
      auto make = [&](uint32_t label_base) {
        std::vector<std::pair<float, uint32_t>> v;
        const int real = static_cast<int>(rng.below(static_cast<uint64_t>(k) + 1));
        for (int i = 0; i < real; ++i) {
          float s = static_cast<float>(rng.below(8)) / 2.0f;
          if (rng.below(8) == 0) s = rng.below(2) ? nan : kNegInf;
          v.emplace_back(s, label_base + static_cast<uint32_t>(rng.below(1000)) * 2);
        }
        std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
          return ranks_before(a.first, a.second, b.first, b.second);
        });
        v.erase(std::unique(v.begin(), v.end(),
                            [](const auto& a, const auto& b) { return a.second == b.second; }),
                v.end());
        v.resize(static_cast<size_t>(k), {kNegInf, TopK::kNoLabel});
        return v;
      };
      const auto a = make(0), b = make(1);
      std::vector<float> as, bs;
      std::vector<uint32_t> al, bl;
      for (const auto& [s, l] : a) as.push_back(s), al.push_back(l);
      for (const auto& [s, l] : b) bs.push_back(s), bl.push_back(l);
      // Reference: the sequential two-pointer merge, ties to list a.
      std::vector<std::pair<float, uint32_t>> want;
      size_t i = 0, j = 0;
      while (want.size() < static_cast<size_t>(2 * k)) {
        const bool take_b =
            i == a.size() || (j < b.size() && ranks_before(bs[j], bl[j], as[i], al[i]));
        want.push_back(take_b ? b[j++] : a[i++]);
      }
      std::vector<int> hit(static_cast<size_t>(2 * k), 0);
      std::vector<std::pair<float, uint32_t>> got(static_cast<size_t>(2 * k));
      for (int t = 0; t < k; ++t) {
        const int pa = merged_position_a(t, as.data(), al.data(), bs.data(), bl.data(), k);
        const int pb = merged_position_b(t, as.data(), al.data(), bs.data(), bl.data(), k);
        ++hit[static_cast<size_t>(pa)];
        ++hit[static_cast<size_t>(pb)];
        got[static_cast<size_t>(pa)] = a[static_cast<size_t>(t)];
        got[static_cast<size_t>(pb)] = b[static_cast<size_t>(t)];
      }
      INFO("k=" << k << " trial=" << trial);
      CHECK(std::all_of(hit.begin(), hit.end(), [](int h) { return h == 1; }));
      for (size_t p = 0; p < got.size(); ++p) {
        CHECK(got[p].second == want[p].second);
        CHECK((got[p].first == want[p].first ||
               (std::isnan(got[p].first) && std::isnan(want[p].first))));
      }
    }
  }
}

TEST_CASE("the GPU top-k's k is checked in every build: 1..kMaxTopK, else InputError") {
  CHECK_NOTHROW(gpu::check_topk_k(1));
  CHECK_NOTHROW(gpu::check_topk_k(100));
  CHECK_NOTHROW(gpu::check_topk_k(gpu::kMaxTopK));
  CHECK_THROWS_AS(gpu::check_topk_k(0), InputError);
  CHECK_THROWS_AS(gpu::check_topk_k(gpu::kMaxTopK + 1), InputError);
  // The message names the bound, the value and where k comes from.
  CHECK_THROWS_WITH(gpu::check_topk_k(5000),
                    Catch::Contains("k <= 4096") && Catch::Contains("got 5000") &&
                        Catch::Contains("eval.k"));
}
