// Bad input: each case throws InputError whose message names the file, the line (and
// column or token) and what was expected.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <sstream>

#include "core/resources.h"
#include "expect_input_error.h"
#include "io/io.h"
#include "io/load.h"
#include "support/test_env.h"
#include "support/test_support.h"

using namespace xmc;
using Catch::Matchers::Contains;
using test::input_error_message;

namespace {
std::string combined_error(const std::string& text, io::ReadOptions opt = {}) {
  return input_error_message([&] { io::parse_xc_combined(text, "bad.txt", opt); });
}
std::string sparse_error(const std::string& text) {
  return input_error_message([&] { io::parse_xc_sparse(text, "bad_y.txt"); });
}
}  // namespace

TEST_CASE("error: unparsable number") {
  std::string m = combined_error("2 5 3\n0 1:0.5\n1 2:abc\n");
  CHECK_THAT(m, Contains("bad.txt:3:5"));
  CHECK_THAT(m, Contains("expected a number"));
  CHECK_THAT(m, Contains("'abc'"));
  m = combined_error("1 5 3\n0 x:1\n");
  CHECK_THAT(m, Contains("bad.txt:2:3"));
  CHECK_THAT(m, Contains("expected a feature index"));
}

TEST_CASE("error: feature index >= D") {
  std::string m = combined_error("2 5 3\n0 1:1\n1 5:1\n");
  CHECK_THAT(m, Contains("bad.txt:3:3"));
  CHECK_THAT(m, Contains("feature index 5 out of range"));
  CHECK_THAT(m, Contains("D = 5"));
  // With index base 1 the largest valid index is D and 0 is out of range.
  io::ReadOptions one;
  one.index_base = 1;
  CHECK_NOTHROW(io::parse_xc_combined("1 5 3\n1 5:1\n", "ok.txt", one));
  m = combined_error("1 5 3\n1 0:1\n", one);
  CHECK_THAT(m, Contains("bad.txt:2:3"));
  CHECK_THAT(m, Contains("expected 1 <= index < 6"));
}

TEST_CASE("error: label >= L") {
  std::string m = combined_error("2 5 3\n0,1 1:1\n2,3 2:1\n");
  CHECK_THAT(m, Contains("bad.txt:3:3"));
  CHECK_THAT(m, Contains("label index 3 out of range"));
  CHECK_THAT(m, Contains("L = 3"));
  m = sparse_error("1 4\n0:1 4:1\n");
  CHECK_THAT(m, Contains("bad_y.txt:2:5"));
  CHECK_THAT(m, Contains("C = 4"));
}

TEST_CASE("error: negative index") {
  std::string m = combined_error("1 5 3\n0 -2:1\n");
  CHECK_THAT(m, Contains("bad.txt:2:3"));
  CHECK_THAT(m, Contains("negative feature index -2"));
  m = combined_error("1 5 3\n-1 2:1\n");
  CHECK_THAT(m, Contains("bad.txt:2:1"));
  CHECK_THAT(m, Contains("negative label index -1"));
}

TEST_CASE("error: fewer rows than the header") {
  std::string m = combined_error("3 5 3\n0 1:1\n1 2:1\n");
  CHECK_THAT(m, Contains("bad.txt:3"));
  CHECK_THAT(m, Contains("expected 3 rows"));
  CHECK_THAT(m, Contains("found only 2"));
}

TEST_CASE("error: more rows than the header") {
  std::string m = combined_error("1 5 3\n0 1:1\n1 2:1\n");
  CHECK_THAT(m, Contains("bad.txt:3"));
  CHECK_THAT(m, Contains("more rows than the 1 the header declares"));
  m = sparse_error("1 4\n0:1\n1:1\n");
  CHECK_THAT(m, Contains("bad_y.txt:3"));
}

TEST_CASE("error: truncated file, last line cut mid-token") {
  std::string m = combined_error("2 5 3\n0 1:1\n1 2");
  CHECK_THAT(m, Contains("bad.txt:3:4"));
  CHECK_THAT(m, Contains("expected ':' after feature index 2"));
  m = combined_error("2 5 3\n0 1:1\n1 2:");
  CHECK_THAT(m, Contains("bad.txt:3:5"));
  CHECK_THAT(m, Contains("expected a number after '2:'"));
  m = combined_error("2 5 3\n0 1:1\n1,");
  CHECK_THAT(m, Contains("bad.txt:3:3"));
  CHECK_THAT(m, Contains("expected a label index"));
}

