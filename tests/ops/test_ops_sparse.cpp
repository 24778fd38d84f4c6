// The sparse op families (transposes, fixed fan-in, group-shared fp32 and bf16, sampled
// scoring) on every device (DEVICE_TEST: the CPU always, CUDA where a GPU is visible; bf16
// only on CUDA): the former CPU-vs-CUDA parity binary test_parity_sparse as shared
// test bodies. Every op runs on fresh random inputs at several sizes, odd ones included
// (n not a multiple of G or of the label tile, B not a multiple of the batch tile, F up to
// 256, all-zero gradient columns and tiles), and is compared element-wise with
// |got - ref| <= abs + |ref|·rel.
//
// References: fixed fan-in against the CPU ops (ops/fixed_fanin.h: the code CPU
// training runs; tests/ops/test_ops.cpp holds them to a naive reference); group-shared and
// sampled scoring against naive double-precision loops written here.
// Tolerances: fp32 sums of K terms of size ~1 get abs = 4e-6·K, rel = 1e-4 (fp32 rounding
// of a length-K sum in another order, FMA contraction on the GPU). bf16: the reference is
// computed from the same bf16-rounded ut, w and (for the gradients, which the kernels
// round when staging) g, so only the accumulation order differs and the fp32 tolerance
// applies; a second check against the unrounded fp32 reference bounds the bf16 error by
// 2^-7 relative to the sum of |terms| (documented budget, three roundings of 2^-9).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/context.h"
#include "core/rng.h"
#include "ops/fixed_fanin.h"
#include "ops/group_shared.h"
#include "ops/sampled.h"
#include "support/device_test.h"

namespace {

using namespace xmc;
using gpu::Bf16;
using namespace xmc::test;

// rows index sets of `fan_in` distinct inputs from [0, m).
std::vector<uint32_t> random_index_sets(Rng& rng, int64_t rows, int64_t fan_in, int64_t m) {
  std::vector<uint32_t> idx(static_cast<size_t>(rows * fan_in));
  std::vector<uint32_t> pool(static_cast<size_t>(m));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < m; ++i) pool[static_cast<size_t>(i)] = static_cast<uint32_t>(i);
    for (int64_t j = 0; j < fan_in; ++j) {  // partial Fisher-Yates
      const auto k = j + static_cast<int64_t>(rng.below(static_cast<uint64_t>(m - j)));
      std::swap(pool[static_cast<size_t>(j)], pool[static_cast<size_t>(k)]);
      idx[static_cast<size_t>(r * fan_in + j)] = pool[static_cast<size_t>(j)];
    }
  }
  return idx;
}

// A gradient g [B×n] with exact zeros: every third column entirely (labels skipped by
// the weight gradient), the first `zero_cols` columns (whole groups / label tiles), and
// about half of the remaining entries (squared hinge with the margin met).
std::vector<float> sparse_gradient(Rng& rng, int64_t batch, int64_t n, int64_t zero_cols) {
  std::vector<float> g = random_floats(rng, static_cast<size_t>(batch * n));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t l = 0; l < n; ++l) {
      float& v = g[static_cast<size_t>(b * n + l)];
      if (l < zero_cols || l % 3 == 1 || rng.uniformf() < 0.5f) v = 0.0f;
    }
  return g;
}

std::string size_tag(std::initializer_list<std::pair<const char*, int64_t>> kv) {
  std::string s;
  for (const auto& [k, v] : kv)
    s += std::string(s.empty() ? "" : " ") + k + "=" + std::to_string(v);
  return s;
}

// --- transposes -----------------------------------------------------------------------
void body_transpose(Context& ctx, Rng& rng) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {33, 70}, {64, 768}, {257, 31}}) {
    const auto u = random_floats(rng, static_cast<size_t>(rows * cols));
    std::vector<float> ref(u.size());
    ops::transpose(ConstMatrix(u.data(), rows, cols), Matrix(ref.data(), cols, rows));
    auto du = put(ctx, u);
    Buffer<float> dt(ctx, MemTag::workspace, u.size());
    Buffer<Bf16> dt16(ctx, MemTag::workspace, u.size());
    ops::transpose(ctx, ConstMatrix(du.data(), rows, cols), Matrix(dt.data(), cols, rows));
    if (ctx.on_gpu())  // bf16 exists on the GPU only
      ops::transpose(ctx, ConstMatrix(du.data(), rows, cols),
                     gpu::Bf16Matrix(dt16.data(), cols, rows));
    const std::string tag = size_tag({{"rows", rows}, {"cols", cols}});
    expect_close("transpose fp32 " + tag, get(dt, u.size()), ref, 0.0, 0.0);
    if (!ctx.on_gpu()) continue;
    const auto t16 = get(dt16, u.size());
    std::vector<float> got16(t16.size());
    for (size_t i = 0; i < t16.size(); ++i) got16[i] = gpu::bf16_widen(t16[i]);
    expect_close("transpose bf16 " + tag, got16, rounded(ref), 0.0, 0.0);
  }
}

