#include "bench/fixed_fanin_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "bench/ceilings.h"
#include "core/context.h"
#include "core/resources.h"
#include "core/rng.h"
#include "ops/dense.h"
#include "ops/fixed_fanin.h"

namespace xmc::bench {

nlohmann::json bench_fixed_fanin(const FixedFaninBenchParams& p) {
  Context ctx(Device::cpu, p.threads);
  const int64_t b = p.batch, m = p.dim, n = p.labels, f = p.fan_in;
  const int64_t chunk = std::min(p.chunk, n);
  Rng rng(2);
  // Random fan-in (duplicates do not change the cost, so no check here).
  std::vector<uint32_t> idx(static_cast<size_t>(n * f));
  std::vector<float> w(idx.size()), bias(static_cast<size_t>(n), 0.0f);
  for (size_t i = 0; i < idx.size(); ++i) {
    idx[i] = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(m)));
    w[i] = static_cast<float>(rng.normal()) * 0.1f;
  }
  std::vector<float> ut(static_cast<size_t>(m * b)), du(static_cast<size_t>(b * m));
  for (auto& x : ut) x = static_cast<float>(rng.normal());
  std::vector<float> z(static_cast<size_t>(b * chunk)), dw(static_cast<size_t>(chunk * f)),
      db(static_cast<size_t>(chunk));
  // Gradients: all nonzero, and a fraction `nonzero` nonzero.
  std::vector<float> g_dense(z.size()), g_sparse(z.size(), 0.0f);
  for (size_t i = 0; i < z.size(); ++i) {
    g_dense[i] = static_cast<float>(rng.normal());
    if (rng.uniform() < p.nonzero) g_sparse[i] = g_dense[i];
  }
  // Dense comparisons, one label block at a time (the whole W [L×m] need not fit):
  // same shape h [B×m]·W_cᵀ, and FLOPs-matched h_F [B×F]·V_cᵀ.
  std::vector<float> h(static_cast<size_t>(b * m)), wc(static_cast<size_t>(chunk * m));
  std::vector<float> hf(static_cast<size_t>(b * f)), vc(static_cast<size_t>(chunk * f));
  for (auto* v : {&h, &wc, &hf, &vc})
    for (auto& x : *v) x = static_cast<float>(rng.normal());

  ConstMatrix utm(ut.data(), m, b);
  auto forward = [&](int64_t c0, int64_t c) {
    ops::fixed_fanin_forward(ctx, idx.data() + c0 * f, w.data() + c0 * f, bias.data() + c0, c, f,
                             utm, Matrix(z.data(), b, c));
  };
  auto weight_grad = [&](const std::vector<float>& g) {
    return [&](int64_t c0, int64_t c) {
      ops::fixed_fanin_weight_grad(ctx, idx.data() + c0 * f, c, f, ConstMatrix(g.data(), b, c), utm,
                                   dw.data(), db.data(), nullptr);
    };
  };
  auto input_grad = [&](const std::vector<float>& g) {
    return [&](int64_t c0, int64_t c) {
      ops::fixed_fanin_input_grad(ctx, idx.data() + c0 * f, w.data() + c0 * f, c, f,
                                  ConstMatrix(g.data(), b, c), Matrix(du.data(), b, m));
    };
  };
  auto gemm_same = [&](int64_t, int64_t c) {
    ops::gemm_nt(ConstMatrix(h.data(), b, m), ConstMatrix(wc.data(), c, m), Matrix(z.data(), b, c));
  };
  auto gemm_matched = [&](int64_t, int64_t c) {
    ops::gemm_nt(ConstMatrix(hf.data(), b, f), ConstMatrix(vc.data(), c, f),
                 Matrix(z.data(), b, c));
  };
  time_over_blocks(p.iters, n, chunk, forward);  // warm-up: pages touched, threads up
  const double t_fwd = time_over_blocks(p.iters, n, chunk, forward);
  const double t_wg = time_over_blocks(p.iters, n, chunk, weight_grad(g_dense));
  const double t_ig = time_over_blocks(p.iters, n, chunk, input_grad(g_dense));
  const double t_wg_s = time_over_blocks(p.iters, n, chunk, weight_grad(g_sparse));
  const double t_ig_s = time_over_blocks(p.iters, n, chunk, input_grad(g_sparse));
  const double t_same = time_over_blocks(p.iters, n, chunk, gemm_same);
  const double t_matched = time_over_blocks(p.iters, n, chunk, gemm_matched);

  const double gemm = measure_sgemm_gflops();
  const double mem = measure_memory_gbps();
  const double dn = static_cast<double>(n), db_ = static_cast<double>(b);
  const double sparse_flops = 2.0 * db_ * dn * static_cast<double>(f);
  // Fewest bytes: indices + weights once, z (or g) once, the layer input once.
  const double sparse_bytes = 8.0 * dn * static_cast<double>(f) + 4.0 * db_ * dn +
                              4.0 * static_cast<double>(m) * db_;
  auto op = [&](double s, double flops, double bytes) {
    return op_figures(s, flops, bytes, gemm, mem);
  };
  const double nz = p.nonzero;
  nlohmann::json j;
  j["device"] = "cpu";
  j["threads"] = ctx.threads();
  j["params"] = {{"batch", b}, {"dim", m}, {"labels", n}, {"fan_in", f},
                 {"chunk", chunk}, {"nonzero", nz}, {"iters", p.iters}};
  j["ceilings"] = cpu_ceilings(gemm, mem);
  j["ops"] = {
      {"forward", op(t_fwd, sparse_flops, sparse_bytes)},
      {"weight_grad", op(t_wg, sparse_flops, sparse_bytes)},
      {"input_grad", op(t_ig, sparse_flops, sparse_bytes)},
      {"weight_grad_sparse", op(t_wg_s, nz * sparse_flops, 0)},
      {"input_grad_sparse", op(t_ig_s, nz * sparse_flops, 0)},
      {"dense_gemm_same_shape",
       op(t_same, 2.0 * db_ * dn * static_cast<double>(m), 4.0 * dn * static_cast<double>(m))},
      {"dense_gemm_flops_matched", op(t_matched, sparse_flops, 4.0 * dn * static_cast<double>(f))},
  };
  j["peak_rss_bytes"] = peak_rss_bytes();
  return j;
}

std::string fixed_fanin_bench_table(const nlohmann::json& j) {
  const auto& pr = j["params"];
  std::string out = fmt::format(
      "fixed fan-in ops, {} threads: B={} m={} L={} F={} (sparse case: {:.0f}% nonzero "
      "gradients)\n",
      j["threads"].get<int>(), pr["batch"].get<int64_t>(), pr["dim"].get<int64_t>(),
      pr["labels"].get<int64_t>(), pr["fan_in"].get<int64_t>(), 100 * pr["nonzero"].get<double>());
  out += ceilings_line(j) + op_header(26);
  for (auto name : {"forward", "weight_grad", "input_grad", "weight_grad_sparse",
                    "input_grad_sparse", "dense_gemm_same_shape", "dense_gemm_flops_matched"}) {
    out += op_row(name, j["ops"][name], 26);
  }
  return out;
}

}  // namespace xmc::bench