TEST_CASE("error: NaN or Inf value") {
  std::string m = combined_error("1 5 3\n0 1:nan\n");
  CHECK_THAT(m, Contains("bad.txt:2:5"));
  CHECK_THAT(m, Contains("not finite"));
  m = combined_error("2 5 3\n0 1:1\n0 1:1 3:inf\n");
  CHECK_THAT(m, Contains("bad.txt:3:9"));
  CHECK_THAT(m, Contains("'inf' is not finite"));
  m = combined_error("1 5 3\n0 1:1e999\n");
  CHECK_THAT(m, Contains("bad.txt:2:5"));
  CHECK_THAT(m, Contains("expected a finite number"));
}

TEST_CASE("error: bad header and duplicate feature index") {
  std::string m = combined_error("2 five 3\n");
  CHECK_THAT(m, Contains("bad.txt:1:3"));
  CHECK_THAT(m, Contains("expected the header 'N D L'"));
  m = combined_error("");
  CHECK_THAT(m, Contains("bad.txt:1:1"));
  CHECK_THAT(m, Contains("empty file"));
  m = sparse_error("1 4 7\n");
  CHECK_THAT(m, Contains("bad_y.txt:1:5"));
  CHECK_THAT(m, Contains("'N C'"));
  m = combined_error("1 5 3\n0 1:1 3:1 1:2\n");
  CHECK_THAT(m, Contains("bad.txt:2"));
  CHECK_THAT(m, Contains("duplicate feature index 1"));
  m = combined_error("1 5 3\n0 1:1x\n");
  CHECK_THAT(m, Contains("bad.txt:2:6"));
  CHECK_THAT(m, Contains("expected a blank after the value"));
}

TEST_CASE("error: train/test dimension mismatch") {
  Dataset train = io::parse_xc_combined("1 5 3\n0 1:1\n", "train.txt");
  Dataset test_d = io::parse_xc_combined("1 6 3\n0 1:1\n", "test.txt");
  Dataset test_l = io::parse_xc_combined("1 5 4\n0 1:1\n", "test.txt");
  std::string m = input_error_message([&] { io::check_compatible(train, test_d); });
  CHECK_THAT(m, Contains("train.txt"));
  CHECK_THAT(m, Contains("test.txt"));
  CHECK_THAT(m, Contains("D = 5"));
  CHECK_THAT(m, Contains("D = 6"));
  m = input_error_message([&] { io::check_compatible(train, test_l); });
  CHECK_THAT(m, Contains("L = 3"));
  CHECK_THAT(m, Contains("L = 4"));
  CHECK_NOTHROW(io::check_compatible(train, train));
}

TEST_CASE("error: features/labels row count mismatch") {
  test::TempDir dir;
  test::write_file(dir / "X.txt", "2 4\n0:1\n1:1\n");
  test::write_file(dir / "Y.txt", "3 2\n0:1\n1:1\n0:1\n");
  std::string m = input_error_message(
      [&] { io::read_xc_split((dir / "X.txt").string(), (dir / "Y.txt").string()); });
  CHECK_THAT(m, Contains("X.txt' has 2 rows"));
  CHECK_THAT(m, Contains("Y.txt' has 3 rows"));
  DenseMatrix x(2, 3);
  io::write_npy((dir / "X.npy").string(), x);
  const auto load_npy = [&](const char* labels) {
    io::DataSource src;
    src.features = (dir / "X.npy").string();
    src.labels = (dir / labels).string();
    io::load_dataset(src);
  };
  m = input_error_message([&] { load_npy("Y.txt"); });
  CHECK_THAT(m, Contains("X.npy' has 2 rows"));
  CHECK_THAT(m, Contains("Y.txt' has 3 rows"));
  // A directory given as the labels file: said so, not parsed as an empty header, and
  // nothing written (no cache of the features).
  std::filesystem::create_directory(dir / "Ydir");
  const auto entries = [&] {
    return std::distance(std::filesystem::directory_iterator(dir.path()),
                         std::filesystem::directory_iterator());
  };
  const auto before = entries();
  for (auto f : std::vector<std::function<void()>>{
           [&] { io::read_xc_split((dir / "X.txt").string(), (dir / "Ydir").string()); },
           [&] { load_npy("Ydir"); }}) {
    m = input_error_message(f);
    CHECK_THAT(m, Contains("Ydir' is not a regular file"));
    CHECK(entries() == before);
  }
}

