// The Context-dispatching ops, one test body each (DEVICE_TEST, support/device_test.h),
// run on every device: "... (cpu)" on the CPU, "... (cuda)" on CUDA where a GPU is visible
// (without one that test case is skipped, never passed; the GPU kit sets
// XMC_TEST_REQUIRE_CUDA so that a missing GPU fails there). Each body draws its inputs on
// the host, runs the op on the device through Buffers (core/buffer.h) and compares with a
// naive double-precision reference written here — so the CPU ops that CPU training runs
// and their CUDA twins are held to the same reference. Where the former CPU-vs-CUDA parity
// binary (tests/cuda/test_parity.cpp) held CUDA to the CPU op more tightly than to the
// double reference (the losses), the body also compares with the CPU op's result at that
// tolerance (CPU against CPU in the (cpu) case).
#include <omp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/rng.h"
#include "model/sparse_linear.h"
#include "ops/dense.h"
#include "ops/encoder.h"
#include "ops/fixed_fanin.h"
#include "ops/group_shared.h"
#include "ops/loss.h"
#include "ops/optimizer.h"
#include "ops/topk.h"
#include "support/device_test.h"
#include "support/op_cases.h"

using namespace xmc;
using namespace xmc::test;

namespace {

// A random CSR matrix [rows×cols]: each entry present with probability 1/one_in, values
// uniform in [-1, 1); with some_empty the columns c with c % 7 == 3 stay empty.
CsrMatrix random_csr(Rng& rng, int64_t rows, uint32_t cols, uint32_t one_in,
                     bool some_empty = false) {
  CsrMatrix x;
  x.rows = rows;
  x.cols = cols;
  for (int64_t r = 0; r < rows; ++r) {
    for (uint32_t c = 0; c < cols; ++c)
      if (!(some_empty && c % 7 == 3) && rng.below(one_in) == 0) {
        x.indices.push_back(c);
        x.values.push_back(2.0f * rng.uniformf() - 1.0f);
      }
    x.indptr.push_back(x.nnz());
  }
  return x;
}

// The row-wise update of w [rows×width] with row moments v in fp32 on the host
// (OptimizerStep::apply_row, the CPU's own formula), for the bf16 checks.
void update_rowwise_reference(const OptimizerConfig& cfg, int64_t step, std::vector<float>& w,
                              std::vector<float>& v, int64_t rows, int64_t width,
                              const std::vector<float>& g) {
  const OptimizerStep st(cfg, cfg.lr, step);
  for (int64_t r = 0; r < rows; ++r)
    st.apply_row(w.data() + r * width, g.data() + r * width, v[static_cast<size_t>(r)], width);
}

// An optimizer of the type with momentum (sgd) and weight decay, so every term is used.
OptimizerConfig optimizer_with_decay(OptimizerType type) {
  OptimizerConfig cfg;
  cfg.type = type;
  cfg.momentum = 0.9;
  cfg.weight_decay = 0.01;
  return cfg;
}

// Parameters and two optimizer-state arrays [n] (the second non-negative, as Adam's v).
struct OptArrays {
  std::vector<float> p, s1, s2;
};
OptArrays random_opt_arrays(Rng& rng, size_t n) {
  OptArrays a{random_floats(rng, n), random_floats(rng, n, 0.1f), random_floats(rng, n, 0.1f)};
  for (auto& v : a.s2) v = std::abs(v);
  return a;
}

// Odd sizes, so no kernel's tile divides them.
constexpr int64_t kM = 37, kK = 53, kN = 29;

using testcases::random_targets;

// The per-row logsumexp of a softmax state after pass 1, read through merge() with
// identity reductions (a one-process merge leaves the state as it is): max + log(sum).
std::vector<float> logsumexp(SoftmaxState& st, int64_t rows) {
  std::vector<double> mx, sum;
  st.merge({[&](std::span<double> v) { mx.assign(v.begin(), v.end()); },
            [&](std::span<double> v) { sum.assign(v.begin(), v.end()); }});
  std::vector<float> lse(static_cast<size_t>(rows));
  for (size_t r = 0; r < lse.size(); ++r) lse[r] = static_cast<float>(mx[r] + std::log(sum[r]));
  return lse;
}

// Element-wise equal, NaN equal to NaN.
bool same_scores(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

}  // namespace

DEVICE_TEST("the three GEMMs and the affine forms against a naive product", "[dense]") {
  Rng rng(3);
  const auto a = random_floats(rng, kM * kK), b = random_floats(rng, kK * kN),
             bt = random_floats(rng, kN * kK), at = random_floats(rng, kK * kM),
             bias = random_floats(rng, kN);
  auto da = put(ctx, a);
  auto db = put(ctx, b);
  auto dbt = put(ctx, bt);
  auto dat = put(ctx, at);
  auto dbias = put(ctx, bias);
  Buffer<float> dc(ctx, MemTag::workspace, kM * kN);
  const Matrix c(dc.data(), kM, kN);
  auto ref = [&](auto elem) {
    std::vector<double> r(kM * kN);
    for (int64_t i = 0; i < kM; ++i)
      for (int64_t j = 0; j < kN; ++j) {
        double s = 0;
        for (int64_t k = 0; k < kK; ++k) s += elem(i, j, k);
        r[i * kN + j] = s;
      }
    return r;
  };
  const auto nn =
      ref([&](int64_t i, int64_t j, int64_t k) { return double(a[i * kK + k]) * b[k * kN + j]; });
  const auto nt =
      ref([&](int64_t i, int64_t j, int64_t k) { return double(a[i * kK + k]) * bt[j * kK + k]; });
  const auto tn =
      ref([&](int64_t i, int64_t j, int64_t k) { return double(at[k * kM + i]) * b[k * kN + j]; });
  ops::gemm_nn(ctx, ConstMatrix(da.data(), kM, kK), ConstMatrix(db.data(), kK, kN), c);
  expect_close("", get(dc, kM * kN), nn, 1e-5, 1e-4);
  ops::gemm_nt(ctx, ConstMatrix(da.data(), kM, kK), ConstMatrix(dbt.data(), kN, kK), c);
  expect_close("", get(dc, kM * kN), nt, 1e-5, 1e-4);
  ops::gemm_tn(ctx, ConstMatrix(dat.data(), kK, kM), ConstMatrix(db.data(), kK, kN), c);
  expect_close("", get(dc, kM * kN), tn, 1e-5, 1e-4);
  // affine: relu(bias + x·w) with w [K×N] (nn) or [N×K] (nt).
  auto relu_bias = [&](std::vector<double> r) {
    for (int64_t i = 0; i < kM; ++i)
      for (int64_t j = 0; j < kN; ++j) r[i * kN + j] = std::max(0.0, r[i * kN + j] + bias[j]);
    return r;
  };
  ops::affine_nn(ctx, ConstMatrix(da.data(), kM, kK), db.data(), dbias.data(), true, c);
  expect_close("", get(dc, kM * kN), relu_bias(nn), 1e-5, 1e-4);
  ops::affine_nt(ctx, ConstMatrix(da.data(), kM, kK), dbt.data(), dbias.data(), true, c);
  expect_close("", get(dc, kM * kN), relu_bias(nt), 1e-5, 1e-4);
  // column sums and the row-vector add.
  Buffer<float> dsum(ctx, MemTag::workspace, kK);
  ops::column_sums(ctx, ConstMatrix(da.data(), kM, kK), dsum.data());
  std::vector<double> sums(kK, 0.0);
  for (int64_t i = 0; i < kM; ++i)
    for (int64_t k = 0; k < kK; ++k) sums[k] += a[i * kK + k];
  expect_close("", get(dsum, kK), sums, 1e-5, 1e-5);
}

// The CPU-vs-CUDA parity binary's GEMM sizes (tests/cuda/test_parity.cpp test_gemm), m×n×k
// from 1×1×1 to 256×1000×768: C = 1.5·op(A)·op(B) + 0.5·C onto a random C, A with a padded
// leading dimension (cols + 3), tolerance 1e-5·k + 1e-4 relative; bf16 operands (CUDA
// only) against the double product of the bf16-rounded inputs.
DEVICE_TEST("the three GEMMs at several sizes: alpha, beta onto C, padded A, bf16 on CUDA",
            "[dense]") {
  struct Size {
    int64_t m, n, k;
  };
  for (Size s : {Size{1, 1, 1}, Size{7, 13, 5}, Size{33, 257, 100}, Size{256, 1000, 768}}) {
    DYNAMIC_SECTION(s.m << "x" << s.n << "x" << s.k) {
      Rng rng(23);
      const double abs = 1e-5 * static_cast<double>(s.k);
      for (int op = 0; op < 3; ++op) {
        // nt: A [m×k], B [n×k]; nn: A [m×k], B [k×n]; tn: A [k×m], B [k×n].
        const int64_t ar = op == 2 ? s.k : s.m, ac = op == 2 ? s.m : s.k;
        const int64_t br = op == 0 ? s.n : s.k, bc = op == 0 ? s.k : s.n;
        const int64_t lda = ac + 3;
        const auto a = random_floats(rng, ar * lda), b = random_floats(rng, br * bc),
                   c = random_floats(rng, s.m * s.n);
        const std::string name = op == 0 ? "gemm_nt" : op == 1 ? "gemm_nn" : "gemm_tn";
        // 1.5·op(A)·op(B) + 0.5·C in double, from the values given.
        auto reference = [&](const std::vector<float>& av, const std::vector<float>& bv) {
          std::vector<double> r(static_cast<size_t>(s.m * s.n), 0.0);
          for (int64_t i = 0; i < s.m; ++i) {
            double* ri = r.data() + i * s.n;
            if (op == 0) {
              for (int64_t j = 0; j < s.n; ++j) {
                double sum = 0.0;
                for (int64_t k = 0; k < s.k; ++k) sum += double(av[i * lda + k]) * bv[j * s.k + k];
                ri[j] = sum;
              }
            } else {
              for (int64_t k = 0; k < s.k; ++k) {
                const double aik = op == 1 ? av[i * lda + k] : av[k * lda + i];
                const float* bk = bv.data() + k * s.n;
                for (int64_t j = 0; j < s.n; ++j) ri[j] += aik * bk[j];
              }
            }
            for (int64_t j = 0; j < s.n; ++j) ri[j] = 1.5 * ri[j] + 0.5 * c[i * s.n + j];
          }
          return r;
        };
        auto dc = put(ctx, c);
        const Matrix gc(dc.data(), s.m, s.n);
        auto gemm = [&](auto ga, auto gb) {
          if (op == 0) ops::gemm_nt(ctx, ga, gb, gc, 1.5f, 0.5f);
          if (op == 1) ops::gemm_nn(ctx, ga, gb, gc, 1.5f, 0.5f);
          if (op == 2) ops::gemm_tn(ctx, ga, gb, gc, 1.5f, 0.5f);
        };
        {
          auto da = put(ctx, a);
          auto db = put(ctx, b);
          gemm(ConstMatrix(da.data(), ar, ac, lda), ConstMatrix(db.data(), br, bc));
          expect_close(name + " fp32", get(dc, c.size()), reference(a, b), abs, 1e-4);
        }
        if (ctx.on_gpu()) {
          auto da = put(ctx, to_bf16(a));
          auto db = put(ctx, to_bf16(b));
          dc.copy_from_host(c.data(), c.size());
          gemm(gpu::ConstBf16Matrix(da.data(), ar, ac, lda),
               gpu::ConstBf16Matrix(db.data(), br, bc));
          expect_close(name + " bf16", get(dc, c.size()), reference(rounded(a), rounded(b)), abs,
                       1e-4);
        }
      }
    }
  }
}

// The parity binary's helper shapes (test_helpers): column sums and the row-vector add on
// 3×3 shapes, then more rows than a CUDA grid.y can count (65535), where the kernels stride
// over rows; the rounding into bf16 there too (CUDA only; a CPU Context throws).
DEVICE_TEST("column sums, the row-vector add and the bf16 rounding at several shapes", "[dense]") {
  Rng rng(29);
  auto add_ref = [](std::vector<float> a, const std::vector<float>& bias) {
    const size_t cols = bias.size();
    for (size_t i = 0; i < a.size(); ++i) a[i] += bias[i % cols];
    return a;
  };
  for (int64_t rows : {1, 17, 256}) {
    for (int64_t cols : {1, 300, 5000}) {
      const std::string tag = std::to_string(rows) + "x" + std::to_string(cols);
      const auto a = random_floats(rng, rows * cols), bias = random_floats(rng, cols);
      auto da = put(ctx, a);
      auto dbias = put(ctx, bias);
      Buffer<float> dsum(ctx, MemTag::workspace, cols);
      ops::column_sums(ctx, ConstMatrix(da.data(), rows, cols), dsum.data());
      std::vector<double> sums(cols, 0.0);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) sums[j] += a[i * cols + j];
      expect_close("column_sums " + tag, get(dsum, cols), sums, 1e-5 * rows, 1e-5);
      ops::add_row_vector(ctx, Matrix(da.data(), rows, cols), dbias.data());
      expect_close("add_row_vector " + tag, get(da, a.size()), add_ref(a, bias), 0, 0);
    }
  }
  for (int64_t rows : {65535, 65536, 70001}) {
    const int64_t cols = 3;
    const std::string tag = std::to_string(rows) + "x" + std::to_string(cols);
    const auto a = random_floats(rng, rows * cols), bias = random_floats(rng, cols);
    auto da = put(ctx, a);
    auto dbias = put(ctx, bias);
    ops::add_row_vector(ctx, Matrix(da.data(), rows, cols), dbias.data());
    const auto want = add_ref(a, bias);
    expect_close("add_row_vector " + tag, get(da, a.size()), want, 0, 0);
    Buffer<gpu::Bf16> d16(ctx, MemTag::workspace, a.size());
    const gpu::Bf16Matrix m16(d16.data(), rows, cols);
    if (ctx.on_gpu()) {
      ops::to_bf16(ctx, ConstMatrix(da.data(), rows, cols), m16);
      expect_close("to_bf16 " + tag, widen(get(d16, a.size())), rounded(want), 0, 0);
    } else {
      CHECK_THROWS_AS(ops::to_bf16(ctx, ConstMatrix(da.data(), rows, cols), m16), Error);
    }
  }
}

