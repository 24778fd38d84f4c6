#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "eval/propensity.h"

using namespace xmc;

// q_l = 1 + C·(N_l + B)^(−A), C = (ln N − 1)·(B + 1)^A.
TEST_CASE("inverse propensity follows the formula on hand-computed values") {
  // A = 1, B = 1, N = 100:  C = (ln 100 − 1)·2.
  //   N_l = 3 -> q = 1 + C/4 = 1 + (ln 100 − 1)/2 = 2.80258509...
  //   N_l = 0 -> q = 1 + C/1 = 2·ln 100 − 1       = 8.21034037...
  auto q = inverse_propensity({3, 0}, 100, 1.0, 1.0);
  REQUIRE(q.size() == 2);
  CHECK(q[0] == Approx(1 + (std::log(100.0) - 1) / 2).epsilon(1e-14));
  CHECK(q[0] == Approx(2.80258509).epsilon(1e-8));
  CHECK(q[1] == Approx(8.21034037).epsilon(1e-8));

  // A label seen once: (1 + B)^(−A)·(B + 1)^A = 1, so q = 1 + ln N − 1 = ln N for any A, B.
  for (auto [a, b] : {std::pair{0.55, 1.5}, std::pair{0.6, 2.6}, std::pair{0.5, 0.4}})
    CHECK(inverse_propensity({1}, 1000, a, b)[0] == Approx(std::log(1000.0)).epsilon(1e-14));

  // Wikipedia defaults A = 0.5, B = 0.4, N = 1000, N_l = 0:
  //   q = 1 + (ln 1000 − 1)·1.4^0.5·0.4^(−0.5) = 1 + (ln 1000 − 1)·sqrt(3.5) = 12.0531...
  CHECK(inverse_propensity({0}, 1000, 0.5, 0.4)[0] ==
        Approx(1 + (std::log(1000.0) - 1) * std::sqrt(3.5)).epsilon(1e-14));

  // Frequent labels get smaller weights.
  auto r = inverse_propensity({0, 1, 10, 1000}, 5000, 0.55, 1.5);
  CHECK(r[0] > r[1]);
  CHECK(r[1] > r[2]);
  CHECK(r[2] > r[3]);
  CHECK(r[3] > 1.0);
}

TEST_CASE("inverse propensity rejects bad parameters") {
  CHECK_THROWS_AS(inverse_propensity({1}, 0, 0.55, 1.5), InputError);
  CHECK_THROWS_AS(inverse_propensity({1}, 10, -0.1, 1.5), InputError);
  CHECK_THROWS_AS(inverse_propensity({1}, 10, 0.55, 0.0), InputError);
  CHECK_THROWS_AS(inverse_propensity({1}, 10, 0.55, std::nan("")), InputError);
  CHECK_THROWS_AS(inverse_propensity({-1}, 10, 0.55, 1.5), InputError);
  CHECK(inverse_propensity({}, 10, 0.55, 1.5).empty());
}

TEST_CASE("propensity defaults by dataset family and family guess") {
  CHECK(propensity_defaults("amazon") == std::pair{0.6, 2.6});
  CHECK(propensity_defaults("wikipedia") == std::pair{0.5, 0.4});
  CHECK(propensity_defaults("other") == std::pair{0.55, 1.5});
  CHECK(propensity_defaults("eurlex") == std::pair{0.55, 1.5});
  CHECK(guess_dataset_family("data/Amazon-670K/trn_X_Y.txt") == "amazon");
  CHECK(guess_dataset_family("LF-AmazonTitles-131K") == "amazon");
  CHECK(guess_dataset_family("/data/WikiLSHTC-325K/train.txt") == "wikipedia");
  CHECK(guess_dataset_family("wiki10-31k") == "wikipedia");
  CHECK(guess_dataset_family("Eurlex-4K") == "other");
  CHECK(propensity_defaults(guess_dataset_family("Wiki10-31K")) == std::pair{0.5, 0.4});
}
