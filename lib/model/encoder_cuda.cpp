#include "model/encoder_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cuda_context.h"
#include "core/cuda_stream.h"
#include "core/error.h"
#include "kernels/dense_ops_cuda.h"
#include "kernels/encoder_ops_cuda.h"
#include "model/activation.h"
#include "model/csr_by_column.h"
#include "model/dropout.h"
#include "model/encoder.h"

namespace xmc {

using gpu::DeviceBuffer;

namespace {

// Grows a device buffer to at least n elements (cudaFree of the old one synchronises the
// device, so queued work cannot read freed memory).
template <class T>
T* encgpu_ensure(DeviceBuffer<T>& b, MemoryLedger& ledger, MemTag tag, size_t n) {
  if (b.size() < n) b = DeviceBuffer<T>(ledger, tag, std::max<size_t>(n, 2 * b.size()));
  return b.data();
}

constexpr size_t kEncAlign = 256;
size_t encgpu_align(size_t x) { return (x + kEncAlign - 1) / kEncAlign * kEncAlign; }

}  // namespace

struct EncoderCuda::Layer {
  bool sparse = false;
  int64_t in = 0, out = 0;
  bool relu = false;
  double dropout = 0.0;
  int64_t step = 0;
  DeviceBuffer<float> params, opt1, opt2;  // [(in+1)×out]: W rows, then the bias row
  DeviceBuffer<float> grad;                // dense: [(in+1)×out]; sparse: bias grad [out]
  DeviceBuffer<float> x, h, dz, dx;        // activations, grown to the batch
  DeviceBuffer<float> row_grad, g_params, g_opt1, g_opt2;  // sparse: [U×out] each
  std::vector<float> stage_params, stage_opt1, stage_opt2;  // checkpoint host copies
  float* w() { return params.data(); }
  float* bias() { return params.data() + in * out; }
  float* state(DeviceBuffer<float>& s, int64_t off = 0) { return s.size() ? s.data() + off : nullptr; }
};

// One staged batch: a single pinned block and its device twin, sections at 256-byte
// offsets (dense x | CSR indptr, indices, values | by-column cols, start, rows, values |
// one dropout mask per dense layer).
struct EncoderCuda::Slot {
  gpu::PinnedBuffer<unsigned char> host;
  DeviceBuffer<unsigned char> dev;
  std::unique_ptr<gpu::CudaEvent> ready;  // side stream: the copy finished
  std::unique_ptr<gpu::CudaEvent> done;   // compute stream: every earlier use finished
  int64_t rows = 0, nnz = 0, touched = 0;
  bool training = false;
  size_t off_x = 0, off_indptr = 0, off_indices = 0, off_values = 0;
  size_t off_tcols = 0, off_tstart = 0, off_trows = 0, off_tvals = 0;
  std::vector<size_t> off_mask;  // per layer; SIZE_MAX: no mask
  template <class T>
  const T* at(size_t off) const {
    return reinterpret_cast<const T*>(dev.data() + off);
  }
};

EncoderCuda::EncoderCuda(Context& ctx, const std::vector<EncoderLayerConfig>& layers,
                         int64_t input_dim, bool sparse_input, const OptimizerConfig& optim,
                         uint64_t seed)
    : ctx_(ctx), input_dim_(input_dim), sparse_input_(sparse_input), output_dim_(input_dim),
      optim_(optim) {
  auto& ledger = ctx.ledger();
  const auto s = ctx.cuda().stream();
  const int states = optimizer_state_arrays(optim);
  int64_t in = input_dim;
  for (size_t i = 0; i < layers.size(); ++i) {
    auto L = std::make_unique<Layer>();
    L->sparse = layers[i].type == "sparse_linear";
    L->in = in;
    L->out = layers[i].out;
    L->relu = parse_activation(layers[i].activation) == Activation::relu;
    L->dropout = layers[i].dropout;
    const auto n = static_cast<size_t>((in + 1) * L->out);
    // Linear / SparseLinear's initialisation: W ~ uniform(±1/sqrt(in)) from
    // Rng::stream(seed, i) in row-major order, b = 0.
    std::vector<float> p0(n, 0.0f);
    Rng init = Rng::stream(seed, i);
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    for (int64_t k = 0; k < in * L->out; ++k)
      p0[static_cast<size_t>(k)] = static_cast<float>((2.0 * init.uniform() - 1.0) * bound);
    L->params = DeviceBuffer<float>(ledger, MemTag::weights, n);
    L->params.upload(p0.data(), n, s);
    if (states >= 1) {
      L->opt1 = DeviceBuffer<float>(ledger, MemTag::optimizer, n);
      L->opt1.zero(s);
    }
    if (states >= 2) {
      L->opt2 = DeviceBuffer<float>(ledger, MemTag::optimizer, n);
      L->opt2.zero(s);
    }
    L->grad = DeviceBuffer<float>(ledger, MemTag::workspace,
                                  L->sparse ? static_cast<size_t>(L->out) : n);
    ctx.cuda().synchronize();  // p0 is freed at the end of the iteration
    in = L->out;
    layers_.push_back(std::move(L));
  }
  output_dim_ = in;
  side_ = std::make_unique<gpu::CudaStream>();
  for (auto& slot : slots_) {
    slot = std::make_unique<Slot>();
    slot->ready = std::make_unique<gpu::CudaEvent>();
    slot->done = std::make_unique<gpu::CudaEvent>();
  }
}

EncoderCuda::~EncoderCuda() = default;

void EncoderCuda::stage(const Batch& batch, bool training, Rng& rng) {
  XMC_CHECK(staged_count_ < 2, "encoder: a third batch staged before the first was forwarded");
  XMC_CHECK(batch.sparse == sparse_input_, "encoder built for {} input got a {} batch",
            sparse_input_ ? "sparse" : "dense", batch.sparse ? "sparse" : "dense");
  Slot& slot = *slots_[static_cast<size_t>(next_stage_)];
  auto& cuda = ctx_.cuda();
  // The previous copy out of this slot's pinned block has finished.
  slot.ready->synchronize();

  // Host side, in the CPU encoder's order of random draws: the sparse layer's dropout,
  // then each dense layer's mask.
  const int64_t rows = batch.size();
  CsrMatrix x;
  CsrByColumn xt;
  if (sparse_input_) {
    const Layer& L0 = *layers_.front();
    XMC_CHECK(batch.sparse_x.cols == L0.in, "sparse_linear expects {} input features, got [{}×{}]",
              L0.in, batch.sparse_x.rows, batch.sparse_x.cols);
    x = batch.sparse_x;
    if (!x.has_values()) x.values.assign(x.indices.size(), 1.0f);
    if (training && L0.dropout > 0.0) dropout_sparse(x, L0.dropout, rng);
    for (size_t k = 0; k < x.indices.size(); ++k)
      XMC_CHECK(x.indices[k] < L0.in, "feature id {} (non-zero {}) >= input dim {}", x.indices[k],
                k, L0.in);
    if (training) group_by_column(x, xt);
  } else {
    XMC_CHECK(batch.dense_x.cols == input_dim_, "encoder expects {} input features, got [{}×{}]",
              input_dim_, batch.dense_x.rows, batch.dense_x.cols);
  }
  // Layout.
  size_t bytes = 0;
  auto section = [&](size_t n) {
    const size_t off = bytes;
    bytes = encgpu_align(bytes + n);
    return off;
  };
  const auto nnz = static_cast<size_t>(x.nnz());
  if (sparse_input_) {
    slot.off_indptr = section(static_cast<size_t>(rows + 1) * sizeof(int64_t));
    slot.off_indices = section(nnz * sizeof(uint32_t));
    slot.off_values = section(nnz * sizeof(float));
    if (training) {
      slot.off_tcols = section(xt.cols.size() * sizeof(uint32_t));
      slot.off_tstart = section(xt.start.size() * sizeof(int64_t));
      slot.off_trows = section(nnz * sizeof(uint32_t));
      slot.off_tvals = section(nnz * sizeof(float));
    }
  } else {
    slot.off_x = section(static_cast<size_t>(rows * input_dim_) * sizeof(float));
  }
  slot.off_mask.assign(layers_.size(), SIZE_MAX);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& L = *layers_[i];
    if (!L.sparse && training && L.dropout > 0.0)
      slot.off_mask[i] = section(static_cast<size_t>(rows * L.in) * sizeof(float));
  }
  bytes = std::max<size_t>(bytes, kEncAlign);
  if (slot.host.size() < bytes)
    slot.host = gpu::PinnedBuffer<unsigned char>(ctx_.ledger(), MemTag::activations, 2 * bytes);
  // Fill.
  unsigned char* base = slot.host.data();
  auto put = [&](size_t off, const void* src, size_t n) {
    if (n) std::memcpy(base + off, src, n);
  };
  if (sparse_input_) {
    put(slot.off_indptr, x.indptr.data(), x.indptr.size() * sizeof(int64_t));
    put(slot.off_indices, x.indices.data(), nnz * sizeof(uint32_t));
    put(slot.off_values, x.values.data(), nnz * sizeof(float));
    if (training) {
      put(slot.off_tcols, xt.cols.data(), xt.cols.size() * sizeof(uint32_t));
      put(slot.off_tstart, xt.start.data(), xt.start.size() * sizeof(int64_t));
      put(slot.off_trows, xt.rows.data(), nnz * sizeof(uint32_t));
      put(slot.off_tvals, xt.values.data(), nnz * sizeof(float));
    }
  } else {
    const ConstMatrix dx = batch.dense_x.view();
    for (int64_t r = 0; r < rows; ++r)
      put(slot.off_x + static_cast<size_t>(r * input_dim_) * sizeof(float), dx.row(r),
          static_cast<size_t>(input_dim_) * sizeof(float));
  }
  for (size_t i = 0; i < layers_.size(); ++i)
    if (slot.off_mask[i] != SIZE_MAX)
      dropout_mask(reinterpret_cast<float*>(base + slot.off_mask[i]), rows * layers_[i]->in,
                   layers_[i]->dropout, rng);
  slot.rows = rows;
  slot.nnz = static_cast<int64_t>(nnz);
  slot.touched = xt.count();
  slot.training = training;

