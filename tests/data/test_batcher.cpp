#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>

#include "core/error.h"
#include "data/batcher.h"
#include "io/io.h"

using namespace xmc;

namespace {
Dataset sparse_dataset() {
  // Row i has feature i (value i + 0.5) and label i % 3.
  std::string text = "10 10 3\n";
  for (int i = 0; i < 10; ++i) text += fmt::format("{} {}:{}\n", i % 3, i, i + 0.5);
  return io::parse_xc_combined(text, "mem");
}
}  // namespace

TEST_CASE("gather_batch copies the rows, sparse and dense") {
  Dataset ds = sparse_dataset();
  const std::vector<int64_t> ids = {7, 2, 2};
  Batch b;
  gather_batch(ds, ids, b);
  CHECK(b.size() == 3);
  REQUIRE(b.sparse);
  CHECK(b.sparse_x.rows == 3);
  CHECK(b.sparse_x.cols == 10);
  CHECK(b.sparse_x.indices == std::vector<uint32_t>{7, 2, 2});
  CHECK(b.sparse_x.values == std::vector<float>{7.5f, 2.5f, 2.5f});
  CHECK(b.labels.indptr == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(b.labels.indices == std::vector<uint32_t>{1, 2, 2});
  CHECK(b.labels.cols == 3);

  Dataset dense;
  DenseMatrix x(4, 2);
  std::iota(x.values.begin(), x.values.end(), 0.0f);
  dense.features = x;
  dense.labels = io::parse_xc_sparse("4 2\n0:1\n1:1\n\n0:1 1:1\n", "mem");
  const std::vector<int64_t> d_ids = {3, 0};
  Batch db;
  gather_batch(dense, d_ids, db);
  REQUIRE_FALSE(db.sparse);
  CHECK(db.dense_x.values == std::vector<float>{6, 7, 0, 1});
  CHECK(db.labels.indices == std::vector<uint32_t>{0, 1, 0});

  const std::vector<int64_t> bad = {10};
  CHECK_THROWS_AS(gather_batch(ds, bad, b), Error);
}

TEST_CASE("Batcher covers every row once per epoch, deterministic by (seed, epoch)") {
  Dataset ds = sparse_dataset();
  Batcher batcher(ds, 4, 42, true);
  CHECK(batcher.batches_per_epoch() == 3);
  auto epoch_ids = [&](int64_t epoch) {
    batcher.start_epoch(epoch);
    std::vector<int64_t> seen;
    std::vector<int64_t> sizes;
    Batch b;
    while (batcher.next(b)) {
      sizes.push_back(b.size());
      for (int64_t k = 0; k < b.size(); ++k) {
        // The batch rows really are the rows of those ids.
        REQUIRE(b.sparse_x.indices[static_cast<size_t>(k)] == b.ids[static_cast<size_t>(k)]);
        REQUIRE(b.labels.indices[static_cast<size_t>(k)] == b.ids[static_cast<size_t>(k)] % 3);
      }
      seen.insert(seen.end(), b.ids.begin(), b.ids.end());
    }
    CHECK(sizes == std::vector<int64_t>{4, 4, 2});
    return seen;
  };
  std::vector<int64_t> e0 = epoch_ids(0);
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> all(10);
  std::iota(all.begin(), all.end(), 0);
  CHECK(sorted == all);
  CHECK(e0 != all);           // shuffled
  CHECK(epoch_ids(0) == e0);  // same epoch, same order
  CHECK(epoch_ids(1) != e0);  // another epoch, another order
  Batcher again(ds, 4, 42, true);
  again.start_epoch(0);
  CHECK(again.order() == e0);

  Batcher plain(ds, 3, 42, false);
  plain.start_epoch(5);
  CHECK(plain.order() == all);
  CHECK_THROWS_AS(Batcher(ds, 0, 1, true), InputError);
}