// --- fixed fan-in ---------------------------------------------------------------------
void body_fixed_fanin(Context& ctx, Rng& rng) {
  Context cpu;  // the CPU ops are the reference
  struct Size {
    int64_t batch, m, n, fan_in;
  };
  // m <= 768: shared-memory input gradient; m > 768 with B >= 32: global atomics.
  for (Size s :
       {Size{1, 5, 1, 1}, Size{7, 40, 33, 5}, Size{64, 768, 1000, 64}, Size{61, 300, 517, 128},
        Size{33, 1000, 100, 32}, Size{20, 600, 50, 256}, Size{100, 2000, 70, 256}}) {
    const std::string tag = size_tag({{"B", s.batch}, {"m", s.m}, {"n", s.n}, {"F", s.fan_in}});
    const auto idx = random_index_sets(rng, s.n, s.fan_in, s.m);
    const auto w = random_floats(rng, static_cast<size_t>(s.n * s.fan_in));
    const auto bias = random_floats(rng, static_cast<size_t>(s.n));
    const auto ut = random_floats(rng, static_cast<size_t>(s.m * s.batch));
    const auto g = sparse_gradient(rng, s.batch, s.n, std::min<int64_t>(2, s.n));
    const auto du0 = random_floats(rng, static_cast<size_t>(s.batch * s.m));
    const ConstMatrix hut(ut.data(), s.m, s.batch), hg(g.data(), s.batch, s.n);

    // z with a padded leading dimension: the padding must stay untouched.
    const int64_t ldz = s.n + 3;
    std::vector<float> z_ref(static_cast<size_t>(s.batch * ldz), 7.0f);
    ops::fixed_fanin_forward(cpu, idx.data(), w.data(), bias.data(), s.n, s.fan_in, hut,
                             Matrix(z_ref.data(), s.batch, s.n, ldz));
    std::vector<float> dw_ref(w.size()), db_ref(bias.size());
    unsigned long long zeros = 0;
    ops::fixed_fanin_weight_grad(cpu, idx.data(), s.n, s.fan_in, hg, hut, dw_ref.data(),
                                 db_ref.data(), &zeros);
    const auto zero_ref = static_cast<int64_t>(zeros);
    std::vector<float> du_ref = du0;
    ops::fixed_fanin_input_grad(cpu, idx.data(), w.data(), s.n, s.fan_in, hg,
                                Matrix(du_ref.data(), s.batch, s.m));

    auto d_idx = put(ctx, idx);
    auto d_w = put(ctx, w);
    auto d_bias = put(ctx, bias);
    auto d_ut = put(ctx, ut);
    auto d_g = put(ctx, g);
    auto d_z = put(ctx, std::vector<float>(z_ref.size(), 7.0f));
    auto d_du = put(ctx, du0);
    Buffer<float> d_dw(ctx, MemTag::workspace, w.size());
    Buffer<float> d_db(ctx, MemTag::workspace, bias.size());
    auto d_zero = put(ctx, std::vector<unsigned long long>{0});
    const ConstMatrix gut(d_ut.data(), s.m, s.batch), gg(d_g.data(), s.batch, s.n);
    ops::fixed_fanin_forward(ctx, d_idx.data(), d_w.data(), d_bias.data(), s.n, s.fan_in, gut,
                             Matrix(d_z.data(), s.batch, s.n, ldz));
    ops::fixed_fanin_weight_grad(ctx, d_idx.data(), s.n, s.fan_in, gg, gut, d_dw.data(),
                                 d_db.data(), d_zero.data());
    ops::fixed_fanin_input_grad(ctx, d_idx.data(), d_w.data(), s.n, s.fan_in, gg,
                                Matrix(d_du.data(), s.batch, s.m));
    const double f = static_cast<double>(s.fan_in), b = static_cast<double>(s.batch);
    expect_close("fixed_fanin forward " + tag, get(d_z, z_ref.size()), z_ref,
                 4e-6 * (f + 1), 1e-4);
    expect_close("fixed_fanin weight_grad dw " + tag, get(d_dw, w.size()), dw_ref,
                 4e-6 * b, 1e-4);
    expect_close("fixed_fanin weight_grad db " + tag, get(d_db, bias.size()), db_ref,
                 4e-6 * b, 1e-4);
    INFO("fixed_fanin weight_grad zero labels " << tag);
    CHECK(static_cast<int64_t>(get(d_zero, 1)[0]) == zero_ref);
    // du accumulates about n·F/m terms per element.
    const double terms = static_cast<double>(s.n * s.fan_in) / static_cast<double>(s.m) + 2.0;
    expect_close("fixed_fanin input_grad " + tag, get(d_du, du0.size()), du_ref,
                 4e-6 * terms, 1e-4);
  }
}

// --- group-shared ---------------------------------------------------------------------
struct GsRef {
  std::vector<double> z, dw, db, du;
  std::vector<double> z_abs, dw_abs, du_abs;  // sums of |terms|, for the bf16 error budget
};

