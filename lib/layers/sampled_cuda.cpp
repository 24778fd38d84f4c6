#include "layers/sampled_cuda.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "layers/device_topk.h"
#include "core/gpu.h"
#include "kernels/dense_ops_cuda.h"
#include "kernels/encoder_ops_cuda.h"
#include "kernels/sparse_ops_cuda.h"
#include "layers/param_refs.h"

namespace xmc {

namespace {

// One step's upload, in 8-byte words: indptr [rows+1], group ptr [groups+1], group entry
// [nnz] (int64), then labels [nnz], group labels [groups], group rows [nnz] (uint32).
int64_t sampled_cuda_pack_words(int64_t rows, int64_t nnz, int64_t groups) {
  return (rows + 1) + (groups + 1) + nnz + (2 * nnz + groups + 1) / 2;
}

}  // namespace

SampledCudaBlock::SampledCudaBlock(gpu::CudaContext& ctx, const OptimizerConfig& optim,
                                   ConstMatrix w_init, int64_t max_batch, int64_t chunk,
                                   int64_t nnz_hint)
    : ctx_(&ctx),
      optim_(optim),
      n_(w_init.rows),
      d_(w_init.cols),
      max_batch_(max_batch),
      chunk_(std::min(chunk, w_init.rows)) {
  XMC_CHECK(n_ > 0 && d_ > 0 && max_batch > 0 && chunk > 0 && nnz_hint >= 0,
            "cuda sampled block L={} d={} B={} chunk={} nnz hint {}", n_, d_, max_batch, chunk,
            nnz_hint);
  XMC_CHECK(w_init.ld == d_, "cuda sampled block: initial weights with ld {} != d {}", w_init.ld,
            d_);
  XMC_CHECK(n_ <= int64_t{std::numeric_limits<uint32_t>::max()},
            "cuda sampled block: {} labels do not fit uint32 ids", n_);
  auto& ledger = ctx.ledger();
  const auto s = ctx.stream();
  const auto wn = static_cast<size_t>(n_ * d_);
  const auto nn = static_cast<size_t>(n_);
  w_ = gpu::DeviceBuffer<float>(ledger, MemTag::weights, wn);
  b_ = gpu::DeviceBuffer<float>(ledger, MemTag::weights, nn);
  b_.zero(s);
  const int states = optimizer_state_arrays(optim);
  if (states >= 1) {
    w_s1_ = gpu::DeviceBuffer<float>(ledger, MemTag::optimizer, wn);
    b_s1_ = gpu::DeviceBuffer<float>(ledger, MemTag::optimizer, nn);
    w_s1_.zero(s);
    b_s1_.zero(s);
  }
  if (states >= 2) {
    w_s2_ = gpu::DeviceBuffer<float>(ledger, MemTag::optimizer, wn);
    b_s2_ = gpu::DeviceBuffer<float>(ledger, MemTag::optimizer, nn);
    w_s2_.zero(s);
    b_s2_.zero(s);
  }
  z_ = gpu::DeviceBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(max_batch * chunk_));
  w_.upload(w_init.data, wn, s);
  reserve(max_batch, std::max<int64_t>(nnz_hint, 1), std::min(std::max<int64_t>(nnz_hint, 1), n_));
  reserved_bytes_ = static_cast<int64_t>(pack_dev_.bytes() + z_dev_.bytes() + g_dev_.bytes() +
                                         dw_.bytes() + db_.bytes());
  // w_init belongs to the caller and may be freed on return: wait for the copy.
  ctx.synchronize();
}

SampledCudaBlock::~SampledCudaBlock() = default;

