#include "bench/ceilings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/resources.h"
#include "core/rng.h"
#include "kernels/dense_ops.h"

namespace xmc::bench {

double measure_sgemm_gflops(int n) {
  const auto nn = static_cast<size_t>(n) * static_cast<size_t>(n);
  std::vector<float> a(nn), b(nn), c(nn);
  Rng rng(1);
  for (auto& x : a) x = rng.uniformf();
  for (auto& x : b) x = rng.uniformf();
  ConstMatrix am(a.data(), n, n), bm(b.data(), n, n);
  Matrix cm(c.data(), n, n);
  kernels::gemm_nn(am, bm, cm);  // warm-up
  double best = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    Stopwatch sw;
    kernels::gemm_nn(am, bm, cm);
    best = std::min(best, sw.seconds());
  }
  return 2.0 * n * static_cast<double>(n) * n / best / 1e9;
}

double measure_copy_gbps(long long bytes) {
  const auto n = static_cast<size_t>(bytes / 4);
  std::vector<float> src(n, 1.0f), dst(n, 0.0f);
  double best = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    Stopwatch sw;
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < static_cast<long long>(n); i += 1 << 16) {
      const size_t len = std::min<size_t>(1 << 16, n - static_cast<size_t>(i));
      std::memcpy(dst.data() + i, src.data() + i, len * sizeof(float));
    }
    best = std::min(best, sw.seconds());
  }
  return 2.0 * static_cast<double>(n) * 4.0 / best / 1e9;
}

double time_over_blocks(int iters, int64_t n, int64_t chunk,
                        const std::function<void(int64_t, int64_t)>& op) {
  Stopwatch sw;
  for (int it = 0; it < iters; ++it)
    for (int64_t c0 = 0; c0 < n; c0 += chunk) op(c0, std::min(chunk, n - c0));
  return sw.seconds() / iters;
}

nlohmann::json op_figures(double seconds, double flops, double bytes, double gemm_gflops,
                          double copy_gbps) {
  nlohmann::json j = {{"seconds", seconds}};
  if (flops > 0) {
    j["gflops"] = flops / seconds / 1e9;
    j["gemm_ratio"] = flops / seconds / 1e9 / gemm_gflops;
  }
  if (bytes > 0) {
    j["gbps"] = bytes / seconds / 1e9;
    j["copy_ratio"] = bytes / seconds / 1e9 / copy_gbps;
  }
  return j;
}

std::string ceilings_line(const nlohmann::json& j) {
  return fmt::format("ceilings: sgemm {:.1f} GFLOP/s, copy {:.1f} GB/s\n",
                     j["ceilings"].value("sgemm_gflops", 0.0),
                     j["ceilings"].value("copy_gbps", 0.0));
}

std::string op_header(int name_width) {
  return fmt::format("{:<{}} {:>10} {:>10} {:>8} {:>10} {:>8}\n", "op", name_width, "ms",
                     "GFLOP/s", "%gemm", "GB/s", "%copy");
}

std::string op_row(const std::string& name, const nlohmann::json& o, int name_width) {
  auto num = [&](const char* k, double scale) {
    return o.contains(k) ? fmt::format("{:.1f}", o[k].get<double>() * scale) : std::string("-");
  };
  return fmt::format("{:<{}} {:>10.2f} {:>10} {:>8} {:>10} {:>8}\n", name, name_width,
                     o["seconds"].get<double>() * 1e3, num("gflops", 1), num("gemm_ratio", 100),
                     num("gbps", 1), num("copy_ratio", 100));
}

}  // namespace xmc::bench