DEVICE_TEST("mask multiply (with and without a mask), set_zero, ReLU gradient", "[dense]") {
  Rng rng(5);
  const auto x = random_floats(rng, kM * kN), mask = random_floats(rng, kM * kN),
             g = random_floats(rng, kM * kN);
  auto dx = put(ctx, x);
  auto dmask = put(ctx, mask);
  auto dg = put(ctx, g);
  Buffer<float> dy(ctx, MemTag::workspace, kM * kN);
  const Matrix y(dy.data(), kM, kN);
  ops::multiply_mask(ctx, ConstMatrix(dx.data(), kM, kN), dmask.data(), y);
  std::vector<double> ref(kM * kN);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = double(x[i]) * mask[i];
  expect_close("", get(dy, ref.size()), ref, 0, 1e-7);
  ops::multiply_mask(ctx, ConstMatrix(dx.data(), kM, kN), nullptr, y);
  expect_close("", get(dy, ref.size()), std::vector<double>(x.begin(), x.end()), 0, 0);
  ops::activation_grad(ctx, true, ConstMatrix(dx.data(), kM, kN), ConstMatrix(dg.data(), kM, kN),
                       y);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = x[i] > 0 ? g[i] : 0.0;
  expect_close("", get(dy, ref.size()), ref, 0, 0);
  ops::set_zero(ctx, y);
  expect_close("", get(dy, ref.size()), std::vector<double>(ref.size(), 0.0), 0, 0);
}

