// The prune-and-regrow module shared by fixed_fanin and group_shared (layers/fanin_block.h).
#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <vector>

#include "core/rng.h"
#include "layers/fanin_block.h"

using namespace xmc;

TEST_CASE("lowest_slots: the k lowest scores, ties to the lower slot, |x| with abs") {
  Rng rng(3);
  for (bool abs : {false, true}) {
    for (int64_t n : {1, 7, 300}) {
      std::vector<float> s(static_cast<size_t>(n));
      // Few distinct values: many ties.
      for (auto& x : s) {
        x = static_cast<float>(rng.below(5)) * 0.25f;
        if (abs && rng.below(2) == 0) x = -x;
      }
      for (int64_t k : {int64_t{1}, n / 2 + 1, n}) {
        INFO("abs " << abs << " n " << n << " k " << k);
        std::vector<int64_t> order(static_cast<size_t>(n));
        std::iota(order.begin(), order.end(), int64_t{0});
        auto val = [&](int64_t i) { return abs ? std::abs(s[static_cast<size_t>(i)]) : s[static_cast<size_t>(i)]; };
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return val(a) < val(b); });
        std::vector<char> want(static_cast<size_t>(n), 0);
        for (int64_t i = 0; i < k; ++i) want[static_cast<size_t>(order[static_cast<size_t>(i)])] = 1;
        CHECK(lowest_slots(s.data(), n, k, abs) == want);
      }
    }
  }
  std::vector<float> one{1.0f};
  CHECK_THROWS(lowest_slots(one.data(), 1, 2));
}

TEST_CASE("regrow_sets: only marked slots change, to inputs the set did not use") {
  const int64_t sets = 4, f = 3, m = 10;
  std::vector<uint32_t> idx = {0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 5, 9};
  const std::vector<uint32_t> before = idx;
  std::vector<char> prune = {1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0};
  std::vector<std::pair<int64_t, int64_t>> reset;
  const int64_t n = regrow_sets(idx.data(), sets, f, m, prune, 42, [&](int64_t q, int64_t j) {
#pragma omp critical
    reset.emplace_back(q, j);
  });
  CHECK(n == 3);
  std::sort(reset.begin(), reset.end());
  CHECK(reset == std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {2, 1}, {2, 2}});
  for (int64_t q = 0; q < sets; ++q) {
    std::vector<uint32_t> set(idx.begin() + q * f, idx.begin() + (q + 1) * f);
    std::sort(set.begin(), set.end());
    CHECK(std::adjacent_find(set.begin(), set.end()) == set.end());  // no duplicates
    for (int64_t j = 0; j < f; ++j) {
      const auto e = static_cast<size_t>(q * f + j);
      if (prune[e]) {
        CHECK(idx[e] != before[e]);
        CHECK(idx[e] < m);
      } else {
        CHECK(idx[e] == before[e]);
      }
    }
  }
}

TEST_CASE("rewire schedule: every interval steps up to fraction `until` of the run") {
  RewireConfig cfg{.interval = 10, .fraction = 0.1, .until = 0.5};
  CHECK_FALSE(rewire_due(cfg, 0, 100));
  CHECK_FALSE(rewire_due(cfg, 5, 100));
  CHECK(rewire_due(cfg, 10, 100));
  CHECK(rewire_due(cfg, 50, 100));
  CHECK_FALSE(rewire_due(cfg, 60, 100));
  CHECK(rewire_count(cfg, 64) == 6);
  cfg.interval = 0;
  CHECK_FALSE(rewire_due(cfg, 10, 100));
}