  // Device side: wait (on the side stream) until the compute stream has passed every
  // queued use of this slot, then copy.
  if (slot.dev.size() < bytes) {
    cuda.synchronize();
    slot.dev = DeviceBuffer<unsigned char>(ctx_.ledger(), MemTag::activations, 2 * bytes);
  }
  slot.done->record(cuda.stream());
  slot.done->make_wait(side_->get());
  gpu::copy_to_device(slot.dev.data(), slot.host.data(), bytes, side_->get());
  slot.ready->record(side_->get());
  next_stage_ ^= 1;
  ++staged_count_;
}

ConstMatrix EncoderCuda::forward_staged() {
  XMC_CHECK(staged_count_ > 0, "encoder forward without a staged batch");
  const int idx = (next_stage_ + 2 - staged_count_) % 2;
  --staged_count_;
  return forward_slot(idx);
}

ConstMatrix EncoderCuda::forward_now(const Batch& batch, bool training, Rng& rng) {
  stage(batch, training, rng);
  const int idx = next_stage_ ^ 1;  // the slot just filled
  --staged_count_;
  // A batch staged before stays first in line: the next stage() refills this slot.
  if (staged_count_ > 0) next_stage_ = idx;
  return forward_slot(idx);
}

ConstMatrix EncoderCuda::forward_slot(int idx) {
  Slot& slot = *slots_[static_cast<size_t>(idx)];
  auto& cuda = ctx_.cuda();
  auto& ledger = ctx_.ledger();
  slot.ready->make_wait(cuda.stream());
  const int64_t rows = slot.rows;
  ConstMatrix cur;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& L = *layers_[i];
    float* h = encgpu_ensure(L.h, ledger, MemTag::activations,
                             static_cast<size_t>(std::max<int64_t>(1, rows * L.out)));
    const Matrix hm(h, rows, L.out);
    if (L.sparse) {
      const gpu::DeviceCsrValues xs{slot.at<int64_t>(slot.off_indptr),
                                    slot.at<uint32_t>(slot.off_indices),
                                    slot.at<float>(slot.off_values), rows, L.in};
      gpu::csr_dense_forward(cuda, xs, L.w(), L.bias(), L.relu, hm);
    } else {
      const ConstMatrix in = i == 0 ? ConstMatrix(slot.at<float>(slot.off_x), rows, L.in) : cur;
      // The input after dropout, kept for the weight gradient.
      float* xc = encgpu_ensure(L.x, ledger, MemTag::activations,
                                static_cast<size_t>(std::max<int64_t>(1, rows * L.in)));
      const float* mask =
          slot.off_mask[i] != SIZE_MAX ? slot.at<float>(slot.off_mask[i]) : nullptr;
      gpu::multiply_mask(cuda, in, mask, Matrix(xc, rows, L.in));
      gpu::gemm_nn(cuda, ConstMatrix(xc, rows, L.in), ConstMatrix(L.w(), L.in, L.out), hm);
      gpu::bias_activation(cuda, hm, L.bias(), L.relu);
    }
    cur = hm;
  }
  if (layers_.empty()) cur = ConstMatrix(slot.at<float>(slot.off_x), rows, input_dim_);
  last_slot_ = idx;
  last_training_ = slot.training;
  last_rows_ = rows;
  return cur;
}