namespace {
std::string npy_bytes(const std::string& descr, const std::string& shape, size_t data_bytes) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string s = "\x93NUMPY";
  s.push_back('\x01');
  s.push_back('\x00');
  s.push_back(static_cast<char>(header.size() & 0xff));
  s.push_back(static_cast<char>(header.size() >> 8));
  return s + header + std::string(data_bytes, '\0');
}
}  // namespace

TEST_CASE("error: wrong .npy dtype or rank") {
  std::stringstream i64(npy_bytes("<i8", "(2, 3)", 48));
  std::string m = input_error_message([&] { io::read_npy(i64, "feat.npy"); });
  CHECK_THAT(m, Contains("feat.npy"));
  CHECK_THAT(m, Contains("'<i8'"));
  CHECK_THAT(m, Contains("expected float32"));
  std::stringstream r1(npy_bytes("<f4", "(6,)", 24));
  m = input_error_message([&] { io::read_npy(r1, "feat.npy"); });
  CHECK_THAT(m, Contains("rank 1"));
  CHECK_THAT(m, Contains("expected a 2-D array"));
  std::stringstream r3(npy_bytes("<f4", "(1, 2, 3)", 24));
  m = input_error_message([&] { io::read_npy(r3, "feat.npy"); });
  CHECK_THAT(m, Contains("rank 3"));
  std::stringstream cut(npy_bytes("<f4", "(2, 3)", 20));
  m = input_error_message([&] { io::read_npy(cut, "feat.npy"); });
  CHECK_THAT(m, Contains("truncated data: expected 6 float32 values"));
  std::stringstream junk("hello world, not numpy");
  m = input_error_message([&] { io::read_npy(junk, "feat.npy"); });
  CHECK_THAT(m, Contains("not a .npy file"));
}

TEST_CASE("error: missing file") {
  test::TempDir dir;
  const std::string p = (dir / "nope.txt").string();
  for (auto f : std::vector<std::function<void()>>{
           [&] { io::read_xc_combined(p); }, [&] { io::read_xc_sparse(p); },
           [&] { io::read_npy(p); }, [&] { io::read_hdf5(p, "features"); }}) {
    std::string m = input_error_message(f);
    CHECK_THAT(m, Contains("nope.txt"));
    CHECK_THAT(m, Contains("No such file"));
  }
}

TEST_CASE("a failed write leaves no file behind") {
  test::TempDir dir;
  Dataset ds = io::parse_xc_combined("1 5 3\n0 1:1\n", "mem");
  const auto missing = dir / "no_such_dir" / "out.txt";
  std::string m = input_error_message(
      [&] { io::write_xc_combined(missing.string(), ds.sparse_features(), ds.labels); });
  CHECK_THAT(m, Contains("no_such_dir/out.txt"));
  CHECK_THROWS_AS(io::write_npy((dir / "no_such_dir" / "x.npy").string(), DenseMatrix(2, 2)),
                  InputError);
  CHECK_FALSE(std::filesystem::exists(dir / "no_such_dir"));
  CHECK(dir.list().empty());
  // A writer that fails midway (rows of features and labels disagree) leaves nothing.
  CsrMatrix more = ds.labels;
  more.rows = 2;
  more.indptr.push_back(more.indptr.back());
  CHECK_THROWS_AS(io::write_xc_combined((dir / "half.txt").string(), ds.sparse_features(), more),
                  Error);
  CHECK(dir.list().empty());
}

// Issue 20, item 13: the token after an index is named even when it is a blank.
TEST_CASE("error: a missing colon names what was found") {
  std::string m = combined_error("1 5 3\n0 1 2:1\n");
  CHECK_THAT(m, Contains("bad.txt:2:4"));
  CHECK_THAT(m, Contains("expected ':' after feature index 1, found a blank"));
  m = combined_error("1 5 3\n0 1\t2:1\n");
  CHECK_THAT(m, Contains("found a tab"));
  m = sparse_error("1 4\n0:1 2\n");
  CHECK_THAT(m, Contains("expected ':' after column index 2, found end of line"));
}

