#include "train/inference.h"

#include <memory>
#include <vector>

#include "config/config_loader.h"
#include "core/error.h"
#include "layers/registry.h"
#include "train/checkpoint.h"
#include "train/shards.h"

namespace xmc {

LoadedModel load_model(const std::string& checkpoint, const std::string& device, int threads) {
  CheckpointReader r(checkpoint);
  LoadedModel m;
  m.config = parse_config(r.read_string("meta/config_yaml"), checkpoint + ":meta/config_yaml", {},
                          output_types());
  const Device dev =
      training_device(device.empty() ? m.config.device : device, m.config.model.output.type);
  m.ctx = std::make_unique<Context>(dev, threads > 0 ? threads : static_cast<int>(m.config.threads));
  m.model = std::make_unique<Model>(*m.ctx, m.config, ModelMeta::load(r), 0);
  const ShardIndex idx = read_shard_index(r);
  if (idx.processes == 1) {
    m.model->load_state(r);
    return m;
  }
  // A label-sharded run's checkpoint: every shard's labels into this one model.
  std::vector<std::unique_ptr<CheckpointReader>> others;
  std::vector<const CheckpointReader*> shards = {&r};
  for (int s = 1; s < idx.processes; ++s) {
    others.push_back(
        std::make_unique<CheckpointReader>(shard_file(checkpoint, idx.step, s).string()));
    shards.push_back(others.back().get());
  }
  m.model->load_sharded_state(shards, idx.ranges);
  return m;
}

CsrMatrix topk_to_csr(const TopK& topk, int64_t num_labels) {
  CsrMatrix m;
  m.rows = topk.rows;
  m.cols = num_labels;
  m.indptr.assign(1, 0);
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

}  // namespace xmc
