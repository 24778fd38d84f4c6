// GPU microbenchmark of the sparse output-layer kernels (ops/fixed_fanin.h, ops/group_shared.h):
// fixed fan-in (fp32) and group-shared (fp32 and bf16) forward, weight gradient and input
// gradient, each timed alone with CUDA events, beside
//   - a FLOPs-matched cuBLAS GEMM: [B×F]·[L×F]ᵀ (inner dimension F, same precision),
//   - the dense GEMM of the same layer shape: [B×d]·[L×d]ᵀ (timed on a 65536-label chunk
//     and scaled to L, as bench_dense_cuda does, so 3M labels need no 9 GB weight matrix),
//   - the measured device-to-device copy bandwidth (the GB/s ceiling).
// GB/s counts the fewest bytes each kernel must move (indices, weights, z or g, dw, du,
// ut once). Gradients are dense (bce-like) unless --zero-frac asks for exact zeros
// (squared hinge with the margin met), which the kernels skip.
// Not a test: tools/gpu_check.sh runs it and keeps its JSON. Exit 77 without a GPU.
//
//   bench_sparse_cuda [--batch 64] [--dim 768] [--labels 65536,670091,3000000]
//                     [--fanin 32,64,128] [--groups 16,32,64] [--gs-fanin 32,64,128]
//                     [--precision fp32,bf16] [--zero-frac 0] [--iters 10] [--json FILE]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cuda_context.h"
#include "core/gpu.h"
#include "core/rng.h"
#include "ops/dense.h"
#include "ops/fixed_fanin.h"
#include "ops/group_shared.h"

namespace {

using namespace xmc;
using gpu::Bf16;
using gpu::CudaContext;
using gpu::DeviceBuffer;
using json = nlohmann::json;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Milliseconds per call of fn (after one warm-up call), CUDA events on the stream.
double time_ms(const CudaContext& ctx, int iters, const std::function<void()>& fn) {
  fn();
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  check(cudaEventRecord(a, ctx.stream()), "record");
  for (int i = 0; i < iters; ++i) fn();
  check(cudaEventRecord(b, ctx.stream()), "record");
  check(cudaEventSynchronize(b), "sync");
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, a, b), "elapsed");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return static_cast<double>(ms) / iters;
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoll(item));
  return out;
}

// Fills n device elements from a repeating host pattern of up to 8M random values
// (enough randomness for gathers; generating 400M values on the host would take longer
// than the benchmark). uint32: uniform in [0, range); float: uniform in [-scale, scale),
// each exactly zero with probability zero_frac.
template <class T>
void fill_device(const CudaContext& ctx, T* dst, int64_t n, uint64_t seed, double range_or_scale,
                 double zero_frac = 0.0) {
  const int64_t pattern = std::min<int64_t>(n, int64_t{1} << 23);
  std::vector<T> h(static_cast<size_t>(pattern));
  Rng rng(seed);
  for (auto& x : h) {
    if constexpr (std::is_same_v<T, uint32_t>) {
      x = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(range_or_scale)));
    } else if constexpr (std::is_same_v<T, float>) {
      x = rng.uniformf() < zero_frac
              ? 0.0f
              : (2.0f * rng.uniformf() - 1.0f) * static_cast<float>(range_or_scale);
    }
  }
  for (int64_t off = 0; off < n; off += pattern) {
    const int64_t c = std::min(pattern, n - off);
    gpu::copy_to_device(dst + off, h.data(), static_cast<size_t>(c) * sizeof(T), ctx.stream());
  }
  ctx.synchronize();
}

struct Ceilings {
  double copy_gbs = 0;
};

Ceilings measure_ceilings(CudaContext& ctx) {
  Ceilings c;
  const size_t n = size_t{64} << 20;  // 256 MiB of floats
  MemoryLedger scratch;
  DeviceBuffer<float> a(scratch, MemTag::workspace, n), b(scratch, MemTag::workspace, n);
  a.zero(ctx.stream());
  const double ms =
      time_ms(ctx, 10, [&] { gpu::copy_device(b.data(), a.data(), a.bytes(), ctx.stream()); });
  c.copy_gbs = 2.0 * static_cast<double>(a.bytes()) / (ms * 1e6);  // read + write
  return c;
}