// Naive double-precision reference of the three ops (DESIGN.md group semantics).
GsRef group_shared_reference(const std::vector<uint32_t>& idx, const std::vector<float>& w,
                             const std::vector<float>& bias, int64_t n, int64_t group,
                             int64_t fan_in, const std::vector<float>& ut, int64_t m, int64_t batch,
                             const std::vector<float>& g, const std::vector<float>& du0) {
  GsRef r;
  r.z.assign(static_cast<size_t>(batch * n), 0.0);
  r.z_abs = r.z;
  r.dw.assign(static_cast<size_t>(n * fan_in), 0.0);
  r.dw_abs = r.dw;
  r.db.assign(static_cast<size_t>(n), 0.0);
  r.du.assign(du0.begin(), du0.end());
  r.du_abs.assign(du0.size(), 0.0);
  for (int64_t l = 0; l < n; ++l) {
    const uint32_t* il = idx.data() + (l / group) * fan_in;
    const float* wl = w.data() + l * fan_in;
    for (int64_t b = 0; b < batch; ++b) {
      const double gv = g[static_cast<size_t>(b * n + l)];
      double z = bias[static_cast<size_t>(l)], za = std::abs(z);
      r.db[static_cast<size_t>(l)] += gv;
      for (int64_t j = 0; j < fan_in; ++j) {
        const double x = ut[static_cast<size_t>(il[j] * batch + b)];
        z += wl[j] * x;
        za += std::abs(wl[j] * x);
        r.dw[static_cast<size_t>(l * fan_in + j)] += gv * x;
        r.dw_abs[static_cast<size_t>(l * fan_in + j)] += std::abs(gv * x);
        r.du[static_cast<size_t>(b * m + il[j])] += gv * wl[j];
        r.du_abs[static_cast<size_t>(b * m + il[j])] += std::abs(gv * wl[j]);
      }
      r.z[static_cast<size_t>(b * n + l)] = z;
      r.z_abs[static_cast<size_t>(b * n + l)] = za;
    }
  }
  return r;
}

void body_group_shared(Context& ctx, Rng& rng) {
  struct Size {
    int64_t batch, m, n, group, fan_in;
  };
  for (Size s :
       {Size{1, 20, 1, 1, 1}, Size{5, 50, 37, 16, 8}, Size{64, 768, 1000, 32, 64},
        Size{61, 500, 203, 40, 100}, Size{130, 600, 100, 64, 256}, Size{17, 300, 150, 80, 48},
        Size{64, 768, 4096, 16, 32}, Size{70, 1000, 333, 64, 128}}) {
    const std::string tag =
        size_tag({{"B", s.batch}, {"m", s.m}, {"n", s.n}, {"G", s.group}, {"F", s.fan_in}});
    const int64_t groups = (s.n + s.group - 1) / s.group;
    const auto idx = random_index_sets(rng, groups, s.fan_in, s.m);
    const auto w = random_floats(rng, static_cast<size_t>(s.n * s.fan_in));
    const auto bias = random_floats(rng, static_cast<size_t>(s.n));
    const auto ut = random_floats(rng, static_cast<size_t>(s.m * s.batch));
    // The first group's gradient is entirely zero (skipped tiles), plus sparse zeros.
    const auto g = sparse_gradient(rng, s.batch, s.n, std::min(s.group, s.n));
    const auto du0 = random_floats(rng, static_cast<size_t>(s.batch * s.m));
    const double f = static_cast<double>(s.fan_in), b = static_cast<double>(s.batch);
    const double du_terms = static_cast<double>(s.n * s.fan_in) / static_cast<double>(s.m) + 2.0;

    auto d_idx = put(ctx, idx);
    auto d_bias = put(ctx, bias);
    auto d_g = put(ctx, g);
    Buffer<float> d_dw(ctx, MemTag::workspace, w.size());
    Buffer<float> d_db(ctx, MemTag::workspace, bias.size());
    const int64_t ldz = s.n + 5;
    const ConstMatrix gg(d_g.data(), s.batch, s.n);

    for (int precision = 0; precision < (ctx.on_gpu() ? 2 : 1); ++precision) {  // bf16: GPU only
      const bool bf = precision == 1;
      const std::string name = std::string("group_shared ") + (bf ? "bf16 " : "fp32 ");
      // Inputs as the kernels see them: bf16 rounds ut and w, and g when staged.
      const auto w_in = bf ? rounded(w) : w;
      const auto ut_in = bf ? rounded(ut) : ut;
      const GsRef ref = group_shared_reference(idx, w_in, bias, s.n, s.group, s.fan_in, ut_in, s.m,
                                               s.batch, g, du0);
      const GsRef ref_g16 = bf ? group_shared_reference(idx, w_in, bias, s.n, s.group, s.fan_in,
                                                        ut_in, s.m, s.batch, rounded(g), du0)
                               : ref;
      auto d_z = put(ctx, std::vector<float>(static_cast<size_t>(s.batch * ldz), 7.0f));
      auto d_du = put(ctx, du0);
      const Matrix gz(d_z.data(), s.batch, s.n, ldz), gdu(d_du.data(), s.batch, s.m);
      // The three ops on the given weights and transposed input (fp32, or bf16 on the GPU).
      auto run = [&](const auto& w_dev, auto ut_view) {
        ops::group_shared_forward(ctx, d_idx.data(), w_dev.data(), d_bias.data(), s.n, s.group,
                                  s.fan_in, ut_view, gz);
        ops::group_shared_weight_grad(ctx, d_idx.data(), s.n, s.group, s.fan_in, gg, ut_view,
                                      d_dw.data(), d_db.data());
        ops::group_shared_input_grad(ctx, d_idx.data(), w_dev.data(), s.n, s.group, s.fan_in, gg,
                                     gdu);
      };
      if (bf) {
        const auto d_w = put(ctx, to_bf16(w));
        const auto d_ut = put(ctx, to_bf16(ut));
        run(d_w, gpu::ConstBf16Matrix(d_ut.data(), s.m, s.batch));
      } else {
        const auto d_w = put(ctx, w);
        const auto d_ut = put(ctx, ut);
        run(d_w, ConstMatrix(d_ut.data(), s.m, s.batch));
      }
      // z: compare the used columns, and check the padding was not written.
      const auto z_all = get(d_z, static_cast<size_t>(s.batch * ldz));
      std::vector<float> z(static_cast<size_t>(s.batch * s.n));
      bool pad_ok = true;
      for (int64_t r = 0; r < s.batch; ++r) {
        std::copy_n(z_all.begin() + r * ldz, s.n, z.begin() + r * s.n);
        for (int64_t c = s.n; c < ldz; ++c)
          pad_ok &= z_all[static_cast<size_t>(r * ldz + c)] == 7.0f;
      }
      INFO(name << "forward wrote into the ld padding " << tag);
      CHECK(pad_ok);
      const auto dw = get(d_dw, w.size());
      const auto db = get(d_db, bias.size());
      const auto du = get(d_du, du0.size());
      expect_close(name + "forward " + tag, z, ref.z, 4e-6 * (f + 1), 1e-4);
      expect_close(name + "weight_grad dw " + tag, dw, ref_g16.dw, 4e-6 * b, 1e-4);
      expect_close(name + "weight_grad db " + tag, db, ref.db, 4e-6 * b, 1e-4);
      expect_close(name + "input_grad " + tag, du, ref_g16.du, 4e-6 * du_terms, 1e-4);
      if (bf) {
        // Against the unrounded fp32 data: within the bf16 budget.
        const GsRef exact =
            group_shared_reference(idx, w, bias, s.n, s.group, s.fan_in, ut, s.m, s.batch, g, du0);
        const double budget = std::ldexp(1.0, -7);
        expect_close(name + "forward vs fp32 " + tag, z, exact.z, 1e-5 * f, budget, &exact.z_abs);
        expect_close(name + "weight_grad vs fp32 " + tag, dw, exact.dw, 1e-5 * b, budget,
                     &exact.dw_abs);
        expect_close(name + "input_grad vs fp32 " + tag, du, exact.du, 1e-5 * du_terms, budget,
                     &exact.du_abs);
      }
    }
  }
}

