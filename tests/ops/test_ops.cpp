// The Context-dispatching ops, one test body each, run on every device this machine has:
// the CPU always, CUDA when the build has it and a GPU is visible (the Catch2 section names
// say which ran; without a GPU nothing is claimed for CUDA; the GPU kit sets
// XMC_TEST_REQUIRE_CUDA so that a missing GPU fails there). Each body draws its inputs on
// the host, runs the op on the device through Buffers (core/buffer.h) and compares with a
// naive double-precision reference written here — so the CPU ops that CPU training runs
// and their CUDA twins are held to the same reference.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/rng.h"
#include "kernels/dense_ops.h"
#include "kernels/encoder_ops.h"
#include "kernels/fixed_fanin_ops.h"
#include "kernels/group_shared_ops.h"
#include "model/csr_by_column.h"
#include "model/loss.h"
#include "model/optimizer.h"
#include "ops_test_util.h"

using namespace xmc;
using namespace xmc::opstest;

namespace {

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

}  // namespace

TEST_CASE("the three GEMMs and the affine forms against a naive product") {
  for (Device dev : test_devices()) {
    DYNAMIC_SECTION("device " << to_string(dev)) {
      Context ctx(dev);
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
      const auto nn = ref([&](int64_t i, int64_t j, int64_t k) { return double(a[i * kK + k]) * b[k * kN + j]; });
      const auto nt = ref([&](int64_t i, int64_t j, int64_t k) { return double(a[i * kK + k]) * bt[j * kK + k]; });
      const auto tn = ref([&](int64_t i, int64_t j, int64_t k) { return double(at[k * kM + i]) * b[k * kN + j]; });
      kernels::gemm_nn(ctx, ConstMatrix(da.data(), kM, kK), ConstMatrix(db.data(), kK, kN), c);
      expect_close("", get(dc, kM * kN), nn, 1e-5, 1e-4);
      kernels::gemm_nt(ctx, ConstMatrix(da.data(), kM, kK), ConstMatrix(dbt.data(), kN, kK), c);
      expect_close("", get(dc, kM * kN), nt, 1e-5, 1e-4);
      kernels::gemm_tn(ctx, ConstMatrix(dat.data(), kK, kM), ConstMatrix(db.data(), kK, kN), c);
      expect_close("", get(dc, kM * kN), tn, 1e-5, 1e-4);
      // affine: relu(bias + x·w) with w [K×N] (nn) or [N×K] (nt).
      auto relu_bias = [&](std::vector<double> r) {
        for (int64_t i = 0; i < kM; ++i)
          for (int64_t j = 0; j < kN; ++j) r[i * kN + j] = std::max(0.0, r[i * kN + j] + bias[j]);
        return r;
      };
      kernels::affine_nn(ctx, ConstMatrix(da.data(), kM, kK), db.data(), dbias.data(), true, c);
      expect_close("", get(dc, kM * kN), relu_bias(nn), 1e-5, 1e-4);
      kernels::affine_nt(ctx, ConstMatrix(da.data(), kM, kK), dbt.data(), dbias.data(), true, c);
      expect_close("", get(dc, kM * kN), relu_bias(nt), 1e-5, 1e-4);
      // column sums and the row-vector add.
      Buffer<float> dsum(ctx, MemTag::workspace, kK);
      kernels::column_sums(ctx, ConstMatrix(da.data(), kM, kK), dsum.data());
      std::vector<double> sums(kK, 0.0);
      for (int64_t i = 0; i < kM; ++i)
        for (int64_t k = 0; k < kK; ++k) sums[k] += a[i * kK + k];
      expect_close("", get(dsum, kK), sums, 1e-5, 1e-5);
    }
  }
}