DEVICE_TEST("the sparse-input layer's forward and weight gradient", "[encoder]") {
  Rng rng(7);
  const int64_t rows = 11, cols = 41, out = 19;
  const CsrMatrix x = random_csr(rng, rows, cols, 5);
  CsrByColumn xt;
  group_by_column(x, xt);
  const auto w = random_floats(rng, cols * out), bias = random_floats(rng, out),
             dz = random_floats(rng, rows * out);
  auto dip = put(ctx, x.indptr);
  auto dval = put(ctx, x.values);
  auto dw = put(ctx, w);
  auto dbias = put(ctx, bias);
  auto ddz = put(ctx, dz);
  auto didx = put(ctx, x.indices);
  Buffer<float> dh(ctx, MemTag::workspace, rows * out);
  ops::csr_dense_forward(ctx, {dip.data(), didx.data(), dval.data(), rows, cols}, dw.data(),
                         dbias.data(), true, Matrix(dh.data(), rows, out));
  std::vector<double> h(rows * out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < out; ++j) {
      double s = bias[j];
      for (int64_t k = x.indptr[r]; k < x.indptr[r + 1]; ++k)
        s += double(x.values[k]) * w[x.indices[k] * out + j];
      h[r * out + j] = std::max(0.0, s);
    }
  expect_close("", get(dh, h.size()), h, 1e-6, 1e-5);
  // Without a bias the product is added to h (no relu): h + x·W.
  ops::csr_dense_forward(ctx, {dip.data(), didx.data(), dval.data(), rows, cols}, dw.data(),
                         nullptr, false, Matrix(dh.data(), rows, out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < out; ++j)
      for (int64_t k = x.indptr[r]; k < x.indptr[r + 1]; ++k)
        h[r * out + j] += double(x.values[k]) * w[x.indices[k] * out + j];
  expect_close("accumulated", get(dh, h.size()), h, 1e-6, 1e-5);
  // g [U×out]: row u = Σ_{entries of column cols[u]} value · dz[row].
  auto dcols = put(ctx, xt.cols);
  auto dstart = put(ctx, xt.start);
  auto drows = put(ctx, xt.rows);
  auto dtv = put(ctx, xt.values);
  const int64_t u = xt.count();
  Buffer<float> dgr(ctx, MemTag::workspace, u * out);
  ops::csr_column_grad(ctx, {dcols.data(), dstart.data(), drows.data(), dtv.data(), u},
                       ConstMatrix(ddz.data(), rows, out), Matrix(dgr.data(), u, out));
  std::vector<double> gr(u * out, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = x.indptr[r]; k < x.indptr[r + 1]; ++k) {
      const auto q =
          std::lower_bound(xt.cols.begin(), xt.cols.end(), x.indices[k]) - xt.cols.begin();
      for (int64_t j = 0; j < out; ++j) gr[q * out + j] += double(x.values[k]) * dz[r * out + j];
    }
  expect_close("", get(dgr, gr.size()), gr, 1e-6, 1e-5);
}

TEST_CASE(
    "G·W grouped by column (csc_accumulate) equals the sparse-input forward's sum, bit "
    "for bit, at any thread count",
    "[encoder][cpu]") {
  // The dense layer's CPU sparse backward: dh += G·W_c with G grouped by column, against
  // csr_dense_forward (no bias: it accumulates) on the same G by row. Every column of the
  // chunk listed (empty ones included) and only the non-empty ones (lazy_update).
  Context ctx;
  Rng rng(29);
  const int64_t rows = 67, cols = 300, d = 96;
  const CsrMatrix x = random_csr(rng, rows, cols, 6, true);
  REQUIRE(x.nnz() * d > 65536);  // large enough for the parallel path
  CsrByColumn nonempty;
  group_by_column(x, nonempty);
  REQUIRE(nonempty.count() < cols);  // some columns are empty
  CsrByColumn every = nonempty;      // cols 0..cols-1, empty ranges for the absent ones
  every.cols.resize(cols);
  every.start.assign(cols + 1, 0);
  for (uint32_t c = 0; c < cols; ++c) every.cols[c] = c;
  for (int64_t u = 0; u < nonempty.count(); ++u)
    every.start[nonempty.cols[u] + 1] = nonempty.start[u + 1] - nonempty.start[u];
  for (int64_t c = 0; c < cols; ++c) every.start[c + 1] += every.start[c];
  const auto w = random_floats(rng, cols * d), h0 = random_floats(rng, rows * d);
  std::vector<float> want = h0;
  ops::csr_dense_forward(ctx, {x.indptr.data(), x.indices.data(), x.values.data(), rows, cols},
                         w.data(), nullptr, false, Matrix(want.data(), rows, d));
  REQUIRE(want != h0);
  const int threads = omp_get_max_threads();
  for (const CsrByColumn* g : {&every, &nonempty})
    for (int t : {1, 2, 3}) {
      INFO((g == &every ? "every column, " : "non-empty columns, ") << t << " threads");
      omp_set_num_threads(t);
      std::vector<float> got = h0;
      ops::csc_accumulate(
          ctx, {g->cols.data(), g->start.data(), g->rows.data(), g->values.data(), g->count()},
          w.data(), Matrix(got.data(), rows, d));
      CHECK(got == want);
    }
  omp_set_num_threads(threads);
}

DEVICE_TEST("the lazy row update equals OptimizerStep::apply per row, other rows untouched",
            "[optimizer]") {
  for (OptimizerType type : {OptimizerType::sgd, OptimizerType::adam, OptimizerType::adamw}) {
    DYNAMIC_SECTION(to_string(type)) {
      Rng rng(11);
      const OptimizerConfig cfg = optimizer_with_decay(type);
      const int64_t n = 31, width = 17;
      const std::vector<uint32_t> ids = {0, 4, 5, 17, 30};
      const auto count = static_cast<int64_t>(ids.size());
      auto [p, s1, s2] = random_opt_arrays(rng, n * width);
      const auto grad = random_floats(rng, count * width);
      auto dp = put(ctx, p);
      auto ds1 = put(ctx, s1);
      auto ds2 = put(ctx, s2);
      auto dgrad = put(ctx, grad);
      auto dids = put(ctx, ids);
      optimizer_update_rows(ctx, cfg, 0.05, 3, dp.data(), dgrad.data(),
                            optimizer_keeps(cfg, 1) ? ds1.data() : nullptr,
                            optimizer_keeps(cfg, 2) ? ds2.data() : nullptr, dids.data(), count,
                            width);
      const OptimizerStep st(cfg, 0.05, 3);
      for (int64_t u = 0; u < count; ++u) {
        const int64_t o = int64_t{ids[u]} * width;
        st.apply(p.data() + o, grad.data() + u * width,
                 optimizer_keeps(cfg, 1) ? s1.data() + o : nullptr,
                 optimizer_keeps(cfg, 2) ? s2.data() + o : nullptr, width);
      }
      // Untouched rows stay bit-identical; touched ones within the fp32 formulas' rounding.
      expect_close("", get(dp, p.size()), std::vector<double>(p.begin(), p.end()), 1e-7, 1e-6);
      if (optimizer_keeps(cfg, 1))
        expect_close("", get(ds1, s1.size()), std::vector<double>(s1.begin(), s1.end()), 1e-8,
                     1e-6);
      const auto got = get(dp, p.size());
      int changed_untouched = 0;
      for (int64_t r = 0; r < n; ++r)
        if (!std::binary_search(ids.begin(), ids.end(), static_cast<uint32_t>(r)))
          for (int64_t j = 0; j < width; ++j)
            changed_untouched += got[r * width + j] != p[r * width + j];
      CHECK(changed_untouched == 0);
    }
  }
}

namespace {

// The fan-in families' reference: label r reads inputs idx[(r / group)·F + j]; fixed
// fan-in is group 1. z = Σ_j w[r,j]·u[b, idx] + bias[r]; dw, db of gradient g; du += g·w.
struct FanInRef {
  std::vector<double> z, dw, db, du;
  int64_t zero_labels = 0;
};
FanInRef fan_in_ref(const std::vector<uint32_t>& idx, const std::vector<float>& w,
                    const std::vector<float>& bias, const std::vector<float>& u,
                    const std::vector<float>& g, const std::vector<float>& du0, int64_t n,
                    int64_t group, int64_t f, int64_t b, int64_t m) {
  FanInRef r;
  r.z.assign(b * n, 0.0);
  r.dw.assign(n * f, 0.0);
  r.db.assign(n, 0.0);
  r.du.assign(du0.begin(), du0.end());
  for (int64_t l = 0; l < n; ++l) {
    const uint32_t* il = idx.data() + (l / group) * f;
    bool all_zero = true;
    for (int64_t s = 0; s < b; ++s) {
      double zz = bias[l];
      const double gl = g[s * n + l];
      all_zero &= gl == 0.0;
      r.db[l] += gl;
      for (int64_t j = 0; j < f; ++j) {
        zz += double(w[l * f + j]) * u[s * m + il[j]];
        r.dw[l * f + j] += gl * u[s * m + il[j]];
        r.du[s * m + il[j]] += gl * w[l * f + j];
      }
      r.z[s * n + l] = zz;
    }
    r.zero_labels += all_zero;
  }
  return r;
}

}  // namespace

DEVICE_TEST("fixed fan-in and group-shared ops and the transpose against one reference",
            "[fanin]") {
  for (int64_t group : {int64_t{1}, int64_t{4}, int64_t{16}}) {
    DYNAMIC_SECTION("group " << group) {
      Rng rng(13);
      const int64_t b = 21, m = 45, n = 71, f = 9, k = (n + group - 1) / group;
      std::vector<uint32_t> idx(k * f);
      for (int64_t q = 0; q < k; ++q) {  // distinct inputs per set
        std::vector<uint32_t> all(m);
        std::iota(all.begin(), all.end(), 0u);
        for (int64_t j = 0; j < f; ++j) std::swap(all[j], all[j + rng.below(m - j)]);
        std::sort(all.begin(), all.begin() + f);
        std::copy(all.begin(), all.begin() + f, idx.begin() + q * f);
      }
      const auto w = random_floats(rng, n * f), bias = random_floats(rng, n),
                 u = random_floats(rng, b * m), du0 = random_floats(rng, b * m);
      auto g = random_floats(rng, b * n);
      for (int64_t l = 0; l < n; l += 5)  // all-zero columns, and scattered zeros
        for (int64_t s = 0; s < b; ++s) g[s * n + l] = 0.0f;
      for (size_t i = 1; i < g.size(); i += 7) g[i] = 0.0f;
      const FanInRef ref = fan_in_ref(idx, w, bias, u, g, du0, n, group, f, b, m);
      auto didx = put(ctx, idx);
      auto dw = put(ctx, w);
      auto dbias = put(ctx, bias);
      auto du = put(ctx, u);
      auto dg = put(ctx, g);
      auto ddu = put(ctx, du0);
      Buffer<float> dut(ctx, MemTag::workspace, m * b);
      ops::transpose(ctx, ConstMatrix(du.data(), b, m), Matrix(dut.data(), m, b));
      std::vector<double> ut_ref(m * b);
      for (int64_t s = 0; s < b; ++s)
        for (int64_t i = 0; i < m; ++i) ut_ref[i * b + s] = u[s * m + i];
      expect_close("", get(dut, ut_ref.size()), ut_ref, 0, 0);
      const ConstMatrix ut(dut.data(), m, b);
      const ConstMatrix gm(dg.data(), b, n);
      Buffer<float> dz(ctx, MemTag::workspace, b * n), ddw(ctx, MemTag::workspace, n * f),
          ddb(ctx, MemTag::workspace, n);
      if (group == 1) {
        Buffer<unsigned long long> zl(ctx, MemTag::workspace, 1);
        ops::fixed_fanin_forward(ctx, didx.data(), dw.data(), dbias.data(), n, f, ut,
                                 Matrix(dz.data(), b, n));
        ops::fixed_fanin_weight_grad(ctx, didx.data(), n, f, gm, ut, ddw.data(), ddb.data(),
                                     zl.data());
        ops::fixed_fanin_input_grad(ctx, didx.data(), dw.data(), n, f, gm,
                                    Matrix(ddu.data(), b, m));
        CHECK(get(zl, 1)[0] == static_cast<unsigned long long>(ref.zero_labels));
      } else {
        ops::group_shared_forward(ctx, didx.data(), dw.data(), dbias.data(), n, group, f, ut,
                                  Matrix(dz.data(), b, n));
        ops::group_shared_weight_grad(ctx, didx.data(), n, group, f, gm, ut, ddw.data(),
                                      ddb.data());
        ops::group_shared_input_grad(ctx, didx.data(), dw.data(), n, group, f, gm,
                                     Matrix(ddu.data(), b, m));
      }
      expect_close("", get(dz, ref.z.size()), ref.z, 1e-5, 1e-5);
      expect_close("", get(ddw, ref.dw.size()), ref.dw, 1e-5, 1e-5);
      expect_close("", get(ddb, ref.db.size()), ref.db, 1e-5, 1e-5);
      expect_close("", get(ddu, ref.du.size()), ref.du, 1e-5, 1e-5);
    }
  }
}

DEVICE_TEST(
    "losses on the device (bias first, loss and zero count accumulated) against a reference",
    "[dense][loss]") {
  for (LossType type : {LossType::bce, LossType::squared_hinge, LossType::softmax}) {
    DYNAMIC_SECTION(to_string(type)) {
      Rng rng(17);
      const int64_t b = 13, c = 57, lo = 5, labels = lo + c + 3;
      CsrMatrix t;
      t.rows = b;
      t.cols = labels;
      for (int64_t r = 0; r < b; ++r) {
        if (r != 2)  // row 2: no positives
          for (uint32_t l = 0; l < labels; ++l)
            if (rng.below(9) == 0) t.indices.push_back(l);
        t.indptr.push_back(t.nnz());
      }
      auto z = random_floats(rng, b * c, 2.5f);
      const auto bias = random_floats(rng, c, 0.5f);
      for (size_t i = 0; i < z.size(); i += 11) z[i] = 3.0f - bias[i % c];  // hinge margin met
      auto dz = put(ctx, z);
      auto dbias = put(ctx, bias);
      LossTargets targets(ctx, b);
      targets.assign(t);
      LossAccumulator acc(ctx);
      acc.reset();
      const Matrix zm(dz.data(), b, c);
      if (type == LossType::softmax) {
        SoftmaxState st(ctx, b);
        st.reset(b);
        // Two chunks of the same labels' logits: accumulate both, then the gradient of each.
        const int64_t c1 = 20;
        softmax_accumulate(ctx, Matrix(dz.data(), b, c1, c), dbias.data(), st);
        softmax_accumulate(ctx, Matrix(dz.data() + c1, b, c - c1, c), dbias.data() + c1, st);
        auto dz2 = put(ctx, z);  // pass 2 on fresh logits (pass 1 may have added the bias)
        softmax_loss_grad(ctx, Matrix(dz2.data(), b, c1, c), dbias.data(), st, targets, lo, b, acc);
        softmax_loss_grad(ctx, Matrix(dz2.data() + c1, b, c - c1, c), dbias.data() + c1, st,
                          targets, lo + c1, b, acc);
        dz = std::move(dz2);
      } else {
        elementwise_loss_grad(ctx, type, zm, dbias.data(), targets, lo, b, acc);
      }
      const gpu::LossAccum a = acc.read();
      // Reference in double; positives of row r among labels [lo, lo+c).
      std::vector<double> gref(b * c, 0.0);
      double lref = 0.0;
      for (int64_t r = 0; r < b; ++r) {
        std::vector<char> pos(c, 0);
        int64_t np = 0;
        for (int64_t k = t.indptr[r]; k < t.indptr[r + 1]; ++k)
          if (t.indices[k] >= lo && t.indices[k] < lo + c) {
            pos[t.indices[k] - lo] = 1;
            ++np;
          }
        if (type == LossType::softmax) {
          const int64_t npos = t.indptr[r + 1] - t.indptr[r];
          if (npos == 0) continue;
          double mx = -1e300, se = 0.0;
          for (int64_t j = 0; j < c; ++j) mx = std::max(mx, double(z[r * c + j]) + bias[j]);
          for (int64_t j = 0; j < c; ++j) se += std::exp(double(z[r * c + j]) + bias[j] - mx);
          const double lse = mx + std::log(se), tt = 1.0 / npos;
          for (int64_t j = 0; j < c; ++j) {
            const double x = double(z[r * c + j]) + bias[j];
            if (pos[j]) lref += tt * (lse - x);
            gref[r * c + j] = (std::exp(x - lse) - (pos[j] ? tt : 0.0)) / b;
          }
          continue;
        }
        for (int64_t j = 0; j < c; ++j) {
          const double x = double(z[r * c + j]) + bias[j];
          const double y = pos[j] ? 1.0 : -1.0;
          if (type == LossType::bce) {
            lref += std::log1p(std::exp(-y * x));
            gref[r * c + j] = -y / (1.0 + std::exp(y * x)) / b;
          } else {
            const double mg = std::max(0.0, 1.0 - y * x);
            lref += mg * mg;
            gref[r * c + j] = -2.0 * y * mg / b;
          }
        }
      }
      CHECK(a.loss == Approx(lref).epsilon(1e-5));
      expect_close("", get(dz, gref.size()), gref, 1e-6, 1e-4);
      if (type == LossType::squared_hinge) {
        const auto g = get(dz, gref.size());
        CHECK(a.zero_grads ==
              static_cast<unsigned long long>(std::count(g.begin(), g.end(), 0.0f)));
        CHECK(a.zero_grads > 0);
      }
    }
  }
}

// The parity binary's loss sizes (test_losses): one entry; rows past the CUDA loss kernels'
// 64 row blocks (each block strides over rows) and past a grid.y (70001); every loss over
// one to three label chunks starting at lo (0 included), the loss and zero count summed
// over the chunks; on CUDA the bf16 copy of the gradient (g_bf16) is the fp32 gradient
// rounded to nearest even, bit for bit. The reference adds the bias in float (as both
// devices do), then works in double: the hinge's margin test is exact in float, so its
// zero count is exact; bce's gradient underflows at a slightly different logit in float.
// Also against the CPU op on the same inputs, at the parity binary's tolerances: gradients
// 1e-7 + 1e-5 relative (softmax 1e-4), losses 1e-6 (softmax 1e-5) + 1e-5 relative, zero
// counts exact for the hinge, the softmax's per-row logsumexp after pass 1 (1e-5 + 1e-5).
DEVICE_TEST("losses over sizes and label chunks, with the bf16 gradient copy on CUDA",
            "[dense][loss]") {
  struct Size {
    int64_t b, c, lo, chunks;
  };
  for (Size s : {Size{1, 1, 0, 1}, Size{5, 37, 3, 2}, Size{64, 1000, 100, 3}, Size{256, 3000, 7, 2},
                 Size{70001, 3, 2, 2}}) {
    DYNAMIC_SECTION(s.b << "x" << s.c << " from " << s.lo << " in " << s.chunks << " chunks") {
      Rng rng(31);
      const bool cuda = ctx.on_gpu();
      const int64_t b = s.b, c = s.c, labels = s.lo + s.c * s.chunks + 11;
      const auto n = static_cast<size_t>(b * c);
      const CsrMatrix t = random_targets(rng, b, labels, 6);
      // Logits of scale 3: the squared hinge meets the margin on a good share of entries.
      std::vector<std::vector<float>> z, bias, x;
      for (int64_t k = 0; k < s.chunks; ++k) {
        z.push_back(random_floats(rng, n, 3.0f));
        bias.push_back(random_floats(rng, c, 0.5f));
        x.push_back(z.back());
        for (size_t i = 0; i < n; ++i) x.back()[i] += bias.back()[i % c];
      }
      // pos[k][r·c + j]: label lo + k·c + j is a positive of row r.
      std::vector<std::vector<char>> pos(s.chunks, std::vector<char>(n, 0));
      for (int64_t r = 0; r < b; ++r)
        for (int64_t e = t.indptr[r]; e < t.indptr[r + 1]; ++e) {
          const int64_t l = int64_t{t.indices[e]} - s.lo;
          if (l >= 0 && l < c * s.chunks) pos[l / c][r * c + l % c] = 1;
        }
      LossTargets targets(ctx, b);
      targets.assign(t);
      LossAccumulator acc(ctx);
      Context cpu;  // the CPU op on the same inputs
      LossTargets cpu_targets(cpu, b);
      cpu_targets.assign(t);
      LossAccumulator cpu_acc(cpu);
      const double gabs = 1e-5 / static_cast<double>(b);
      // The chunk's gradient (in dz) against gref and against the CPU op's (cpu_g, with
      // the parity binary's tolerance cpu_rel), and on CUDA its bf16 copy.
      Buffer<gpu::Bf16> g16(ctx, MemTag::workspace, cuda ? n : 0);
      const gpu::Bf16Matrix g16m = cuda ? gpu::Bf16Matrix(g16.data(), b, c) : gpu::Bf16Matrix{};
      auto check_chunk = [&](const std::string& name, const Buffer<float>& dz,
                             const std::vector<double>& gref, const std::vector<float>& cpu_g,
                             double cpu_rel) {
        const auto got = get(dz, n);
        expect_close(name + " gradient", got, gref, gabs, 1e-4);
        expect_close(name + " gradient against the CPU op", got, cpu_g, 1e-7, cpu_rel);
        if (cuda)
          expect_close(name + " bf16 gradient copy", widen(get(g16, n)), rounded(got), 0, 0);
      };
      for (LossType type : {LossType::bce, LossType::squared_hinge}) {
        acc.reset();
        cpu_acc.reset();
        double lref = 0.0;
        int64_t zref = 0;
        for (int64_t k = 0; k < s.chunks; ++k) {
          const std::string name = std::string(to_string(type)) + " chunk " + std::to_string(k);
          auto dz = put(ctx, z[k]);
          auto db = put(ctx, bias[k]);
          elementwise_loss_grad(ctx, type, Matrix(dz.data(), b, c), db.data(), targets,
                                s.lo + k * c, b, acc, g16m);
          std::vector<float> cpu_g = z[k];
          elementwise_loss_grad(cpu, type, Matrix(cpu_g.data(), b, c), bias[k].data(), cpu_targets,
                                s.lo + k * c, b, cpu_acc);
          std::vector<double> gref(n);
          for (size_t i = 0; i < n; ++i) {
            const double xi = x[k][i], y = pos[k][i] ? 1.0 : -1.0;
            if (type == LossType::bce) {
              lref += std::log1p(std::exp(-y * xi));
              gref[i] = -y / (1.0 + std::exp(y * xi)) / static_cast<double>(b);
            } else {
              const double mg = std::max(0.0, 1.0 - y * xi);
              lref += mg * mg;
              gref[i] = -2.0 * y * mg / static_cast<double>(b);
            }
            zref += gref[i] == 0.0;
          }
          check_chunk(name, dz, gref, cpu_g, 1e-5);
        }
        const gpu::LossAccum a = acc.read();
        const gpu::LossAccum ca = cpu_acc.read();
        INFO(to_string(type));
        CHECK(a.loss == Approx(lref).epsilon(1e-5).margin(1e-6));
        expect_close("loss against the CPU op", a.loss, ca.loss, 1e-6, 1e-5);
        const auto total = static_cast<double>(n) * static_cast<double>(s.chunks);
        const double zero_tol = type == LossType::squared_hinge ? 0.0 : 1e-3 * total + 2;
        CHECK(std::abs(static_cast<double>(a.zero_grads) - static_cast<double>(zref)) <= zero_tol);
        expect_close("zero gradients against the CPU op", static_cast<double>(a.zero_grads),
                     static_cast<double>(ca.zero_grads), zero_tol, 0);
        if (type == LossType::squared_hinge && total > 100) CHECK(a.zero_grads > 0);
      }
      // Softmax: pass 1 over every chunk, then pass 2 (on fresh logits: the CPU's pass 1
      // adds the bias into its logits), t = 1/(the row's positives over all labels).
      SoftmaxState st(ctx, b), cpu_st(cpu, b);
      st.reset(b);
      cpu_st.reset(b);
      for (int64_t k = 0; k < s.chunks; ++k) {
        auto dz = put(ctx, z[k]);
        auto db = put(ctx, bias[k]);
        softmax_accumulate(ctx, Matrix(dz.data(), b, c), db.data(), st);
        std::vector<float> zc = z[k];
        softmax_accumulate(cpu, Matrix(zc.data(), b, c), bias[k].data(), cpu_st);
      }
      std::vector<double> lse(b, 0.0);
      for (int64_t r = 0; r < b; ++r) {
        double mx = -1e300, se = 0.0;
        for (const auto& xk : x)
          for (int64_t j = 0; j < c; ++j) mx = std::max(mx, double(xk[r * c + j]));
        for (const auto& xk : x)
          for (int64_t j = 0; j < c; ++j) se += std::exp(double(xk[r * c + j]) - mx);
        lse[r] = mx + std::log(se);
      }
      const std::vector<float> got_lse = logsumexp(st, b);
      expect_close("softmax logsumexp", got_lse, lse, 1e-5, 1e-5);
      expect_close("softmax logsumexp against the CPU op", got_lse, logsumexp(cpu_st, b), 1e-5,
                   1e-5);
      acc.reset();
      cpu_acc.reset();
      double lref = 0.0;
      for (int64_t k = 0; k < s.chunks; ++k) {
        auto dz = put(ctx, z[k]);
        auto db = put(ctx, bias[k]);
        softmax_loss_grad(ctx, Matrix(dz.data(), b, c), db.data(), st, targets, s.lo + k * c, b,
                          acc, g16m);
        std::vector<float> cpu_g = z[k];
        softmax_loss_grad(cpu, Matrix(cpu_g.data(), b, c), bias[k].data(), cpu_st, cpu_targets,
                          s.lo + k * c, b, cpu_acc);
        std::vector<double> gref(n, 0.0);
        for (int64_t r = 0; r < b; ++r) {
          const int64_t npos = t.indptr[r + 1] - t.indptr[r];
          if (npos == 0) continue;
          const double tt = 1.0 / static_cast<double>(npos);
          for (int64_t j = 0; j < c; ++j) {
            const size_t i = static_cast<size_t>(r * c + j);
            const double xi = x[k][i];
            if (pos[k][i]) lref += tt * (lse[r] - xi);
            gref[i] = (std::exp(xi - lse[r]) - (pos[k][i] ? tt : 0.0)) / static_cast<double>(b);
          }
        }
        check_chunk("softmax chunk " + std::to_string(k), dz, gref, cpu_g, 1e-4);
      }
      const double loss = acc.read().loss;
      CHECK(loss == Approx(lref).epsilon(1e-5).margin(1e-6));
      expect_close("softmax loss against the CPU op", loss, cpu_acc.read().loss, 1e-5, 1e-5);
    }
  }
}

// The sampled backends' candidate losses (bce, squared hinge; weighted and not) on the
// Context's device against a double reference and against the host form on the same
// inputs: gradients 1e-5/B + 1e-4 relative against the reference (the host's bce uses fast
// exp/log1p), 1e-7 + 1e-5 relative against the host form; losses 1e-5 relative; the hinge's
// zero count exact (both compute its margin in double from the same float score). Then the
// sampled softmax (the row offsets on the device; expf on the GPU where the host has its
// approximation: 1e-4 relative against the host form).
DEVICE_TEST("candidate losses over sampled entries on the device equal the host form",
            "[sparse][sampled][loss]") {
  Rng rng(53);
  for (int64_t rows : {int64_t{1}, int64_t{7}, int64_t{300}}) {
    DYNAMIC_SECTION(rows << " rows") {
      std::vector<int64_t> ptr{0};
      for (int64_t r = 0; r < rows; ++r)
        ptr.push_back(ptr.back() + 1 + static_cast<int64_t>(rng.below(120)));
      const int64_t nnz = ptr.back(), batch = rows + 3;
      const auto n = static_cast<size_t>(nnz);
      std::vector<uint8_t> positive(n);
      for (auto& p : positive) p = rng.below(8) == 0 ? 1 : 0;
      const std::vector<float> z = random_floats(rng, n, 3.0f);
      std::vector<float> weight(n);
      for (auto& w : weight)
        w = rng.below(3) == 0 ? 0.03f : 1.0f + static_cast<float>(rng.below(4));
      for (LossType type : {LossType::bce, LossType::squared_hinge}) {
        for (bool weighted : {false, true}) {
          INFO(to_string(type) << (weighted ? " weighted" : ""));
          const double inv_b = 1.0 / static_cast<double>(batch);
          std::vector<double> gref(n);
          double lref = 0.0;
          int64_t zref = 0;
          for (size_t e = 0; e < n; ++e) {
            const double x = z[e], w = weighted ? weight[e] : 1.0, y = positive[e] ? 1.0 : -1.0;
            if (type == LossType::bce) {
              lref += w * std::log1p(std::exp(-y * x));
              gref[e] = w * (1.0 / (1.0 + std::exp(-x)) - (positive[e] ? 1.0 : 0.0)) * inv_b;
            } else {
              const double m = 1.0 - y * x;
              if (m > 0) lref += w * m * m;
              gref[e] = m > 0 ? -2.0 * y * m * w * inv_b : 0.0;
              zref += m > 0 ? 0 : 1;
            }
          }
          Buffer<float> zg = put(ctx, z);
          Buffer<uint8_t> pos_d = put(ctx, positive);
          Buffer<float> w_d = put(ctx, weight);
          LossAccumulator acc(ctx);
          acc.reset(0.5);  // what the step summed before
          candidate_loss_grad(ctx, type, ptr.data(), rows, nnz, pos_d.data(),
                              weighted ? w_d.data() : nullptr, batch, zg.data(), acc);
          const gpu::LossAccum got = acc.read();
          std::vector<float> host = z;
          int64_t host_zeros = 0;
          const double host_loss = candidate_loss_grad(type, ptr.data(), rows, positive.data(),
                                                       weighted ? weight.data() : nullptr, batch,
                                                       host.data(), &host_zeros);
          const auto g = get(zg, n);
          expect_close("gradient", g, gref, 1e-5 * inv_b, 1e-4);
          expect_close("gradient against the host form", g, host, 1e-7, 1e-5);
          expect_close("loss", got.loss - 0.5, lref, 1e-6, 1e-5);
          expect_close("loss against the host form", got.loss - 0.5, host_loss, 1e-6, 1e-5);
          CHECK(static_cast<int64_t>(got.zero_grads) ==
                static_cast<int64_t>(std::count(g.begin(), g.end(), 0.0f)));
          if (type == LossType::squared_hinge) {
            CHECK(static_cast<int64_t>(got.zero_grads) == zref);
            CHECK(host_zeros == zref);
          }
        }
      }
      // Softmax over each point's entries (t = 1/#positives, points without positives
      // contribute nothing), the row offsets on the device: against a double reference and
      // the host form.
      {
        const double inv_b = 1.0 / static_cast<double>(batch);
        std::vector<double> gref(n, 0.0);
        double lref = 0.0;
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t e0 = ptr[r], e1 = ptr[r + 1];
          int64_t np = 0;
          double mx = -1e300;
          for (int64_t e = e0; e < e1; ++e) {
            np += positive[e];
            mx = std::max(mx, static_cast<double>(z[e]));
          }
          if (np == 0) continue;
          double sum = 0.0;
          for (int64_t e = e0; e < e1; ++e) sum += std::exp(z[e] - mx);
          const double lse = mx + std::log(sum), t = 1.0 / static_cast<double>(np);
          for (int64_t e = e0; e < e1; ++e) {
            gref[e] = (std::exp(z[e] - lse) - (positive[e] ? t : 0.0)) * inv_b;
            if (positive[e]) lref += t * (lse - z[e]);
          }
        }
        Buffer<float> zg = put(ctx, z);
        Buffer<uint8_t> pos_d = put(ctx, positive);
        Buffer<int64_t> ptr_d = put(ctx, ptr);
        LossAccumulator acc(ctx);
        acc.reset(0.25);
        candidate_loss_grad(ctx, LossType::softmax, ptr_d.data(), rows, nnz, pos_d.data(), nullptr,
                            batch, zg.data(), acc);
        const gpu::LossAccum got = acc.read();
        std::vector<float> host = z;
        int64_t host_zeros = 0;
        const double host_loss =
            candidate_loss_grad(LossType::softmax, ptr.data(), rows, positive.data(), nullptr,
                                batch, host.data(), &host_zeros);
        const auto g = get(zg, n);
        INFO("softmax");
        expect_close("gradient", g, gref, 1e-5 * inv_b, 1e-4);
        expect_close("gradient against the host form", g, host, 1e-6 * inv_b, 1e-4);
        expect_close("loss", got.loss - 0.25, lref, 1e-5, 1e-5);
        expect_close("loss against the host form", got.loss - 0.25, host_loss, 1e-5, 1e-5);
        CHECK(static_cast<int64_t>(got.zero_grads) ==
              static_cast<int64_t>(std::count(g.begin(), g.end(), 0.0f)));
      }
    }
  }
}

