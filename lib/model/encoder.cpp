#include "model/encoder.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <tuple>

#include "core/cuda_context.h"
#include "core/cuda_stream.h"
#include "core/error.h"
#include "model/dropout.h"
#include "model/linear.h"
#include "model/sparse_linear.h"

namespace xmc {

namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

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
    (void)parse_enum<Activation>(l.activation, "activation");  // throws naming the known ones
  }
}

}  // namespace

// One slot of the double-buffered batch staging. The host fills a block; on a CUDA Context
// the block is pinned and copied to a device twin on a side stream (so the copy of batch
// i+1 overlaps the compute of batch i), and the ops read the twin; on a CPU Context the
// ops read the host block itself. Both blocks grow with the batch and are in the ledger as
// activations.
class StagingSlot {
 public:
  StagingSlot() = default;
  explicit StagingSlot(Context& ctx) : ctx_(&ctx) {
    if (!ctx.on_gpu()) return;
    side_ = std::make_unique<gpu::CudaStream>();
    ready_ = std::make_unique<gpu::CudaEvent>();
    done_ = std::make_unique<gpu::CudaEvent>();
  }
  // The host block, at least `bytes` long (contents unspecified). GPU: waits until the
  // previous copy out of it finished.
  unsigned char* host(size_t bytes) {
    bytes = std::max<size_t>(bytes, 1);
    if (!ctx_->on_gpu()) {
      if (cpu_.size() < bytes)
        cpu_ = HostBuffer<unsigned char>(ctx_->ledger(), MemTag::activations, 2 * bytes);
      return cpu_.data();
    }
    ready_->synchronize();
    if (pinned_.size() < bytes)
      pinned_ = gpu::PinnedBuffer<unsigned char>(ctx_->ledger(), MemTag::activations, 2 * bytes);
    return pinned_.data();
  }
  // GPU: once the compute stream has passed every queued use of the previous contents,
  // copies the first `bytes` of the host block to the device twin on the side stream.
  // CPU: nothing.
  void upload(size_t bytes) {
    if (!ctx_->on_gpu()) return;
    gpu::CudaContext& cuda = ctx_->cuda();
    if (dev_.size() < bytes) {
      cuda.synchronize();  // the old twin may still be read by queued work
      dev_ = gpu::DeviceBuffer<unsigned char>(ctx_->ledger(), MemTag::activations, 2 * bytes);
    }
    done_->record(cuda.stream());
    done_->make_wait(side_->get());
    gpu::copy_to_device(dev_.data(), pinned_.data(), bytes, side_->get());
    ready_->record(side_->get());
  }
  // GPU: the compute stream waits for the copy. CPU: nothing.
  void wait_ready() {
    if (ctx_->on_gpu()) ready_->make_wait(ctx_->cuda().stream());
  }
  // What the ops read: the device twin (GPU) or the host block (CPU).
  const unsigned char* data() const { return ctx_->on_gpu() ? dev_.data() : cpu_.data(); }

 private:
  Context* ctx_ = nullptr;
  HostBuffer<unsigned char> cpu_;                 // CPU
  gpu::PinnedBuffer<unsigned char> pinned_;       // GPU
  gpu::DeviceBuffer<unsigned char> dev_;          // GPU
  std::unique_ptr<gpu::CudaStream> side_;         // GPU: host→device copies
  std::unique_ptr<gpu::CudaEvent> ready_, done_;  // GPU: copy finished / uses finished
};

// One staged batch: a single block (StagingSlot: pinned + device twin on the GPU, host on
// the CPU), sections at 256-byte offsets — dense x | CSR indptr, indices, values |
// by-column cols, start, rows, values | one dropout mask per dense layer.
struct EncoderSlot {
  StagingSlot mem;
  int64_t rows = 0, nnz = 0, touched = 0;
  bool training = false;
  size_t off_x = 0, off_indptr = 0, off_indices = 0, off_values = 0;
  size_t off_tcols = 0, off_tstart = 0, off_trows = 0, off_tvals = 0;
  std::vector<size_t> off_mask;  // per dense layer; SIZE_MAX: no mask
  template <class T>
  const T* at(size_t off) const {
    return reinterpret_cast<const T*>(mem.data() + off);
  }
};

