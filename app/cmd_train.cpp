#include <spdlog/spdlog.h>

#include <csignal>
#include <iostream>

#include "commands.h"
#include "config/config_loader.h"
#include "config/config_reference.h"
#include "core/error.h"
#include "layers/registry.h"
#include "train/trainer.h"

namespace xmc::app {

Command register_train(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "train",
      "Train a model from a YAML experiment config. Writes config.resolved.yaml, "
      "metrics.jsonl (one JSON object per epoch), results.json and checkpoint.h5 to the run "
      "directory (--out, else the config's `out`, else runs/<name>); results.json appears "
      "only when the run is complete. A directory that holds a run is refused unless "
      "--resume or --overwrite. SIGINT / SIGTERM finish the current step, write a checkpoint "
      "and exit 130 / 143 (continue with --resume). A config whose data.synth.enabled is true "
      "generates its synthetic data when the files are missing.");
  struct Opts {
    std::string config;
    std::vector<std::string> set;
    std::string out, device;
    bool resume = false, overwrite = false, allow_config_change = false, json = false,
         reference = false;
    int64_t halt_after_epoch = 0;
  };
  auto o = std::make_shared<Opts>();
  sub->add_option("config", o->config, "Experiment config (YAML)");
  sub->add_option("--set", o->set,
                  "Override a config key, e.g. --set train.epochs=3 (repeatable; the value is "
                  "YAML)");
  sub->add_option("--out", o->out, "Run directory (overrides the config's `out`)");
  sub->add_option("--device", o->device, "cpu | cuda | auto (overrides the config's `device`)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  auto* resume = sub->add_flag(
      "--resume", o->resume,
      "Continue an interrupted run from <run dir>/checkpoint.h5 to the same final result as an "
      "uninterrupted run. The config must be the run's own (config.resolved.yaml; out, device, "
      "threads and train.log_every_s may differ). On a complete run: prints its results and "
      "exits 0");
  sub->add_flag("--overwrite", o->overwrite,
                "Replace the run already in the run directory (its files are removed when "
                "training starts; a run that fails before that leaves the old one intact)")
      ->excludes(resume);
  sub->add_flag("--allow-config-change", o->allow_config_change,
                "With --resume: continue with a changed config; the changed keys are recorded "
                "in metrics.jsonl and config.resolved.yaml becomes the new config")
      ->needs(resume);
  sub->add_flag("--json", o->json, "Print results.json on stdout instead of the summary table");
  sub->add_flag("--config-reference", o->reference,
                "Print the reference of every config key (Markdown) and exit");
  sub->add_option("--halt-after-epoch", o->halt_after_epoch,
                  "Testing aid: stop after this epoch's checkpoint, as if the run were killed")
      ->group("");
  return {sub, [o]() -> int {
            if (o->reference) {
              std::cout << config_reference_markdown(output_types());
              return 0;
            }
            if (o->config.empty())
              throw_input("train: a config file is required (xmctrain train CONFIG)");
            ExperimentConfig cfg = load_config(o->config, o->set, output_types());
            TrainOptions opt;
            opt.out_dir = o->out;
            opt.device = o->device;
            opt.resume = o->resume;
            opt.overwrite = o->overwrite;
            opt.allow_config_change = o->allow_config_change;
            opt.halt_after_epoch = o->halt_after_epoch;
            opt.config_yaml = dump_config(cfg);
            TrainSummary s = run_training(cfg, opt);
            if (s.halted) return 0;
            if (s.stop_signal != 0) {
              if (s.quiet) return 128 + s.stop_signal;
              std::string again = (s.processes > 1 ? fmt::format("mpirun -np {} ", s.processes)
                                                   : std::string()) +
                                  "xmctrain train " + o->config + " --out " + s.run_dir;
              for (const auto& kv : o->set) again += " --set '" + kv + "'";
              std::cerr << fmt::format(
                  "interrupted by {}: checkpoint written to {}/checkpoint.h5; continue with:\n"
                  "  {} --resume\n",
                  s.stop_signal == SIGINT ? "SIGINT" : "SIGTERM", s.run_dir, again);
              return 128 + s.stop_signal;
            }
            if (s.quiet) return 0;
            if (o->json) {
              std::cout << s.results.dump(2) << "\n";
              return 0;
            }
            if (s.complete) {
              std::cout << fmt::format(
                  "run directory {} is complete ({} epochs): nothing to do; results.json is "
                  "kept\n",
                  s.run_dir, s.results.value("epochs", 0));
              return 0;
            }
            const auto& r = s.results;
            std::cout << s.metrics_table << "\n";
            std::cout << fmt::format(
                "backend {}  device {}  threads {}\n"
                "epoch time {:.2f} s  ({:.0f} samples/s)  total {:.1f} s\n"
                "peak RSS {:.1f} MiB  output layer {:.1f} MiB (ledger) / {:.1f} MiB (analytic)\n"
                "run directory {}\n",
                r["backend"].get<std::string>(), r["device"].get<std::string>(),
                r["threads"].get<int>(), r["last_epoch_seconds"].get<double>(),
                r["samples_per_s"].get<double>(), r["total_seconds"].get<double>(),
                r["peak_rss_bytes"].get<double>() / 1048576.0,
                r["output_layer_bytes"].get<double>() / 1048576.0,
                r["output_layer_analytic_bytes"].get<double>() / 1048576.0,
                r["run_dir"].get<std::string>());
            return 0;
          }};
}

}  // namespace xmc::app
