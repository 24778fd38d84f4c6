#include "bench/ceilings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/resources.h"
#include "core/rng.h"
#include "ops/dense.h"

namespace xmc::bench {

double measure_sgemm_gflops(int n) {
  const auto nn = static_cast<size_t>(n) * static_cast<size_t>(n);
  std::vector<float> a(nn), b(nn), c(nn);
  Rng rng(1);
  for (auto& x : a) x = rng.uniformf();
  for (auto& x : b) x = rng.uniformf();
  ConstMatrix am(a.data(), n, n), bm(b.data(), n, n);
  Matrix cm(c.data(), n, n);
  ops::gemm_nn(am, bm, cm);  // warm-up
  double best = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    Stopwatch sw;
    ops::gemm_nn(am, bm, cm);
    best = std::min(best, sw.seconds());
  }
  return 2.0 * n * static_cast<double>(n) * n / best / 1e9;
}

double measure_memory_gbps(long long bytes) {
  const auto n = static_cast<size_t>(bytes / 4);
  std::vector<float> src(n, 1.0f), dst(n, 0.0f);
  double copy = 1e300, rmw = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    Stopwatch sw;
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < static_cast<long long>(n); i += 1 << 16) {
      const size_t len = std::min<size_t>(1 << 16, n - static_cast<size_t>(i));
      std::memcpy(dst.data() + i, src.data() + i, len * sizeof(float));
    }
    copy = std::min(copy, sw.lap());
    float* d = dst.data();
    const float* s = src.data();
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < static_cast<long long>(n); ++i) d[i] += 0.5f * s[i];
    rmw = std::min(rmw, sw.seconds());
  }
  const double bytes4 = 4.0 * static_cast<double>(n);
  return std::max(2.0 * bytes4 / copy, 3.0 * bytes4 / rmw) / 1e9;
}

double time_over_blocks(int iters, int64_t n, int64_t chunk,
                        const std::function<void(int64_t, int64_t)>& op) {
  Stopwatch sw;
  for (int it = 0; it < iters; ++it)
    for (int64_t c0 = 0; c0 < n; c0 += chunk) op(c0, std::min(chunk, n - c0));
  return sw.seconds() / iters;
}

nlohmann::json op_figures(double seconds, double flops, double bytes, double gemm_gflops,
                          double memory_gbps) {
  nlohmann::json j = {{"seconds", seconds}};
  if (flops > 0) {
    j["gflops"] = flops / seconds / 1e9;
    j["gemm_ratio"] = flops / seconds / 1e9 / gemm_gflops;
  }
  if (bytes > 0) {
    j["gbps"] = bytes / seconds / 1e9;
    j["memory_ratio"] = bytes / seconds / 1e9 / memory_gbps;
  }
  return j;
}

std::string ceilings_line(const nlohmann::json& j) {
  return fmt::format("ceilings: sgemm {:.1f} GFLOP/s, memory {:.1f} GB/s\n",
                     j["ceilings"].value("sgemm_gflops", 0.0),
                     j["ceilings"].value("memory_gbps", 0.0));
}

std::string op_header(int name_width) {
  return fmt::format("{:<{}} {:>10} {:>10} {:>8} {:>10} {:>8}\n", "op", name_width, "ms",
                     "GFLOP/s", "%gemm", "GB/s", "%mem");
}

std::string op_row(const std::string& name, const nlohmann::json& o, int name_width) {
  auto num = [&](const char* k, double scale) {
    return o.contains(k) ? fmt::format("{:.1f}", o[k].get<double>() * scale) : std::string("-");
  };
  return fmt::format("{:<{}} {:>10.2f} {:>10} {:>8} {:>10} {:>8}\n", name, name_width,
                     o["seconds"].get<double>() * 1e3, num("gflops", 1), num("gemm_ratio", 100),
                     num("gbps", 1), num("memory_ratio", 100));
}

}  // namespace xmc::bench
