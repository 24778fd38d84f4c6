#include <filesystem>
#include <fstream>
#include <iostream>

#include "bench/ceilings.h"
#include "bench/dense_bench.h"
#include "bench/fixed_fanin_bench.h"
#include "bench/group_shared_bench.h"
#include "commands.h"
#include "core/context.h"
#include "core/error.h"
#include "sampling/lsh_bench.h"

namespace xmc::app {

Command register_bench(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "bench",
      "Kernel microbenchmarks: per-op time, achieved GFLOP/s and GB/s beside the measured "
      "sgemm and memory-bandwidth ceilings of this machine. Prints a table, or JSON with --json.");
  sub->require_subcommand(1);
  auto p = std::make_shared<bench::DenseBenchParams>();
  auto json = std::make_shared<bool>(false);
  auto* dense = sub->add_subcommand("dense", "One training step of the dense output layer");
  dense->add_option("--batch", p->batch, "Batch size B")->capture_default_str();
  dense->add_option("--dim", p->dim, "Input width d")->capture_default_str();
  dense->add_option("--labels", p->labels, "Number of labels L")->capture_default_str();
  dense->add_option("--chunk", p->chunk, "Labels per chunk")->capture_default_str();
  dense->add_option("--iters", p->iters, "Timed steps")->capture_default_str();
  dense->add_option("--optimizer", p->optimizer, "sgd | adam | adamw")->capture_default_str();
  dense->add_option("--loss", p->loss, "bce | squared_hinge | softmax")->capture_default_str();
  dense->add_option("--threads", p->threads, "Threads (0 = all cores)");
  dense
      ->add_option("--sparse-gradient", p->sparse_gradient,
                   "cpu: the output layer's sparse_gradient threshold (0: exact; the bias then "
                   "starts at the labels' log prior, so G is as sparse as in training)")
      ->capture_default_str();
  auto dev = std::make_shared<std::string>("cpu");
  auto cp = std::make_shared<bench::DenseCudaBenchParams>();
  dense->add_option("--device", *dev,
                    "cpu | cuda (cuda: adam + bce, L = 131072, 670091, 3000000 unless --labels, "
                    "chunk 16384 unless --chunk)")
      ->capture_default_str();
  dense->add_option("--precision", cp->precisions, "cuda: fp32, bf16 and/or fp8 (Adam in each)")
      ->capture_default_str();
  dense->add_flag("--json", *json, "Print JSON");
  auto lp = std::make_shared<bench::LshBenchParams>();
  auto* lsh = sub->add_subcommand("lsh", "The lsh_sampled sampling step alone, per point, as L grows");
  lsh->add_option("--labels", lp->labels, "Label counts L to measure")->capture_default_str();
  lsh->add_option("--dim", lp->dim, "Vector width d")->capture_default_str();
  lsh->add_option("--batch", lp->batch, "Points per batch")->capture_default_str();
  lsh->add_option("--iters", lp->iters, "Timed batches")->capture_default_str();
  lsh->add_option("--hash", lp->hash, "simhash | dwta")->capture_default_str();
  lsh->add_option("--k", lp->k, "Bits (simhash) or codes (dwta) per table")->capture_default_str();
  lsh->add_option("--tables", lp->tables, "Number of tables")->capture_default_str();
  lsh->add_option("--capacity", lp->capacity, "Labels per bucket")->capture_default_str();
  lsh->add_option("--query", lp->query, "embedding | label | none")->capture_default_str();
  lsh->add_option("--max-candidates", lp->max_candidates, "Cap per point")->capture_default_str();
  lsh->add_option("--min-candidates", lp->min_candidates, "Padding target")->capture_default_str();
  lsh->add_option("--threads", lp->threads, "Threads (0 = all cores)")->capture_default_str();
  lsh->add_flag("--json", *json, "Print JSON");
  auto q = std::make_shared<bench::FixedFaninBenchParams>();
  auto* ff = sub->add_subcommand(
      "fixed_fanin",
      "Fixed fan-in ops (forward, weight and input gradient, dense and sparse gradients) "
      "beside a same-shape and a FLOPs-matched dense GEMM");
  ff->add_option("--batch", q->batch, "Batch size B")->capture_default_str();
  ff->add_option("--dim", q->dim, "Inputs m of the sparse layer")->capture_default_str();
  ff->add_option("--labels", q->labels, "Number of labels L")->capture_default_str();
  ff->add_option("--fan-in", q->fan_in, "Fan-in F")->capture_default_str();
  ff->add_option("--chunk", q->chunk, "Labels per block")->capture_default_str();
  ff->add_option("--nonzero", q->nonzero, "Share of nonzero gradients in the sparse case")
      ->capture_default_str();
  ff->add_option("--iters", q->iters, "Timed repetitions")->capture_default_str();
  ff->add_option("--threads", q->threads, "Threads (0 = all cores)");
  ff->add_flag("--json", *json, "Print JSON");
  auto gp = std::make_shared<bench::GroupSharedBenchParams>();
  auto* gs = sub->add_subcommand(
      "group_shared",
      "Group-shared ops (forward, weight and input gradient) for each G and F beside the fixed "
      "fan-in ops and a FLOPs-matched dense GEMM");
  gs->add_option("--batch", gp->batch, "Batch size B")->capture_default_str();
  gs->add_option("--dim", gp->dim, "Inputs m of the tail")->capture_default_str();
  gs->add_option("--labels", gp->labels, "Number of labels L")->capture_default_str();
  gs->add_option("--groups", gp->groups, "Group sizes G (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  gs->add_option("--fan-ins", gp->fan_ins, "Fan-ins F (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  gs->add_option("--chunk", gp->chunk, "Labels per block")->capture_default_str();
  gs->add_option("--iters", gp->iters, "Timed repetitions")->capture_default_str();
  gs->add_option("--threads", gp->threads, "Threads (0 = all cores)");
  gs->add_flag("--json", *json, "Print JSON");
  auto* ceil = sub->add_subcommand(
      "ceilings",
      "Measure this machine's CPU ceilings (sgemm GFLOP/s on 2048³, memory GB/s over 512 MiB) "
      "and cache them for `xmctrain plan` (--out, default "
      "$XDG_CACHE_HOME/xmctrain/ceilings-cpu-<threads>t.json, ~/.cache without XDG_CACHE_HOME)");
  auto ceil_threads = std::make_shared<int>(0);
  auto ceil_out = std::make_shared<std::string>();
  ceil->add_option("--threads", *ceil_threads, "Threads (0 = all cores)")->capture_default_str();
  ceil->add_option("--out", *ceil_out, "Where to write the JSON (default: the cache path)");
  ceil->add_flag("--json", *json, "Print JSON");
  return {sub,
          [p, lp, q, gp, json, dense, lsh, ff, gs, dev, cp, ceil, ceil_threads, ceil_out]() -> int {
            if (ceil->parsed()) {
              const Context ctx(Device::cpu, *ceil_threads);
              const std::string out =
                  ceil_out->empty() ? bench::ceilings_cache_path(ctx.threads()) : *ceil_out;
              const auto parent = std::filesystem::path(out).parent_path();
              std::error_code ec;
              if (!parent.empty()) std::filesystem::create_directories(parent, ec);
              std::ofstream f(out);  // opened before the measurement
              if (!f) throw_input("bench ceilings: cannot write '{}'", out);
              const nlohmann::json j = bench::measure_ceilings(ctx.threads());
              f << j.dump(2) << "\n";
              if (!f.flush()) throw_input("bench ceilings: writing '{}' failed", out);
              std::cout << (*json ? j.dump(2) + "\n"
                                  : bench::ceilings_line(j) +
                                        fmt::format("{} threads, written to {}\n", ctx.threads(),
                                                    out));
            }
            if (gs->parsed()) {
              if (gp->batch < 1 || gp->dim < 1 || gp->labels < 1 || gp->chunk < 1 ||
                  gp->iters < 1 || gp->groups.empty() || gp->fan_ins.empty())
                throw_input("bench group_shared: sizes, --iters, --groups and --fan-ins must be "
                            "positive");
              for (auto g : gp->groups)
                if (g < 1) throw_input("bench group_shared: --groups {} must be positive", g);
              for (auto f : gp->fan_ins)
                if (f < 1 || f > gp->dim)
                  throw_input("bench group_shared: --fan-ins {} must be in [1, --dim {}]", f, gp->dim);
              auto j = bench::bench_group_shared(*gp);
              std::cout << (*json ? j.dump(2) + "\n" : bench::group_shared_bench_table(j));
            }
            if (lsh->parsed()) {
              if (lp->dim < 1 || lp->batch < 1 || lp->iters < 1 || lp->labels.empty())
                throw_input("bench lsh: sizes, --iters and --labels must be positive");
              for (auto n : lp->labels)
                if (n < 1) throw_input("bench lsh: --labels {} must be positive", n);
              auto j = bench::bench_lsh(*lp);
              std::cout << (*json ? j.dump(2) + "\n" : bench::lsh_bench_table(j));
            }
            if (ff->parsed()) {
              if (q->batch < 1 || q->dim < 1 || q->labels < 1 || q->fan_in < 1 ||
                  q->fan_in > q->dim || q->chunk < 1 || q->iters < 1)
                throw_input("bench fixed_fanin: sizes and --iters must be positive and "
                            "--fan-in ({}) at most --dim ({})", q->fan_in, q->dim);
              if (!(q->nonzero >= 0.0 && q->nonzero <= 1.0))
                throw_input("bench fixed_fanin: --nonzero {} is not in [0, 1]", q->nonzero);
              auto j = bench::bench_fixed_fanin(*q);
              std::cout << (*json ? j.dump(2) + "\n" : bench::fixed_fanin_bench_table(j));
            }
            if (dense->parsed()) {
              if (p->batch < 1 || p->dim < 1 || p->labels < 1 || p->chunk < 1 || p->iters < 1)
                throw_input("bench dense: sizes and --iters must be positive");
              if (*dev == "cuda") {
                cp->batch = p->batch;
                cp->dim = p->dim;
                cp->iters = p->iters;
                if (dense->count("--labels") > 0) cp->labels = {p->labels};
                if (dense->count("--chunk") > 0) cp->chunk = p->chunk;
                auto j = bench::bench_dense_cuda(*cp);
                std::cout << (*json ? j.dump(2) + "\n" : bench::dense_cuda_bench_table(j));
                return 0;
              }
              if (*dev != "cpu")
                throw_input("bench dense: --device must be cpu or cuda, got '{}'", *dev);
              auto j = bench::bench_dense(*p);
              std::cout << (*json ? j.dump(2) + "\n" : bench::dense_bench_table(j));
            }
            return 0;
          }};
}

}  // namespace xmc::app
