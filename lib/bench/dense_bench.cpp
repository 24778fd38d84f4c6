#include "bench/dense_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "bench/ceilings.h"
#include "core/context.h"
#include "core/resources.h"
#include "core/rng.h"
#include "layers/dense_block.h"

namespace xmc::bench {

nlohmann::json bench_dense(const DenseBenchParams& p) {
  Context ctx(Device::cpu, p.threads);
  OptimizerConfig optim;
  optim.type = parse_enum<OptimizerType>(p.optimizer, "optimizer");
  DenseBlock block(ctx, p.dim, 0, p.labels, p.batch, p.chunk, parse_enum<LossType>(p.loss, "loss"), optim, 1);
  if (p.sparse_gradient > 0.0) {
    block.set_sparse_gradient(p.sparse_gradient);
    const double prior = 3.0 / static_cast<double>(p.labels);
    for (const TensorRef& t : block.state(""))
      if (t.name == "bias")
        std::fill_n(std::get<float*>(t.data), t.numel(),
                    static_cast<float>(std::log(prior / (1.0 - prior))));
  }

  Rng rng(2);
  std::vector<float> h(static_cast<size_t>(p.batch * p.dim)), dh(h.size());
  for (auto& x : h) x = static_cast<float>(rng.normal());
  std::vector<std::vector<uint32_t>> rows(static_cast<size_t>(p.batch));
  for (auto& row : rows) {  // 3 random positives per row
    while (row.size() < 3) {
      auto l = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(p.labels)));
      if (std::find(row.begin(), row.end(), l) == row.end()) row.push_back(l);
    }
    std::sort(row.begin(), row.end());
  }
  const CsrMatrix targets = CsrMatrix::from_rows(rows, p.labels);
  ConstMatrix hm(h.data(), p.batch, p.dim);
  Matrix dhm(dh.data(), p.batch, p.dim);
  block.train_step(targets, hm, dhm, {1e-4, 1});  // warm-up: pages touched, threads up

  DenseTimings t;
  block.set_timings(&t);
  Stopwatch sw;
  for (int it = 0; it < p.iters; ++it) block.train_step(targets, hm, dhm, {1e-4, it + 2});
  const double step = sw.seconds() / p.iters;
  block.set_timings(nullptr);

  const double gemm = measure_sgemm_gflops();
  const double mem = measure_memory_gbps();
  const double bld = static_cast<double>(p.batch) * static_cast<double>(p.labels) * p.dim;
  const double wbytes = 4.0 * static_cast<double>(p.labels) * p.dim;
  const int states = optimizer_state_arrays(optim);
  auto op = [&](double seconds, double flops, double bytes) {
    return op_figures(seconds / p.iters, flops, bytes, gemm, mem);
  };
  nlohmann::json j;
  j["device"] = "cpu";
  j["threads"] = ctx.threads();
  j["params"] = {{"batch", p.batch}, {"dim", p.dim},        {"labels", p.labels},
                 {"chunk", p.chunk}, {"iters", p.iters},    {"optimizer", p.optimizer},
                 {"loss", p.loss},   {"precision", "fp32"}, {"sparse_gradient", p.sparse_gradient}};
  j["ceilings"] = cpu_ceilings(gemm, mem);
  // Minimal traffic: forward and dh read W once each; the update reads W, dW and the
  // optimizer state and writes W and the state back.
  j["ops"] = {
      {"forward", op(t.forward, 2 * bld, wbytes)},
      {"loss", op(t.loss, 0, 2.0 * 4 * p.batch * static_cast<double>(p.labels))},
      {"backward_input", op(t.backward_input, 2 * bld, wbytes)},
      {"backward_weight", op(t.backward_weight, 2 * bld, wbytes)},
      {"update", op(t.update, 0, wbytes * (3 + 2 * states))},
  };
  j["step"] = {{"seconds", step},
               {"gflops", 6 * bld / step / 1e9},
               {"gemm_ratio", 6 * bld / step / 1e9 / gemm}};
  j["peak_rss_bytes"] = peak_rss_bytes();
  return j;
}

std::string dense_bench_table(const nlohmann::json& j) {
  const auto& pr = j["params"];
  std::string out = fmt::format(
      "dense step, {} threads: B={} d={} L={} chunk={} {} {}\n", j["threads"].get<int>(),
      pr["batch"].get<int64_t>(), pr["dim"].get<int64_t>(), pr["labels"].get<int64_t>(),
      pr["chunk"].get<int64_t>(), pr["optimizer"].get<std::string>(),
      pr["precision"].get<std::string>());
  out += ceilings_line(j) + op_header(16);
  for (auto name : {"forward", "loss", "backward_input", "backward_weight", "update"})
    out += op_row(name, j["ops"][name], 16);
  out += op_row("full step", j["step"], 16);
  return out;
}

}  // namespace xmc::bench
