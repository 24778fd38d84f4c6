#include "train/model.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <numeric>
#include <span>

#include "core/cuda_context.h"
#include "core/error.h"
#include "eval/propensity.h"
#include "layers/registry.h"
#include "layers/shard_set.h"

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
  std::iota(label_map.begin(), label_map.end(), int64_t{0});
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

Device training_device(const std::string& requested, const std::string& backend) {
  const Device d = resolve_device(requested);
  if (d == Device::cpu || backend_has_cuda(backend)) return d;
  if (requested == "auto") {
    spdlog::warn("device auto: a CUDA GPU is present, but model.output.type '{}' has no CUDA "
                 "path yet: running on the CPU",
                 backend);
    return Device::cpu;
  }
  throw_input("device 'cuda': model.output.type '{}' has no CUDA path yet; use --device cpu",
              backend);
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

std::vector<float> label_log_prior(const std::vector<int64_t>& label_freq, int64_t n_train) {
  std::vector<float> out(label_freq.size());
  const double n = static_cast<double>(n_train) + 1.0;
  for (size_t l = 0; l < label_freq.size(); ++l) {
    const double p = (static_cast<double>(label_freq[l]) + 0.5) / n;
    out[l] = static_cast<float>(std::log(p) - std::log1p(-p));
  }
  return out;
}

Model::Model(Context& ctx, const ExperimentConfig& cfg, ModelMeta meta, int64_t total_steps,
             Comm* comm, const ShardSelection* shard_set)
    : meta_(std::move(meta)), ctx_(&ctx), comm_(comm != nullptr && comm->size() > 1 ? comm : nullptr) {
  if (cfg.optim.encoder.rowwise)
    throw_input(
        "optim.encoder.rowwise: the row-wise second moment is for the output layer's dense "
        "label weights (optim.output.rowwise)");
  if (cfg.optim.encoder.kahan)
    throw_input(
        "optim.encoder.kahan: the encoder keeps fp32 weights; Kahan compensation is for the "
        "output layer's bf16 or fp8 label weights (optim.output.kahan)");
  if (cfg.optim.encoder.state_precision != StatePrecision::fp32)
    throw_input(
        "optim.encoder.state_precision: {}: the encoder keeps fp32 optimizer state (bf16 state "
        "is for the output layer's bf16 label weights, optim.output.state_precision)",
        to_string(cfg.optim.encoder.state_precision));
  // The rows themselves are set by the trainer (TrainLoop::init_centroid_weights), which has
  // the data; a backend that cannot take them is refused here, before anything is built or written.
  if (cfg.model.weight_init == "centroid" && !OutputLayer::with_weight_rows(cfg.model.output.type))
    throw_input(
        "model.weight_init: centroid sets each label's weight vector over the whole encoder "
        "output, which backend {} does not have (dense, lsh_sampled and anns_sampled do)",
        cfg.model.output.type);
  encoder_ = std::make_unique<Encoder>(ctx, cfg.model.encoder, meta_.input_dim, meta_.sparse_input,
                                       cfg.optim.encoder, cfg.seed);
  LayerInit init{.ctx = &ctx,
                 .input_dim = encoder_->output_dim(),
                 .num_labels = meta_.num_labels,
                 .batch_size = cfg.train.batch_size,
                 .optim = cfg.optim.output,
                 .seed = cfg.seed ^ 0x6f75747075745eULL,
                 .label_freq = meta_.label_freq,
                 .total_steps = total_steps,
                 .num_train = meta_.n_train};
  if (comm_ != nullptr && shard_set == nullptr) {
    if (comm_->size() > meta_.num_labels)
      throw_input("{} processes for {} labels: a label-sharded run needs at least one label per "
                  "process", comm_->size(), meta_.num_labels);
    const LabelRange r = shard_labels(meta_.num_labels, comm_->rank(), comm_->size());
    init.label_lo = r.lo;
    init.label_hi = r.hi;
    init.shard = comm_->rank();
    init.shards = comm_->size();
    init.comm = comm_;
  }
  // Host and device together: a layer on the GPU keeps its parameters in device memory.
  const auto ledger_total = [&ctx] {
    return ctx.ledger().total_current(MemSpace::host) + ctx.ledger().total_current(MemSpace::device);
  };
  const int64_t before = ledger_total();
  output_ = shard_set != nullptr
                ? std::make_unique<ShardSetLayer>(init, cfg.model.output, *shard_set)
                : create_output_layer(init, cfg.model.output);
  output_ledger_bytes_ = ledger_total() - before;
  // A resumed run then reads every parameter, the bias included, from its checkpoint (a
  // shard set every parameter from the checkpoint set).
  if (shard_set == nullptr && cfg.model.bias_init == "log_prior")
    output_->init_bias(label_log_prior(meta_.label_freq, meta_.n_train));
}

TopK Model::predict(const Batch& batch, int k) {
  Rng unused(0);
  ConstMatrix h = encoder_->forward(batch, /*training=*/false, unused);
  return output_->topk(h, k);
}

void Model::embed(const Batch& batch, Matrix out) {
  Rng unused(0);
  ConstMatrix h = encoder_->forward(batch, /*training=*/false, unused);
  XMC_CHECK(out.rows == h.rows && out.cols == h.cols, "embed: out [{}×{}], h [{}×{}]", out.rows,
            out.cols, h.rows, h.cols);
  if (ctx_->on_gpu()) {
    auto& cuda = ctx_->cuda();
    for (int64_t i = 0; i < h.rows; ++i)
      gpu::copy_to_host(out.row(i), h.row(i), static_cast<size_t>(h.cols) * sizeof(float),
                        cuda.stream());
    cuda.synchronize();
    return;
  }
  for (int64_t i = 0; i < h.rows; ++i) std::copy(h.row(i), h.row(i) + h.cols, out.row(i));
}

void Model::save_state(CheckpointWriter& w, bool with_encoder) {
  meta_.save(w);
  sync_state(StateSync::to_host);
  if (with_encoder)
    for (const auto& t : encoder_->state()) w.write(t);
  for (const auto& t : output_->state()) w.write(t);
  sync_state(StateSync::release);
}

void Model::load_shard_set(const CheckpointReader& index,
                           const std::vector<const CheckpointReader*>& shards) {
  auto* set = dynamic_cast<ShardSetLayer*>(output_.get());
  XMC_CHECK(set != nullptr && set->parts() == shards.size(), "{} shard files for {}",
            shards.size(), set != nullptr ? set->parts() : 0);
  sync_state(StateSync::to_host);
  for (const auto& t : encoder_->state()) index.read(t);
  for (size_t s = 0; s < shards.size(); ++s)
    for (const auto& t : set->part(s).state()) shards[s]->read(t);
  sync_state(StateSync::to_device);
}

void Model::load_state(const CheckpointReader& r, const CheckpointReader* encoder_from) {
  sync_state(StateSync::to_host);
  for (const auto& t : encoder_->state()) (encoder_from != nullptr ? *encoder_from : r).read(t);
  for (const auto& t : output_->state()) r.read(t);
  sync_state(StateSync::to_device);
}

void Model::sync_state(StateSync s) {
  encoder_->sync_state(s);
  output_->sync_state(s);
}

}  // namespace xmc
