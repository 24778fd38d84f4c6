#include "bench/layer_step_bench.h"

#include <algorithm>
#include <cmath>
#include <variant>
#include <vector>

#include "core/context.h"
#include "core/resources.h"
#include "core/rng.h"
#include "data/batch.h"
#include "layers/registry.h"

namespace xmc::bench {

namespace {

Batch random_batch(Rng& rng, const LayerShape& s, int64_t per_point) {
  Batch b;
  b.sparse = false;
  b.labels.rows = 0;
  b.labels.cols = s.num_labels;
  b.labels.indptr = {0};
  for (int64_t i = 0; i < s.batch; ++i) {
    b.ids.push_back(static_cast<int64_t>(rng.below(static_cast<uint64_t>(s.num_train))));
    std::vector<uint32_t> pos;
    while (static_cast<int64_t>(pos.size()) < per_point) {
      const auto l = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(s.num_labels)));
      if (std::find(pos.begin(), pos.end(), l) == pos.end()) pos.push_back(l);
    }
    std::sort(pos.begin(), pos.end());
    b.labels.indices.insert(b.labels.indices.end(), pos.begin(), pos.end());
    b.labels.indptr.push_back(static_cast<int64_t>(b.labels.indices.size()));
    ++b.labels.rows;
  }
  return b;
}

}  // namespace

double measure_layer_step_seconds(const LayerShape& s, const OutputSpec& spec, int threads) {
  Context ctx(Device::cpu, threads);
  LayerInit init;
  init.ctx = &ctx;
  init.input_dim = s.input_dim;
  init.num_labels = s.num_labels;
  init.batch_size = std::max<int64_t>(s.batch, 1);
  init.optim = s.optim;
  init.seed = 7;
  init.num_train = std::max<int64_t>(s.num_train, 1);
  init.total_steps = 1000;
  std::unique_ptr<OutputLayer> layer = create_output_layer(init, spec);
  Rng rng(11);
  // A stale hard-negative table, as after a refresh (anns_sampled's checkpoint state).
  bool has_table = false;
  for (const TensorRef& t : layer->state()) {
    if (t.name == "output/hard_negatives") {
      uint32_t* v = std::get<uint32_t*>(t.data);
      for (int64_t i = 0; i < t.numel(); ++i)
        v[i] = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(s.num_labels)));
      has_table = true;
    } else if (t.name == "output/anns_meta") {
      int64_t* m = std::get<int64_t*>(t.data);
      m[0] = m[1] = 1;
    }
  }
  if (has_table) layer->sync_state(StateSync::to_device);
  const int64_t per_point =
      std::clamp<int64_t>(static_cast<int64_t>(std::ceil(s.labels_per_point)), 1, s.num_labels);
  const int64_t batch = init.batch_size, d = s.input_dim;
  std::vector<float> h(static_cast<size_t>(batch * d)), dh(h.size());
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (auto& x : h) x = static_cast<float>(rng.normal()) * scale;
  std::vector<Batch> batches;
  for (int i = 0; i < 4; ++i) batches.push_back(random_batch(rng, s, per_point));
  int64_t step = 0;
  auto one = [&] {
    ++step;
    layer->train_step(batches[static_cast<size_t>(step) % batches.size()],
                      ConstMatrix(h.data(), batch, d), Matrix(dh.data(), batch, d),
                      {s.optim.lr, step});
  };
  one();
  one();
  Stopwatch sw;
  int timed = 0;
  while (timed < 3 || sw.seconds() < 0.3) {
    one();
    ++timed;
  }
  return sw.seconds() / timed;
}

}  // namespace xmc::bench
