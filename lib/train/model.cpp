#include "train/model.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "eval/propensity.h"
#include "layers/registry.h"

namespace xmc {

void ModelMeta::save(CheckpointWriter& w) const {
  w.write_i64("meta/input_dim", {input_dim});
  w.write_i64("meta/num_labels", {num_labels});
  w.write_i64("meta/n_train", {n_train});
  w.write_i64("meta/sparse_input", {sparse_input ? 1 : 0});
  w.write_i64("meta/label_freq", label_freq);
  // Internal label index -> original label id. Identity for every backend that keeps
  // the original order; backends that permute labels store their own permutation.
  std::vector<int64_t> label_map(static_cast<size_t>(num_labels));
  for (int64_t i = 0; i < num_labels; ++i) label_map[static_cast<size_t>(i)] = i;
  w.write_i64("meta/label_map", label_map);
}

ModelMeta ModelMeta::load(const CheckpointReader& r) {
  ModelMeta m;
  m.input_dim = r.read_i64("meta/input_dim").at(0);
  m.num_labels = r.read_i64("meta/num_labels").at(0);
  m.n_train = r.read_i64("meta/n_train").at(0);
  m.sparse_input = r.read_i64("meta/sparse_input").at(0) != 0;
  m.label_freq = r.read_i64("meta/label_freq");
  if (static_cast<int64_t>(m.label_freq.size()) != m.num_labels)
    throw_input("{}: meta/label_freq has {} entries, expected {}", r.path(), m.label_freq.size(),
                m.num_labels);
  return m;
}

Device training_device(const std::string& requested) {
  const Device d = resolve_device(requested);
  if (d == Device::cpu) return d;
  if (requested == "auto") {
    spdlog::warn("a CUDA GPU is present, but the CUDA training path is not wired yet: using the CPU");
    return Device::cpu;
  }
  throw_input("device 'cuda': the CUDA training path is not wired yet in this build; use --device cpu");
}

OptimizerConfig to_optimizer_config(const OptimSpec& spec) {
  OptimizerConfig c;
  c.type = parse_optimizer(spec.type);
  c.lr = spec.lr;
  c.momentum = spec.momentum;
  c.weight_decay = spec.weight_decay;
  c.beta1 = spec.beta1;
  c.beta2 = spec.beta2;
  c.eps = spec.eps;
  return c;
}

std::vector<double> model_propensities(const DataConfig& data, const PropensityConfig& prop,
                                       const ModelMeta& meta) {
  double a = prop.a, b = prop.b;
  if (a == 0.0 && b == 0.0) {
    const std::string& name = data.train.path.empty() ? data.train.features : data.train.path;
    const std::string family =
        prop.family == "auto" ? std::string(guess_dataset_family(name)) : prop.family;
    std::tie(a, b) = propensity_defaults(family);
  }
  return inverse_propensity(meta.label_freq, meta.n_train, a, b);
}

namespace {
std::vector<EncoderLayerConfig> encoder_layers(const ExperimentConfig& cfg) {
  std::vector<EncoderLayerConfig> out;
  for (const auto& l : cfg.model.encoder) out.push_back({l.type, l.out, l.activation, l.dropout});
  return out;
}
}  // namespace

Model::Model(Context& ctx, const ExperimentConfig& cfg, ModelMeta meta, int64_t total_steps)
    : meta_(std::move(meta)) {
  encoder_ = std::make_unique<Encoder>(ctx, encoder_layers(cfg), meta_.input_dim,
                                       meta_.sparse_input,
                                       to_optimizer_config(cfg.optim.encoder), cfg.seed);
  LayerInit init;
  init.ctx = &ctx;
  init.input_dim = encoder_->output_dim();
  init.num_labels = meta_.num_labels;
  init.batch_size = cfg.train.batch_size;
  init.optim = to_optimizer_config(cfg.optim.output);
  init.seed = cfg.seed ^ 0x6f75747075745eULL;
  init.label_freq = meta_.label_freq;
  init.total_steps = total_steps;
  init.num_train = meta_.n_train;
  const int64_t before = ctx.ledger().total_current();
  output_ = create_output_layer(init, cfg.model.output);
  output_ledger_bytes_ = ctx.ledger().total_current() - before;
}

TopK Model::predict(const Batch& batch, int k) {
  Rng unused(0);
  ConstMatrix h = encoder_->forward(batch, /*training=*/false, unused);
  return output_->topk(h, k);
}

void Model::save_state(CheckpointWriter& w) {
  meta_.save(w);
  for (const auto& t : encoder_->state()) w.write(t);
  for (const auto& t : output_->state()) w.write(t);
}

void Model::load_state(const CheckpointReader& r) {
  for (const auto& t : encoder_->state()) r.read(t);
  for (const auto& t : output_->state()) r.read(t);
}

}  // namespace xmc