// --- sampled scoring ------------------------------------------------------------------
void body_sampled(Context& ctx, Rng& rng) {
  struct Size {
    int64_t batch, labels, d, max_cand;
  };
  for (Size s : {Size{1, 10, 1, 1}, Size{7, 50, 33, 10}, Size{64, 10000, 768, 200},
                 Size{5, 100, 130, 100}, Size{40, 30, 257, 30}}) {
    const std::string tag =
        size_tag({{"B", s.batch}, {"L", s.labels}, {"d", s.d}, {"C", s.max_cand}});
    // Per-row distinct candidates in random order; row 1 (if any) has none; labels drawn
    // from a small range when L is small, so several rows share labels.
    std::vector<int64_t> indptr{0};
    std::vector<uint32_t> labels;
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t c =
          b == 1 ? 0 : 1 + static_cast<int64_t>(rng.below(static_cast<uint64_t>(s.max_cand)));
      std::vector<uint32_t> row;
      while (static_cast<int64_t>(row.size()) < std::min(c, s.labels)) {
        const auto l = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(s.labels)));
        if (std::find(row.begin(), row.end(), l) == row.end()) row.push_back(l);
      }
      labels.insert(labels.end(), row.begin(), row.end());
      indptr.push_back(static_cast<int64_t>(labels.size()));
    }
    const int64_t nnz = static_cast<int64_t>(labels.size());
    const ops::CandidateCsr hc{indptr.data(), labels.data(), s.batch, nnz};
    const auto w = random_floats(rng, static_cast<size_t>(s.labels * s.d));
    const auto bias = random_floats(rng, static_cast<size_t>(s.labels));
    const auto h = random_floats(rng, static_cast<size_t>(s.batch * s.d));
    auto g = random_floats(rng, static_cast<size_t>(nnz));
    for (auto& x : g)
      if (rng.uniformf() < 0.3f) x = 0.0f;
    const auto dh0 = random_floats(rng, static_cast<size_t>(s.batch * s.d));
    const ConstMatrix hh(h.data(), s.batch, s.d);

    const ops::EntryGroupsBuffers eg = ops::group_entries_by_label(hc, s.labels);
    const ops::EntryGroups hv = eg.view();
    // Naive double-precision reference: scores (bias + w_l·h_r), dh0 + Σ g·w_l per row,
    // dW / db per distinct label (Σ g·h_r, Σ g), and the gathered rows w_l.
    const auto ds = static_cast<size_t>(s.d);
    std::vector<double> scores_ref(static_cast<size_t>(nnz)), dh_ref(dh0.begin(), dh0.end()),
        dw_ref(static_cast<size_t>(hv.groups) * ds, 0.0), db_ref(static_cast<size_t>(hv.groups), 0.0),
        rows_ref(static_cast<size_t>(hv.groups) * ds);
    for (int64_t r = 0; r < s.batch; ++r)
      for (int64_t e = indptr[r]; e < indptr[r + 1]; ++e) {
        const size_t l = labels[static_cast<size_t>(e)], ru = static_cast<size_t>(r) * ds;
        const size_t u = static_cast<size_t>(
            std::lower_bound(hv.labels, hv.labels + hv.groups, labels[static_cast<size_t>(e)]) -
            hv.labels);
        const double ge = g[static_cast<size_t>(e)];
        double z = bias[l];
        for (size_t j = 0; j < ds; ++j) {
          z += double(w[l * ds + j]) * h[ru + j];
          dh_ref[ru + j] += ge * w[l * ds + j];
          dw_ref[u * ds + j] += ge * h[ru + j];
        }
        scores_ref[static_cast<size_t>(e)] = z;
        db_ref[u] += ge;
      }
    for (int64_t u = 0; u < hv.groups; ++u)
      for (size_t j = 0; j < ds; ++j)
        rows_ref[static_cast<size_t>(u) * ds + j] = w[size_t{hv.labels[u]} * ds + j];
    // The grouping is a partition of the entries, labels ascending, rows ascending.
    {
      bool ok = hv.nnz == nnz && hv.ptr[hv.groups] == nnz;
      std::vector<int> seen(static_cast<size_t>(nnz), 0);
      for (int64_t u = 0; ok && u < hv.groups; ++u) {
        ok &= u == 0 || hv.labels[u - 1] < hv.labels[u];
        for (int64_t i = hv.ptr[u]; ok && i < hv.ptr[u + 1]; ++i) {
          const int64_t e = hv.entry[i];
          ok &=
              labels[static_cast<size_t>(e)] == hv.labels[u] && ++seen[static_cast<size_t>(e)] == 1;
          ok &= indptr[hv.row[i]] <= e && e < indptr[hv.row[i] + 1];
          ok &= i == hv.ptr[u] || hv.row[i - 1] < hv.row[i];
        }
      }
      ok &= std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; });
      INFO("group_entries_by_label is not a sorted partition " << tag);
      CHECK(ok);
    }

    auto d_w = put(ctx, w);
    auto d_bias = put(ctx, bias);
    auto d_h = put(ctx, h);
    auto d_g = put(ctx, g);
    auto d_dh = put(ctx, dh0);
    auto d_indptr = put(ctx, indptr);
    auto d_labels = put(ctx, labels);
    auto d_ul = put(ctx, eg.labels);
    auto d_ptr = put(ctx, eg.ptr);
    auto d_entry = put(ctx, eg.entry);
    auto d_row = put(ctx, eg.row);
    Buffer<float> d_scores(ctx, MemTag::workspace, std::max<int64_t>(nnz, 1));
    Buffer<float> d_dw(ctx, MemTag::workspace, std::max<size_t>(dw_ref.size(), 1));
    Buffer<float> d_db(ctx, MemTag::workspace, std::max<size_t>(db_ref.size(), 1));
    const ops::CandidateCsr dc{d_indptr.data(), d_labels.data(), s.batch, nnz};
    const ops::EntryGroups dv{d_ul.data(),  d_ptr.data(), d_entry.data(),
                              d_row.data(), hv.groups,    hv.nnz};
    const ConstMatrix gh(d_h.data(), s.batch, s.d);
    ops::sampled_scores(ctx, d_w.data(), d_bias.data(), s.d, dc, gh, d_scores.data());
    ops::sampled_input_grad(ctx, d_w.data(), s.d, dc, d_g.data(),
                            Matrix(d_dh.data(), s.batch, s.d));
    ops::sampled_weight_grad(ctx, dv, d_g.data(), gh, Matrix(d_dw.data(), hv.groups, s.d),
                             d_db.data());
    const double dd = static_cast<double>(s.d);
    expect_close("sampled scores " + tag, get(d_scores, static_cast<size_t>(nnz)),
                 scores_ref, 4e-6 * (dd + 1), 1e-4);
    expect_close("sampled input_grad " + tag, get(d_dh, dh0.size()), dh_ref,
                 4e-6 * static_cast<double>(s.max_cand + 1), 1e-4);
    expect_close("sampled weight_grad dw " + tag, get(d_dw, dw_ref.size()), dw_ref,
                 4e-6 * static_cast<double>(s.batch), 1e-4);
    expect_close("sampled weight_grad db " + tag, get(d_db, db_ref.size()), db_ref,
                 4e-6 * static_cast<double>(s.batch), 1e-4);
    Buffer<float> d_rows(ctx, MemTag::workspace, std::max<size_t>(rows_ref.size(), 1));
    ops::gather_rows(ctx, d_w.data(), d_ul.data(), hv.groups, s.d, d_rows.data());
    expect_close("gather_rows " + tag, get(d_rows, rows_ref.size()), rows_ref, 0, 0);
  }
}