void EncoderCuda::backward_update(ConstMatrix dh, double lr, int64_t step) {
  if (layers_.empty()) return;
  XMC_CHECK(last_slot_ >= 0 && last_training_, "encoder backward without a training forward");
  XMC_CHECK(dh.rows == last_rows_ && dh.cols == output_dim_,
            "encoder backward: dh [{}×{}], expected [{}×{}]", dh.rows, dh.cols, last_rows_,
            output_dim_);
  const Slot& slot = *slots_[static_cast<size_t>(last_slot_)];
  auto& cuda = ctx_.cuda();
  auto& ledger = ctx_.ledger();
  const int64_t rows = last_rows_;
  // Gradients of every layer first (each dx needs the forward weights), then the updates.
  ConstMatrix g = dh;
  for (size_t i = layers_.size(); i-- > 0;) {
    Layer& L = *layers_[i];
    float* dz = encgpu_ensure(L.dz, ledger, MemTag::workspace,
                              static_cast<size_t>(std::max<int64_t>(1, rows * L.out)));
    const Matrix dzm(dz, rows, L.out);
    gpu::activation_grad(cuda, L.relu, ConstMatrix(L.h.data(), rows, L.out), g, dzm);
    if (L.sparse) {
      gpu::column_sums(cuda, dzm, L.grad.data());
      const int64_t u = slot.touched;
      float* rg = encgpu_ensure(L.row_grad, ledger, MemTag::workspace,
                                static_cast<size_t>(std::max<int64_t>(1, u * L.out)));
      const gpu::DeviceCsrByColumn xt{slot.at<uint32_t>(slot.off_tcols),
                                      slot.at<int64_t>(slot.off_tstart),
                                      slot.at<uint32_t>(slot.off_trows),
                                      slot.at<float>(slot.off_tvals), u};
      gpu::csr_column_grad(cuda, xt, dzm, Matrix(rg, u, L.out));
      continue;  // the first layer: no dx
    }
    // dW [in×out] = x̃ᵀ·dz, db = column sums of dz.
    gpu::gemm_tn(cuda, ConstMatrix(L.x.data(), rows, L.in), dzm, Matrix(L.grad.data(), L.in, L.out));
    gpu::column_sums(cuda, dzm, L.grad.data() + L.in * L.out);
    if (i == 0) break;
    // dx [B×in] = dz·Wᵀ, through the dropout mask.
    float* dx = encgpu_ensure(L.dx, ledger, MemTag::workspace,
                              static_cast<size_t>(std::max<int64_t>(1, rows * L.in)));
    const Matrix dxm(dx, rows, L.in);
    gpu::gemm_nt(cuda, dzm, ConstMatrix(L.w(), L.in, L.out), dxm);
    if (slot.off_mask[i] != SIZE_MAX)
      gpu::multiply_mask(cuda, dxm, slot.at<float>(slot.off_mask[i]), dxm);
    g = dxm;
  }
  for (auto& lp : layers_) {
    Layer& L = *lp;
    if (L.sparse) {
      // Lazy update of the touched rows only: gather them (and their state) into
      // contiguous rows, the fused update, scatter back. Then the bias.
      const int64_t u = slot.touched;
      const auto un = static_cast<size_t>(std::max<int64_t>(1, u * L.out));
      const uint32_t* rows_ids = slot.at<uint32_t>(slot.off_tcols);
      float* gp = encgpu_ensure(L.g_params, ledger, MemTag::workspace, un);
      float* g1 = L.opt1.size() ? encgpu_ensure(L.g_opt1, ledger, MemTag::workspace, un) : nullptr;
      float* g2 = L.opt2.size() ? encgpu_ensure(L.g_opt2, ledger, MemTag::workspace, un) : nullptr;
      gpu::gather_rows(cuda, L.w(), rows_ids, u, L.out, gp);
      if (g1) gpu::gather_rows(cuda, L.opt1.data(), rows_ids, u, L.out, g1);
      if (g2) gpu::gather_rows(cuda, L.opt2.data(), rows_ids, u, L.out, g2);
      gpu::optimizer_update(cuda, optim_, lr, step, gp, L.row_grad.data(), g1, g2, u * L.out);
      gpu::scatter_rows(cuda, gp, rows_ids, u, L.out, L.w());
      if (g1) gpu::scatter_rows(cuda, g1, rows_ids, u, L.out, L.opt1.data());
      if (g2) gpu::scatter_rows(cuda, g2, rows_ids, u, L.out, L.opt2.data());
      const int64_t boff = L.in * L.out;
      gpu::optimizer_update(cuda, optim_, lr, step, L.bias(), L.grad.data(), L.state(L.opt1, boff),
                            L.state(L.opt2, boff), L.out);
    } else {
      gpu::optimizer_update(cuda, optim_, lr, step, L.w(), L.grad.data(), L.state(L.opt1),
                            L.state(L.opt2), (L.in + 1) * L.out);
    }
    L.step = step;
  }
  last_training_ = false;
}

