#pragma once
// The data a run trains and evaluates on.
#include "config/experiment_config.h"
#include "core/context.h"
#include "core/memory_ledger.h"
#include "train/evaluation.h"

namespace xmc {

// Generates the synthetic dataset a config names when it is enabled and missing.
void ensure_synthetic_data(const ExperimentConfig& cfg);

// The data of a run, loaded (and the synthetic set generated) on construction, and what
// follows from it: the model's meta and the evaluation settings. Built in place (es points
// at filter).
struct RunData {
  RunData(const ExperimentConfig& cfg, Context& ctx);
  RunData(const RunData&) = delete;
  RunData& operator=(const RunData&) = delete;

  Dataset train, test;
  LedgerEntry mem;
  ModelMeta meta;
  FilterSet filter;
  EvalSettings es;
};

}  // namespace xmc
