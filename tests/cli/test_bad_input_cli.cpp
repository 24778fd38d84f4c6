// Every malformed-input case through the real binary: exit code 2, a message naming the
// file and line (or both files), and nothing written (no cache, no run directory).
// The library-level tests (tests/io/test_io_errors.cpp) check the messages in detail.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "support/test_env.h"
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

// Issue 20, items 9 and 13: compressed and binary files, and headers whose sizes the
// memory cannot hold, exit 2 at the file and line, echo no raw bytes, write no cache.
TEST_CASE("binary, compressed and oversized files are rejected with exit code 2") {
  TempDir tmp;
  const std::string gz("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xed\xc1\x01\x0d\x00\x00", 16);
  SECTION("gzip file") {
    write_file(tmp / "train.txt.gz", gz);
    expect_rejected({"info", (tmp / "train.txt.gz").string()}, tmp,
                    {"train.txt.gz:1:1", "binary or compressed file (gzip-compressed)"});
    CHECK_FALSE(has_raw_binary(run_cli({"info", (tmp / "train.txt.gz").string()}).err));
  }
  SECTION("text with binary garbage") {
    write_file(tmp / "bad.txt", std::string("2 5 3\n0 1:1\n\x7f\x45\x4c\x46\x02\x01\x01\x00", 20));
    expect_rejected({"info", (tmp / "bad.txt").string()}, tmp,
                    {"bad.txt:3:1", "binary or compressed file (byte 0x7f)"});
    CHECK_FALSE(has_raw_binary(run_cli({"info", (tmp / "bad.txt").string()}).err));
  }
  SECTION("header L beyond the memory budget") {
    ScopedEnv limit("XMC_MEMORY_LIMIT", "1G");
    write_file(tmp / "bad.txt", "3 5 4000000000\n0 1:1\n1 2:1\n2 3:1\n");
    expect_rejected({"info", (tmp / "bad.txt").string()}, tmp,
                    {"bad.txt:1:5", "header L = 4000000000", "XMC_MEMORY_LIMIT"});
  }
  SECTION(".npy shape beyond the file") {
    write_npy(tmp / "x.npy", "<f4", "(99999999999, 4)", 32);
    write_file(tmp / "labels.txt", "2 3\n0:1\n1:1\n");
    expect_rejected({"info", (tmp / "x.npy").string(), "--labels", (tmp / "labels.txt").string()},
                    tmp, {"x.npy", "truncated data", "found 32 bytes"});
  }
}

// Issue 20, item 4: NaN / inf in dense features exit 2 naming the file and position.
TEST_CASE("non-finite dense features are rejected with exit code 2") {
  TempDir tmp;
  write_file(tmp / "labels.txt", "2 3\n0:1\n1:1\n");
  write_npy(tmp / "x.npy", "<f4", "(2, 2)", 0);
  {
    std::ofstream f(tmp / "x.npy", std::ios::binary | std::ios::app);
    const float v[4] = {1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN(), 4.0f};
    f.write(reinterpret_cast<const char*>(v), sizeof(v));
  }
  expect_rejected({"info", (tmp / "x.npy").string(), "--labels", (tmp / "labels.txt").string()},
                  tmp, {"x.npy", "value nan at row 1, column 0", "not finite"});
}

// Issue 20, item 8: lsh_sampled k: 24 (inside the documented bounds) died in
// std::bad_alloc with exit 1; the memory plan is checked first and names the keys.
TEST_CASE("lsh_sampled tables larger than the memory exit 2 naming the keys") {
  TempDir tmp;
  write_file(tmp / "train.txt", "4 6 3\n0 1:1\n1 2:1\n2 3:1\n0 4:1 5:1\n");
  write_file(tmp / "c.yaml", "data:\n  train: {path: " + (tmp / "train.txt").string() +
                                 "}\n  test: {path: " + (tmp / "train.txt").string() +
                                 "}\n  cache: false\n"
                                 "model:\n  encoder: [{type: sparse_linear, out: 4}]\n"
                                 "  output: {type: lsh_sampled, k: 24}\n"
                                 "train: {epochs: 1, batch_size: 2}\n");
  ScopedEnv limit("XMC_MEMORY_LIMIT", "4G");
  auto r = run_cli(
      {"train", (tmp / "c.yaml").string(), "--out", (tmp / "run").string(), "--device", "cpu"});
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("2^24 buckets") != std::string::npos);
  CHECK(r.err.find("model.output.k") != std::string::npos);
  CHECK(r.err.find("more than the 4.0 GiB available (XMC_MEMORY_LIMIT)") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "run" / "checkpoint.h5"));
}
