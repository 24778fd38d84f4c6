// `xmctrain bench dense --device cuda`: one dense training step on the GPU (B×d input, L
// labels in chunks): per-op time (forward GEMM, loss kernel, dh GEMM, dW GEMM + bias sums,
// optimizer update), each timed alone over all chunks with CUDA events, then the full
// DenseBlock::train_step on a CUDA Context; achieved TFLOP/s and GB/s beside the measured ceilings
// (large cuBLAS GEMM in the same precision, device-to-device copy), and peak device memory
// of the layer: ledger vs analytic vs driver. Host code only: in a build without CUDA the
// first GPU call throws "built without CUDA support".
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "bench/dense_bench.h"
#include "core/cuda_context.h"
#include "core/cuda_stream.h"
#include "core/error.h"
#include "core/gpu.h"
#include "core/rng.h"
#include "layers/dense_block.h"
#include "ops/dense.h"

namespace xmc::bench {
namespace {

using gpu::Bf16;
using gpu::CudaContext;
using gpu::DeviceBuffer;
using gpu::Fp8;
using json = nlohmann::json;

// Milliseconds per call of fn (after one warm-up call), CUDA events on the stream.
double dcb_time_ms(const CudaContext& ctx, int iters, const std::function<void()>& fn) {
  fn();
  gpu::CudaEvent a(true), b(true);
  a.record(ctx.stream());
  for (int i = 0; i < iters; ++i) fn();
  b.record(ctx.stream());
  b.synchronize();
  return static_cast<double>(b.elapsed_ms_since(a)) / iters;
}

void dcb_fill_random(const CudaContext& ctx, DeviceBuffer<float>& b, uint64_t seed, float scale) {
  std::vector<float> h(b.size());
  Rng rng(seed);
  for (auto& x : h) x = (2.0f * rng.uniformf() - 1.0f) * scale;
  b.upload(h.data(), h.size(), ctx.stream());
  ctx.synchronize();
}

struct DcbCeilings {
  double fp32_tflops = 0, bf16_tflops = 0, copy_gbs = 0;
};

DcbCeilings dcb_measure_ceilings(CudaContext& ctx) {
  DcbCeilings c;
  const int64_t n = 8192;
  MemoryLedger& L = ctx.ledger();
  DeviceBuffer<float> a(L, MemTag::workspace, n * n), b(L, MemTag::workspace, n * n),
      out(L, MemTag::workspace, n * n);
  dcb_fill_random(ctx, a, 1, 1.0f);
  dcb_fill_random(ctx, b, 2, 1.0f);
  const double flops = 2.0 * n * n * n;
  double ms = dcb_time_ms(ctx, 5, [&] {
    gpu::gemm_nt(ctx, ConstMatrix(a.data(), n, n), ConstMatrix(b.data(), n, n),
                 Matrix(out.data(), n, n));
  });
  c.fp32_tflops = flops / (ms * 1e9);
  DeviceBuffer<Bf16> a16(L, MemTag::workspace, n * n), b16(L, MemTag::workspace, n * n);
  gpu::to_bf16(ctx, ConstMatrix(a.data(), n, n), gpu::Bf16Matrix(a16.data(), n, n));
  gpu::to_bf16(ctx, ConstMatrix(b.data(), n, n), gpu::Bf16Matrix(b16.data(), n, n));
  ms = dcb_time_ms(ctx, 10, [&] {
    gpu::gemm_nt(ctx, gpu::ConstBf16Matrix(a16.data(), n, n),
                 gpu::ConstBf16Matrix(b16.data(), n, n), Matrix(out.data(), n, n));
  });
  c.bf16_tflops = flops / (ms * 1e9);
  const size_t bytes = a.bytes();
  ms = dcb_time_ms(ctx, 10, [&] { gpu::copy_device(out.data(), a.data(), bytes, ctx.stream()); });
  c.copy_gbs = 2.0 * static_cast<double>(bytes) / (ms * 1e6);  // read + write
  return c;
}

CsrMatrix dcb_targets(int64_t batch, int64_t labels, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<uint32_t>> rows(static_cast<size_t>(batch));
  for (auto& row : rows) {
    for (int i = 0; i < 5; ++i) row.push_back(static_cast<uint32_t>(rng.below(labels)));
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
  }
  return CsrMatrix::from_rows(rows, labels);
}

json dcb_bench_one(Context& run, int64_t batch, int64_t d, int64_t labels, int64_t chunk,
                   Precision precision, int iters, const DcbCeilings& ceil) {
  CudaContext& ctx = run.cuda();
  // bf16 GEMMs for bf16 and fp8 weights (an fp8 chunk is widened into bf16 first).
  const bool bf16 = precision != Precision::fp32, fp8 = precision == Precision::fp8;
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
    DeviceBuffer<Fp8> w8(scratch, MemTag::workspace, fp8 ? c * d : 1);
    DeviceBuffer<float> scale(scratch, MemTag::workspace, fp8 ? c : 1);
    w8.zero(x.stream());
    scale.zero(x.stream());
    dcb_fill_random(x, h, 3, 1.0f);
    dcb_fill_random(x, w, 4, 0.05f);
    dcb_fill_random(x, z, 5, 1.0f);
    bias.zero(x.stream());
    m.zero(x.stream());
    v.zero(x.stream());
    gpu::to_bf16(x, ConstMatrix(w.data(), c, d), gpu::Bf16Matrix(w16.data(), c, d));
    gpu::to_bf16(x, ConstMatrix(h.data(), batch, d), gpu::Bf16Matrix(h16.data(), batch, d));
    gpu::to_bf16(x, ConstMatrix(z.data(), batch, c), gpu::Bf16Matrix(g16.data(), batch, c));
    const CsrMatrix t = dcb_targets(batch, c, 9);
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
    double ms = 0.0;
    if (fp8) {  // each chunk's codes widened into bf16 before its GEMMs: read 1, write 2 bytes
      ms = dcb_time_ms(x, iters, [&] {
        gpu::widen_fp8(x, gpu::ConstFp8Matrix(w8.data(), c, d), scale.data(),
                       gpu::Bf16Matrix(w16.data(), c, d));
      });
      add_op("widen", ms * nchunks, 0, static_cast<double>(labels) * d * 3.0);
    }
    ms = dcb_time_ms(x, iters, [&] {
      if (bf16)
        gpu::gemm_nt(x, gpu::ConstBf16Matrix(h16.data(), batch, d),
                     gpu::ConstBf16Matrix(w16.data(), c, d), zm);
      else
        gpu::gemm_nt(x, ConstMatrix(h.data(), batch, d), ConstMatrix(w.data(), c, d), zm);
    });
    add_op("forward", ms * nchunks, gemm_flops, 0);
    ms = dcb_time_ms(x, iters, [&] {
      gpu::elementwise_loss_grad(x, LossType::bce, zm, bias.data(), dt, 0, batch, acc.data(),
                                 bf16 ? gpu::Bf16Matrix(g16.data(), batch, c) : gpu::Bf16Matrix());
    });
    add_op("loss", ms * nchunks, 0,
           static_cast<double>(batch) * labels * (8.0 + (bf16 ? 2.0 : 0.0)));
    ms = dcb_time_ms(x, iters, [&] {
      if (bf16)
        gpu::gemm_nn(x, gpu::ConstBf16Matrix(g16.data(), batch, c),
                     gpu::ConstBf16Matrix(w16.data(), c, d), Matrix(dh.data(), batch, d), 1.0f,
                     1.0f);
      else
        gpu::gemm_nn(x, ConstMatrix(z.data(), batch, c), ConstMatrix(w.data(), c, d),
                     Matrix(dh.data(), batch, d), 1.0f, 1.0f);
    });
    add_op("backward_input", ms * nchunks, gemm_flops, 0);
    ms = dcb_time_ms(x, iters, [&] {
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
    ms = dcb_time_ms(x, iters, [&] {
      if (fp8)
        gpu::optimizer_update_fp8(x, cfg, 1e-6, 1, w8.data(), scale.data(), dw.data(), m.data(),
                                  v.data(), c, d, 0);
      else if (bf16)
        gpu::optimizer_update(x, cfg, 1e-6, 1, w16.data(), dw.data(), m.data(), v.data(), c * d, 0);
      else
        gpu::optimizer_update(x, cfg, 1e-6, 1, w.data(), dw.data(), m.data(), v.data(), c * d);
    });
    // adam: w read+write, g read, m and v read+write.
    const double wb = weight_bytes(precision);
    add_op("update", ms * nchunks, 0, static_cast<double>(labels) * d * (2 * wb + 4 + 16));
  }

  // The full step through DenseBlock on the CUDA Context.
  MemoryLedger ledger;
  const int64_t baseline = gpu::device_mem_info().used_bytes();
  json step;
  {
    DenseBlock block(run, d, 0, labels, batch, chunk, LossType::bce, cfg, 1,
                     DensePrecision{precision, false});
    DeviceBuffer<float> h(ledger, MemTag::activations, batch * d),
        dh(ledger, MemTag::activations, batch * d);
    dcb_fill_random(ctx, h, 11, 1.0f);
    const CsrMatrix t = dcb_targets(batch, labels, 12);
    int64_t s = 0;
    const double ms = dcb_time_ms(ctx, iters, [&] {
      ++s;
      block.train_step(t, ConstMatrix(h.data(), batch, d), Matrix(dh.data(), batch, d),
                       LrState{1e-6, s});
    });
    const double tflops = 3.0 * gemm_flops / (ms * 1e9);
    const gpu::MemCrossCheck mc = gpu::memory_cross_check(ctx.ledger(), baseline);
    // The run's ledger holds the context's cuBLAS workspace and the block.
    const int64_t block_ledger = ctx.ledger().total_peak(MemSpace::device) -
                                 static_cast<int64_t>(ctx.cublas_workspace_bytes());
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
          {"precision", std::string(to_string(precision))},
          {"loss", "bce"},
          {"optimizer", "adam"},
          {"ops", ops},
          {"step", step}};
}

}  // namespace

nlohmann::json bench_dense_cuda(const DenseCudaBenchParams& p) {
  const auto devices = gpu::query_devices();
  if (devices.empty()) throw InputError("bench dense --device cuda: no CUDA GPU is visible");
  for (const auto& pr : p.precisions)
    if (pr != "fp32" && pr != "bf16" && pr != "fp8")
      throw_input("bench dense: --precision must be fp32, bf16 or fp8, got '{}'", pr);
  MemoryLedger ledger;
  CudaContext ctx(ledger, 0);
  const DcbCeilings ceil = dcb_measure_ceilings(ctx);
  json out = {{"device", "cuda"},
              {"gpu", devices[0].name},
              {"ceilings",
               {{"fp32_gemm_tflops", ceil.fp32_tflops},
                {"bf16_gemm_tflops", ceil.bf16_tflops},
                {"copy_gbs", ceil.copy_gbs}}},
              {"runs", json::array()}};
  for (int64_t labels : p.labels)
    for (const auto& pr : p.precisions) {
      Context run_ctx(Device::cuda);
      out["runs"].push_back(dcb_bench_one(
          run_ctx, p.batch, p.dim, labels, p.chunk,
          pr == "fp32" ? Precision::fp32 : (pr == "bf16" ? Precision::bf16 : Precision::fp8),
          p.iters, ceil));
    }
  return out;
}

std::string dense_cuda_bench_table(const nlohmann::json& j) {
  const auto& c = j["ceilings"];
  std::string out = fmt::format(
      "GPU {}: ceilings fp32 GEMM {:.1f} TFLOP/s, bf16 GEMM {:.1f} TFLOP/s, copy {:.0f} GB/s\n",
      j["gpu"].get<std::string>(), c["fp32_gemm_tflops"].get<double>(),
      c["bf16_gemm_tflops"].get<double>(), c["copy_gbs"].get<double>());
  for (const auto& r : j["runs"]) {
    out +=
        fmt::format("\ndense step: B={} d={} L={} chunk={} {} {} {}\n", r["batch"].get<int64_t>(),
                    r["dim"].get<int64_t>(), r["labels"].get<int64_t>(), r["chunk"].get<int64_t>(),
                    r["optimizer"].get<std::string>(), r["loss"].get<std::string>(),
                    r["precision"].get<std::string>());
    out += fmt::format("{:<16} {:>10} {:>10} {:>8} {:>10} {:>8}\n", "op", "ms", "TFLOP/s", "%gemm",
                       "GB/s", "%copy");
    auto row = [&](const std::string& name, const json& o) {
      auto num = [&](const char* k, double scale) {
        return o.contains(k) ? fmt::format("{:.1f}", o[k].get<double>() * scale) : std::string("-");
      };
      out += fmt::format("{:<16} {:>10.2f} {:>10} {:>8} {:>10} {:>8}\n", name,
                         o["ms"].get<double>(), num("tflops", 1), num("ratio_to_gemm_ceiling", 100),
                         num("gbs", 1), num("ratio_to_copy_ceiling", 100));
    };
    for (const auto& o : r["ops"]) row(o["op"].get<std::string>(), o);
    row("full step", r["step"]);
    const auto& s = r["step"];
    out += fmt::format(
        "memory: ledger peak {:.1f} MiB, analytic {:.1f} MiB (ratio {:.3f}), driver {:.1f} MiB\n",
        s["ledger_device_peak_bytes"].get<double>() / 1048576.0,
        s["analytic_bytes"].get<double>() / 1048576.0,
        s["ledger_device_peak_bytes"].get<double>() / s["analytic_bytes"].get<double>(),
        s["driver_used_bytes"].get<double>() / 1048576.0);
  }
  return out;
}

}  // namespace xmc::bench