json op_entry(const char* name, double ms, double flops, double bytes, const Ceilings& ceil) {
  return {{"op", name},
          {"ms", ms},
          {"tflops", flops / (ms * 1e9)},
          {"gbs", bytes / (ms * 1e6)},
          {"ratio_to_copy_ceiling", bytes / (ms * 1e6) / ceil.copy_gbs}};
}

struct Config {
  int64_t batch = 64, dim = 768;
  std::vector<int64_t> labels = {65536, 670091, 3000000};
  std::vector<int64_t> fanin = {32, 64, 128};
  std::vector<int64_t> groups = {16, 32, 64};
  std::vector<int64_t> gs_fanin = {32, 64, 128};
  std::vector<std::string> precisions = {"fp32", "bf16"};
  double zero_frac = 0.0;
  int iters = 10;
};

// Everything one label count needs, allocated once for the largest fan-in.
struct Buffers {
  MemoryLedger ledger;
  DeviceBuffer<uint32_t> idx;
  DeviceBuffer<float> w, dw, z, g, bias, db, ut, du, a_small, h, w_dense;
  DeviceBuffer<Bf16> w16, ut16, a16, h16, w_dense16;
  DeviceBuffer<unsigned long long> zeros;
};

json bench_labels(CudaContext& ctx, const Config& cfg, int64_t L, const Ceilings& ceil) {
  const int64_t B = cfg.batch, d = cfg.dim;
  int64_t fmax = 1;
  for (int64_t f : cfg.fanin) fmax = std::max(fmax, f);
  for (int64_t f : cfg.gs_fanin) fmax = std::max(fmax, f);
  const int64_t chunk = std::min<int64_t>(L, 65536);
  Buffers s;
  auto& lg = s.ledger;
  const auto tag = MemTag::workspace;
  s.idx = DeviceBuffer<uint32_t>(lg, tag, L * fmax);
  s.w = DeviceBuffer<float>(lg, tag, L * fmax);
  s.dw = DeviceBuffer<float>(lg, tag, L * fmax);
  s.w16 = DeviceBuffer<Bf16>(lg, tag, L * fmax);
  s.z = DeviceBuffer<float>(lg, tag, B * L);
  s.g = DeviceBuffer<float>(lg, tag, B * L);
  s.bias = DeviceBuffer<float>(lg, tag, L);
  s.db = DeviceBuffer<float>(lg, tag, L);
  s.ut = DeviceBuffer<float>(lg, tag, d * B);
  s.ut16 = DeviceBuffer<Bf16>(lg, tag, d * B);
  s.du = DeviceBuffer<float>(lg, tag, B * d);
  s.a_small = DeviceBuffer<float>(lg, tag, B * fmax);
  s.a16 = DeviceBuffer<Bf16>(lg, tag, B * fmax);
  s.h = DeviceBuffer<float>(lg, tag, B * d);
  s.h16 = DeviceBuffer<Bf16>(lg, tag, B * d);
  s.w_dense = DeviceBuffer<float>(lg, tag, chunk * d);
  s.w_dense16 = DeviceBuffer<Bf16>(lg, tag, chunk * d);
  s.zeros = DeviceBuffer<unsigned long long>(lg, tag, 1);
  fill_device(ctx, s.idx.data(), L * fmax, 1, static_cast<double>(d));
  fill_device(ctx, s.w.data(), L * fmax, 2, 0.05);
  fill_device(ctx, s.g.data(), B * L, 3, 0.01, cfg.zero_frac);
  fill_device(ctx, s.bias.data(), L, 4, 0.1);
  fill_device(ctx, s.ut.data(), d * B, 5, 1.0);
  fill_device(ctx, s.a_small.data(), B * fmax, 6, 1.0);
  fill_device(ctx, s.h.data(), B * d, 7, 1.0);
  fill_device(ctx, s.w_dense.data(), chunk * d, 8, 0.05);
  gpu::to_bf16(ctx, ConstMatrix(s.w.data(), L, fmax), gpu::Bf16Matrix(s.w16.data(), L, fmax));
  gpu::to_bf16(ctx, ConstMatrix(s.ut.data(), d, B), gpu::Bf16Matrix(s.ut16.data(), d, B));
  gpu::to_bf16(ctx, ConstMatrix(s.a_small.data(), B, fmax), gpu::Bf16Matrix(s.a16.data(), B, fmax));
  gpu::to_bf16(ctx, ConstMatrix(s.h.data(), B, d), gpu::Bf16Matrix(s.h16.data(), B, d));
  gpu::to_bf16(ctx, ConstMatrix(s.w_dense.data(), chunk, d),
               gpu::Bf16Matrix(s.w_dense16.data(), chunk, d));
  s.du.zero(ctx.stream());
  ctx.synchronize();
  const int it = cfg.iters;
  const Matrix z(s.z.data(), B, L);
  const ConstMatrix g(s.g.data(), B, L), ut(s.ut.data(), d, B);
  const gpu::ConstBf16Matrix ut16(s.ut16.data(), d, B);
  const Matrix du(s.du.data(), B, d);
  const double fB = static_cast<double>(B), fL = static_cast<double>(L),
               fd = static_cast<double>(d);

  // FLOPs-matched GEMM (inner dimension F) and the dense GEMM, per precision.
  auto gemm_f = [&](int64_t F, bool bf) {
    return time_ms(ctx, it, [&] {
      if (bf)
        gpu::gemm_nt(ctx, gpu::ConstBf16Matrix(s.a16.data(), B, F),
                     gpu::ConstBf16Matrix(s.w16.data(), L, F), z);
      else
        gpu::gemm_nt(ctx, ConstMatrix(s.a_small.data(), B, F), ConstMatrix(s.w.data(), L, F), z);
    });
  };
  json dense = json::object();
  for (bool bf : {false, true}) {
    const double ms = time_ms(ctx, it,
                              [&] {
                                if (bf)
                                  gpu::gemm_nt(ctx, gpu::ConstBf16Matrix(s.h16.data(), B, d),
                                               gpu::ConstBf16Matrix(s.w_dense16.data(), chunk, d),
                                               Matrix(s.z.data(), B, chunk));
                                else
                                  gpu::gemm_nt(ctx, ConstMatrix(s.h.data(), B, d),
                                               ConstMatrix(s.w_dense.data(), chunk, d),
                                               Matrix(s.z.data(), B, chunk));
                              }) *
                      fL / static_cast<double>(chunk);
    dense[bf ? "bf16_ms" : "fp32_ms"] = ms;
    dense[bf ? "bf16_tflops" : "fp32_tflops"] = 2.0 * fB * fL * fd / (ms * 1e9);
  }

  json ff_runs = json::array();
  for (int64_t F : cfg.fanin) {
    std::fprintf(stderr, "bench: fixed_fanin L=%lld F=%lld\n", static_cast<long long>(L),
                 static_cast<long long>(F));
    const double fF = static_cast<double>(F), flops = 2.0 * fB * fL * fF;
    const double ut_bytes = fd * fB * 4;
    const double fwd = time_ms(ctx, it, [&] {
      gpu::fixed_fanin_forward(ctx, s.idx.data(), s.w.data(), s.bias.data(), L, F, ut, z);
    });
    const double wg = time_ms(ctx, it, [&] {
      gpu::fixed_fanin_weight_grad(ctx, s.idx.data(), L, F, g, ut, s.dw.data(), s.db.data(),
                                   s.zeros.data());
    });
    const double ig = time_ms(
        ctx, it, [&] { gpu::fixed_fanin_input_grad(ctx, s.idx.data(), s.w.data(), L, F, g, du); });
    const double gm = gemm_f(F, false);
    json ops = json::array();
    ops.push_back(
        op_entry("forward", fwd, flops, fL * fF * 8 + fB * fL * 4 + fL * 4 + ut_bytes, ceil));
    ops.push_back(
        op_entry("weight_grad", wg, flops, fL * fF * 8 + fB * fL * 4 + fL * 4 + ut_bytes, ceil));
    ops.push_back(
        op_entry("input_grad", ig, flops, fL * fF * 8 + fB * fL * 4 + 2 * fB * fd * 4, ceil));
    json run = {{"fan_in", F}, {"precision", "fp32"}, {"ops", ops}, {"flops_matched_gemm_ms", gm}};
    ff_runs.push_back(run);
  }

  json gs_runs = json::array();
  for (const auto& p : cfg.precisions) {
    const bool bf = p == "bf16";
    for (int64_t G : cfg.groups)
      for (int64_t F : cfg.gs_fanin) {
        std::fprintf(stderr, "bench: group_shared L=%lld G=%lld F=%lld %s\n",
                     static_cast<long long>(L), static_cast<long long>(G),
                     static_cast<long long>(F), p.c_str());
        const double fF = static_cast<double>(F), flops = 2.0 * fB * fL * fF;
        const double K = std::ceil(fL / static_cast<double>(G));
        const double wb = bf ? 2.0 : 4.0, ut_bytes = fd * fB * wb;
        const double fwd = time_ms(ctx, it, [&] {
          if (bf)
            gpu::group_shared_forward(ctx, s.idx.data(), s.w16.data(), s.bias.data(), L, G, F, ut16,
                                      z);
          else
            gpu::group_shared_forward(ctx, s.idx.data(), s.w.data(), s.bias.data(), L, G, F, ut, z);
        });
        const double wg = time_ms(ctx, it, [&] {
          if (bf)
            gpu::group_shared_weight_grad(ctx, s.idx.data(), L, G, F, g, ut16, s.dw.data(),
                                          s.db.data());
          else
            gpu::group_shared_weight_grad(ctx, s.idx.data(), L, G, F, g, ut, s.dw.data(),
                                          s.db.data());
        });
        const double ig = time_ms(ctx, it, [&] {
          if (bf)
            gpu::group_shared_input_grad(ctx, s.idx.data(), s.w16.data(), L, G, F, g, du);
          else
            gpu::group_shared_input_grad(ctx, s.idx.data(), s.w.data(), L, G, F, g, du);
        });
        const double gm = gemm_f(F, bf);
        json ops = json::array();
        ops.push_back(op_entry("forward", fwd, flops,
                               fL * fF * wb + K * fF * 4 + fB * fL * 4 + fL * 4 + ut_bytes, ceil));
        ops.push_back(op_entry("weight_grad", wg, flops,
                               K * fF * 4 + fB * fL * 4 + fL * fF * 4 + fL * 4 + ut_bytes, ceil));
        ops.push_back(op_entry("input_grad", ig, flops,
                               fL * fF * wb + K * fF * 4 + fB * fL * 4 + 2 * fB * fd * 4, ceil));
        json run = {{"group", G},
                    {"fan_in", F},
                    {"precision", p},
                    {"ops", ops},
                    {"flops_matched_gemm_ms", gm}};
        gs_runs.push_back(run);
      }
  }
  return {{"labels", L},
          {"batch", B},
          {"dim", d},
          {"zero_frac", cfg.zero_frac},
          {"dense_gemm", dense},
          {"fixed_fanin", ff_runs},
          {"group_shared", gs_runs}};
}

