#include <iostream>

#include "bench/dense_bench.h"
#include "commands.h"
#include "core/error.h"
#include "sampling/lsh_bench.h"

namespace xmc::app {

Command register_bench(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "bench",
      "Kernel microbenchmarks: per-op time, achieved GFLOP/s and GB/s beside the measured "
      "sgemm and copy ceilings of this machine. Prints a table, or JSON with --json.");
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
  return {sub, [p, lp, json, dense, lsh]() -> int {
            if (lsh->parsed()) {
              if (lp->dim < 1 || lp->batch < 1 || lp->iters < 1 || lp->labels.empty())
                throw_input("bench lsh: sizes, --iters and --labels must be positive");
              for (auto n : lp->labels)
                if (n < 1) throw_input("bench lsh: --labels {} must be positive", n);
              auto j = bench::bench_lsh(*lp);
              std::cout << (*json ? j.dump(2) + "\n" : bench::lsh_bench_table(j));
            }
            if (dense->parsed()) {
              if (p->batch < 1 || p->dim < 1 || p->labels < 1 || p->chunk < 1 || p->iters < 1)
                throw_input("bench dense: sizes and --iters must be positive");
              auto j = bench::bench_dense(*p);
              std::cout << (*json ? j.dump(2) + "\n" : bench::dense_bench_table(j));
            }
            return 0;
          }};
}

}  // namespace xmc::app