// Layer 0 is a SparseLinear for sparse input, every other layer a Linear.
struct Encoder::Impl {
  Context& ctx;
  int64_t input_dim;
  bool sparse_input;
  int64_t output_dim;
  std::unique_ptr<SparseLinear> first;         // sparse input only
  std::vector<std::unique_ptr<Linear>> dense;  // the remaining layers (all, for dense input)
  std::array<EncoderSlot, 2> slots;
  int next_stage = 0;    // slot the next stage() fills
  int staged_count = 0;  // staged, not yet forwarded
  int last_slot = -1;    // slot of the last forward
  bool last_training = false;
  int64_t last_rows = 0;

  ConstMatrix forward_slot(int idx);
};

Encoder::Encoder(Context& ctx, const std::vector<EncoderLayerConfig>& layers, int64_t input_dim,
                 bool sparse_input, const OptimizerConfig& optim, uint64_t seed)
    : impl_(std::make_unique<Impl>(Impl{ctx, input_dim, sparse_input, input_dim, {}, {}, {}})) {
  validate(layers, input_dim, sparse_input);
  int64_t in = input_dim;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    Rng init = Rng::stream(seed, i);
    const auto act = parse_enum<Activation>(l.activation, "activation");
    if (l.type == "sparse_linear") {
      impl_->first = std::make_unique<SparseLinear>(ctx, in, l.out, act, l.dropout, optim, init);
    } else {
      impl_->dense.push_back(std::make_unique<Linear>(ctx, in, l.out, act, l.dropout, optim, init));
    }
    in = l.out;
  }
  impl_->output_dim = in;
  for (auto& slot : impl_->slots) slot.mem = StagingSlot(ctx);
}

Encoder::~Encoder() = default;

int64_t Encoder::output_dim() const { return impl_->output_dim; }
bool Encoder::empty() const { return !impl_->first && impl_->dense.empty(); }

void Encoder::stage(const Batch& batch, bool training, Rng& rng) {
  Impl& m = *impl_;
  XMC_CHECK(m.staged_count < 2, "encoder: a third batch staged before the first was forwarded");
  if (batch.sparse != m.sparse_input)
    throw_error("encoder built for {} input got a {} batch", m.sparse_input ? "sparse" : "dense",
                batch.sparse ? "sparse" : "dense");
  EncoderSlot& slot = m.slots[static_cast<size_t>(m.next_stage)];

  // On the host, in the layers' order of random draws: the sparse layer's dropout, then
  // each dense layer's mask (dropout_mask).
  const int64_t rows = batch.size();
  CsrMatrix x;
  CsrByColumn xt;
  if (m.sparse_input) {
    m.first->prepare_input(batch.sparse_x, training, rng, x, xt);
  } else {
    XMC_CHECK(batch.dense_x.cols == m.input_dim, "encoder expects {} input features, got [{}×{}]",
              m.input_dim, batch.dense_x.rows, batch.dense_x.cols);
  }
  // Layout; the host arrays of the sections given one are copied in once the block exists.
  size_t bytes = 0;
  std::vector<std::tuple<size_t, const void*, size_t>> copies;
  auto section = [&](size_t n, const void* src = nullptr) {
    const size_t off = bytes;
    bytes = align_up(bytes + n);
    if (src != nullptr && n > 0) copies.emplace_back(off, src, n);
    return off;
  };
  const auto nnz = static_cast<size_t>(x.nnz());
  if (m.sparse_input) {
    slot.off_indptr = section(x.indptr.size() * sizeof(int64_t), x.indptr.data());
    slot.off_indices = section(nnz * sizeof(uint32_t), x.indices.data());
    slot.off_values = section(nnz * sizeof(float), x.values.data());
    if (training) {
      slot.off_tcols = section(xt.cols.size() * sizeof(uint32_t), xt.cols.data());
      slot.off_tstart = section(xt.start.size() * sizeof(int64_t), xt.start.data());
      slot.off_trows = section(nnz * sizeof(uint32_t), xt.rows.data());
      slot.off_tvals = section(nnz * sizeof(float), xt.values.data());
    }
  } else {
    slot.off_x = section(static_cast<size_t>(rows * m.input_dim) * sizeof(float));
  }
  slot.off_mask.assign(m.dense.size(), SIZE_MAX);
  for (size_t i = 0; i < m.dense.size(); ++i)
    if (training && m.dense[i]->dropout() > 0.0)
      slot.off_mask[i] = section(static_cast<size_t>(rows * m.dense[i]->in_dim()) * sizeof(float));
  bytes = std::max<size_t>(bytes, kAlign);
  // Fill.
  unsigned char* base = slot.mem.host(bytes);
  for (const auto& [off, src, n] : copies) std::memcpy(base + off, src, n);
  if (!m.sparse_input) {
    const ConstMatrix dx = batch.dense_x.view();
    const auto row_bytes = static_cast<size_t>(m.input_dim) * sizeof(float);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(base + slot.off_x + static_cast<size_t>(r) * row_bytes, dx.row(r), row_bytes);
  }
  for (size_t i = 0; i < m.dense.size(); ++i)
    if (slot.off_mask[i] != SIZE_MAX)
      dropout_mask(reinterpret_cast<float*>(base + slot.off_mask[i]), rows * m.dense[i]->in_dim(),
                   m.dense[i]->dropout(), rng);
  slot.rows = rows;
  slot.nnz = static_cast<int64_t>(nnz);
  slot.touched = xt.count();
  slot.training = training;
  slot.mem.upload(bytes);
  m.next_stage ^= 1;
  ++m.staged_count;
}