void SampledCudaBlock::reserve(int64_t rows, int64_t nnz, int64_t groups) {
  if (rows <= rows_cap_ && nnz <= nnz_cap_ && groups <= groups_cap_) return;
  // The old buffers may still be read by queued work.
  ctx_->synchronize();
  auto& ledger = ctx_->ledger();
  if (nnz > nnz_cap_) {
    nnz_cap_ = std::max(nnz, 2 * nnz_cap_);
    const auto n = static_cast<size_t>(nnz_cap_);
    z_host_ = gpu::PinnedBuffer<float>(ledger, MemTag::workspace, n);
    g_host_ = gpu::PinnedBuffer<float>(ledger, MemTag::workspace, n);
    z_dev_ = gpu::DeviceBuffer<float>(ledger, MemTag::workspace, n);
    g_dev_ = gpu::DeviceBuffer<float>(ledger, MemTag::workspace, n);
  }
  if (groups > groups_cap_) {
    groups_cap_ = std::max(groups, std::min(2 * groups_cap_, n_));
    dw_ =
        gpu::DeviceBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(groups_cap_ * d_));
    db_ = gpu::DeviceBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(groups_cap_));
  }
  rows_cap_ = std::max(rows, rows_cap_);
  const auto words = static_cast<size_t>(sampled_cuda_pack_words(rows_cap_, nnz_cap_, groups_cap_));
  pack_host_ = gpu::PinnedBuffer<int64_t>(ledger, MemTag::workspace, words);
  pack_dev_ = gpu::DeviceBuffer<int64_t>(ledger, MemTag::workspace, words);
}

kernels::CandidateCsr SampledCudaBlock::stage(const kernels::CandidateCsr& cand,
                                              const kernels::EntryGroupsBuffers* groups,
                                              kernels::EntryGroups* dgroups) {
  XMC_CHECK(cand.rows >= 0 && cand.nnz >= 0 && cand.indptr[cand.rows] == cand.nnz,
            "cuda sampled: candidate CSR with {} rows ends at {}, nnz {}", cand.rows,
            cand.rows >= 0 ? cand.indptr[cand.rows] : -1, cand.nnz);
  const int64_t ng = groups ? static_cast<int64_t>(groups->labels.size()) : 0;
  reserve(cand.rows, cand.nnz, ng);
  // Pinned block, filled in the layout of sampled_cuda_pack_words (memcpy: the uint32
  // part is written through bytes, never read back as int64).
  auto* base = reinterpret_cast<char*>(pack_host_.data());
  const size_t o_indptr = 0;
  const size_t o_gptr = o_indptr + 8 * static_cast<size_t>(cand.rows + 1);
  const size_t o_entry = o_gptr + 8 * static_cast<size_t>(ng + 1);
  const size_t o_labels = o_entry + 8 * static_cast<size_t>(cand.nnz);
  const size_t o_glabels = o_labels + 4 * static_cast<size_t>(cand.nnz);
  const size_t o_grow = o_glabels + 4 * static_cast<size_t>(ng);
  const size_t bytes = o_grow + 4 * static_cast<size_t>(groups ? cand.nnz : 0);
  std::memcpy(base + o_indptr, cand.indptr, 8 * static_cast<size_t>(cand.rows + 1));
  std::memcpy(base + o_labels, cand.labels, 4 * static_cast<size_t>(cand.nnz));
  if (groups) {
    XMC_CHECK(static_cast<int64_t>(groups->entry.size()) == cand.nnz &&
                  static_cast<int64_t>(groups->ptr.size()) == ng + 1,
              "cuda sampled: grouping of {} entries / {} pointers for nnz {}, {} labels",
              groups->entry.size(), groups->ptr.size(), cand.nnz, ng);
    std::memcpy(base + o_gptr, groups->ptr.data(), 8 * static_cast<size_t>(ng + 1));
    std::memcpy(base + o_entry, groups->entry.data(), 8 * static_cast<size_t>(cand.nnz));
    std::memcpy(base + o_glabels, groups->labels.data(), 4 * static_cast<size_t>(ng));
    std::memcpy(base + o_grow, groups->row.data(), 4 * static_cast<size_t>(cand.nnz));
  }
  auto* dev = reinterpret_cast<char*>(pack_dev_.data());
  gpu::copy_to_device(dev, base, bytes, ctx_->stream());
  if (dgroups) {
    dgroups->labels = reinterpret_cast<const uint32_t*>(dev + o_glabels);
    dgroups->ptr = reinterpret_cast<const int64_t*>(dev + o_gptr);
    dgroups->entry = reinterpret_cast<const int64_t*>(dev + o_entry);
    dgroups->row = reinterpret_cast<const uint32_t*>(dev + o_grow);
    dgroups->groups = ng;
    dgroups->nnz = cand.nnz;
  }
  return {reinterpret_cast<const int64_t*>(dev + o_indptr),
          reinterpret_cast<const uint32_t*>(dev + o_labels), cand.rows, cand.nnz};
}

