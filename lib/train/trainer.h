#pragma once
// Trainer: runs an experiment end to end — data (generated when the config asks for
// synthetic data), model, epochs of shuffled mini-batches, evaluation every N epochs,
// checkpoints, and the run directory:
//   config.resolved.yaml  metrics.jsonl (one object per epoch)  results.json  checkpoint.h5
// (names in train/run_files.h); a run that stops on an error leaves the message in
// failed.txt, and results.json exists only once a run has finished.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "config/experiment_config.h"

namespace xmc {

struct TrainOptions {
  std::string out_dir;         // overrides cfg.out
  std::string device;          // overrides cfg.device when set
  bool resume = false;         // continue from <out>/checkpoint.h5
  int64_t halt_after_epoch = 0;  // > 0: stop after that epoch's checkpoint, as if killed
  std::string config_yaml;     // the resolved config text written to the run directory
};

struct TrainSummary {
  nlohmann::json results;    // the content of results.json
  std::string metrics_table; // the last evaluation as a human-readable table
  bool halted = false;       // stopped early by halt_after_epoch
};

// Throws InputError for bad data, config or paths — before training starts where possible.
TrainSummary run_training(const ExperimentConfig& cfg, const TrainOptions& opt);

// The run directory a config trains into: cfg.out, or runs/<name>.
std::string run_directory(const ExperimentConfig& cfg, const TrainOptions& opt);

// Generates the synthetic dataset a config names when it is enabled and missing.
void ensure_synthetic_data(const ExperimentConfig& cfg);

}  // namespace xmc
