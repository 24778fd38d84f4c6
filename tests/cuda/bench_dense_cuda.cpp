// GPU microbenchmark of one dense training step (B×d input, L labels in chunks): per-op
// time (forward GEMM, loss kernel, dh GEMM, dW GEMM + bias sums, optimizer update) each
// timed alone over all chunks with CUDA events, then the full DenseBlockCuda::train_step;
// achieved TFLOP/s and GB/s beside the measured ceilings (large cuBLAS GEMM in the same
// precision, device-to-device copy), and peak device memory: ledger vs analytic vs driver.
// Not a test: tools/gpu_check.sh runs it and keeps its JSON. Exit 77 without a GPU.
//
//   bench_dense_cuda [--batch 256] [--dim 768] [--labels 131072,670091,3000000]
//                    [--chunk 16384] [--iters 5] [--precision fp32,bf16] [--json FILE]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda_context.h"
#include "core/gpu.h"
#include "core/rng.h"
#include "kernels/dense_block_cuda.h"
#include "kernels/dense_ops_cuda.h"

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

void fill_random(const CudaContext& ctx, DeviceBuffer<float>& b, uint64_t seed, float scale) {
  std::vector<float> h(b.size());
  Rng rng(seed);
  for (auto& x : h) x = (2.0f * rng.uniformf() - 1.0f) * scale;
  b.upload(h.data(), h.size(), ctx.stream());
  ctx.synchronize();
}

struct Ceilings {
  double fp32_tflops = 0, bf16_tflops = 0, copy_gbs = 0;
};

Ceilings measure_ceilings(CudaContext& ctx) {
  Ceilings c;
  const int64_t n = 8192;
  MemoryLedger& L = ctx.ledger();
  DeviceBuffer<float> a(L, MemTag::workspace, n * n), b(L, MemTag::workspace, n * n),
      out(L, MemTag::workspace, n * n);
  fill_random(ctx, a, 1, 1.0f);
  fill_random(ctx, b, 2, 1.0f);
  const double flops = 2.0 * n * n * n;
  double ms = time_ms(ctx, 5, [&] {
    gpu::gemm_nt(ctx, ConstMatrix(a.data(), n, n), ConstMatrix(b.data(), n, n),
                 Matrix(out.data(), n, n));
  });
  c.fp32_tflops = flops / (ms * 1e9);
  DeviceBuffer<Bf16> a16(L, MemTag::workspace, n * n), b16(L, MemTag::workspace, n * n);
  gpu::to_bf16(ctx, ConstMatrix(a.data(), n, n), gpu::Bf16Matrix(a16.data(), n, n));
  gpu::to_bf16(ctx, ConstMatrix(b.data(), n, n), gpu::Bf16Matrix(b16.data(), n, n));
  ms = time_ms(ctx, 10, [&] {
    gpu::gemm_nt(ctx, gpu::ConstBf16Matrix(a16.data(), n, n),
                 gpu::ConstBf16Matrix(b16.data(), n, n), Matrix(out.data(), n, n));
  });
  c.bf16_tflops = flops / (ms * 1e9);
  const size_t bytes = a.bytes();
  ms = time_ms(ctx, 10, [&] { gpu::copy_device(out.data(), a.data(), bytes, ctx.stream()); });
  c.copy_gbs = 2.0 * static_cast<double>(bytes) / (ms * 1e6);  // read + write
  return c;
}

CsrMatrix synthetic_targets(int64_t batch, int64_t labels, uint64_t seed) {
  Rng rng(seed);
  CsrMatrix t;
  t.rows = batch;
  t.cols = labels;
  for (int64_t r = 0; r < batch; ++r) {
    std::vector<uint32_t> row;
    for (int i = 0; i < 5; ++i) row.push_back(static_cast<uint32_t>(rng.below(labels)));
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
    t.indices.insert(t.indices.end(), row.begin(), row.end());
    t.indptr.push_back(static_cast<int64_t>(t.indices.size()));
  }
  return t;
}