DEVICE_TEST("gradient sparsification: kept above the threshold, 0 or ±t below, unbiased",
            "[dense][loss]") {
  const bool cuda = ctx.on_gpu();
  const int64_t b = 37, c = 513, col0 = 100, labels = 1000;
  const float t = 0.01f;
  const uint64_t stream = gpu::rounding_stream(77, 5);
  Rng rng(12);
  // Magnitudes from 0 to 3t: a third at or above the threshold.
  const std::vector<float> g0 = random_floats(rng, static_cast<size_t>(b * c), 3.0f * t);
  // The expected result, entry by entry, from the documented draw.
  std::vector<double> want(g0.size());
  int64_t zeros = 0, raised = 0;
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < c; ++j) {
      const float x = g0[i * c + j];
      const float v = gpu::sparsify_value(
          x, t, gpu::rounding_bits(stream, static_cast<uint64_t>(i * labels + col0 + j)));
      if (std::abs(x) >= t)
        REQUIRE(v == x);
      else
        REQUIRE((v == 0.0f || v == t || v == -t));
      if (v != 0.0f && v != x) REQUIRE(std::signbit(v) == std::signbit(x));
      zeros += v == 0.0f;
      raised += v != 0.0f && v != x;
      want[i * c + j] = v;
    }
  // A third of the entries is below t, and half of those become 0: about a sixth each.
  CHECK(zeros > b * c / 8);
  CHECK(raised > b * c / 8);
  // The whole matrix at once, and in two column pieces (the chunking of a layer): the same.
  Buffer<float> g = put(ctx, g0);
  Buffer<gpu::Bf16> g16(ctx, MemTag::workspace, cuda ? g0.size() : 0);
  sparsify_gradient(ctx, Matrix(g.data(), b, c), t, stream, col0, labels,
                    cuda ? gpu::Bf16Matrix(g16.data(), b, c) : gpu::Bf16Matrix{});
  const auto got = get(g, g0.size());
  expect_close("sparsified", got, want, 0, 0);
  if (cuda) expect_close("bf16 copy", widen(get(g16, g0.size())), rounded(got), 0, 0);
  Buffer<float> g2 = put(ctx, g0);
  const int64_t c1 = 200;
  sparsify_gradient(ctx, Matrix(g2.data(), b, c1, c), t, stream, col0, labels);
  sparsify_gradient(ctx, Matrix(g2.data() + c1, b, c - c1, c), t, stream, col0 + c1, labels);
  expect_close("sparsified in two pieces", get(g2, g0.size()), want, 0, 0);
  // Unbiased: a constant below the threshold averages back to itself over many draws.
  const int64_t rows = 64;
  for (float x : {0.0023f, -0.0007f}) {
    Buffer<float> m = put(ctx, std::vector<float>(static_cast<size_t>(rows * labels), x));
    sparsify_gradient(ctx, Matrix(m.data(), rows, labels), t, stream, 0, labels);
    const auto v = get(m, static_cast<size_t>(rows * labels));
    double mean = 0.0;
    for (float e : v) mean += e;
    mean /= static_cast<double>(v.size());
    // One draw's deviation is at most sqrt(t·|x|): 5 standard errors of the mean.
    const double se = std::sqrt(t * std::abs(x) / static_cast<double>(v.size()));
    CHECK(std::abs(mean - x) < 5.0 * se);
  }
  // Bad arguments are refused before the device branch.
  CHECK_THROWS(sparsify_gradient(ctx, Matrix(g.data(), b, c), 0.0f, stream, col0, labels));
  CHECK_THROWS(sparsify_gradient(ctx, Matrix(g.data(), b, c), t, stream, col0, c));
}

