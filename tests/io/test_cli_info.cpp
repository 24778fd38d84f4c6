// End-to-end: xmctrain info on small files.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/matrix.h"
#include "io/io.h"
#include "support/test_support.h"

using namespace xmc;
using Catch::Matchers::Contains;

namespace {
const char* kCombined = "4 6 3\n0,2 1:0.5 4:1.5\n 0:1 5:2\n1 2:-0.25\n0 3:1\n";
}

TEST_CASE("cli info: human report and JSON for a combined file") {
  test::TempDir dir;
  const auto p = (dir / "c.txt").string();
  test::write_file(p, kCombined);
  auto r = test::run_cli({"info", p});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("points (N):             4"));
  CHECK_THAT(r.out, Contains("labels never seen:      0"));
  CHECK(dir.list() == std::vector<std::string>{"c.txt", "c.txt.xmccache"});

  r = test::run_cli({"info", p, "--json"});  // from the cache this time
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["points"] == 4);
  CHECK(j["features"] == 6);
  CHECK(j["labels"] == 3);
  CHECK(j["feature_kind"] == "sparse");
  CHECK(j["feature_nnz"] == 6);
  CHECK(j["label_nnz"] == 4);
  CHECK(j["empty_rows"] == 1);
  CHECK(j["unseen_labels"] == 0);
  CHECK(j["avg_labels_per_point"].get<double>() == Approx(1.0));
  CHECK(j["label_frequency"]["max"] == 2);
  CHECK(j["label_frequency"]["min"] == 1);
}

TEST_CASE("cli info: split, npy and index base 1") {
  test::TempDir dir;
  test::write_file(dir / "X.txt", "2 4\n1:1 2:3\n4:2\n");
  test::write_file(dir / "Y.txt", "2 3\n1:1\n2:1 3:1\n");
  auto r = test::run_cli({"info", (dir / "X.txt").string(), "--labels", (dir / "Y.txt").string(),
                          "--index-base", "1", "--no-cache", "--json"});
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["points"] == 2);
  CHECK(j["feature_nnz"] == 3);
  CHECK(j["label_nnz"] == 3);
  CHECK(dir.list() == std::vector<std::string>{"X.txt", "Y.txt"});  // --no-cache wrote nothing

  DenseMatrix x(2, 5);
  x.values[3] = 1.0f;
  io::write_npy((dir / "X.npy").string(), x);
  r = test::run_cli({"info", (dir / "X.npy").string(), "--labels", (dir / "Y.txt").string(),
                     "--index-base", "1", "--json"});
  REQUIRE(r.exit_code == 0);
  j = nlohmann::json::parse(r.out);
  CHECK(j["feature_kind"] == "dense");
  CHECK(j["features"] == 5);
  CHECK(j["feature_nnz"] == 1);
}

TEST_CASE("cli info: missing or malformed file exits 2 and writes nothing") {
  test::TempDir dir;
  auto r = test::run_cli({"info", (dir / "missing.txt").string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("missing.txt"));
  CHECK_THAT(r.err, Contains("No such file"));
  CHECK(dir.list().empty());

  test::write_file(dir / "bad.txt", "2 6 3\n0 1:0.5\n1 7:1\n");
  r = test::run_cli({"info", (dir / "bad.txt").string(), "--json"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("bad.txt:3:3"));
  CHECK_THAT(r.err, Contains("feature index 7 out of range"));
  CHECK(r.out.empty());
  CHECK(dir.list() == std::vector<std::string>{"bad.txt"});  // no cache of a bad file

  r = test::run_cli({"info", (dir / "bad.txt").string(), "--index-base", "2"});
  CHECK(r.exit_code == 2);
}
