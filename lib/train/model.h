#pragma once
// Model: the encoder and the output layer built from an experiment config and the data's
// shape, with checkpoint save/load of their state and of the metadata that eval and
// predict need without the training data (input dim, labels, label frequencies).
#include <cstdint>
#include <memory>
#include <vector>

#include "config/experiment_config.h"
#include "core/context.h"
#include "dist/comm.h"
#include "layers/output_layer.h"
#include "model/encoder.h"
#include "ops/optimizer.h"
#include "ops/topk.h"
#include "train/checkpoint.h"

namespace xmc {

struct ShardSelection;  // layers/shard_set.h

struct ModelMeta {
  int64_t input_dim = 0;            // D
  int64_t num_labels = 0;           // L
  int64_t n_train = 0;              // training points (propensities)
  bool sparse_input = false;
  std::vector<int64_t> label_freq;  // [L] training counts

  void save(CheckpointWriter& w) const;
  static ModelMeta load(const CheckpointReader& r);
};

// model.bias_init: log_prior — the log-odds of each label's smoothed training frequency,
// log(p/(1-p)) with p = (n_l + 0.5)/(N + 1) (finite for labels without a training point).
std::vector<float> label_log_prior(const std::vector<int64_t>& label_freq, int64_t n_train);

// The device a model with output type `backend` runs on: "cpu", "cuda" or "auto".
// "cuda" without CUDA support, without a visible GPU, or for a backend without a CUDA path
// (layers/registry.cpp) throws InputError — never a silent fallback. "auto" picks cuda
// when it can, else the CPU (with a warning when a GPU is present but the backend has no
// CUDA path).
Device training_device(const std::string& requested, const std::string& backend);

// Inverse propensities of the model's labels: A/B from `prop` (a = b = 0: the family's
// defaults; family auto: guessed from the training data's path).
std::vector<double> model_propensities(const DataConfig& data, const PropensityConfig& prop,
                                       const ModelMeta& meta);

class Model {
 public:
  // total_steps: planned optimizer steps (schedules, rewiring); 0 for inference only.
  // comm (optional, kept): a label-sharded run — this process builds the output layer over
  // its own labels (shard_labels) and predict() returns top-k lists of those labels only.
  // shard_set (optional, inference only): the label ranges of consecutive shards of a
  // label-sharded run's checkpoint set, which this process evaluates side by side
  // (layers/shard_set.h) instead of the labels shard_labels would give it.
  Model(Context& ctx, const ExperimentConfig& cfg, ModelMeta meta, int64_t total_steps,
        Comm* comm = nullptr, const ShardSelection* shard_set = nullptr);

  Encoder& encoder() { return *encoder_; }
  OutputLayer& output() { return *output_; }
  const ModelMeta& meta() const { return meta_; }
  // The processes of a label-sharded run (nullptr: one process).
  Comm* comm() const { return comm_; }
  // Bytes the output layer put into the ledger when it was built (weights, optimizer
  // state, workspace), to compare with output().analytic_bytes().
  int64_t output_ledger_bytes() const { return output_ledger_bytes_; }

  // Top-k (global label ids) of a batch, without dropout (on the model's device).
  TopK predict(const Batch& batch, int k);
  // h [B×d] of a batch without dropout, copied to the host rows of out (any device).
  void embed(const Batch& batch, Matrix out);

  // Device-resident state is staged through host copies (same layout on both devices).
  // A label-sharded run's rank r > 0 writes its file without the encoder (with_encoder
  // false: the ranks' copies are identical, rank 0's file holds it) and reads it back
  // from rank 0's (`encoder_from`; nullptr: from r).
  void save_state(CheckpointWriter& w, bool with_encoder = true);
  void load_state(const CheckpointReader& r, const CheckpointReader* encoder_from = nullptr);
  // A model built over a shard set: the encoder from `index` (rank 0's file), the output
  // part s from shards[s].
  void load_shard_set(const CheckpointReader& index,
                      const std::vector<const CheckpointReader*>& shards);

 private:
  // The encoder's and the output layer's sync_state (host copies for checkpoints).
  void sync_state(StateSync s);
  ModelMeta meta_;
  std::unique_ptr<Encoder> encoder_;
  std::unique_ptr<OutputLayer> output_;
  int64_t output_ledger_bytes_ = 0;
  Context* ctx_ = nullptr;
  Comm* comm_ = nullptr;
};

}  // namespace xmc
