// Host-side pieces of the GPU encoder, testable without a GPU: the by-column grouping of a
// sparse batch (the sparse layer's weight gradient on the device), the host-drawn dropout
// masks (the same entries as the sparse input's dropout), and the staged forward
// (stage + forward_staged == forward, same random draws, on the CPU).
#include <catch2/catch.hpp>

#include <vector>

#include "core/context.h"
#include "model/dropout.h"
#include "model/encoder.h"
#include "model/sparse_linear.h"
#include "model_test_util.h"

using namespace xmc;
using namespace xmc::test;

TEST_CASE("group_by_column lists each column's entries in position order") {
  // Rows: {2:0.5, 5:1.0}, {}, {0:2.0, 2:3.0}, {2:4.0}
  std::vector<std::vector<uint32_t>> idx = {{2, 5}, {}, {0, 2}, {2}};
  std::vector<std::vector<float>> val = {{0.5f, 1.0f}, {}, {2.0f, 3.0f}, {4.0f}};
  const CsrMatrix x = make_csr(idx, 6, &val);
  CsrByColumn g;
  group_by_column(x, g);
  CHECK(g.cols == std::vector<uint32_t>{0, 2, 5});
  CHECK(g.start == std::vector<int64_t>{0, 1, 4, 5});
  CHECK(g.rows == std::vector<uint32_t>{2, 0, 2, 3, 0});
  CHECK(g.values == std::vector<float>{2.0f, 0.5f, 3.0f, 4.0f, 1.0f});
  // Pattern-only input: every value 1; reusing the output clears it.
  const CsrMatrix p = make_csr({{1}, {1, 3}}, 4);
  group_by_column(p, g);
  CHECK(g.cols == std::vector<uint32_t>{1, 3});
  CHECK(g.start == std::vector<int64_t>{0, 2, 3});
  CHECK(g.rows == std::vector<uint32_t>{0, 1, 1});
  CHECK(g.values == std::vector<float>{1.0f, 1.0f, 1.0f});
  // Empty batch.
  group_by_column(make_csr({{}, {}}, 4), g);
  CHECK(g.count() == 0);
  CHECK(g.start == std::vector<int64_t>{0});
}

TEST_CASE("dropout_mask draws one uniform per entry and dropout_sparse drops the same entries") {
  const int64_t rows = 7, cols = 13, n = rows * cols;
  const double p = 0.3;
  const float keep = static_cast<float>(1.0 / (1.0 - p));
  std::vector<float> mask(static_cast<size_t>(n));
  Rng a(5), b(5);
  dropout_mask(mask.data(), n, p, a);
  int zeros = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool dropped = b.uniformf() < static_cast<float>(p);
    CHECK(mask[static_cast<size_t>(i)] == (dropped ? 0.0f : keep));
    zeros += dropped;
  }
  CHECK(a.state() == b.state());  // one draw per entry
  CHECK(zeros > 0);
  CHECK(zeros < n);
  // The sparse input's dropout, from the same stream over a full pattern (every value 2),
  // keeps exactly the entries the mask keeps, scaled by the same 1/(1-p).
  std::vector<std::vector<uint32_t>> idx(static_cast<size_t>(rows));
  std::vector<std::vector<float>> val(static_cast<size_t>(rows));
  std::vector<std::vector<uint32_t>> kept(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      idx[static_cast<size_t>(r)].push_back(static_cast<uint32_t>(j));
      val[static_cast<size_t>(r)].push_back(2.0f);
      if (mask[static_cast<size_t>(r * cols + j)] != 0.0f)
        kept[static_cast<size_t>(r)].push_back(static_cast<uint32_t>(j));
    }
  CsrMatrix x = make_csr(idx, cols, &val);
  Rng c(5);
  dropout_sparse(x, p, c);
  CHECK(c.state() == a.state());
  REQUIRE(x.rows == rows);
  for (int64_t r = 0; r < rows; ++r) {
    const size_t begin = static_cast<size_t>(x.indptr[static_cast<size_t>(r)]);
    const size_t end = static_cast<size_t>(x.indptr[static_cast<size_t>(r) + 1]);
    CHECK(std::vector<uint32_t>(x.indices.begin() + static_cast<std::ptrdiff_t>(begin),
                                x.indices.begin() + static_cast<std::ptrdiff_t>(end)) ==
          kept[static_cast<size_t>(r)]);
    for (size_t k = begin; k < end; ++k) CHECK(x.values[k] == 2.0f * keep);
  }
}

TEST_CASE("staged forward equals forward, with the same random draws") {
  Context ctx(Device::cpu, 1);
  OptimizerConfig optim;
  optim.type = OptimizerType::adam;
  const std::vector<EncoderLayerConfig> layers = {{"sparse_linear", 6, "relu", 0.25},
                                                  {"linear", 4, "relu", 0.5}};
  Encoder direct(ctx, layers, 12, true, optim, 3);
  Encoder staged(ctx, layers, 12, true, optim, 3);
  Batch batches[2];
  Rng data(9);
  for (auto& b : batches) {
    std::vector<std::vector<uint32_t>> idx = {{0, 3, 4}, {3, 9}, {1, 4, 10, 11}};
    std::vector<std::vector<float>> val;
    for (auto& row : idx) val.push_back(to_float(random_vector(data, row.size(), 0.2, 1.5)));
    b.ids = {0, 1, 2};
    b.sparse = true;
    b.sparse_x = make_csr(idx, 12, &val);
    b.labels = make_csr({{0}, {1}, {}}, 5);
  }
  Rng r1(17), r2(17);
  // The trainer's order: stage 0; then per batch: forward_staged, stage the next, backward.
  staged.stage(batches[0], true, r2);
  for (int i = 0; i < 2; ++i) {
    const ConstMatrix h1 = direct.forward(batches[i], true, r1);
    std::vector<float> want(h1.data, h1.data + h1.rows * h1.cols);
    const ConstMatrix h2 = staged.forward_staged();
    if (i == 0) staged.stage(batches[1], true, r2);
    std::vector<float> got(h2.data, h2.data + h2.rows * h2.cols);
    CHECK(got == want);
    std::vector<float> dh(want.size(), 0.1f);
    direct.backward_update(ConstMatrix(dh.data(), h1.rows, h1.cols), 1e-2, i + 1);
    staged.backward_update(ConstMatrix(dh.data(), h1.rows, h1.cols), 1e-2, i + 1);
  }
  CHECK(r1.state() == r2.state());
  // Same parameters after the two steps; sync_state is a no-op on the CPU.
  staged.sync_state(StateSync::to_host);
  auto sa = direct.state();
  auto sb = staged.state();
  REQUIRE(sa.size() == sb.size());
  for (size_t t = 0; t < sa.size(); ++t) {
    if (!std::holds_alternative<float*>(sa[t].data)) continue;
    const float* pa = std::get<float*>(sa[t].data);
    const float* pb = std::get<float*>(sb[t].data);
    CHECK(std::vector<float>(pa, pa + sa[t].numel()) == std::vector<float>(pb, pb + sb[t].numel()));
  }
  staged.sync_state(StateSync::release);
  CHECK_THROWS(staged.forward_staged());  // nothing staged
}