// Issue 20, item 13: underflow is no error (1e-50 rounds to 0 as 1e-40 rounds to a
// subnormal); overflow still is.
TEST_CASE("values below the float range round to zero, above it are rejected") {
  Dataset ds = io::parse_xc_combined("1 5 3\n0 1:1e-50 2:1e-40 3:-1e-300 4:2.5\n", "ok.txt");
  const auto& v = ds.sparse_features().values;
  REQUIRE(v.size() == 4);
  CHECK(v[0] == 0.0f);
  CHECK(v[1] == 1e-40f);
  CHECK(v[2] == 0.0f);
  CHECK(std::signbit(v[2]));
  CHECK(v[3] == 2.5f);
  std::string m = combined_error("1 5 3\n0 1:1e39\n");
  CHECK_THAT(m, Contains("bad.txt:2:5"));
  CHECK_THAT(m, Contains("out of float range"));
  m = combined_error("1 5 3\n0 1:-1e400\n");
  CHECK_THAT(m, Contains("out of float range"));
}

// Issue 20, item 13: binary and compressed files are named as such; messages never echo
// raw bytes.
TEST_CASE("error: binary or compressed files") {
  const std::string gz("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xed\xc1\x01\x0d\x00\x00", 16);
  std::string m = combined_error(gz);
  CHECK_THAT(m, Contains("bad.txt:1:1"));
  CHECK_THAT(m, Contains("binary or compressed file (gzip-compressed)"));
  CHECK_FALSE(test::has_raw_binary(m));
  m = sparse_error(std::string("\x28\xb5\x2f\xfd\x00\x58", 6));
  CHECK_THAT(m, Contains("zstd"));
  // A NUL byte in the body (a text file with binary garbage appended).
  m = combined_error(std::string("2 5 3\n0 1:1\n1 2:\0\0\x01\n", 19));
  CHECK_THAT(m, Contains("bad.txt:3:5"));
  CHECK_THAT(m, Contains("binary or compressed file (byte 0x00)"));
  CHECK_FALSE(test::has_raw_binary(m));
  // Bytes that are not NUL but not text either: shown escaped, never raw.
  m = combined_error("1 5 3\n0 1:\xff\xfe\x80\n");
  CHECK_THAT(m, Contains("\\xff\\xfe\\x80"));
  CHECK_FALSE(test::has_raw_binary(m));
  // The header of a split file is read on its own first: the same message.
  test::TempDir dir;
  test::write_file(dir / "X.txt", gz);
  test::write_file(dir / "Y.txt", "1 2\n0:1\n");
  m = input_error_message(
      [&] { io::read_xc_split((dir / "X.txt").string(), (dir / "Y.txt").string()); });
  CHECK_THAT(m, Contains("X.txt:1:1: binary or compressed file (gzip-compressed)"));
  CHECK_FALSE(test::has_raw_binary(m));
  test::write_file(dir / "X.txt", "\x01\x02 5\n");
  m = input_error_message(
      [&] { io::read_xc_split((dir / "X.txt").string(), (dir / "Y.txt").string()); });
  CHECK_THAT(m, Contains("X.txt:1:1: binary or compressed file (byte 0x01)"));
  CHECK(dir.list() == std::vector<std::string>{"X.txt", "Y.txt"});  // no cache written
}

// Issue 20, item 9: a header's sizes are checked against the file and the memory budget
// before anything is allocated from them, and before a cache is written.
TEST_CASE("error: header sizes the file or the memory cannot hold") {
  test::ScopedEnv limit("XMC_MEMORY_LIMIT", "1G");
  std::string m = combined_error("3 5 4000000000\n0 1:1\n1 2:1\n2 3:1\n");
  CHECK_THAT(m, Contains("bad.txt:1:5"));
  CHECK_THAT(m, Contains("header L = 4000000000"));
  CHECK_THAT(m, Contains("1.0 GiB available (XMC_MEMORY_LIMIT)"));
  m = sparse_error("2 300000000\n0:1\n1:1\n");
  CHECK_THAT(m, Contains("bad_y.txt:1:3"));
  CHECK_THAT(m, Contains("header C = 300000000"));
  m = combined_error("99999999999 5 3\n0 1:1\n");
  CHECK_THAT(m, Contains("bad.txt:1:1"));
  CHECK_THAT(m, Contains("header N = 99999999999 rows, but only 6 bytes follow"));
  // Through the file reader: no cache is written for a file that fails.
  test::TempDir dir;
  test::write_file(dir / "big.txt", "3 5 4000000000\n0 1:1\n1 2:1\n2 3:1\n");
  m = input_error_message([&] { io::read_xc_combined((dir / "big.txt").string()); });
  CHECK_THAT(m, Contains("big.txt:1:5"));
  CHECK(dir.list() == std::vector<std::string>{"big.txt"});
}