const std::vector<uint32_t>& SampledCudaBlock::train_step(const kernels::CandidateCsr& cand,
                                                          ConstMatrix h, Matrix dh,
                                                          const LrState& lr,
                                                          const LossGrad& loss_grad) {
  XMC_CHECK(h.rows == cand.rows && h.cols == d_ && dh.rows == h.rows && dh.cols == d_,
            "cuda sampled step: h [{}×{}], dh [{}×{}], {} candidate rows, d={}", h.rows, h.cols,
            dh.rows, dh.cols, cand.rows, d_);
  const auto s = ctx_->stream();
  // The previous step's transfers out of the pinned buffers are complete before they are
  // refilled (usually a no-op: the layer synchronised to read h or the scores already).
  ctx_->synchronize();
  kernels::EntryGroupsBuffers groups = kernels::group_entries_by_label(cand, n_);
  kernels::EntryGroups dgroups;
  const kernels::CandidateCsr dc = stage(cand, &groups, &dgroups);
  const int64_t nnz = cand.nnz, ng = dgroups.groups;
  const auto zbytes = static_cast<size_t>(nnz) * sizeof(float);

  gpu::sampled_scores(*ctx_, w_.data(), b_.data(), d_, dc, h, z_dev_.data());
  gpu::copy_to_host(z_host_.data(), z_dev_.data(), zbytes, s);
  ctx_->synchronize();
  loss_grad({z_host_.data(), static_cast<size_t>(nnz)}, {g_host_.data(), static_cast<size_t>(nnz)});
  gpu::copy_to_device(g_dev_.data(), g_host_.data(), zbytes, s);

  // dh = Σ g·w with the weights before this step's update (the op accumulates).
  if (dh.ld == dh.cols) {
    gpu::memset_device(dh.data, 0, static_cast<size_t>(dh.rows * dh.cols) * sizeof(float), s);
  } else {
    for (int64_t r = 0; r < dh.rows; ++r)
      gpu::memset_device(dh.row(r), 0, static_cast<size_t>(dh.cols) * sizeof(float), s);
  }
  gpu::sampled_input_grad(*ctx_, w_.data(), d_, dc, g_dev_.data(), dh);
  gpu::sampled_weight_grad(*ctx_, dgroups, g_dev_.data(), h, Matrix(dw_.data(), ng, d_),
                           db_.data());
  gpu::optimizer_update_rows(*ctx_, optim_, lr.lr, lr.step, w_.data(), dw_.data(),
                             data_or_null(w_s1_), data_or_null(w_s2_), dgroups.labels, ng, d_);
  OptimizerConfig bias_cfg = optim_;
  bias_cfg.weight_decay = 0.0;  // no weight decay on the bias, as on the CPU
  gpu::optimizer_update_rows(*ctx_, bias_cfg, lr.lr, lr.step, b_.data(), db_.data(),
                             data_or_null(b_s1_), data_or_null(b_s2_), dgroups.labels, ng, 1);
  touched_ = std::move(groups.labels);
  return touched_;
}

std::vector<float> SampledCudaBlock::candidate_scores(const kernels::CandidateCsr& cand,
                                                      ConstMatrix h) {
  XMC_CHECK(h.rows == cand.rows && h.cols == d_, "cuda candidate scores: h [{}×{}], {} rows, d={}",
            h.rows, h.cols, cand.rows, d_);
  ctx_->synchronize();
  const kernels::CandidateCsr dc = stage(cand, nullptr, nullptr);
  gpu::sampled_scores(*ctx_, w_.data(), b_.data(), d_, dc, h, z_dev_.data());
  std::vector<float> out(static_cast<size_t>(cand.nnz));
  gpu::copy_to_host(out.data(), z_dev_.data(), out.size() * sizeof(float), ctx_->stream());
  ctx_->synchronize();
  return out;
}

void SampledCudaBlock::scores(ConstMatrix h, int64_t lo, Matrix out) {
  XMC_CHECK(lo >= 0 && lo + out.cols <= n_ && h.cols == d_ && out.rows == h.rows,
            "cuda sampled scores: h [{}×{}], out [{}×{}] at label {}, L={} d={}", h.rows, h.cols,
            out.rows, out.cols, lo, n_, d_);
  gpu::gemm_nt(*ctx_, h, ConstMatrix(w_.data() + lo * d_, out.cols, d_), out);
  gpu::add_row_vector(*ctx_, out, b_.data() + lo);
}