TEST_CASE("mask multiply (with and without a mask), set_zero, ReLU gradient") {
  for (Device dev : test_devices()) {
    DYNAMIC_SECTION("device " << to_string(dev)) {
      Context ctx(dev);
      Rng rng(5);
      const auto x = random_floats(rng, kM * kN), mask = random_floats(rng, kM * kN),
                 g = random_floats(rng, kM * kN);
      auto dx = put(ctx, x);
      auto dmask = put(ctx, mask);
      auto dg = put(ctx, g);
      Buffer<float> dy(ctx, MemTag::workspace, kM * kN);
      const Matrix y(dy.data(), kM, kN);
      kernels::multiply_mask(ctx, ConstMatrix(dx.data(), kM, kN), dmask.data(), y);
      std::vector<double> ref(kM * kN);
      for (size_t i = 0; i < ref.size(); ++i) ref[i] = double(x[i]) * mask[i];
      expect_close("", get(dy, ref.size()), ref, 0, 1e-7);
      kernels::multiply_mask(ctx, ConstMatrix(dx.data(), kM, kN), nullptr, y);
      expect_close("", get(dy, ref.size()), std::vector<double>(x.begin(), x.end()), 0, 0);
      kernels::activation_grad(ctx, true, ConstMatrix(dx.data(), kM, kN),
                               ConstMatrix(dg.data(), kM, kN), y);
      for (size_t i = 0; i < ref.size(); ++i) ref[i] = x[i] > 0 ? g[i] : 0.0;
      expect_close("", get(dy, ref.size()), ref, 0, 0);
      kernels::set_zero(ctx, y);
      expect_close("", get(dy, ref.size()), std::vector<double>(ref.size(), 0.0), 0, 0);
    }
  }
}

TEST_CASE("the sparse-input layer's forward and weight gradient") {
  for (Device dev : test_devices()) {
    DYNAMIC_SECTION("device " << to_string(dev)) {
      Context ctx(dev);
      Rng rng(7);
      const int64_t rows = 11, cols = 41, out = 19;
      CsrMatrix x;
      x.rows = rows;
      x.cols = cols;
      for (int64_t r = 0; r < rows; ++r) {
        for (uint32_t c = 0; c < cols; ++c)
          if (rng.below(5) == 0) {
            x.indices.push_back(c);
            x.values.push_back(2.0f * rng.uniformf() - 1.0f);
          }
        x.indptr.push_back(x.nnz());
      }
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
      kernels::csr_dense_forward(ctx, {dip.data(), didx.data(), dval.data(), rows, cols},
                                 dw.data(), dbias.data(), true, Matrix(dh.data(), rows, out));
      std::vector<double> h(rows * out);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < out; ++j) {
          double s = bias[j];
          for (int64_t k = x.indptr[r]; k < x.indptr[r + 1]; ++k)
            s += double(x.values[k]) * w[x.indices[k] * out + j];
          h[r * out + j] = std::max(0.0, s);
        }
      expect_close("", get(dh, h.size()), h, 1e-6, 1e-5);
      // g [U×out]: row u = Σ_{entries of column cols[u]} value · dz[row].
      auto dcols = put(ctx, xt.cols);
      auto dstart = put(ctx, xt.start);
      auto drows = put(ctx, xt.rows);
      auto dtv = put(ctx, xt.values);
      const int64_t u = xt.count();
      Buffer<float> dgr(ctx, MemTag::workspace, u * out);
      kernels::csr_column_grad(ctx, {dcols.data(), dstart.data(), drows.data(), dtv.data(), u},
                               ConstMatrix(ddz.data(), rows, out), Matrix(dgr.data(), u, out));
      std::vector<double> gr(u * out, 0.0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = x.indptr[r]; k < x.indptr[r + 1]; ++k) {
          const auto q = std::lower_bound(xt.cols.begin(), xt.cols.end(), x.indices[k]) -
                         xt.cols.begin();
          for (int64_t j = 0; j < out; ++j) gr[q * out + j] += double(x.values[k]) * dz[r * out + j];
        }
      expect_close("", get(dgr, gr.size()), gr, 1e-6, 1e-5);
    }
  }
}

