#pragma once
// Trainer: runs an experiment end to end — data (generated when the config asks for
// synthetic data), model, epochs of shuffled mini-batches, evaluation every N epochs,
// checkpoints, and the run directory:
//   config.resolved.yaml  metrics.jsonl (one object per epoch)  results.json  checkpoint.h5
// (names in train/run_files.h); a run that stops on an error after training began leaves
// the message in failed.txt, and results.json exists only once a run has finished.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/experiment_config.h"

namespace xmc {

struct TrainOptions {
  std::string out_dir;               // overrides cfg.out
  std::string device;                // overrides cfg.device when set
  bool resume = false;               // continue from <out>/checkpoint.h5
  bool overwrite = false;            // replace a run already in the directory
  bool allow_config_change = false;  // resume with a changed config (logged in metrics.jsonl)
  int64_t halt_after_epoch = 0;      // > 0: stop after that epoch's checkpoint, as if killed
  std::string config_yaml;           // the resolved config text written to the run directory
};

struct TrainSummary {
  nlohmann::json results;     // the content of results.json
  std::string metrics_table;  // the last evaluation as a human-readable table (empty when complete)
  bool halted = false;        // stopped early by halt_after_epoch
  bool complete = false;      // --resume of a finished run: nothing done, results from results.json
  int stop_signal = 0;        // SIGINT / SIGTERM: stopped after a step with a checkpoint
  std::string run_dir;        // where the run is
  bool quiet = false;         // a rank other than 0 of a label-sharded run: rank 0 reports
  int processes = 1;          // the processes of the run (mpirun -np)
};

// Throws InputError for bad data, config or paths — before training starts where possible.
// SIGINT and SIGTERM during training finish the step, write a checkpoint and return with
// stop_signal set.
TrainSummary run_training(const ExperimentConfig& cfg, const TrainOptions& opt);

// The run directory a config trains into: cfg.out, or runs/<name>.
std::string run_directory(const ExperimentConfig& cfg, const TrainOptions& opt);

}  // namespace xmc