// Bad shapes are refused on the host with the offending value, before any launch.
void body_shape_checks(Context& ctx) {
  Buffer<float> buf(ctx, MemTag::workspace, 64);
  Buffer<uint32_t> idx(ctx, MemTag::workspace, 64);
  auto throws = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const std::exception&) {
      return true;
    }
    return false;
  };
  // fixed_fanin_forward with z rows != B.
  CHECK(throws([&] {
    ops::fixed_fanin_forward(ctx, idx.data(), buf.data(), nullptr, 4, 2,
                             ConstMatrix(buf.data(), 4, 2), Matrix(buf.data(), 3, 4));
  }));
  // bf16 group_shared_forward with F = 257 (on the CPU: bf16 at all).
  CHECK(throws([&] {
    ops::group_shared_forward(ctx, idx.data(), reinterpret_cast<const Bf16*>(buf.data()), nullptr,
                              2, 1, 257, gpu::ConstBf16Matrix(nullptr, 4, 1),
                              Matrix(buf.data(), 1, 2));
  }));
}
}  // namespace

// One DEVICE_TEST per family ([sparse]: the GPU kit's racecheck runs these).
DEVICE_TEST("transposes, fp32 and (CUDA) bf16, at odd sizes", "[sparse]") {
  Rng rng(2024);
  body_transpose(ctx, rng);
}
DEVICE_TEST("fixed fan-in forward, weight and input gradients against the CPU ops", "[sparse]") {
  Rng rng(2024);
  body_fixed_fanin(ctx, rng);
}
DEVICE_TEST("group-shared ops, fp32 and (CUDA) bf16, against a naive reference", "[sparse]") {
  Rng rng(2024);
  body_group_shared(ctx, rng);
}
DEVICE_TEST(
    "sampled scoring, gradients and row gather against a naive reference, grouping a partition",
    "[sparse]") {
  Rng rng(2024);
  body_sampled(ctx, rng);
}
DEVICE_TEST("bad shapes are refused with an error before any work", "[sparse]") {
  body_shape_checks(ctx);
}