TEST_CASE("the lazy row update equals OptimizerStep::apply per row, other rows untouched") {
  for (Device dev : test_devices()) {
    for (OptimizerType type : {OptimizerType::sgd, OptimizerType::adam, OptimizerType::adamw}) {
      DYNAMIC_SECTION("device " << to_string(dev) << ", " << to_string(type)) {
        Context ctx(dev);
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
        const int states = optimizer_state_arrays(cfg);
        optimizer_update_rows(ctx, cfg, 0.05, 3, dp.data(), dgrad.data(),
                              states >= 1 ? ds1.data() : nullptr, states >= 2 ? ds2.data() : nullptr,
                              dids.data(), count, width);
        const OptimizerStep st(cfg, 0.05, 3);
        for (int64_t u = 0; u < count; ++u) {
          const int64_t o = int64_t{ids[u]} * width;
          st.apply(p.data() + o, grad.data() + u * width, states >= 1 ? s1.data() + o : nullptr,
                   states >= 2 ? s2.data() + o : nullptr, width);
        }
        // Untouched rows stay bit-identical; touched ones within the fp32 formulas' rounding.
        expect_close("", get(dp, p.size()), std::vector<double>(p.begin(), p.end()), 1e-7, 1e-6);
        if (states >= 1)
          expect_close("", get(ds1, s1.size()), std::vector<double>(s1.begin(), s1.end()), 1e-8, 1e-6);
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

TEST_CASE("fixed fan-in and group-shared ops and the transpose against one reference") {
  for (Device dev : test_devices()) {
    for (int64_t group : {int64_t{1}, int64_t{4}, int64_t{16}}) {
      DYNAMIC_SECTION("device " << to_string(dev) << ", group " << group) {
        Context ctx(dev);
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
        kernels::transpose(ctx, ConstMatrix(du.data(), b, m), Matrix(dut.data(), m, b));
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
          kernels::fixed_fanin_forward(ctx, didx.data(), dw.data(), dbias.data(), n, f, ut,
                                       Matrix(dz.data(), b, n));
          kernels::fixed_fanin_weight_grad(ctx, didx.data(), n, f, gm, ut, ddw.data(), ddb.data(),
                                           zl.data());
          kernels::fixed_fanin_input_grad(ctx, didx.data(), dw.data(), n, f, gm,
                                          Matrix(ddu.data(), b, m));
          CHECK(get(zl, 1)[0] == static_cast<unsigned long long>(ref.zero_labels));
        } else {
          kernels::group_shared_forward(ctx, didx.data(), dw.data(), dbias.data(), n, group, f, ut,
                                        Matrix(dz.data(), b, n));
          kernels::group_shared_weight_grad(ctx, didx.data(), n, group, f, gm, ut, ddw.data(),
                                            ddb.data());
          kernels::group_shared_input_grad(ctx, didx.data(), dw.data(), n, group, f, gm,
                                           Matrix(ddu.data(), b, m));
        }
        expect_close("", get(dz, ref.z.size()), ref.z, 1e-5, 1e-5);
        expect_close("", get(ddw, ref.dw.size()), ref.dw, 1e-5, 1e-5);
        expect_close("", get(ddb, ref.db.size()), ref.db, 1e-5, 1e-5);
        expect_close("", get(ddu, ref.du.size()), ref.du, 1e-5, 1e-5);
      }
    }
  }
}

TEST_CASE("losses on the device (bias first, loss and zero count accumulated) against a reference") {
  for (Device dev : test_devices()) {
    for (LossType type : {LossType::bce, LossType::squared_hinge, LossType::softmax}) {
      DYNAMIC_SECTION("device " << to_string(dev) << ", " << to_string(type)) {
        Context ctx(dev);
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
          CHECK(a.zero_grads == static_cast<unsigned long long>(std::count(g.begin(), g.end(), 0.0f)));
          CHECK(a.zero_grads > 0);
        }
      }
    }
  }
}

TEST_CASE("the dense optimizer update on the device equals OptimizerStep::apply") {
  for (Device dev : test_devices()) {
    for (OptimizerType type : {OptimizerType::sgd, OptimizerType::adam, OptimizerType::adamw}) {
      DYNAMIC_SECTION("device " << to_string(dev) << ", " << to_string(type)) {
        Context ctx(dev);
        Rng rng(19);
        const OptimizerConfig cfg = optimizer_with_decay(type);
        const int64_t n = 1031;
        auto [p, s1, s2] = random_opt_arrays(rng, n);
        const auto grad = random_floats(rng, n);
        auto dp = put(ctx, p);
        auto ds1 = put(ctx, s1);
        auto ds2 = put(ctx, s2);
        auto dgrad = put(ctx, grad);
        const int states = optimizer_state_arrays(cfg);
        for (int64_t step = 1; step <= 3; ++step) {
          optimizer_update(ctx, cfg, 0.05, step, dp.data(), dgrad.data(),
                           states >= 1 ? ds1.data() : nullptr, states >= 2 ? ds2.data() : nullptr, n);
          OptimizerStep(cfg, 0.05, step)
              .apply(p.data(), grad.data(), states >= 1 ? s1.data() : nullptr,
                     states >= 2 ? s2.data() : nullptr, n);
        }
        expect_close("", get(dp, p.size()), std::vector<double>(p.begin(), p.end()), 1e-7, 1e-6);
        if (states >= 2)
          expect_close("", get(ds2, s2.size()), std::vector<double>(s2.begin(), s2.end()), 1e-9, 1e-6);
      }
    }
  }
}