TEST_CASE("XMC_MEMORY_LIMIT sets the memory budget, and a malformed one is an input error") {
  {
    test::ScopedEnv limit("XMC_MEMORY_LIMIT", "8G");
    CHECK(memory_budget().bytes == (int64_t{8} << 30));
    CHECK(memory_budget().source == "XMC_MEMORY_LIMIT");
    CHECK_NOTHROW(check_memory_plan(8.0 * (1 << 30), "x", "y"));
    const std::string m =
        input_error_message([] { check_memory_plan(9.0 * (1 << 30), "the thing", "ask less"); });
    CHECK_THAT(m, Contains("the thing would need 9.0 GiB of memory, more than the 8.0 GiB "
                           "available (XMC_MEMORY_LIMIT): ask less"));
  }
  // 1GiB too since `xmctrain plan --memory` (issue 41) shares the parser: the suffixes
  // always meant powers of 1024.
  for (const char* v : {"512M", "512MB", "1024", "1.5g", "2T", "1GiB"}) {
    test::ScopedEnv limit("XMC_MEMORY_LIMIT", v);
    CHECK(memory_budget().bytes > 0);
  }
  for (const char* v : {"lots", "-1G", "5X", "1Gib", "1GiBs"}) {
    test::ScopedEnv limit("XMC_MEMORY_LIMIT", v);
    CHECK_THAT(input_error_message([] { memory_budget(); }), Contains("XMC_MEMORY_LIMIT"));
  }
}

// Issue 20, item 4: NaN / inf in dense features are rejected where they are read, naming
// the file and the position (the XC text parser already rejected them).
TEST_CASE("error: non-finite dense features (.npy, .h5)") {
  test::TempDir dir;
  DenseMatrix x(3, 4);
  x.values[6] = std::numeric_limits<float>::quiet_NaN();  // row 1, column 2
  x.values[11] = -std::numeric_limits<float>::infinity();
  io::write_npy((dir / "x.npy").string(), x);
  std::string m = input_error_message([&] { io::read_npy((dir / "x.npy").string()); });
  CHECK_THAT(m, Contains("x.npy"));
  CHECK_THAT(m, Contains("value nan at row 1, column 2"));
  CHECK_THAT(m, Contains("2 non-finite values"));
  io::write_hdf5((dir / "x.h5").string(), "features", x);
  m = input_error_message([&] { io::read_hdf5((dir / "x.h5").string(), "features"); });
  CHECK_THAT(m, Contains("x.h5 (dataset 'features')"));
  CHECK_THAT(m, Contains("row 1, column 2"));
  // float16 infinity (0x7c00) in a .npy of dtype <f2.
  std::string f16 = npy_bytes("<f2", "(1, 2)", 0);
  f16 += std::string("\x00\x3c\x00\x7c", 4);  // 1.0, inf
  std::stringstream in(f16);
  m = input_error_message([&] { io::read_npy(in, "h.npy"); });
  CHECK_THAT(m, Contains("h.npy: value inf at row 0, column 1"));
}

// Issue 20, item 9: an .npy shape must match the bytes after the header, checked before
// the array is allocated.
TEST_CASE("error: .npy shape that does not match the file size") {
  std::stringstream huge(npy_bytes("<f4", "(99999999999, 4)", 16));
  std::string m = input_error_message([&] { io::read_npy(huge, "big.npy"); });
  CHECK_THAT(m, Contains("big.npy: truncated data: expected 399999999996 float32 values"));
  CHECK_THAT(m, Contains("found 16 bytes"));
  std::stringstream overflow(npy_bytes("<f4", "(9223372036854775807, 3)", 16));
  m = input_error_message([&] { io::read_npy(overflow, "big.npy"); });
  CHECK_THAT(m, Contains("overflow"));
  std::stringstream trailing(npy_bytes("<f4", "(2, 2)", 20));
  m = input_error_message([&] { io::read_npy(trailing, "t.npy"); });
  CHECK_THAT(m, Contains("t.npy: 20 bytes after the header, expected 16"));
  std::stringstream exact(npy_bytes("<f4", "(2, 2)", 16));
  CHECK(io::read_npy(exact, "ok.npy").values.size() == 4);
  // A header without a shape entry: its text is shown, escaped.
  std::string bytes = npy_bytes("<f4", "(2, 2)", 16);
  bytes.replace(bytes.find("shape"), 5, "sh\x01pe");
  std::stringstream noshape(bytes);
  m = input_error_message([&] { io::read_npy(noshape, "s.npy"); });
  CHECK_THAT(m, Contains("no 'shape' entry"));
  CHECK_THAT(m, Contains("\\x01"));
}