namespace {

// anns_sampled's draw written plainly (a sorted set of taken labels), for one point.
struct PlainDraw {
  std::vector<uint32_t> label;
  std::vector<uint8_t> positive;
  std::vector<float> weight;
};
PlainDraw plain_draw(const ops::CandidateDraw& c, int64_t id, std::vector<uint32_t> pos) {
  PlainDraw out;
  std::sort(pos.begin(), pos.end());
  pos.erase(std::unique(pos.begin(), pos.end()), pos.end());
  std::set<uint32_t> taken(pos.begin(), pos.end());
  for (uint32_t l : pos) {
    out.label.push_back(l);
    out.positive.push_back(1);
    out.weight.push_back(1.0f);
  }
  if (c.hard != nullptr && id >= 0 && id < c.points)
    for (int64_t j = 0; j < c.k_h; ++j) {
      const uint32_t l = c.hard[id * c.k_h + j];
      if (l == ops::kNoCandidate || !taken.insert(l).second) continue;
      out.label.push_back(l);
      out.positive.push_back(0);
      out.weight.push_back(c.hard_weight);
    }
  const auto left = static_cast<int64_t>(c.labels) - static_cast<int64_t>(taken.size());
  const float rw = c.unbiased && c.k_r > 0 && left > c.k_r
                       ? static_cast<float>(static_cast<double>(left) / static_cast<double>(c.k_r))
                       : 1.0f;
  std::vector<uint32_t> drawn;
  if (c.k_r >= left) {
    for (uint32_t l = 0; l < c.labels; ++l)
      if (taken.count(l) == 0) drawn.push_back(l);
  } else {
    Rng rng = Rng::stream(c.seed ^ (static_cast<uint64_t>(c.step) * 0xA24BAED4963EE407ULL),
                          static_cast<uint64_t>(id));
    while (static_cast<int64_t>(drawn.size()) < c.k_r) {
      const auto l = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(c.labels)));
      if (taken.insert(l).second) drawn.push_back(l);
    }
  }
  for (uint32_t l : drawn) {
    out.label.push_back(l);
    out.positive.push_back(0);
    out.weight.push_back(rw);
  }
  return out;
}

}  // namespace

