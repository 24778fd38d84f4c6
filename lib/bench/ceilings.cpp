#include "bench/ceilings.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "core/blas_kernels.h"
#include "core/context.h"
#include "core/resources.h"
#include "core/rng.h"
#include "ops/dense.h"
#include "ops/fixed_fanin.h"
#include "ops/group_shared.h"

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

double measure_fanin_gflops(int64_t batch, int64_t inputs, int64_t fan_in, int64_t group,
                            int64_t labels) {
  const Context ctx(Device::cpu, 0);  // the threads OpenMP was given by the caller's Context
  const int64_t b = batch, m = inputs, f = std::min(fan_in, inputs), n = labels;
  const int64_t chunk = std::max(group, int64_t{4096} / group * group);
  const int64_t sets = (n + group - 1) / group;
  Rng rng(4);
  std::vector<uint32_t> idx(static_cast<size_t>(sets * f));
  for (auto& i : idx) i = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(m)));
  std::vector<float> w(static_cast<size_t>(n * f)), bias(static_cast<size_t>(n), 0.0f);
  std::vector<float> ut(static_cast<size_t>(m * b)), du(static_cast<size_t>(b * m));
  std::vector<float> z(static_cast<size_t>(b * chunk)), g(z.size()),
      dw(static_cast<size_t>(chunk * f)), db(static_cast<size_t>(chunk));
  for (auto* v : {&w, &ut, &g})
    for (auto& x : *v) x = static_cast<float>(rng.normal());
  const ConstMatrix utm(ut.data(), m, b);
  auto step = [&](int64_t c0, int64_t c) {
    const uint32_t* ic = idx.data() + (c0 / group) * f;
    const ConstMatrix gc(g.data(), b, c);
    if (group == 1) {
      ops::fixed_fanin_forward(ctx, ic, w.data() + c0 * f, bias.data() + c0, c, f, utm,
                               Matrix(z.data(), b, c));
      ops::fixed_fanin_weight_grad(ctx, ic, c, f, gc, utm, dw.data(), db.data(), nullptr);
      ops::fixed_fanin_input_grad(ctx, ic, w.data() + c0 * f, c, f, gc, Matrix(du.data(), b, m));
    } else {
      ops::group_shared_forward(ctx, ic, w.data() + c0 * f, bias.data() + c0, c, group, f, utm,
                                Matrix(z.data(), b, c));
      ops::group_shared_weight_grad(ctx, ic, c, group, f, gc, utm, dw.data(), db.data());
      ops::group_shared_input_grad(ctx, ic, w.data() + c0 * f, c, group, f, gc,
                                   Matrix(du.data(), b, m));
    }
  };
  time_over_blocks(1, n, chunk, step);  // warm-up
  // The best of at least 5 passes spanning at least half a second: on a shared VM a rate
  // from 3 passes (a fifth of a second) swung 1.6x between two plans a minute apart.
  double best = 1e300;
  const Stopwatch sw;
  for (int rep = 0; rep < 5 || sw.seconds() < 0.5; ++rep)
    best = std::min(best, time_over_blocks(1, n, chunk, step));
  return 6.0 * static_cast<double>(b * n * f) / best / 1e9;
}

std::string ceilings_cache_path(int threads) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string base = xdg != nullptr && *xdg != 0 ? std::string(xdg)
                           : home != nullptr           ? std::string(home) + "/.cache"
                                                       : std::string(".cache");
  return fmt::format("{}/xmctrain/ceilings-cpu-{}t.json", base, threads);
}

nlohmann::json cpu_ceilings(double sgemm_gflops, double memory_gbps) {
  return {{"sgemm_gflops", sgemm_gflops},
          {"memory_gbps", memory_gbps},
          {"blas_kernels", blas_kernels()}};
}

nlohmann::json measure_ceilings(int threads) {
  std::string cpu;
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; cpu.empty() && std::getline(info, line);)
    if (line.starts_with("model name"))
      cpu = line.substr(std::min(line.size(), line.find(':') + 2));
  const double gemm = measure_sgemm_gflops();
  const double mem = measure_memory_gbps();
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return {{"ceilings", cpu_ceilings(gemm, mem)},
          {"threads", threads},
          {"device", "cpu"},
          {"cpu", cpu},
          {"measured_at", when}};
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
  const std::string kernels = j["ceilings"].value("blas_kernels", std::string());
  return fmt::format("ceilings: sgemm {:.1f} GFLOP/s, memory {:.1f} GB/s{}\n",
                     j["ceilings"].value("sgemm_gflops", 0.0),
                     j["ceilings"].value("memory_gbps", 0.0),
                     kernels.empty() ? std::string() : ", OpenBLAS " + kernels + " kernels");
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