double op_ms(const json& run, int i) { return run["ops"][i]["ms"].get<double>(); }

void print_tables(const json& out) {
  std::printf("GPU %s: copy ceiling %.0f GB/s\n", out["gpu"].get<std::string>().c_str(),
              out["ceilings"]["copy_gbs"].get<double>());
  std::printf("\nfixed fan-in (fp32)\n%-8s %4s %8s %8s %8s %8s %7s %7s %7s %9s\n", "labels", "F",
              "fwd ms", "dW ms", "dh ms", "gemmF ms", "fwd%bw", "dW%bw", "dh%bw", "dense ms");
  for (const auto& r : out["runs"])
    for (const auto& f : r["fixed_fanin"])
      std::printf("%-8lld %4lld %8.3f %8.3f %8.3f %8.3f %6.1f%% %6.1f%% %6.1f%% %9.3f\n",
                  static_cast<long long>(r["labels"].get<int64_t>()),
                  static_cast<long long>(f["fan_in"].get<int64_t>()), op_ms(f, 0), op_ms(f, 1),
                  op_ms(f, 2), f["flops_matched_gemm_ms"].get<double>(),
                  100 * f["ops"][0]["ratio_to_copy_ceiling"].get<double>(),
                  100 * f["ops"][1]["ratio_to_copy_ceiling"].get<double>(),
                  100 * f["ops"][2]["ratio_to_copy_ceiling"].get<double>(),
                  r["dense_gemm"]["fp32_ms"].get<double>());
  std::printf(
      "\ngroup-shared (speedup = fixed fan-in fp32 time / this, same L and F)\n"
      "%-8s %3s %4s %-5s %8s %8s %8s %8s %7s %7s %7s %6s %6s %6s\n",
      "labels", "G", "F", "prec", "fwd ms", "dW ms", "dh ms", "gemmF ms", "fwd%bw", "dW%bw",
      "dh%bw", "xfwd", "xbwd", "/gemmF");
  for (const auto& r : out["runs"])
    for (const auto& gsr : r["group_shared"]) {
      const int64_t F = gsr["fan_in"].get<int64_t>();
      double xf = 0, xb = 0;
      for (const auto& f : r["fixed_fanin"])
        if (f["fan_in"].get<int64_t>() == F) {
          xf = op_ms(f, 0) / op_ms(gsr, 0);
          xb = (op_ms(f, 1) + op_ms(f, 2)) / (op_ms(gsr, 1) + op_ms(gsr, 2));
        }
      std::printf(
          "%-8lld %3lld %4lld %-5s %8.3f %8.3f %8.3f %8.3f %6.1f%% %6.1f%% %6.1f%% %6.2f %6.2f "
          "%6.2f\n",
          static_cast<long long>(r["labels"].get<int64_t>()),
          static_cast<long long>(gsr["group"].get<int64_t>()), static_cast<long long>(F),
          gsr["precision"].get<std::string>().c_str(), op_ms(gsr, 0), op_ms(gsr, 1), op_ms(gsr, 2),
          gsr["flops_matched_gemm_ms"].get<double>(),
          100 * gsr["ops"][0]["ratio_to_copy_ceiling"].get<double>(),
          100 * gsr["ops"][1]["ratio_to_copy_ceiling"].get<double>(),
          100 * gsr["ops"][2]["ratio_to_copy_ceiling"].get<double>(), xf, xb,
          op_ms(gsr, 0) / gsr["flops_matched_gemm_ms"].get<double>());
    }
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  std::string json_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--batch") {
      cfg.batch = std::stoll(v);
    } else if (k == "--dim") {
      cfg.dim = std::stoll(v);
    } else if (k == "--labels") {
      cfg.labels = parse_list(v);
    } else if (k == "--fanin") {
      cfg.fanin = parse_list(v);
    } else if (k == "--groups") {
      cfg.groups = parse_list(v);
    } else if (k == "--gs-fanin") {
      cfg.gs_fanin = parse_list(v);
    } else if (k == "--precision") {
      cfg.precisions.clear();
      std::stringstream ss(v);
      std::string p;
      while (std::getline(ss, p, ',')) {
        if (p != "fp32" && p != "bf16") {
          std::fprintf(stderr, "precision must be fp32 or bf16, got %s\n", p.c_str());
          return 2;
        }
        cfg.precisions.push_back(p);
      }
    } else if (k == "--zero-frac") {
      cfg.zero_frac = std::stod(v);
    } else if (k == "--iters") {
      cfg.iters = std::stoi(v);
    } else if (k == "--json") {
      json_path = v;
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    const auto devices = gpu::query_devices();
    if (devices.empty()) {
      std::printf("no CUDA GPU: skipped\n");
      return 77;
    }
    MemoryLedger ledger;
    CudaContext ctx(ledger, 0);
    const Ceilings ceil = measure_ceilings(ctx);
    json out = {{"gpu", devices[0].name},
                {"ceilings", {{"copy_gbs", ceil.copy_gbs}}},
                {"iters", cfg.iters},
                {"runs", json::array()}};
    for (int64_t L : cfg.labels) out["runs"].push_back(bench_labels(ctx, cfg, L, ceil));
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    print_tables(out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_sparse_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
