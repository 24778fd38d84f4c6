#include "train/inference.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "config/config_loader.h"
#include "core/error.h"
#include "core/resources.h"
#include "data/batcher.h"
#include "layers/registry.h"
#include "layers/shard_set.h"
#include "train/checkpoint.h"
#include "train/evaluation.h"

namespace xmc {

LoadedModel load_model(const std::string& checkpoint, const std::string& device, int threads,
                       Comm* comm) {
  CheckpointReader r(checkpoint);
  LoadedModel m;
  m.config = parse_config(r.read_string("meta/config_yaml"), checkpoint + ":meta/config_yaml", {},
                          output_types());
  const Device dev =
      training_device(device.empty() ? m.config.device : device, m.config.model.output.type);
  m.ctx = std::make_unique<Context>(dev, threads > 0 ? threads : static_cast<int>(m.config.threads),
                                    dev == Device::cuda ? rank_gpu(comm) : 0);
  ModelMeta meta = ModelMeta::load(r);
  const ShardIndex idx = read_shard_index(r, meta.num_labels);
  const int processes = comm != nullptr ? comm->size() : 1;
  if (processes > idx.processes)
    throw_input(
        "{}: {} holds {} shard{}: evaluate it with at most {} process{} (mpirun -np {}), "
        "not {}",
        checkpoint, idx.processes == 1 ? "a one-process checkpoint" : "the checkpoint set",
        idx.processes, idx.processes == 1 ? "" : "s", idx.processes, idx.processes == 1 ? "" : "es",
        idx.processes, processes);
  if (idx.processes == 1) {
    m.model = std::make_unique<Model>(*m.ctx, m.config, std::move(meta), 0);
    m.model->load_state(r);
    return m;
  }
  // A label-sharded run's checkpoint set: this process evaluates the consecutive shards
  // shard_labels gives it (all of them in one process), each as its process trained it.
  const int rank = comm != nullptr ? comm->rank() : 0;
  const LabelRange mine = shard_labels(idx.processes, rank, processes);
  ShardSelection set;
  set.ranges.assign(idx.ranges.begin() + mine.lo, idx.ranges.begin() + mine.hi);
  set.first = static_cast<int>(mine.lo);
  set.total = idx.processes;
  m.model = std::make_unique<Model>(*m.ctx, m.config, std::move(meta), 0, comm, &set);
  std::vector<std::unique_ptr<CheckpointReader>> files;
  std::vector<const CheckpointReader*> shards;
  for (int64_t s = mine.lo; s < mine.hi; ++s) {
    if (s > 0)  // shard 0 is the index file, open as r
      files.push_back(std::make_unique<CheckpointReader>(
          shard_file(checkpoint, idx.step, static_cast<int>(s)).string()));
    shards.push_back(s == 0 ? &r : files.back().get());
  }
  m.model->load_shard_set(r, shards);
  return m;
}

CsrMatrix topk_to_csr(const TopK& topk, int64_t num_labels) {
  CsrMatrix m;
  m.rows = topk.rows;
  m.cols = num_labels;
  for (int64_t r = 0; r < topk.rows; ++r) {
    for (int j = 0; j < topk.k; ++j) {
      const uint32_t l = topk.row_labels(r)[j];
      if (l == TopK::kNoLabel) continue;
      m.indices.push_back(l);
      m.values.push_back(topk.row_scores(r)[j]);
    }
    m.indptr.push_back(static_cast<int64_t>(m.indices.size()));
  }
  return m;
}

// ---- evaluation (train/evaluation.h) ----

TopK predict_dataset(Model& model, const Dataset& data, const EvalSettings& s) {
  const int extra = s.filter ? s.filter->max_per_point() : 0;
  const int kk = s.k + extra;
  TopK all = TopK::padded(data.num_points(), kk);
  Batcher in_order(data, s.batch_size, 0, /*shuffle=*/false);
  in_order.start_epoch(0);
  Batch batch;
  for (int64_t r0 = 0; in_order.next(batch); r0 += batch.size()) {
    TopK part = model.predict(batch, kk);
    // Label-sharded: every rank's lists merged on rank 0; the other ranks keep nothing.
    if (model.comm() != nullptr) {
      part = gather_topk(*model.comm(), part);
      if (!model.comm()->is_root()) continue;
    }
    std::copy(part.labels.begin(), part.labels.end(), all.labels.begin() + r0 * kk);
    std::copy(part.scores.begin(), part.scores.end(), all.scores.begin() + r0 * kk);
  }
  if (model.comm() != nullptr && !model.comm()->is_root()) return {};
  if (s.filter) apply_filter(all, *s.filter);
  return all;
}

EvalResult evaluate_dataset(Model& model, const Dataset& data, const EvalSettings& s) {
  Stopwatch sw;
  TopK pred = predict_dataset(model, data, s);
  EvalResult r;
  if (model.comm() != nullptr && !model.comm()->is_root()) return r;  // rank 0 scores
  r.metrics = compute_metrics(pred, data.labels, s.inv_prop, s.k);
  r.seconds = sw.seconds();
  return r;
}

}  // namespace xmc
