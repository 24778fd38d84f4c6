// Every malformed-input case through the real binary: exit code 2, a message naming the
// file and line (or both files), and nothing written (no cache, no run directory).
// The library-level tests (tests/io/test_io_errors.cpp) check the messages in detail.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "support/test_support.h"

using namespace xmc::test;
namespace fs = std::filesystem;

namespace {

// A minimal .npy file: descr e.g. "<i8", shape e.g. "(2, 2)", payload bytes.
void write_npy(const fs::path& p, const std::string& descr, const std::string& shape,
               size_t payload_bytes) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(p, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const auto len = static_cast<uint16_t>(header.size());
  f.put(static_cast<char>(len & 0xff));
  f.put(static_cast<char>(len >> 8));
  f << header << std::string(payload_bytes, '\0');
}

void expect_rejected(const std::vector<std::string>& args, const TempDir& dir,
                     const std::vector<std::string>& expected) {
  const auto before = dir.list();
  auto r = run_cli(args);
  INFO(r.err);
  CHECK(r.exit_code == 2);
  for (const auto& e : expected) CHECK(r.err.find(e) != std::string::npos);
  CHECK(dir.list() == before);  // nothing written: no cache, no partial output
}

}  // namespace

TEST_CASE("malformed XC text files are rejected with file:line and exit code 2") {
  struct Case {
    const char* what;
    const char* text;
    const char* where;
  };
  const std::vector<Case> cases = {
      {"unparsable number", "2 5 3\n0 1:0.5\n1 2:abc\n", "bad.txt:3"},
      {"feature index >= D", "2 5 3\n0 1:1\n1 5:1\n", "bad.txt:3"},
      {"label >= L", "2 5 3\n0,1 1:1\n2,3 2:1\n", "bad.txt:3"},
      {"negative index", "1 5 3\n0 -2:1\n", "bad.txt:2"},
      {"fewer rows than the header", "3 5 3\n0 1:1\n1 2:1\n", "bad.txt"},
      {"more rows than the header", "1 5 3\n0 1:1\n1 2:1\n", "bad.txt:3"},
      {"truncated last line", "2 5 3\n0 1:1\n1 2:", "bad.txt:3"},
      {"NaN value", "2 5 3\n0 1:nan\n1 2:1\n", "bad.txt:2"},
      {"Inf value", "2 5 3\n0 1:1\n1 2:inf\n", "bad.txt:3"},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.what) {
      TempDir tmp;
      write_file(tmp / "bad.txt", c.text);
      expect_rejected({"info", (tmp / "bad.txt").string()}, tmp, {c.where});
    }
  }
}

TEST_CASE("bad dense inputs and mismatched files are rejected with exit code 2") {
  TempDir tmp;
  write_file(tmp / "labels.txt", "2 3\n0:1\n1:1\n");
  SECTION("wrong .npy dtype") {
    write_npy(tmp / "x.npy", "<i8", "(2, 2)", 32);
    expect_rejected({"info", (tmp / "x.npy").string(), "--labels", (tmp / "labels.txt").string()},
                    tmp, {"x.npy", "<i8"});
  }
  SECTION("wrong .npy rank") {
    write_npy(tmp / "x.npy", "<f4", "(4,)", 16);
    expect_rejected({"info", (tmp / "x.npy").string(), "--labels", (tmp / "labels.txt").string()},
                    tmp, {"x.npy"});
  }
  SECTION("features/labels row count mismatch") {
    write_npy(tmp / "x.npy", "<f4", "(3, 2)", 24);
    expect_rejected({"info", (tmp / "x.npy").string(), "--labels", (tmp / "labels.txt").string()},
                    tmp, {"x.npy", "labels.txt", "3", "2"});
  }
  SECTION("missing file") {
    expect_rejected({"info", (tmp / "missing.txt").string()}, tmp, {"missing.txt"});
  }
  SECTION("train/test dimension mismatch") {
    write_file(tmp / "train.txt", "2 5 3\n0 1:1\n1 2:1\n");
    write_file(tmp / "test.txt", "1 6 3\n0 5:1\n");
    write_file(tmp / "c.yaml", "data:\n  train: {path: " + (tmp / "train.txt").string() +
                                   "}\n  test: {path: " + (tmp / "test.txt").string() +
                                   "}\n  cache: false\nmodel:\n  encoder: [{type: sparse_linear, out: 4}]\n");
    auto r = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "run").string()});
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("train.txt") != std::string::npos);
    CHECK(r.err.find("test.txt") != std::string::npos);
    CHECK(r.err.find("5") != std::string::npos);
    CHECK(r.err.find("6") != std::string::npos);
    CHECK_FALSE(fs::exists(tmp / "run" / "checkpoint.h5"));
    CHECK_FALSE(fs::exists(tmp / "run" / "results.json"));
  }
}