DEVICE_TEST("the dense optimizer update on the device equals OptimizerStep::apply",
            "[dense][optimizer]") {
  for (OptimizerType type : {OptimizerType::sgd, OptimizerType::adam, OptimizerType::adamw}) {
    DYNAMIC_SECTION(to_string(type)) {
      Rng rng(19);
      const OptimizerConfig cfg = optimizer_with_decay(type);
      const int64_t n = 1031;
      auto [p, s1, s2] = random_opt_arrays(rng, n);
      const auto grad = random_floats(rng, n);
      auto dp = put(ctx, p);
      auto ds1 = put(ctx, s1);
      auto ds2 = put(ctx, s2);
      auto dgrad = put(ctx, grad);
      for (int64_t step = 1; step <= 3; ++step) {
        optimizer_update(ctx, cfg, 0.05, step, dp.data(), dgrad.data(),
                         optimizer_keeps(cfg, 1) ? ds1.data() : nullptr,
                         optimizer_keeps(cfg, 2) ? ds2.data() : nullptr, n);
        OptimizerStep(cfg, 0.05, step)
            .apply(p.data(), grad.data(), optimizer_keeps(cfg, 1) ? s1.data() : nullptr,
                   optimizer_keeps(cfg, 2) ? s2.data() : nullptr, n);
      }
      expect_close("", get(dp, p.size()), std::vector<double>(p.begin(), p.end()), 1e-7, 1e-6);
      if (optimizer_keeps(cfg, 2))
        expect_close("", get(ds2, s2.size()), std::vector<double>(s2.begin(), s2.end()), 1e-9,
                     1e-6);
    }
  }
}