json bench_one(CudaContext& ctx, int64_t batch, int64_t d, int64_t labels, int64_t chunk, bool bf16,
               int iters, const Ceilings& ceil) {
  OptimizerConfig cfg;  // adam, the most memory-hungry update
  const int64_t c = std::min(chunk, labels);
  const double gemm_flops = 2.0 * batch * labels * d;
  const double gemm_ceiling = bf16 ? ceil.bf16_tflops : ceil.fp32_tflops;
  json ops = json::array();
  auto add_op = [&](const char* name, double ms, double flops, double bytes) {
    json o = {{"op", name}, {"ms", ms}};
    if (flops > 0) {
      o["tflops"] = flops / (ms * 1e9);
      o["ratio_to_gemm_ceiling"] = flops / (ms * 1e9) / gemm_ceiling;
    }
    if (bytes > 0) {
      o["gbs"] = bytes / (ms * 1e6);
      o["ratio_to_copy_ceiling"] = bytes / (ms * 1e6) / ceil.copy_gbs;
    }
    ops.push_back(o);
  };

  // Per-op times on standalone buffers with the block's shapes (freed before the step).
  {
    MemoryLedger scratch;  // not the run's ledger: these buffers are not the block's
    CudaContext& x = ctx;
    DeviceBuffer<float> h(scratch, MemTag::workspace, batch * d),
        dh(scratch, MemTag::workspace, batch * d);
    DeviceBuffer<float> z(scratch, MemTag::workspace, batch * c),
        dw(scratch, MemTag::workspace, c * d);
    DeviceBuffer<float> bias(scratch, MemTag::workspace, c), db(scratch, MemTag::workspace, c);
    DeviceBuffer<float> m(scratch, MemTag::workspace, c * d), v(scratch, MemTag::workspace, c * d);
    DeviceBuffer<float> w(scratch, MemTag::workspace, c * d);
    DeviceBuffer<Bf16> w16(scratch, MemTag::workspace, c * d),
        h16(scratch, MemTag::workspace, batch * d), g16(scratch, MemTag::workspace, batch * c);
    fill_random(x, h, 3, 1.0f);
    fill_random(x, w, 4, 0.05f);
    fill_random(x, z, 5, 1.0f);
    bias.zero(x.stream());
    m.zero(x.stream());
    v.zero(x.stream());
    gpu::to_bf16(x, ConstMatrix(w.data(), c, d), gpu::Bf16Matrix(w16.data(), c, d));
    gpu::to_bf16(x, ConstMatrix(h.data(), batch, d), gpu::Bf16Matrix(h16.data(), batch, d));
    gpu::to_bf16(x, ConstMatrix(z.data(), batch, c), gpu::Bf16Matrix(g16.data(), batch, c));
    const CsrMatrix t = synthetic_targets(batch, c, 9);
    DeviceBuffer<int64_t> ip(scratch, MemTag::workspace, t.indptr.size());
    DeviceBuffer<uint32_t> ix(scratch, MemTag::workspace, std::max<size_t>(t.indices.size(), 1));
    ip.upload(t.indptr.data(), t.indptr.size(), x.stream());
    ix.upload(t.indices.data(), t.indices.size(), x.stream());
    DeviceBuffer<gpu::LossAccum> acc(scratch, MemTag::workspace, 1);
    acc.zero(x.stream());
    const gpu::DeviceCsr dt{ip.data(), ix.data(), batch, c};
    // Every label chunk reuses the same chunk buffers: the op's work per step is
    // (labels / c) times one chunk.
    const double nchunks = static_cast<double>(labels) / static_cast<double>(c);
    const Matrix zm(z.data(), batch, c);
    double ms = time_ms(x, iters, [&] {
      if (bf16)
        gpu::gemm_nt(x, gpu::ConstBf16Matrix(h16.data(), batch, d),
                     gpu::ConstBf16Matrix(w16.data(), c, d), zm);
      else
        gpu::gemm_nt(x, ConstMatrix(h.data(), batch, d), ConstMatrix(w.data(), c, d), zm);
    });
    add_op("forward", ms * nchunks, gemm_flops, 0);
    ms = time_ms(x, iters, [&] {
      gpu::elementwise_loss_grad(x, LossType::bce, zm, bias.data(), dt, 0, batch, acc.data(),
                                 bf16 ? gpu::Bf16Matrix(g16.data(), batch, c) : gpu::Bf16Matrix());
    });
    add_op("loss", ms * nchunks, 0,
           static_cast<double>(batch) * labels * (8.0 + (bf16 ? 2.0 : 0.0)));
    ms = time_ms(x, iters, [&] {
      if (bf16)
        gpu::gemm_nn(x, gpu::ConstBf16Matrix(g16.data(), batch, c),
                     gpu::ConstBf16Matrix(w16.data(), c, d), Matrix(dh.data(), batch, d), 1.0f,
                     1.0f);
      else
        gpu::gemm_nn(x, ConstMatrix(z.data(), batch, c), ConstMatrix(w.data(), c, d),
                     Matrix(dh.data(), batch, d), 1.0f, 1.0f);
    });
    add_op("backward_input", ms * nchunks, gemm_flops, 0);
    ms = time_ms(x, iters, [&] {
      if (bf16)
        gpu::gemm_tn(x, gpu::ConstBf16Matrix(g16.data(), batch, c),
                     gpu::ConstBf16Matrix(h16.data(), batch, d), Matrix(dw.data(), c, d));
      else
        gpu::gemm_tn(x, ConstMatrix(z.data(), batch, c), ConstMatrix(h.data(), batch, d),
                     Matrix(dw.data(), c, d));
      gpu::column_sums(x, ConstMatrix(z.data(), batch, c), db.data());
    });
    add_op("backward_weight", ms * nchunks, gemm_flops, 0);
    // Tiny learning rate: the weights stay in range over the repetitions.
    ms = time_ms(x, iters, [&] {
      if (bf16)
        gpu::optimizer_update(x, cfg, 1e-6, 1, w16.data(), dw.data(), m.data(), v.data(), c * d, 0);
      else
        gpu::optimizer_update(x, cfg, 1e-6, 1, w.data(), dw.data(), m.data(), v.data(), c * d);
    });
    // adam: w read+write, g read, m and v read+write.
    const double wb = bf16 ? 2.0 : 4.0;
    add_op("update", ms * nchunks, 0, static_cast<double>(labels) * d * (2 * wb + 4 + 16));
  }

  // The full step through DenseBlockCuda.
  MemoryLedger ledger;
  const int64_t baseline = gpu::device_mem_info().used_bytes();
  json step;
  {
    gpu::DenseBlockCuda block(
        ctx, d, 0, labels, batch, chunk, LossType::bce, cfg, 1,
        {bf16 ? gpu::WeightPrecision::bf16 : gpu::WeightPrecision::fp32, false});
    DeviceBuffer<float> h(ledger, MemTag::activations, batch * d),
        dh(ledger, MemTag::activations, batch * d);
    fill_random(ctx, h, 11, 1.0f);
    const CsrMatrix t = synthetic_targets(batch, labels, 12);
    int64_t s = 0;
    const double ms = time_ms(ctx, iters, [&] {
      ++s;
      block.train_step(t, ConstMatrix(h.data(), batch, d), Matrix(dh.data(), batch, d),
                       LrState{1e-6, s});
    });
    const double tflops = 3.0 * gemm_flops / (ms * 1e9);
    const gpu::MemCrossCheck mc = gpu::memory_cross_check(ctx.ledger(), baseline);
    // The run's ledger holds the context's cuBLASLt workspace and the block.
    const int64_t block_ledger =
        ctx.ledger().total_peak(MemSpace::device) - static_cast<int64_t>(ctx.lt_workspace_bytes());
    step = {{"ms", ms},
            {"tflops", tflops},
            {"ratio_to_gemm_ceiling", tflops / gemm_ceiling},
            {"analytic_bytes", block.analytic_bytes()},
            {"ledger_device_peak_bytes", block_ledger},
            {"driver_used_bytes", mc.driver_bytes}};
  }
  return {{"batch", batch},
          {"dim", d},
          {"labels", labels},
          {"chunk", c},
          {"precision", bf16 ? "bf16" : "fp32"},
          {"loss", "bce"},
          {"optimizer", "adam"},
          {"ops", ops},
          {"step", step}};
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 256, dim = 768, chunk = 16384;
  int iters = 5;
  std::vector<int64_t> label_counts = {131072, 670091, 3000000};
  std::vector<std::string> precisions = {"fp32", "bf16"};
  std::string json_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--batch")
      batch = std::stoll(v);
    else if (k == "--dim")
      dim = std::stoll(v);
    else if (k == "--labels")
      label_counts = parse_list(v);
    else if (k == "--chunk")
      chunk = std::stoll(v);
    else if (k == "--iters")
      iters = std::stoi(v);
    else if (k == "--precision") {
      precisions.clear();
      std::stringstream ss(v);
      std::string p;
      while (std::getline(ss, p, ',')) precisions.push_back(p);
    } else if (k == "--json")
      json_path = v;
    else {
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
                {"ceilings",
                 {{"fp32_gemm_tflops", ceil.fp32_tflops},
                  {"bf16_gemm_tflops", ceil.bf16_tflops},
                  {"copy_gbs", ceil.copy_gbs}}},
                {"runs", json::array()}};
    for (int64_t labels : label_counts)
      for (const auto& p : precisions) {
        if (p != "fp32" && p != "bf16") {
          std::fprintf(stderr, "precision must be fp32 or bf16, got %s\n", p.c_str());
          return 2;
        }
        std::fprintf(stderr, "bench: L=%lld %s\n", static_cast<long long>(labels), p.c_str());
        MemoryLedger run_ledger;
        CudaContext run_ctx(run_ledger, 0);
        out["runs"].push_back(
            bench_one(run_ctx, batch, dim, labels, chunk, p == "bf16", iters, ceil));
      }
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    // Short table last.
    std::printf("GPU %s: ceilings fp32 GEMM %.1f TFLOP/s, bf16 GEMM %.1f TFLOP/s, copy %.0f GB/s\n",
                devices[0].name.c_str(), ceil.fp32_tflops, ceil.bf16_tflops, ceil.copy_gbs);
    std::printf("%-9s %-5s %8s %8s %8s %8s %8s %9s %7s %10s\n", "labels", "prec", "fwd ms",
                "loss ms", "dh ms", "dW ms", "upd ms", "step ms", "%gemm", "mem/analyt");
    for (const auto& r : out["runs"]) {
      const auto& o = r["ops"];
      const auto& s = r["step"];
      std::printf("%-9lld %-5s %8.2f %8.2f %8.2f %8.2f %8.2f %9.2f %6.1f%% %10.3f\n",
                  static_cast<long long>(r["labels"].get<int64_t>()),
                  r["precision"].get<std::string>().c_str(), o[0]["ms"].get<double>(),
                  o[1]["ms"].get<double>(), o[2]["ms"].get<double>(), o[3]["ms"].get<double>(),
                  o[4]["ms"].get<double>(), s["ms"].get<double>(),
                  100.0 * s["ratio_to_gemm_ceiling"].get<double>(),
                  s["ledger_device_peak_bytes"].get<double>() / s["analytic_bytes"].get<double>());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dense_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