// The candidate draw on the Context's device against the plain draw above, point by
// point and exactly (the same draws: CUDA runs the CPU's row function): positives sorted
// and distinct, hard negatives minus empty slots, repeats and positives, uniform negatives
// by rejection, every weight rule; small label counts where the uniform part takes every
// label left; rows whose slots do not fit (the CPU refuses them, the GPU marks them -1);
// then the padded rows packed into one CSR (compact_candidates).
DEVICE_TEST(
    "anns_sampled's candidate draw and its packing: the plain draw's candidates, on every device",
    "[sparse][sampled]") {
  Rng rng(77);
  struct Case {
    int64_t labels, k_h, k_r;
    bool hard, unbiased;
  };
  for (const Case& cs :
       {Case{301, 8, 13, true, false}, Case{301, 8, 13, true, true}, Case{301, 0, 40, false, false},
        Case{20, 6, 13, true, true}, Case{5000, 32, 64, true, false}}) {
    DYNAMIC_SECTION("labels " << cs.labels << " k_h " << cs.k_h << " k_r " << cs.k_r
                              << (cs.hard ? " hard" : "") << (cs.unbiased ? " unbiased" : "")) {
      const int64_t points = 53, rows = 29;
      std::vector<uint32_t> table(static_cast<size_t>(points * cs.k_h));
      for (auto& l : table) {  // empty slots, repeats, labels that are positives
        const uint64_t r = rng.below(10);
        l = r == 0 ? ops::kNoCandidate
                   : static_cast<uint32_t>(
                         rng.below(static_cast<uint64_t>(std::min<int64_t>(cs.labels, 40))));
      }
      std::vector<int64_t> ids, pos_ptr{0};
      std::vector<uint32_t> pos;
      for (int64_t b = 0; b < rows; ++b) {
        ids.push_back(b == 3 ? points + 7 : static_cast<int64_t>(rng.below(points)));
        const auto np = static_cast<int64_t>(rng.below(6));  // unsorted, with repeats
        for (int64_t j = 0; j < np; ++j)
          pos.push_back(static_cast<uint32_t>(
              rng.below(static_cast<uint64_t>(std::min<int64_t>(cs.labels, 40)))));
        pos_ptr.push_back(static_cast<int64_t>(pos.size()));
      }
      ops::CandidateDraw c{.labels = cs.labels,
                           .hard = cs.hard ? table.data() : nullptr,
                           .points = points,
                           .k_h = cs.k_h,
                           .k_r = cs.k_r,
                           .seed = 991,
                           .step = 17,
                           .hard_weight = 0.03f,
                           .unbiased = cs.unbiased};
      const int64_t cap = ops::candidate_slots(c, 5);
      const auto slots = static_cast<size_t>(rows * cap);
      Buffer<int64_t> ids_d = put(ctx, ids), ptr_d = put(ctx, pos_ptr),
                      count_d(ctx, MemTag::workspace, rows);
      Buffer<uint32_t> pos_d = put(ctx, pos), table_d = put(ctx, table),
                       label_d(ctx, MemTag::workspace, slots);
      Buffer<uint8_t> flag_d(ctx, MemTag::workspace, slots);
      Buffer<float> weight_d(ctx, MemTag::workspace, slots);
      ops::CandidateDraw cd = c;
      if (cs.hard) cd.hard = table_d.data();
      ops::draw_candidates(ctx, cd, ids_d.data(), ptr_d.data(), pos_d.data(), rows, cap,
                           label_d.data(), flag_d.data(), weight_d.data(), count_d.data());
      const auto label = get(label_d, slots);
      const auto flag = get(flag_d, slots);
      const auto weight = get(weight_d, slots);
      const auto count = get(count_d, static_cast<size_t>(rows));
      for (int64_t b = 0; b < rows; ++b) {
        const PlainDraw want = plain_draw(c, ids[static_cast<size_t>(b)],
                                          {pos.begin() + pos_ptr[static_cast<size_t>(b)],
                                           pos.begin() + pos_ptr[static_cast<size_t>(b) + 1]});
        INFO("row " << b);
        REQUIRE(count[static_cast<size_t>(b)] == static_cast<int64_t>(want.label.size()));
        const auto at = static_cast<ptrdiff_t>(b * cap),
                   n = static_cast<ptrdiff_t>(want.label.size());
        CHECK(std::vector<uint32_t>(label.begin() + at, label.begin() + at + n) == want.label);
        CHECK(std::vector<uint8_t>(flag.begin() + at, flag.begin() + at + n) == want.positive);
        CHECK(std::vector<float>(weight.begin() + at, weight.begin() + at + n) == want.weight);
      }
      // The padded rows packed into one CSR: the plain draws one after another.
      {
        std::vector<int64_t> want_ptr{0};
        std::vector<uint32_t> want_label;
        std::vector<uint8_t> want_flag;
        std::vector<float> want_weight;
        for (int64_t b = 0; b < rows; ++b) {
          const PlainDraw w = plain_draw(c, ids[static_cast<size_t>(b)],
                                         {pos.begin() + pos_ptr[static_cast<size_t>(b)],
                                          pos.begin() + pos_ptr[static_cast<size_t>(b) + 1]});
          want_label.insert(want_label.end(), w.label.begin(), w.label.end());
          want_flag.insert(want_flag.end(), w.positive.begin(), w.positive.end());
          want_weight.insert(want_weight.end(), w.weight.begin(), w.weight.end());
          want_ptr.push_back(static_cast<int64_t>(want_label.size()));
        }
        Buffer<int64_t> ptr_out(ctx, MemTag::workspace, static_cast<size_t>(rows + 1));
        Buffer<uint32_t> label_out(ctx, MemTag::workspace, slots);
        Buffer<uint8_t> flag_out(ctx, MemTag::workspace, slots), scratch;
        Buffer<float> weight_out(ctx, MemTag::workspace, slots);
        const int64_t nnz = ops::compact_candidates(
            ctx, rows, cap, label_d.data(), flag_d.data(), weight_d.data(), count_d.data(), scratch,
            ptr_out.data(), label_out.data(), flag_out.data(), weight_out.data());
        REQUIRE(nnz == want_ptr.back());
        CHECK(get(ptr_out, static_cast<size_t>(rows + 1)) == want_ptr);
        CHECK(get(label_out, static_cast<size_t>(nnz)) == want_label);
        CHECK(get(flag_out, static_cast<size_t>(nnz)) == want_flag);
        CHECK(get(weight_out, static_cast<size_t>(nnz)) == want_weight);
      }
      // One slot short for a row with 5 positives: refused on the CPU, -1 on the GPU.
      std::vector<int64_t> five{0, 5};
      std::vector<uint32_t> five_pos{1, 2, 3, 4, 0};
      Buffer<int64_t> five_d = put(ctx, five);
      Buffer<uint32_t> five_pos_d = put(ctx, five_pos);
      if (ctx.on_gpu()) {
        ops::draw_candidates(ctx, cd, ids_d.data(), five_d.data(), five_pos_d.data(), 1, cap - 1,
                             label_d.data(), flag_d.data(), weight_d.data(), count_d.data());
        CHECK(get(count_d, 1)[0] == -1);
      } else {
        CHECK_THROWS_WITH(ops::draw_candidates(ctx, cd, ids_d.data(), five_d.data(),
                                               five_pos_d.data(), 1, cap - 1, label_d.data(),
                                               flag_d.data(), weight_d.data(), count_d.data()),
                          Catch::Contains("slots"));
      }
    }
  }
}