// The parity binary's optimizer sizes (test_optimizers): the four update rules (plain sgd
// without state among them), n from 1 to past a grid, three steps from zero state with a
// fresh gradient each, against the host update (ops/optimizer.h) in fp32: parameters and
// both states. Then bf16 weights (both devices), each step against the fp32 update of the
// current bf16 values: rounded to nearest (within half a bf16 ulp, 2^-9 relative, plus
// slack), stochastically (one of the two bf16 neighbours of the fp32 update), and with bf16
// state as well (weights and state within a bf16 ulp of the fp32 update of the current
// values). The device's bf16 updates equal the CPU's (the same counter-based draws): all
// but a few slots bit for bit (fp32 contraction differences can move a rounding boundary),
// none more than one bf16 step apart.
DEVICE_TEST("the dense optimizer update over sizes with fresh gradients, bf16 weights and state",
            "[dense][optimizer]") {
  for (const OptimizerConfig& cfg : testcases::optimizers()) {
    for (int64_t n : {1, 1000, 1031, 100003}) {
      DYNAMIC_SECTION(testcases::describe(cfg) << ", n=" << n) {
        Rng rng(37);
        const int states = optimizer_state_arrays(cfg);
        if (cfg.type == OptimizerType::sgd && cfg.momentum == 0.0) CHECK(states == 0);
        const auto un = static_cast<size_t>(n);
        auto p = random_floats(rng, un);
        std::vector<float> s1(un, 0.0f), s2(un, 0.0f);
        auto dp = put(ctx, p);
        auto ds1 = put(ctx, s1);
        auto ds2 = put(ctx, s2);
        auto st = [&](auto& b, int i) { return optimizer_keeps(cfg, i) ? b.data() : nullptr; };
        // bf16 weights: nearest, stochastic (fp32 state each), and stochastic with bf16
        // state; the same three on the CPU for the cross-device check.
        Context cpu;
        const auto p16 = to_bf16(p);
        auto w16 = [&](Context& c) { return put(c, p16); };
        auto zeros = [&](Context& c) { return put(c, std::vector<float>(un, 0.0f)); };
        auto zeros16 = [&](Context& c) { return put(c, to_bf16(std::vector<float>(un, 0.0f))); };
        Buffer<gpu::Bf16> dn = w16(ctx), dsr = w16(ctx), dss = w16(ctx);
        Buffer<float> n1 = zeros(ctx), n2 = zeros(ctx), r1 = zeros(ctx), r2 = zeros(ctx);
        Buffer<gpu::Bf16> q1 = zeros16(ctx), q2 = zeros16(ctx);
        Buffer<gpu::Bf16> cn = w16(cpu), csr = w16(cpu), css = w16(cpu);
        Buffer<float> cn1 = zeros(cpu), cn2 = zeros(cpu), cr1 = zeros(cpu), cr2 = zeros(cpu);
        Buffer<gpu::Bf16> cq1 = zeros16(cpu), cq2 = zeros16(cpu);
        int64_t differ = 0;
        for (int64_t step = 1; step <= 3; ++step) {
          INFO("step " << step);
          const auto g = random_floats(rng, un, 0.5f);
          auto dg = put(ctx, g);
          optimizer_update(ctx, cfg, cfg.lr, step, dp.data(), dg.data(), st(ds1, 1), st(ds2, 2), n);
          optimizer_update(cfg, cfg.lr, step, p.data(), g.data(),
                           optimizer_keeps(cfg, 1) ? s1.data() : nullptr,
                           optimizer_keeps(cfg, 2) ? s2.data() : nullptr, n);
          expect_close("params", get(dp, un), p, 1e-6, 1e-5);
          if (optimizer_keeps(cfg, 1)) expect_close("state1", get(ds1, un), s1, 1e-6, 1e-5);
          if (optimizer_keeps(cfg, 2)) expect_close("state2", get(ds2, un), s2, 1e-7, 1e-5);
          // This step's update of the current bf16 values (and states) in fp32.
          auto want_n = widen(get(dn, un)), want_s = widen(get(dsr, un)),
               want_q = widen(get(dss, un));
          auto hn1 = get(n1, un), hn2 = get(n2, un), hr1 = get(r1, un), hr2 = get(r2, un);
          auto hq1 = widen(get(q1, un)), hq2 = widen(get(q2, un));
          auto ref = [&](std::vector<float>& w, std::vector<float>& a, std::vector<float>& b) {
            optimizer_update(cfg, cfg.lr, step, w.data(), g.data(),
                             optimizer_keeps(cfg, 1) ? a.data() : nullptr,
                             optimizer_keeps(cfg, 2) ? b.data() : nullptr, n);
          };
          ref(want_n, hn1, hn2);
          ref(want_s, hr1, hr2);
          ref(want_q, hq1, hq2);
          const uint64_t key = 0x1234u + static_cast<uint64_t>(step);
          optimizer_update(ctx, cfg, cfg.lr, step, dn.data(), dg.data(), st(n1, 1), st(n2, 2), n);
          optimizer_update(ctx, cfg, cfg.lr, step, dsr.data(), dg.data(), st(r1, 1), st(r2, 2), n,
                           key);
          optimizer_update(ctx, cfg, cfg.lr, step, dss.data(), dg.data(), st(q1, 1), st(q2, 2), n,
                           key);
          expect_close("bf16 params (nearest)", widen(get(dn, un)), want_n, 1e-6, 1.0 / 256);
          auto between = [&](const std::vector<float>& got, const std::vector<float>& want) {
            int64_t outside = 0;
            for (size_t i = 0; i < un; ++i) {
              const float x = want[i];
              uint32_t u;
              std::memcpy(&u, &x, 4);
              const float down = gpu::bf16_widen(gpu::Bf16{static_cast<uint16_t>(u >> 16)});
              const float up = gpu::bf16_widen(gpu::Bf16{static_cast<uint16_t>((u >> 16) + 1)});
              const float tol = 1e-6f + std::abs(x) * 1e-5f;
              if (!(got[i] >= std::min(down, up) - tol && got[i] <= std::max(down, up) + tol))
                ++outside;
            }
            return outside;
          };
          INFO("stochastically rounded bf16 params outside their fp32 update's neighbours");
          CHECK(between(widen(get(dsr, un)), want_s) == 0);
          CHECK(between(widen(get(dss, un)), want_q) == 0);
          if (optimizer_keeps(cfg, 1))
            expect_close("bf16 state1", widen(get(q1, un)), hq1, 1e-6, 1.0 / 128);
          if (optimizer_keeps(cfg, 2))
            expect_close("bf16 state2", widen(get(q2, un)), hq2, 1e-9, 1.0 / 128);
          // The same updates on the CPU.
          optimizer_update(cpu, cfg, cfg.lr, step, cn.data(), g.data(), st(cn1, 1), st(cn2, 2), n);
          optimizer_update(cpu, cfg, cfg.lr, step, csr.data(), g.data(), st(cr1, 1), st(cr2, 2), n,
                           key);
          optimizer_update(cpu, cfg, cfg.lr, step, css.data(), g.data(), st(cq1, 1), st(cq2, 2), n,
                           key);
          for (auto [d, c] : {std::pair{&dn, &cn}, std::pair{&dsr, &csr}, std::pair{&dss, &css}}) {
            const auto a = get(*d, un), b = get(*c, un);
            for (size_t i = 0; i < un; ++i) {
              if (a[i].bits == b[i].bits) continue;
              ++differ;
              CHECK(std::abs(int{a[i].bits} - int{b[i].bits}) <= 1);
            }
          }
        }
        INFO(differ << " bf16 weights differ between the device and the CPU");
        CHECK(differ <= 1 + n / 1000);
        if (!ctx.on_gpu()) CHECK(differ == 0);
      }
    }
  }
}

