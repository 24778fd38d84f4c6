#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>

#include "data/stats.h"
#include "data/synthetic.h"
#include "support/test_support.h"

using namespace xmc;
using Catch::Matchers::Contains;

TEST_CASE("synthetic data is deterministic by seed") {
  SynthConfig c;
  c.train = 500;
  c.test = 100;
  c.labels = 100;
  c.clusters = 10;
  SynthData a = generate_synthetic(c);
  SynthData b = generate_synthetic(c);
  CHECK(a.train.labels.indices == b.train.labels.indices);
  CHECK(a.train.dense_features().values == b.train.dense_features().values);
  CHECK(a.test.dense_features().values == b.test.dense_features().values);
  CHECK(a.oracle_p1 == b.oracle_p1);
  c.seed = 1;
  SynthData d = generate_synthetic(c);
  CHECK(d.train.labels.indices != a.train.labels.indices);
}

TEST_CASE("synthetic sparse features are non-negative, normalised, all labels seen") {
  SynthConfig c;
  c.format = "sparse";
  c.train = 2000;
  c.test = 500;
  c.labels = 300;
  c.clusters = 20;
  c.features = 1000;
  SynthData s = generate_synthetic(c);
  const CsrMatrix& x = s.train.sparse_features();
  CHECK(x.cols == 1000);
  for (int64_t i = 0; i < x.rows; ++i) {
    double ss = 0;
    for (int64_t k = 0; k < x.row_nnz(i); ++k) {
      REQUIRE(x.row_values(i)[k] > 0.0f);
      ss += x.row_values(i)[k] * x.row_values(i)[k];
    }
    REQUIRE(ss == Approx(1.0).epsilon(1e-4));
    REQUIRE(x.row_nnz(i) <= c.nnz);
  }
  DatasetStats st = compute_stats(s.train);
  CHECK(st.unseen_labels == 0);
  CHECK(st.empty_rows == 0);
  // The structure is learnable: the oracle beats predicting the most popular label.
  CHECK(s.oracle_p1 > s.popularity_p1 + 0.2);
  // Noise controls learnability.
  c.noise = 0.98;
  CHECK(generate_synthetic(c).oracle_p1 < s.oracle_p1);
}

TEST_CASE("cli synth then info: statistics match the generator parameters") {
  test::TempDir dir;
  for (double alpha : {0.8, 1.2}) {
    const std::string out = (dir / fmt::format("dense{}", alpha)).string();
    auto r = test::run_cli({"synth", "--out", out, "--train", "20000", "--test", "1000", "--labels",
                            "1500", "--features", "64", "--clusters", "30", "--alpha",
                            fmt::format("{}", alpha), "--labels-per-point", "4", "--seed", "7"});
    REQUIRE(r.exit_code == 0);
    auto meta = nlohmann::json::parse(test::read_file(out + "/synth.json"));
    CHECK(meta["parameters"]["alpha"].get<double>() == alpha);
    CHECK(meta["oracle_p1"].get<double>() > meta["popularity_p1"].get<double>());

    r = test::run_cli({"info", out + "/trn_X.npy", "--labels", out + "/trn_X_Y.txt", "--json"});
    REQUIRE(r.exit_code == 0);
    auto j = nlohmann::json::parse(r.out);
    CHECK(j["points"] == 20000);
    CHECK(j["labels"] == 1500);
    CHECK(j["features"] == 64);
    CHECK(j["feature_kind"] == "dense");
    CHECK(j["unseen_labels"] == 0);
    // Mean 1 + Poisson(3), less the few repeats dropped inside small clusters.
    CHECK(j["avg_labels_per_point"].get<double>() == Approx(4.0).margin(0.15));
    // Sorted label frequencies fall as rank^-alpha.
    CHECK(j["rank_frequency_slope"].get<double>() == Approx(-alpha).margin(0.15));

    r = test::run_cli({"info", out + "/tst_X.npy", "--labels", out + "/tst_X_Y.txt", "--json"});
    REQUIRE(r.exit_code == 0);
    CHECK(nlohmann::json::parse(r.out)["points"] == 1000);
  }

  const std::string sp = (dir / "sparse").string();
  auto r = test::run_cli({"synth", "--out", sp, "--format", "sparse", "--train", "3000", "--test",
                          "500", "--labels", "400", "--features", "2000"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("oracle P@1"));
  r = test::run_cli({"info", sp + "/train.txt", "--json", "--no-cache"});
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["points"] == 3000);
  CHECK(j["features"] == 2000);
  CHECK(j["labels"] == 400);
  CHECK(j["avg_features_per_point"].get<double>() <= 60.0);
}

TEST_CASE("cli synth: bad options exit 2 and write nothing") {
  test::TempDir dir;
  const std::string out = (dir / "o").string();
  auto r = test::run_cli({"synth", "--out", out, "--clusters", "0"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("--clusters"));
  r = test::run_cli({"synth", "--out", out, "--format", "sparse", "--noise", "1.5"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("--noise"));
  r = test::run_cli({"synth"});  // --out is required
  CHECK(r.exit_code == 2);
  CHECK(dir.list().empty());
  CHECK_FALSE(std::filesystem::exists(out));
}
