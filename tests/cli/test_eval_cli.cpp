// `xmctrain eval --predictions` on the hand-checked fixture of tests/eval/fixtures
// (derivation in tests/eval/test_evaluate.cpp and fixtures/README.md).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "support/test_support.h"

using namespace xmc::test;
namespace fs = std::filesystem;

namespace {
const fs::path kFixtures = fs::path(XMC_SOURCE_DIR) / "tests" / "eval" / "fixtures";

// Copies the fixture files into dir (so nothing is written beside the sources).
void copy_fixtures(const TempDir& dir) {
  for (auto f : {"train_labels.txt", "test_labels.txt", "predictions.txt"})
    fs::copy_file(kFixtures / f, dir / f);
}
}  // namespace

TEST_CASE("eval of a predictions file agrees with the hand-computed example to 1e-6") {
  TempDir tmp;
  copy_fixtures(tmp);
  auto r = run_cli({"eval", "--predictions", (tmp / "predictions.txt").string(), "--data",
                    (tmp / "test_labels.txt").string(), "--train",
                    (tmp / "train_labels.txt").string(), "--k", "3", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto m = nlohmann::json::parse(r.out)["metrics"];
  const std::vector<std::pair<std::string, double>> expected = {
      {"P@1", 0.5},          {"P@2", 0.375},        {"P@3", 0.3333333},
      {"nDCG@1", 0.5},       {"nDCG@2", 0.4643060}, {"nDCG@3", 0.5049823},
      {"PSP@1", 0.3941112},  {"PSP@2", 0.4934952},  {"PSP@3", 0.5930744},
      {"PSnDCG@1", 0.3941112}, {"PSnDCG@2", 0.4378538}, {"PSnDCG@3", 0.4879221},
      {"R@1", 0.2083333},    {"R@2", 0.4583333},    {"R@3", 0.5833333}};
  for (const auto& [key, value] : expected) {
    INFO(key);
    CHECK(m[key].get<double>() == Approx(value).margin(1e-6));
  }
  // Nothing was written beside the inputs (no cache files).
  CHECK(tmp.list() == std::vector<std::string>{"predictions.txt", "test_labels.txt",
                                               "train_labels.txt"});
  // The human table prints the same numbers in percent.
  auto t = run_cli({"eval", "--predictions", (tmp / "predictions.txt").string(), "--data",
                    (tmp / "test_labels.txt").string(), "--train",
                    (tmp / "train_labels.txt").string(), "--k", "3"});
  REQUIRE(t.exit_code == 0);
  CHECK(t.out.find("39.41") != std::string::npos);
}

TEST_CASE("eval of a predictions file applies a filter file") {
  TempDir tmp;
  copy_fixtures(tmp);
  write_file(tmp / "filter.txt", "0 0\n");
  auto r = run_cli({"eval", "--predictions", (tmp / "predictions.txt").string(), "--data",
                    (tmp / "test_labels.txt").string(), "--train",
                    (tmp / "train_labels.txt").string(), "--k", "3", "--filter",
                    (tmp / "filter.txt").string(), "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto m = nlohmann::json::parse(r.out)["metrics"];
  CHECK(m["P@1"].get<double>() == Approx(0.25).margin(1e-6));
  CHECK(m["P@3"].get<double>() == Approx(0.25).margin(1e-6));
  CHECK(m["R@3"].get<double>() == Approx(0.4583333).margin(1e-6));
}

TEST_CASE("eval of a predictions file rejects mismatched or malformed input") {
  TempDir tmp;
  copy_fixtures(tmp);
  write_file(tmp / "wrong_l.txt", "4 6\n0:1\n\n\n\n");
  auto r = run_cli({"eval", "--predictions", (tmp / "wrong_l.txt").string(), "--data",
                    (tmp / "test_labels.txt").string(), "--train",
                    (tmp / "train_labels.txt").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("6") != std::string::npos);
  CHECK(r.err.find("5") != std::string::npos);

  write_file(tmp / "bad.txt", "4 5\n0:0.9 1:x\n\n\n\n");
  r = run_cli({"eval", "--predictions", (tmp / "bad.txt").string(), "--data",
               (tmp / "test_labels.txt").string(), "--train", (tmp / "train_labels.txt").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("bad.txt:2") != std::string::npos);

  r = run_cli({"eval", "--predictions", (tmp / "missing.txt").string(), "--data",
               (tmp / "test_labels.txt").string(), "--train", (tmp / "train_labels.txt").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("missing.txt") != std::string::npos);
}
