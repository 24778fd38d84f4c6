#include <fcntl.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <thread>

#include "core/error.h"
#include "io/cache.h"
#include "io/io.h"
#include "io/load.h"
#include "support/test_support.h"

using namespace xmc;
namespace fs = std::filesystem;

TEST_CASE("npy float32 round-trip and float16 conversion") {
  test::TempDir dir;
  DenseMatrix m(3, 4);
  for (size_t i = 0; i < m.values.size(); ++i) m.values[i] = 0.5f * static_cast<float>(i) - 2.0f;
  const std::string p = (dir / "x.npy").string();
  io::write_npy(p, m);
  DenseMatrix back = io::read_npy(p);
  CHECK(back.rows == 3);
  CHECK(back.cols == 4);
  CHECK(back.values == m.values);

  // float16 [1×4]: 1.0, -2.0, 0.5, 65504 (max half), version 2.0 header (u32 length).
  std::string header = "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 4), }";
  header.append((64 - (12 + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string bytes = "\x93NUMPY";
  bytes += '\x02';
  bytes += '\x00';
  for (int k = 0; k < 4; ++k) bytes += static_cast<char>((header.size() >> (8 * k)) & 0xff);
  bytes += header;
  for (uint16_t h : {0x3c00, 0xc000, 0x3800, 0x7bff}) {
    bytes += static_cast<char>(h & 0xff);
    bytes += static_cast<char>(h >> 8);
  }
  test::write_file(dir / "h.npy", bytes);
  DenseMatrix half = io::read_npy((dir / "h.npy").string());
  CHECK(half.values == std::vector<float>{1.0f, -2.0f, 0.5f, 65504.0f});
}

TEST_CASE("hdf5 round-trip and missing dataset") {
  test::TempDir dir;
  DenseMatrix m(2, 3);
  for (size_t i = 0; i < m.values.size(); ++i) m.values[i] = static_cast<float>(i) + 0.25f;
  const std::string p = (dir / "x.h5").string();
  io::write_hdf5(p, "features", m);
  CHECK(dir.list() == std::vector<std::string>{"x.h5"});
  DenseMatrix back = io::read_hdf5(p, "features");
  CHECK(back.rows == 2);
  CHECK(back.cols == 3);
  CHECK(back.values == m.values);
  try {
    io::read_hdf5(p, "embeddings");
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::Contains("x.h5"));
    CHECK_THAT(e.what(), Catch::Contains("no dataset 'embeddings'"));
  }
}

TEST_CASE("load_dataset picks the reader by fields and extension") {
  test::TempDir dir;
  test::write_file(dir / "c.txt", "2 4 3\n0 1:1\n1,2 3:2\n");
  test::write_file(dir / "X.txt", "2 4\n1:1\n3:2\n");
  test::write_file(dir / "Y.txt", "2 3\n0:1\n1:1 2:1\n");
  DenseMatrix x(2, 4);
  io::write_npy((dir / "X.npy").string(), x);
  io::write_hdf5((dir / "X.h5").string(), "emb", x);

  io::DataSource c;
  c.path = (dir / "c.txt").string();
  Dataset a = io::load_dataset(c);
  CHECK(a.sparse());
  CHECK(a.num_labels() == 3);

  io::DataSource s;
  s.features = (dir / "X.txt").string();
  s.labels = (dir / "Y.txt").string();
  Dataset b = io::load_dataset(s);
  CHECK(b.sparse());
  CHECK(b.labels.indices == a.labels.indices);
  CHECK(b.sparse_features().indices == a.sparse_features().indices);

  s.features = (dir / "X.npy").string();
  Dataset n = io::load_dataset(s);
  CHECK_FALSE(n.sparse());
  CHECK(n.num_features() == 4);

  s.features = (dir / "X.h5").string();
  s.hdf5_dataset = "emb";
  Dataset h = io::load_dataset(s);
  CHECK_FALSE(h.sparse());
  CHECK(h.num_points() == 2);

  io::DataSource bad = s;
  bad.format = "csv";
  CHECK_THROWS_AS(io::load_dataset(bad), InputError);
  io::DataSource both = s;
  both.path = c.path;
  CHECK_THROWS_AS(io::load_dataset(both), InputError);
  io::DataSource no_labels;
  no_labels.features = s.features;
  CHECK_THROWS_AS(io::load_dataset(no_labels), InputError);
}

TEST_CASE("an explicit dense format reads the features whatever their extension") {
  test::TempDir dir;
  test::write_file(dir / "Y.txt", "2 3\n0:1\n1:1 2:1\n");
  DenseMatrix x(2, 4);
  x.values[5] = 1.5f;
  io::write_npy((dir / "X.bin").string(), x);
  io::write_hdf5((dir / "E.dat").string(), "emb", x);
  io::DataSource s;
  s.labels = (dir / "Y.txt").string();
  s.features = (dir / "X.bin").string();
  s.format = "npy";
  Dataset n = io::load_dataset(s);
  REQUIRE_FALSE(n.sparse());
  CHECK(n.dense_features().values == x.values);
  s.features = (dir / "E.dat").string();
  s.format = "hdf5";
  s.hdf5_dataset = "emb";
  Dataset h = io::load_dataset(s);
  REQUIRE_FALSE(h.sparse());
  CHECK(h.dense_features().values == x.values);
  // The format is what is read: an .npy file named as HDF5 input fails in the HDF5 reader.
  io::write_npy((dir / "X.npy").string(), x);
  s.features = (dir / "X.npy").string();
  try {
    io::load_dataset(s);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::Contains("X.npy"));
  }
  // auto still goes by extension: X.bin is no .npy, so it is read as XC text and refused.
  s.features = (dir / "X.bin").string();
  s.format = "auto";
  CHECK_THROWS_AS(io::load_dataset(s), InputError);
}

TEST_CASE("binary cache: second load equals the first, a changed source invalidates it") {
  test::TempDir dir;
  const std::string p = (dir / "c.txt").string();
  test::write_file(p, "3 6 4\n0,2 1:0.5 4:1.5\n 0:1 5:2\n1,3 2:-0.25\n");
  Dataset first = io::read_xc_combined(p);
  REQUIRE(fs::exists(io::cache_path(p)));
  CHECK(dir.list() == std::vector<std::string>{"c.txt", "c.txt.xmccache"});
  Dataset second = io::read_xc_combined(p);
  CHECK(second.sparse_features().indptr == first.sparse_features().indptr);
  CHECK(second.sparse_features().indices == first.sparse_features().indices);
  CHECK(second.sparse_features().values == first.sparse_features().values);
  CHECK(second.labels.indptr == first.labels.indptr);
  CHECK(second.labels.indices == first.labels.indices);
  CHECK(second.num_features() == 6);
  CHECK(second.num_labels() == 4);

  // The cache is really what is read: a doctored cache with the same stamp is believed.
  // (Proves the second load did not reparse the text.)
  {
    io::CacheKey key{io::CacheKind::xc_combined, io::file_stamp(p), 0};
    CsrMatrix x = first.sparse_features();
    x.values[0] = 42.0f;
    io::save_cache(p, key, {&x, &first.labels});
    CHECK(io::read_xc_combined(p).sparse_features().values[0] == 42.0f);
    // Other read options do not use it.
    io::ReadOptions no_cache;
    no_cache.use_cache = false;
    CHECK(io::read_xc_combined(p, no_cache).sparse_features().values[0] == 0.5f);
  }

  // Modify the source (same size, later mtime): the cache is rebuilt from the text.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  test::write_file(p, "3 6 4\n0,2 1:0.7 4:1.5\n 0:1 5:2\n1,3 2:-0.25\n");
  Dataset third = io::read_xc_combined(p);
  CHECK(third.sparse_features().values[0] == 0.7f);
  CHECK(io::read_xc_combined(p).sparse_features().values[0] == 0.7f);

  // A truncated cache is ignored, not trusted.
  std::string cache = test::read_file(io::cache_path(p));
  test::write_file(io::cache_path(p), cache.substr(0, cache.size() - 9));
  CHECK(io::read_xc_combined(p).labels.indices == first.labels.indices);
}

TEST_CASE("binary cache: an unwritable cache only warns") {
  test::TempDir dir;
  const std::string p = (dir / "c.txt").string();
  test::write_file(p, "1 4 2\n1 0:1\n");
  // A directory where the cache file should go: the rename fails even for root (unlike
  // a read-only directory), which exercises the same path.
  fs::create_directory(io::cache_path(p));
  Dataset ds = io::read_xc_combined(p);
  CHECK(ds.num_points() == 1);
  CHECK(ds.labels.indices == std::vector<uint32_t>{1});
  CHECK(fs::is_directory(io::cache_path(p)));
  CHECK(dir.list() == std::vector<std::string>{"c.txt"});  // no temporary left behind
}

// Issue 20, item 10: a rewrite of the same size whose mtime is set back to the nanosecond
// (touch -d, cp -p, rsync -t) is seen through the change time and inode.
TEST_CASE("binary cache: a same-size rewrite with the old mtime is reparsed") {
  test::TempDir dir;
  const std::string p = (dir / "c.txt").string();
  test::write_file(p, "2 6 4\n0,2 1:0.5\n1 3:2\n");
  const io::FileStamp before = io::file_stamp(p);
  CHECK(io::read_xc_combined(p).sparse_features().values[0] == 0.5f);
  REQUIRE(fs::exists(io::cache_path(p)));
  test::write_file(p, "2 6 4\n0,2 1:0.9\n1 3:2\n");
  // Setting the mtime back updates the change time to the kernel's clock; repeat until it
  // has moved past the original (the clock is coarse: a few milliseconds at most).
  const timespec times[2] = {{0, UTIME_OMIT},
                             {static_cast<time_t>(before.mtime_ns / 1000000000),
                              static_cast<long>(before.mtime_ns % 1000000000)}};
  do REQUIRE(::utimensat(AT_FDCWD, p.c_str(), times, 0) == 0);
  while (io::file_stamp(p).ctime_ns == before.ctime_ns);
  REQUIRE(io::file_stamp(p).mtime_ns == before.mtime_ns);
  REQUIRE(io::file_stamp(p).size == before.size);
  CHECK(io::read_xc_combined(p).sparse_features().values[0] == 0.9f);
}

// Issue 20, item 10: the cache's contents are checked as the parser's output would be; a
// corrupted one is reported and the text reparsed, never passed on to training.
TEST_CASE("binary cache: corrupted contents are not trusted") {
  test::TempDir dir;
  const std::string p = (dir / "c.txt").string();
  test::write_file(p, "2 6 4\n0,2 1:0.5 4:1\n1 3:2\n");
  const Dataset good = io::read_xc_combined(p);
  const io::CacheKey key{io::CacheKind::xc_combined, io::file_stamp(p), 0};
  struct Case {
    const char* what;
    std::function<void(CsrMatrix& x, CsrMatrix& y)> corrupt;
  };
  const std::vector<Case> cases = {
      {"feature index >= D", [](CsrMatrix& x, CsrMatrix&) { x.indices[0] = 6; }},
      {"label index >= L", [](CsrMatrix&, CsrMatrix& y) { y.indices[1] = 1000; }},
      {"NaN value", [](CsrMatrix& x, CsrMatrix&) { x.values[1] = std::nanf(""); }},
      {"infinite value", [](CsrMatrix& x, CsrMatrix&) { x.values[2] = INFINITY; }},
      {"unsorted row", [](CsrMatrix& x, CsrMatrix&) { std::swap(x.indices[0], x.indices[1]); }},
      {"row past the end", [](CsrMatrix& x, CsrMatrix&) { x.indptr[1] = 5; }},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.what) {
      CsrMatrix x = good.sparse_features(), y = good.labels;
      c.corrupt(x, y);
      io::save_cache(p, key, {&x, &y});
      REQUIRE(io::load_cache(p, key) == std::nullopt);
      const Dataset again = io::read_xc_combined(p);
      CHECK(again.sparse_features().indices == good.sparse_features().indices);
      CHECK(again.sparse_features().values == good.sparse_features().values);
      CHECK(again.labels.indices == good.labels.indices);
    }
  }
}
