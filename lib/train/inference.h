#pragma once
// Inference from a checkpoint: rebuild the model from the stored config and state, then
// evaluate or predict.
#include <memory>
#include <string>

#include "config/experiment_config.h"
#include "core/context.h"
#include "dist/comm.h"
#include "train/model.h"

namespace xmc {

struct LoadedModel {
  ExperimentConfig config;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Model> model;
};

// device: cpu | cuda | auto ("" = the checkpoint config's device).
// A label-sharded run's checkpoint set is read whole in one process, or by the processes of
// comm (at most one per shard), each evaluating its consecutive shards (InputError for more
// processes than shards); evaluation then merges the top-k lists on rank 0.
LoadedModel load_model(const std::string& checkpoint, const std::string& device, int threads,
                       Comm* comm = nullptr);

// Top-k predictions as a CSR [N×L] of label:score pairs in descending score order.
CsrMatrix topk_to_csr(const TopK& topk, int64_t num_labels);

}  // namespace xmc
