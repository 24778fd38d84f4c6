// Host-side pieces of the GPU encoder, testable without a GPU: the by-column grouping of a
// sparse batch (the sparse layer's weight gradient on the device), the host-drawn dropout
// masks (same draws as dropout_dense), and the staged forward (stage + forward_staged ==
// forward, same random draws, on the CPU).
#include <catch2/catch.hpp>

#include <vector>

#include "core/context.h"
#include "model/csr_by_column.h"
#include "model/dropout.h"
#include "model/encoder.h"
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

namespace {
// Inverted dropout of x [B×n] in place, the multipliers into mask [B×n] (the dense
// dropout the host-drawn masks reproduce).
void dropout_dense(Matrix x, float* mask, double p, Rng& rng) {
  dropout_mask(mask, x.rows * x.cols, p, rng);
  for (int64_t r = 0; r < x.rows; ++r) {
    float* xr = x.row(r);
    const float* mr = mask + r * x.cols;
    for (int64_t j = 0; j < x.cols; ++j) xr[j] *= mr[j];
  }
}
}  // namespace

TEST_CASE("dropout_mask makes the draws of dropout_dense") {
  const int64_t rows = 7, cols = 13;
  DenseMatrix x(rows, cols);
  for (auto& v : x.values) v = 1.0f;
  std::vector<float> mask_dense(static_cast<size_t>(rows * cols)), mask(mask_dense.size());
  Rng a(5), b(5);
  dropout_dense(x.view(), mask_dense.data(), 0.3, a);
  dropout_mask(mask.data(), rows * cols, 0.3, b);
  CHECK(mask == mask_dense);
  CHECK(a.state() == b.state());  // same number of draws
  int zeros = 0;
  for (float m : mask) zeros += m == 0.0f;
  CHECK(zeros > 0);
  CHECK(zeros < rows * cols);
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