std::vector<TensorRef> EncoderCuda::state() {
  std::vector<TensorRef> s;
  if (layers_.empty()) return s;
  XMC_CHECK(staged_state_, "state() of the GPU encoder before sync_state(to_host)");
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& L = *layers_[i];
    const std::string prefix = "encoder/" + std::to_string(i);
    s.push_back({prefix + "/weight", {L.in, L.out}, L.stage_params.data()});
    s.push_back({prefix + "/bias", {L.out}, L.stage_params.data() + L.in * L.out});
    if (!L.stage_opt1.empty()) s.push_back({prefix + "/opt1", {L.in + 1, L.out}, L.stage_opt1.data()});
    if (!L.stage_opt2.empty()) s.push_back({prefix + "/opt2", {L.in + 1, L.out}, L.stage_opt2.data()});
    s.push_back({prefix + "/step", {1}, &L.step});
  }
  return s;
}

void EncoderCuda::sync_state(StateSync s) {
  auto& cuda = ctx_.cuda();
  const auto st = cuda.stream();
  for (auto& lp : layers_) {
    Layer& L = *lp;
    auto down = [&](const DeviceBuffer<float>& b, std::vector<float>& v) {
      v.resize(b.size());
      b.download(v.data(), b.size(), st);
    };
    auto up = [&](DeviceBuffer<float>& b, const std::vector<float>& v) {
      b.upload(v.data(), v.size(), st);
    };
    switch (s) {
      case StateSync::to_host:
        down(L.params, L.stage_params);
        down(L.opt1, L.stage_opt1);
        down(L.opt2, L.stage_opt2);
        break;
      case StateSync::to_device:
        XMC_CHECK(staged_state_, "sync_state(to_device) without host copies");
        up(L.params, L.stage_params);
        up(L.opt1, L.stage_opt1);
        up(L.opt2, L.stage_opt2);
        break;
      case StateSync::release:
        break;
    }
  }
  cuda.synchronize();
  staged_state_ = s == StateSync::to_host;
  if (!staged_state_)
    for (auto& lp : layers_) {
      lp->stage_params = {};
      lp->stage_opt1 = {};
      lp->stage_opt2 = {};
    }
}

}  // namespace xmc