ConstMatrix Encoder::forward_staged() {
  Impl& m = *impl_;
  XMC_CHECK(m.staged_count > 0, "encoder forward without a staged batch");
  const int idx = (m.next_stage + 2 - m.staged_count) % 2;
  --m.staged_count;
  return m.forward_slot(idx);
}

ConstMatrix Encoder::forward(const Batch& batch, bool training, Rng& rng) {
  Impl& m = *impl_;
  stage(batch, training, rng);
  const int idx = m.next_stage ^ 1;  // the slot just filled
  --m.staged_count;
  // A batch staged before stays first in line: the next stage() refills this slot.
  if (m.staged_count > 0) m.next_stage = idx;
  return m.forward_slot(idx);
}

ConstMatrix Encoder::Impl::forward_slot(int idx) {
  EncoderSlot& slot = slots[static_cast<size_t>(idx)];
  slot.mem.wait_ready();
  const int64_t rows = slot.rows;
  ConstMatrix h;
  if (first) {
    h = first->forward(gpu::DeviceCsrValues{slot.at<int64_t>(slot.off_indptr),
                                            slot.at<uint32_t>(slot.off_indices),
                                            slot.at<float>(slot.off_values), rows, input_dim},
                       slot.training);
  } else {
    h = ConstMatrix(slot.at<float>(slot.off_x), rows, input_dim);
  }
  for (size_t i = 0; i < dense.size(); ++i) {
    const float* mask = slot.off_mask[i] != SIZE_MAX ? slot.at<float>(slot.off_mask[i]) : nullptr;
    h = dense[i]->forward(h, mask, slot.training);
  }
  last_slot = idx;
  last_training = slot.training;
  last_rows = rows;
  return h;
}

void Encoder::backward_update(ConstMatrix dh, double lr, int64_t step) {
  Impl& m = *impl_;
  if (empty()) return;  // identity: nothing to learn
  XMC_CHECK(m.last_slot >= 0 && m.last_training, "encoder backward without a training forward");
  XMC_CHECK(dh.rows == m.last_rows && dh.cols == m.output_dim,
            "encoder backward: dh [{}×{}], expected [{}×{}]", dh.rows, dh.cols, m.last_rows,
            m.output_dim);
  const EncoderSlot& slot = m.slots[static_cast<size_t>(m.last_slot)];
  // Gradients for every layer first (each needs its own forward weights for dx), then
  // the updates.
  ConstMatrix g = dh;
  for (size_t i = m.dense.size(); i-- > 0;) {
    const bool need_dx = i > 0 || m.first != nullptr;
    g = m.dense[i]->backward(g, need_dx);
  }
  if (m.first)
    m.first->backward(g, gpu::DeviceCsrByColumn{slot.at<uint32_t>(slot.off_tcols),
                                                slot.at<int64_t>(slot.off_tstart),
                                                slot.at<uint32_t>(slot.off_trows),
                                                slot.at<float>(slot.off_tvals), slot.touched});
  if (m.first) m.first->apply_update(lr, step);
  for (auto& layer : m.dense) layer->apply_update(lr, step);
  m.last_training = false;
}

void Encoder::sync_state(StateSync s) {
  if (impl_->first) impl_->first->sync_state(s);
  for (auto& layer : impl_->dense) layer->sync_state(s);
}

std::vector<TensorRef> Encoder::state() {
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