// The grouping of candidate entries by label on the Context's device equals the host's
// exactly (labels ascending, entries of a label in ascending order, their rows), over
// batches with repeated labels across rows, empty rows, one label, and no entries.
DEVICE_TEST("grouping candidate entries by label on the device equals the host grouping",
            "[sparse][sampled]") {
  Rng rng(91);
  struct Case {
    int64_t rows, labels, per_row;
  };
  for (const Case& cs :
       {Case{29, 301, 40}, Case{256, 70000, 100}, Case{5, 1, 1}, Case{3, 10, 0}, Case{64, 17, 9}}) {
    DYNAMIC_SECTION(cs.rows << " rows, " << cs.labels << " labels, up to " << cs.per_row
                            << " a row") {
      std::vector<int64_t> indptr{0};
      std::vector<uint32_t> labels;
      for (int64_t b = 0; b < cs.rows; ++b) {
        const int64_t n =
            cs.per_row == 0
                ? 0
                : static_cast<int64_t>(rng.below(static_cast<uint64_t>(cs.per_row) + 1));
        std::set<uint32_t> row;  // distinct within a row, as the layers' candidates are
        while (static_cast<int64_t>(row.size()) < std::min(n, cs.labels))
          row.insert(static_cast<uint32_t>(rng.below(static_cast<uint64_t>(cs.labels))));
        std::vector<uint32_t> v(row.begin(), row.end());
        for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);  // any order
        labels.insert(labels.end(), v.begin(), v.end());
        indptr.push_back(static_cast<int64_t>(labels.size()));
      }
      const int64_t nnz = indptr.back();
      const ops::CandidateCsr host{indptr.data(), labels.data(), cs.rows, nnz};
      const ops::EntryGroupsBuffers want = ops::group_entries_by_label(host, cs.labels);
      Buffer<int64_t> indptr_d = put(ctx, indptr);
      Buffer<uint32_t> labels_d = put(ctx, labels);
      const auto cap = static_cast<size_t>(std::max<int64_t>(nnz, 1));
      Buffer<uint32_t> g_labels(ctx, MemTag::workspace, cap), g_row(ctx, MemTag::workspace, cap);
      Buffer<int64_t> g_ptr(ctx, MemTag::workspace, cap + 1), g_entry(ctx, MemTag::workspace, cap);
      Buffer<uint8_t> scratch;
      const int64_t groups = ops::group_entries_by_label(
          ctx, {indptr_d.data(), labels_d.data(), cs.rows, nnz}, cs.labels, scratch,
          {g_labels.data(), g_ptr.data(), g_entry.data(), g_row.data()});
      REQUIRE(groups == static_cast<int64_t>(want.labels.size()));
      CHECK(get(g_labels, static_cast<size_t>(groups)) == want.labels);
      CHECK(get(g_ptr, static_cast<size_t>(groups) + 1) == want.ptr);
      CHECK(get(g_entry, static_cast<size_t>(nnz)) == want.entry);
      CHECK(get(g_row, static_cast<size_t>(nnz)) == want.row);
    }
  }
}