// The parity binary's top-k cases (test_topk_merge), through the streamed device top-k
// (ops/topk.h): scores integers / 4 (many exact ties), some NaN and -inf; k of 1
// to 300; rows shorter than k (L = 3, k = 5: pads) and chunks narrower than k; 70001 rows
// (past a CUDA grid.y). Rows in one block (no begin_block) and in three; each chunk copied
// from the host scores into the workspace. The lists must equal one TopKAccumulator over
// the whole matrix exactly: labels, tie order, NaN ranked as -inf, pads (NaN == NaN).
DEVICE_TEST("top-k streamed over label chunks", "[dense][topk]") {
  struct Case {
    int k;
    int64_t rows, cols, chunk;
    bool specials;  // NaN and -inf among the scores
  };
  const std::vector<Case> cases = {
      {1, 1, 3000, 700, false},   {5, 40, 3000, 700, false}, {64, 40, 3000, 700, false},
      {5, 2, 3, 3, false},        {5, 3, 7, 2, false},       {8, 9, 500, 64, true},
      {100, 17, 2000, 300, true}, {300, 4, 1000, 128, true}, {1, 70001, 5, 5, false}};
  for (const Case& c : cases) {
    DYNAMIC_SECTION("k=" << c.k << " rows=" << c.rows << " cols=" << c.cols << " chunk=" << c.chunk
                         << (c.specials ? " nan/-inf" : "")) {
      Rng rng(41);
      std::vector<float> s(static_cast<size_t>(c.rows * c.cols));
      for (auto& x : s) {
        x = static_cast<float>(rng.below(40)) / 4.0f;
        if (c.specials && rng.below(10) == 0)
          x = rng.below(2) ? std::numeric_limits<float>::quiet_NaN()
                           : -std::numeric_limits<float>::infinity();
      }
      const int64_t offset = 11;
      TopKAccumulator acc(c.rows, c.k);
      acc.add_chunk(ConstMatrix(s.data(), c.rows, c.cols), offset);
      const TopK want = acc.result();
      for (int64_t block_rows : {c.rows, (c.rows + 2) / 3}) {
        INFO("blocks of " << block_rows << " rows");
        int64_t r0 = 0;
        std::vector<float> part;
        auto score = [&](int64_t c0, Matrix z) {
          part.resize(static_cast<size_t>(z.rows * z.cols));
          for (int64_t r = 0; r < z.rows; ++r)
            std::copy_n(s.begin() + (r0 + r) * c.cols + c0, z.cols, part.begin() + r * z.cols);
          ops::copy_from_host(ctx, part.data(), z);
        };
        const TopK got =
            block_rows == c.rows
                ? stream_topk(ctx, c.rows, c.k, block_rows, c.cols, c.chunk, offset, nullptr, score)
                : stream_topk(
                      ctx, c.rows, c.k, block_rows, c.cols, c.chunk, offset,
                      [&](int64_t b0, int64_t) { r0 = b0; }, score);
        CHECK(got.rows == c.rows);
        CHECK(got.k == c.k);
        CHECK(got.labels == want.labels);
        CHECK(same_scores(got.scores, want.scores));
      }
    }
  }
}

