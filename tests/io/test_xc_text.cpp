#include <fmt/format.h>

#include <catch2/catch.hpp>

#include "io/io.h"
#include "support/test_support.h"

using namespace xmc;

namespace {
std::vector<uint32_t> row(const CsrMatrix& m, int64_t r) {
  return {m.row_indices(r), m.row_indices(r) + m.row_nnz(r)};
}
std::vector<float> vals(const CsrMatrix& m, int64_t r) {
  return {m.row_values(r), m.row_values(r) + m.row_nnz(r)};
}
}  // namespace

TEST_CASE("combined format: labels, unlabeled rows, sorting") {
  const std::string text =
      "3 6 4\n"
      "0,2 1:0.5 4:1.5\n"
      " 5:2 0:1\n"        // no labels; features out of order -> sorted
      "3,1,3 2:-0.25\n";  // repeated label merged
  Dataset ds = io::parse_xc_combined(text, "mem");
  REQUIRE(ds.sparse());
  CHECK(ds.num_points() == 3);
  CHECK(ds.num_features() == 6);
  CHECK(ds.num_labels() == 4);
  const CsrMatrix& x = ds.sparse_features();
  CHECK(row(x, 0) == std::vector<uint32_t>{1, 4});
  CHECK(vals(x, 0) == std::vector<float>{0.5f, 1.5f});
  CHECK(row(x, 1) == std::vector<uint32_t>{0, 5});
  CHECK(vals(x, 1) == std::vector<float>{1.0f, 2.0f});
  CHECK(vals(x, 2) == std::vector<float>{-0.25f});
  CHECK(row(ds.labels, 0) == std::vector<uint32_t>{0, 2});
  CHECK(ds.labels.row_nnz(1) == 0);
  CHECK(row(ds.labels, 2) == std::vector<uint32_t>{1, 3});
  CHECK_FALSE(ds.labels.has_values());
}

TEST_CASE("combined format: index base 1, CRLF, trailing blank lines, no final newline") {
  io::ReadOptions opt;
  opt.index_base = 1;
  Dataset ds = io::parse_xc_combined("2 3 2\r\n1 1:1 3:2\r\n2 2:3\n\n", "mem", opt);
  CHECK(row(ds.labels, 0) == std::vector<uint32_t>{0});
  CHECK(row(ds.sparse_features(), 0) == std::vector<uint32_t>{0, 2});
  CHECK(row(ds.labels, 1) == std::vector<uint32_t>{1});
  Dataset d2 = io::parse_xc_combined("1 3 2\n1 2:3", "mem");
  CHECK(d2.num_points() == 1);
  CHECK(vals(d2.sparse_features(), 0) == std::vector<float>{3.0f});
}

TEST_CASE("multi-threaded parse equals single-threaded parse") {
  // Enough text for several 1 MiB ranges.
  std::string text = "150000 1000 500\n";
  for (int i = 0; i < 150000; ++i) {
    if (i % 7 == 0)
      text += " ";  // some unlabeled rows
    else
      text += fmt::format("{},{}", i % 500, (i * 7 + 1) % 500);
    for (int k = 0; k < 5; ++k)
      text += fmt::format(" {}:{}", (i * 13 + k * 101) % 1000, 0.25 * k + i % 3);
    text += '\n';
  }
  io::ReadOptions one;
  one.threads = 1;
  io::ReadOptions many;
  many.threads = 4;
  Dataset a = io::parse_xc_combined(text, "mem", one);
  Dataset b = io::parse_xc_combined(text, "mem", many);
  CHECK(a.num_points() == 150000);
  CHECK(a.sparse_features().indptr == b.sparse_features().indptr);
  CHECK(a.sparse_features().indices == b.sparse_features().indices);
  CHECK(a.sparse_features().values == b.sparse_features().values);
  CHECK(a.labels.indptr == b.labels.indptr);
  CHECK(a.labels.indices == b.labels.indices);
  CHECK(a.labels.row_nnz(0) == 0);  // row 0 was made unlabeled
  CHECK(a.labels.row_nnz(1) == 2);
}

TEST_CASE("sparse format keeps values, and empty lines are empty rows") {
  CsrMatrix m = io::parse_xc_sparse("3 5\n4:0.5 0:2\n\n1:1\n", "mem");
  CHECK(m.rows == 3);
  CHECK(m.cols == 5);
  CHECK(row(m, 0) == std::vector<uint32_t>{0, 4});
  CHECK(vals(m, 0) == std::vector<float>{2.0f, 0.5f});
  CHECK(m.row_nnz(1) == 0);
  CHECK(row(m, 2) == std::vector<uint32_t>{1});
}

TEST_CASE("writers round-trip through the readers, both index bases") {
  test::TempDir dir;
  const std::string text = "3 6 4\n0,2 1:0.5 4:1.5\n 0:1 5:2\n1,3 2:-0.25\n";
  Dataset ds = io::parse_xc_combined(text, "mem");
  for (int base : {0, 1}) {
    io::ReadOptions opt;
    opt.index_base = base;
    opt.use_cache = false;
    const std::string p = (dir / fmt::format("c{}.txt", base)).string();
    io::write_xc_combined(p, ds.sparse_features(), ds.labels, base);
    Dataset back = io::read_xc_combined(p, opt);
    CHECK(back.sparse_features().indices == ds.sparse_features().indices);
    CHECK(back.sparse_features().values == ds.sparse_features().values);
    CHECK(back.labels.indptr == ds.labels.indptr);
    CHECK(back.labels.indices == ds.labels.indices);

    const std::string fx = (dir / fmt::format("x{}.txt", base)).string();
    const std::string fy = (dir / fmt::format("y{}.txt", base)).string();
    io::write_xc_sparse(fx, ds.sparse_features(), base);
    io::write_xc_sparse(fy, ds.labels, base);
    Dataset split = io::read_xc_split(fx, fy, opt);
    CHECK(split.sparse_features().values == ds.sparse_features().values);
    CHECK(split.labels.indices == ds.labels.indices);
    CHECK_FALSE(split.labels.has_values());
  }
  // The unlabeled row is written with a leading blank.
  io::write_xc_combined((dir / "w.txt").string(), ds.sparse_features(), ds.labels);
  CHECK(test::read_file(dir / "w.txt") == "3 6 4\n0,2 1:0.5 4:1.5\n 0:1 5:2\n1,3 2:-0.25\n");
}
