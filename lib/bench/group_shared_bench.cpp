#include "bench/group_shared_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "bench/ceilings.h"
#include "bench/fixed_fanin_bench.h"
#include "core/context.h"
#include "core/resources.h"
#include "core/rng.h"
#include "ops/group_shared.h"

namespace xmc::bench {

nlohmann::json bench_group_shared(const GroupSharedBenchParams& p) {
  Context ctx(Device::cpu, p.threads);
  const int64_t b = p.batch, m = p.dim, n = p.labels;
  const double mem = measure_memory_gbps();
  Rng rng(3);
  std::vector<float> ut(static_cast<size_t>(m * b)), du(static_cast<size_t>(b * m));
  for (auto& x : ut) x = static_cast<float>(rng.normal());
  ConstMatrix utm(ut.data(), m, b);

  nlohmann::json j;
  j["device"] = "cpu";
  j["threads"] = ctx.threads();
  j["params"] = {{"batch", b}, {"dim", m}, {"labels", n}, {"chunk", p.chunk}, {"iters", p.iters}};
  j["ceilings"] = {{"memory_gbps", mem}};
  j["fixed_fanin"] = nlohmann::json::object();
  j["configs"] = nlohmann::json::array();
  for (int64_t f : p.fan_ins) {
    // The per-label fixed fan-in ops and the FLOPs-matched dense GEMM at this F.
    const nlohmann::json ff = bench_fixed_fanin({.batch = b,
                                                 .dim = m,
                                                 .labels = n,
                                                 .fan_in = f,
                                                 .chunk = p.chunk,
                                                 .iters = p.iters,
                                                 .threads = p.threads});
    j["ceilings"]["sgemm_gflops"] = ff["ceilings"]["sgemm_gflops"];
    j["ceilings"]["blas_kernels"] = ff["ceilings"]["blas_kernels"];
    j["fixed_fanin"][std::to_string(f)] = ff["ops"];

    std::vector<float> w(static_cast<size_t>(n * f)), bias(static_cast<size_t>(n), 0.0f);
    for (auto& x : w) x = static_cast<float>(rng.normal()) * 0.1f;
    for (int64_t g : p.groups) {
      const int64_t groups = (n + g - 1) / g;
      const int64_t chunk = std::max(g, std::min(p.chunk, n) / g * g);
      // One random set per group (duplicates do not change the cost, so no check here).
      std::vector<uint32_t> idx(static_cast<size_t>(groups * f));
      for (auto& i : idx) i = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(m)));
      std::vector<float> z(static_cast<size_t>(b * chunk)), gr(z.size()),
          dw(static_cast<size_t>(chunk * f)), db(static_cast<size_t>(chunk));
      for (auto& x : gr) x = static_cast<float>(rng.normal());
      auto forward = [&](int64_t c0, int64_t c) {
        ops::group_shared_forward(ctx, idx.data() + (c0 / g) * f, w.data() + c0 * f,
                                  bias.data() + c0, c, g, f, utm, Matrix(z.data(), b, c));
      };
      time_over_blocks(p.iters, n, chunk, forward);  // warm-up
      const double t_fwd = time_over_blocks(p.iters, n, chunk, forward);
      const double t_wg = time_over_blocks(p.iters, n, chunk, [&](int64_t c0, int64_t c) {
        ops::group_shared_weight_grad(ctx, idx.data() + (c0 / g) * f, c, g, f,
                                      ConstMatrix(gr.data(), b, c), utm, dw.data(), db.data());
      });
      const double t_ig = time_over_blocks(p.iters, n, chunk, [&](int64_t c0, int64_t c) {
        ops::group_shared_input_grad(ctx, idx.data() + (c0 / g) * f, w.data() + c0 * f, c, g, f,
                                     ConstMatrix(gr.data(), b, c), Matrix(du.data(), b, m));
      });
      // Fewest bytes: weights and the group index sets once, z (or g) once, the input once.
      const double dn = static_cast<double>(n), df = static_cast<double>(f);
      const double flops = 2.0 * static_cast<double>(b) * dn * df;
      const double bytes = 4.0 * dn * df + 4.0 * static_cast<double>(groups) * df +
                           4.0 * static_cast<double>(b) * dn + 4.0 * static_cast<double>(m * b);
      const auto& fops = ff["ops"];
      const double matched = fops["dense_gemm_flops_matched"]["seconds"].get<double>();
      auto op = [&](double s, const char* ff_name) {
        return nlohmann::json{
            {"seconds", s},
            {"gflops", flops / s / 1e9},
            {"gbps", bytes / s / 1e9},
            {"memory_ratio", bytes / s / 1e9 / mem},
            {"speedup_vs_fixed_fanin", fops[ff_name]["seconds"].get<double>() / s},
            {"time_vs_dense_matched", s / matched}};
      };
      j["configs"].push_back({{"group", g},
                              {"fan_in", f},
                              {"ops",
                               {{"forward", op(t_fwd, "forward")},
                                {"weight_grad", op(t_wg, "weight_grad")},
                                {"input_grad", op(t_ig, "input_grad")}}}});
    }
  }
  j["peak_rss_bytes"] = peak_rss_bytes();
  return j;
}

std::string group_shared_bench_table(const nlohmann::json& j) {
  const auto& pr = j["params"];
  std::string out =
      fmt::format("group-shared ops, {} threads: B={} m={} L={} (all gradients nonzero)\n",
                  j["threads"].get<int>(), pr["batch"].get<int64_t>(), pr["dim"].get<int64_t>(),
                  pr["labels"].get<int64_t>());
  out += ceilings_line(j);
  out += fmt::format("{:>4} {:>4} {:<12} {:>9} {:>9} {:>8} {:>7} {:>10} {:>11} {:>11}\n", "G", "F",
                     "op", "ms", "GFLOP/s", "GB/s", "%mem", "ff ms", "x vs ff", "x dense-F");
  for (const auto& c : j["configs"]) {
    const auto f = c["fan_in"].get<int64_t>();
    const auto& ff = j["fixed_fanin"][std::to_string(f)];
    for (auto name : {"forward", "weight_grad", "input_grad"}) {
      const auto& o = c["ops"][name];
      out += fmt::format(
          "{:>4} {:>4} {:<12} {:>9.2f} {:>9.1f} {:>8.1f} {:>7.1f} {:>10.2f} {:>11.2f} {:>11.2f}\n",
          c["group"].get<int64_t>(), f, name, o["seconds"].get<double>() * 1e3,
          o["gflops"].get<double>(), o["gbps"].get<double>(), 100 * o["memory_ratio"].get<double>(),
          ff[name]["seconds"].get<double>() * 1e3, o["speedup_vs_fixed_fanin"].get<double>(),
          o["time_vs_dense_matched"].get<double>());
    }
  }
  out +=
      "ff ms: fixed fan-in op at the same F; x vs ff: its time / this time; x dense-F: this "
      "time / the FLOPs-matched dense GEMM (inner dimension F)\n";
  return out;
}

}  // namespace xmc::bench