TopK SampledCudaBlock::topk(ConstMatrix h, int k) {
  XMC_CHECK(h.cols == d_, "cuda top-k: h has {} columns, d = {}", h.cols, d_);
  ConstMatrix hb;
  return device_stream_topk(
      *ctx_, h.rows, k, max_batch_, n_, chunk_, 0, z_.data(),
      [&](int64_t r0, int64_t rows) { hb = h.rows_range(r0, rows); },
      [&](int64_t c0, Matrix z) { scores(hb, c0, z); });
}

std::vector<float> SampledCudaBlock::to_host(ConstMatrix m) const {
  std::vector<float> v(static_cast<size_t>(m.rows * m.cols));
  const auto s = ctx_->stream();
  if (m.ld == m.cols) {
    gpu::copy_to_host(v.data(), m.data, v.size() * sizeof(float), s);
  } else {
    for (int64_t r = 0; r < m.rows; ++r)
      gpu::copy_to_host(v.data() + r * m.cols, m.row(r),
                        static_cast<size_t>(m.cols) * sizeof(float), s);
  }
  ctx_->synchronize();
  return v;
}

std::vector<float> SampledCudaBlock::download_rows(std::span<const uint32_t> labels) {
  const auto count = static_cast<int64_t>(labels.size());
  std::vector<float> out(static_cast<size_t>(count * d_));
  if (count == 0) return out;
  for (uint32_t l : labels) XMC_CHECK(l < n_, "download of label {} >= {}", l, n_);
  const auto s = ctx_->stream();
  auto& ledger = ctx_->ledger();
  gpu::DeviceBuffer<uint32_t> ids(ledger, MemTag::workspace, labels.size());
  gpu::DeviceBuffer<float> rows(ledger, MemTag::workspace, out.size());
  ids.upload(labels.data(), labels.size(), s);
  gpu::gather_rows(*ctx_, w_.data(), ids.data(), count, d_, rows.data());
  rows.download(out.data(), out.size(), s);
  ctx_->synchronize();
  return out;
}

void SampledCudaBlock::download_weights(float* w, float* b) const {
  const auto s = ctx_->stream();
  if (w) w_.download(w, w_.size(), s);
  if (b) b_.download(b, b_.size(), s);
  ctx_->synchronize();
}

SampledCudaBlock::HostState SampledCudaBlock::download() const {
  const auto s = ctx_->stream();
  HostState st;
  auto get = [&](const gpu::DeviceBuffer<float>& b, std::vector<float>& v) {
    v.resize(b.size());
    b.download(v.data(), b.size(), s);
  };
  get(w_, st.weight);
  get(b_, st.bias);
  get(w_s1_, st.weight_opt1);
  get(w_s2_, st.weight_opt2);
  get(b_s1_, st.bias_opt1);
  get(b_s2_, st.bias_opt2);
  ctx_->synchronize();
  return st;
}

void SampledCudaBlock::upload(const HostState& st) {
  const auto s = ctx_->stream();
  auto put = [&](gpu::DeviceBuffer<float>& b, const std::vector<float>& v, const char* name) {
    XMC_CHECK(v.size() == b.size(), "cuda sampled upload: {} has {} values, expected {}", name,
              v.size(), b.size());
    b.upload(v.data(), v.size(), s);
  };
  put(w_, st.weight, "weight");
  put(b_, st.bias, "bias");
  put(w_s1_, st.weight_opt1, "weight_opt1");
  put(w_s2_, st.weight_opt2, "weight_opt2");
  put(b_s1_, st.bias_opt1, "bias_opt1");
  put(b_s2_, st.bias_opt2, "bias_opt2");
  ctx_->synchronize();
}

int64_t SampledCudaBlock::analytic_bytes() const {
  const int64_t states = optimizer_state_arrays(optim_);
  int64_t bytes = 4 * (n_ * d_ + n_) * (1 + states);  // W, b, their optimizer state
  bytes += 4 * max_batch_ * chunk_;                   // top-k logits
  return bytes + reserved_bytes_;
}

}  // namespace xmc
