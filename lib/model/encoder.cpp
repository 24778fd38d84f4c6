#include "model/encoder.h"

#include <optional>

#include "core/error.h"
#include "model/activation.h"
#include "model/encoder_cuda.h"
#include "model/linear.h"
#include "model/sparse_linear.h"

namespace xmc {

// Layer 0 is a SparseLinear for sparse input, every other layer a Linear.
struct Encoder::Impl {
  Context& ctx;
  int64_t input_dim;
  bool sparse_input;
  int64_t output_dim;
  std::unique_ptr<SparseLinear> first;         // sparse input only
  std::vector<std::unique_ptr<Linear>> dense;  // the remaining layers (all, for dense input)
  bool have_forward = false;
  std::unique_ptr<EncoderCuda> gpu;            // on a CUDA Context: everything above unused
  struct Staged {
    const Batch* batch;
    bool training;
    Rng* rng;
  };
  std::vector<Staged> staged;                  // CPU: stage()d, not yet forwarded
};

namespace {

void validate(const std::vector<EncoderLayerConfig>& layers, int64_t input_dim, bool sparse_input) {
  if (input_dim <= 0) throw_input("encoder: input dimension {} must be > 0", input_dim);
  if (sparse_input && layers.empty())
    throw_input(
        "encoder: sparse input needs a first encoder layer of type sparse_linear "
        "(the encoder is empty)");
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    if (l.type != "sparse_linear" && l.type != "linear")
      throw_input("encoder layer {}: unknown type '{}': expected one of sparse_linear, linear", i,
                  l.type);
    if (i == 0 && sparse_input && l.type != "sparse_linear")
      throw_input("encoder layer 0: sparse input needs type sparse_linear, got '{}'", l.type);
    if (l.type == "sparse_linear" && !(i == 0 && sparse_input))
      throw_input(
          "encoder layer {}: sparse_linear needs sparse input (only as the first layer "
          "on sparse features), but its input is dense",
          i);
    if (l.out <= 0) throw_input("encoder layer {}: out = {} must be > 0", i, l.out);
    if (!(l.dropout >= 0.0 && l.dropout < 1.0))
      throw_input("encoder layer {}: dropout = {} must be in [0, 1)", i, l.dropout);
    (void)parse_activation(l.activation);  // throws naming the known ones
  }
}

}  // namespace

Encoder::Encoder(Context& ctx, const std::vector<EncoderLayerConfig>& layers, int64_t input_dim,
                 bool sparse_input, const OptimizerConfig& optim, uint64_t seed)
    : impl_(std::make_unique<Impl>(
          Impl{ctx, input_dim, sparse_input, input_dim, {}, {}, false, {}, {}})) {
  validate(layers, input_dim, sparse_input);
  if (ctx.on_gpu()) {
    impl_->gpu = std::make_unique<EncoderCuda>(ctx, layers, input_dim, sparse_input, optim, seed);
    impl_->output_dim = impl_->gpu->output_dim();
    empty_ = layers.empty();
    return;
  }
  int64_t in = input_dim;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    Rng init = Rng::stream(seed, i);
    const Activation act = parse_activation(l.activation);
    if (l.type == "sparse_linear") {
      impl_->first = std::make_unique<SparseLinear>(ctx, in, l.out, act, l.dropout, optim, init);
    } else {
      impl_->dense.push_back(std::make_unique<Linear>(ctx, in, l.out, act, l.dropout, optim, init));
    }
    in = l.out;
  }
  impl_->output_dim = in;
}

Encoder::~Encoder() = default;

int64_t Encoder::input_dim() const { return impl_->input_dim; }
int64_t Encoder::output_dim() const { return impl_->output_dim; }
bool Encoder::empty() const { return impl_->gpu ? empty_ : !impl_->first && impl_->dense.empty(); }

void Encoder::stage(const Batch& batch, bool training, Rng& rng) {
  if (impl_->gpu) return impl_->gpu->stage(batch, training, rng);
  XMC_CHECK(impl_->staged.size() < 2, "encoder: a third batch staged before the first was forwarded");
  impl_->staged.push_back({&batch, training, &rng});
}

ConstMatrix Encoder::forward_staged() {
  if (impl_->gpu) return impl_->gpu->forward_staged();
  XMC_CHECK(!impl_->staged.empty(), "encoder forward without a staged batch");
  const Impl::Staged s = impl_->staged.front();
  impl_->staged.erase(impl_->staged.begin());
  return forward_cpu(*s.batch, s.training, *s.rng);
}

ConstMatrix Encoder::forward(const Batch& batch, bool training, Rng& rng) {
  if (impl_->gpu) return impl_->gpu->forward_now(batch, training, rng);
  return forward_cpu(batch, training, rng);
}

ConstMatrix Encoder::forward_cpu(const Batch& batch, bool training, Rng& rng) {
  Impl& m = *impl_;
  if (batch.sparse != m.sparse_input)
    throw_error("encoder built for {} input got a {} batch", m.sparse_input ? "sparse" : "dense",
                batch.sparse ? "sparse" : "dense");
  m.have_forward = training;
  ConstMatrix h;
  if (m.first) {
    h = m.first->forward(batch.sparse_x, training, rng);
  } else {
    h = batch.dense_x.view();
    XMC_CHECK(h.cols == m.input_dim, "encoder expects {} input features, got [{}×{}]", m.input_dim,
              h.rows, h.cols);
  }
  for (auto& layer : m.dense) h = layer->forward(h, training, rng);
  return h;
}

void Encoder::backward_update(ConstMatrix dh, double lr, int64_t step) {
  Impl& m = *impl_;
  if (m.gpu) return m.gpu->backward_update(dh, lr, step);
  if (empty()) return;  // identity: nothing to learn
  XMC_CHECK(m.have_forward, "encoder backward without a training forward");
  XMC_CHECK(dh.cols == m.output_dim, "encoder backward: dh has {} columns, expected {}", dh.cols,
            m.output_dim);
  // Gradients for every layer first (each needs its own forward weights for dx), then
  // the updates.
  ConstMatrix g = dh;
  for (size_t i = m.dense.size(); i-- > 0;) {
    const bool need_dx = i > 0 || m.first != nullptr;
    g = m.dense[i]->backward(g, need_dx);
  }
  if (m.first) m.first->backward(g);
  if (m.first) m.first->apply_update(lr, step);
  for (auto& layer : m.dense) layer->apply_update(lr, step);
}

void Encoder::sync_state(StateSync s) {
  if (impl_->gpu) impl_->gpu->sync_state(s);
}

std::vector<TensorRef> Encoder::state() {
  if (impl_->gpu) return impl_->gpu->state();
  std::vector<TensorRef> s;
  size_t i = 0;
  auto append = [&s](std::vector<TensorRef> v) {
    for (auto& t : v) s.push_back(std::move(t));
  };
  if (impl_->first) append(impl_->first->state("encoder/" + std::to_string(i++)));
  for (auto& layer : impl_->dense) append(layer->state("encoder/" + std::to_string(i++)));
  return s;
}

}  // namespace xmc
