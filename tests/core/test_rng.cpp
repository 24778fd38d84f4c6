#include <catch2/catch.hpp>

#include "core/rng.h"

using namespace xmc;

TEST_CASE("rng is deterministic and its state round-trips") {
  Rng a(42), b(42), c(43);
  for (int i = 0; i < 10; ++i) CHECK(a.next() == b.next());
  CHECK(a.next() != c.next());
  auto st = a.state();
  uint64_t x = a.next();
  a.set_state(st);
  CHECK(a.next() == x);
}

TEST_CASE("rng distributions have the right moments") {
  Rng r(7);
  const int n = 200000;
  double sum = 0, sum2 = 0, usum = 0;
  for (int i = 0; i < n; ++i) {
    double z = r.normal();
    sum += z;
    sum2 += z * z;
    usum += r.uniform();
  }
  CHECK(std::abs(sum / n) < 0.02);
  CHECK(std::abs(sum2 / n - 1.0) < 0.02);
  CHECK(std::abs(usum / n - 0.5) < 0.01);
  uint64_t counts[10] = {};
  for (int i = 0; i < n; ++i) counts[r.below(10)]++;
  for (auto cnt : counts) CHECK(std::abs(static_cast<double>(cnt) / n - 0.1) < 0.01);
}