// One row shorter than k, with a NaN (the former parity binary's case): the list is the
// three labels by score, NaN ranked as -inf (after 0.5), then pads — no label repeated.
DEVICE_TEST("top-k of a row shorter than k ends in pads, NaN ranked last", "[dense][topk]") {
  const std::vector<float> s = {0.5f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
  auto score = [&](int64_t, Matrix z) { ops::copy_from_host(ctx, s.data(), z); };
  const TopK got = stream_topk(ctx, 1, 5, 1, 3, 3, 0, nullptr, score);
  CHECK(got.labels == std::vector<uint32_t>{2, 0, 1, TopK::kNoLabel, TopK::kNoLabel});
  TopKAccumulator acc(1, 5);
  acc.add_chunk(ConstMatrix(s.data(), 1, 3), 0);
  CHECK(acc.result().labels == got.labels);
}

// Row-wise Adam (optimizer_update_rowwise; adam and adamw with beta1 = 0): rows of width 1,
// 37, 130 and 1000, three steps from zero state with a fresh gradient each, against a
// double-precision reference of the formula (params 1e-6 + 1e-5 relative, the row moments
// 1e-9 + 1e-5 relative); then bf16 params rounded to nearest (within a bf16 ulp of the fp32
// update of the current values) and stochastically, the device's bf16 rows equal to the
// CPU's but for a few slots one bf16 step apart. A config without rowwise and beta1 = 0 is
// refused.
DEVICE_TEST("the row-wise second moment update over widths and steps, fp32 and bf16",
            "[dense][optimizer]") {  // [dense]: the kit's racecheck:ops_dense covers its kernel
  for (OptimizerType type : {OptimizerType::adam, OptimizerType::adamw}) {
    for (int64_t width : {1, 37, 130, 1000}) {
      DYNAMIC_SECTION(to_string(type) << " width " << width) {
        OptimizerConfig cfg;
        cfg.type = type;
        cfg.lr = 1e-2;
        cfg.beta1 = 0.0;
        cfg.weight_decay = type == OptimizerType::adam ? 1e-4 : 1e-2;
        cfg.rowwise = true;
        const int64_t rows = 53;
        const auto n = static_cast<size_t>(rows * width);
        Rng rng(61);
        auto p = random_floats(rng, n);
        std::vector<double> rp(p.begin(), p.end()), rv(static_cast<size_t>(rows), 0.0);
        auto dp = put(ctx, p);
        auto dv = put(ctx, std::vector<float>(static_cast<size_t>(rows), 0.0f));
        Context cpu;
        auto dp16 = put(ctx, to_bf16(p)), cp16 = put(cpu, to_bf16(p));
        auto dv16 = put(ctx, std::vector<float>(static_cast<size_t>(rows), 0.0f));
        auto cv16 = put(cpu, std::vector<float>(static_cast<size_t>(rows), 0.0f));
        auto dn16 = put(ctx, to_bf16(p));
        auto dnv = put(ctx, std::vector<float>(static_cast<size_t>(rows), 0.0f));
        int64_t differ = 0;
        for (int64_t step = 1; step <= 3; ++step) {
          INFO("step " << step);
          const auto g = random_floats(rng, n, 0.5f);
          auto dg = put(ctx, g);
          // The reference, in double.
          const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(step));
          const bool adamw = type == OptimizerType::adamw;
          for (int64_t r = 0; r < rows; ++r) {
            double sq = 0.0;
            for (int64_t j = 0; j < width; ++j) {
              const auto i = static_cast<size_t>(r * width + j);
              const double gi = g[i] + (adamw ? 0.0 : cfg.weight_decay * rp[i]);
              sq += gi * gi;
            }
            double& v = rv[static_cast<size_t>(r)];
            v = cfg.beta2 * v + (1.0 - cfg.beta2) * sq / static_cast<double>(width);
            const double scale = cfg.lr / (std::sqrt(v / bc2) + cfg.eps);
            for (int64_t j = 0; j < width; ++j) {
              const auto i = static_cast<size_t>(r * width + j);
              const double gi = g[i] + (adamw ? 0.0 : cfg.weight_decay * rp[i]);
              rp[i] = rp[i] * (adamw ? 1.0 - cfg.lr * cfg.weight_decay : 1.0) - scale * gi;
            }
          }
          optimizer_update_rowwise(ctx, cfg, cfg.lr, step, dp.data(), dg.data(), dv.data(), rows,
                                   width);
          expect_close("params", get(dp, n), rp, 1e-6, 1e-5);
          expect_close("row moments", get(dv, static_cast<size_t>(rows)), rv, 1e-9, 1e-5);
          // bf16 to nearest: within a bf16 ulp of the fp32 update of the current values.
          auto want = widen(get(dn16, n));
          auto wv = get(dnv, static_cast<size_t>(rows));
          update_rowwise_reference(cfg, step, want, wv, rows, width, g);
          optimizer_update_rowwise(ctx, cfg, cfg.lr, step, dn16.data(), dg.data(), dnv.data(), rows,
                                   width);
          expect_close("bf16 params (nearest)", widen(get(dn16, n)), want, 1e-6, 1.0 / 256);
          // Stochastic, on the device and on the CPU, with the same key.
          const uint64_t key = 0x5151u + static_cast<uint64_t>(step);
          optimizer_update_rowwise(ctx, cfg, cfg.lr, step, dp16.data(), dg.data(), dv16.data(),
                                   rows, width, key);
          optimizer_update_rowwise(cpu, cfg, cfg.lr, step, cp16.data(), g.data(), cv16.data(), rows,
                                   width, key);
          const auto a = get(dp16, n), b = get(cp16, n);
          for (size_t i = 0; i < n; ++i) {
            if (a[i].bits == b[i].bits) continue;
            ++differ;
            CHECK(std::abs(int{a[i].bits} - int{b[i].bits}) <= 1);
          }
        }
        INFO(differ << " bf16 weights differ between the device and the CPU");
        CHECK(differ <= 1 + static_cast<int64_t>(n) / 1000);
        if (!ctx.on_gpu()) CHECK(differ == 0);
        OptimizerConfig plain = cfg;
        plain.rowwise = false;
        CHECK_THROWS_AS(optimizer_update_rowwise(ctx, plain, cfg.lr, 1, dp.data(), dp.data(),
                                                 dv.data(), rows, width),
                        Error);
      }
    }
  }
}

// The row-gathered update of the sampled layers (the former parity binary's test): the four
// update rules, rows of width 1, 37 and 130, three steps, each on a random subset of distinct
// rows in shuffled order, against OptimizerStep::apply per row: the touched rows within the
// fp32 formulas' rounding (params 1e-6 + 1e-5, states 1e-7 / 1e-9 + 1e-5 relative), the
// untouched rows bit-identical to the device's own values before the call (not to the
// host's: a row touched at an earlier step carries that step's rounding difference).
DEVICE_TEST("the lazy row update over widths and steps, untouched rows unchanged", "[optimizer]") {
  const int64_t n = 50;
  for (const OptimizerConfig& cfg : testcases::optimizers()) {
    for (int64_t width : {int64_t{1}, int64_t{37}, int64_t{130}}) {
      DYNAMIC_SECTION(testcases::describe(cfg) << " width " << width) {
        Rng rng(43);
        const auto total = static_cast<size_t>(n * width);
        std::vector<float> p = random_floats(rng, total), s1(total, 0.0f), s2(total, 0.0f);
        auto dp = put(ctx, p), d1 = put(ctx, s1), d2 = put(ctx, s2);
        for (int64_t step = 1; step <= 3; ++step) {
          INFO("step " << step);
          std::vector<uint32_t> rows;
          for (uint32_t r = 0; r < n; ++r)
            if (rng.below(3) == 0) rows.push_back(r);
          for (size_t i = rows.size(); i > 1; --i) std::swap(rows[i - 1], rows[rng.below(i)]);
          const auto count = static_cast<int64_t>(rows.size());
          const std::vector<float> g = random_floats(rng, static_cast<size_t>(count * width), 0.5f);
          const OptimizerStep os(cfg, cfg.lr, step);
          for (int64_t u = 0; u < count; ++u) {
            const int64_t o = int64_t{rows[static_cast<size_t>(u)]} * width;
            os.apply(p.data() + o, g.data() + u * width,
                     optimizer_keeps(cfg, 1) ? s1.data() + o : nullptr,
                     optimizer_keeps(cfg, 2) ? s2.data() + o : nullptr, width);
          }
          auto dg = put(ctx, g);
          auto drows = put(ctx, rows);
          const auto before = get(dp, total);
          optimizer_update_rows(ctx, cfg, cfg.lr, step, dp.data(), dg.data(),
                                optimizer_keeps(cfg, 1) ? d1.data() : nullptr,
                                optimizer_keeps(cfg, 2) ? d2.data() : nullptr, drows.data(), count,
                                width);
          const auto got = get(dp, total);
          expect_close("params", got, p, 1e-6, 1e-5);
          if (optimizer_keeps(cfg, 1)) expect_close("state1", get(d1, total), s1, 1e-7, 1e-5);
          if (optimizer_keeps(cfg, 2)) expect_close("state2", get(d2, total), s2, 1e-9, 1e-5);
          std::vector<char> hit(static_cast<size_t>(n), 0);
          for (uint32_t r : rows) hit[r] = 1;
          int64_t changed_untouched = 0;
          for (int64_t r = 0; r < n; ++r)
            if (!hit[static_cast<size_t>(r)])
              for (int64_t j = 0; j < width; ++j) {
                const auto i = static_cast<size_t>(r * width + j);
                changed_untouched += got[i] != before[i];
              }
          CHECK(changed_untouched == 0);
        }
      }
    }
  }
}
