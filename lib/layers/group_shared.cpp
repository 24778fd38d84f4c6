#include "layers/group_shared.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/resources.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "kernels/dense_ops.h"
#include "kernels/fixed_fanin_ops.h"  // transpose
#include "kernels/group_shared_ops.h"
#include "model/dropout.h"
#include "model/optimizer_state.h"

namespace xmc {

namespace {

// Stream ids of the layer's random draws.
constexpr uint64_t kGsIndexStream = 0x6a5e'0001ULL;
constexpr uint64_t kGsWeightStream = 0x6a5e'0002ULL;
constexpr uint64_t kGsShuffleStream = 0x6a5e'0003ULL;
constexpr uint64_t kGsDropoutStream = 0x6a5e'0004ULL;
constexpr uint64_t kGsRewireStream = 0x6a5e'0005ULL;
constexpr uint64_t kGsHeadStream = 0x6a5e'0006ULL;
constexpr uint64_t kGsProjStream = 0x6a5e'0007ULL;
constexpr uint64_t kGsSemanticStream = 0x6a5e'0008ULL;

HostBuffer<float> gs_buffer(MemoryLedger& ledger, MemTag tag, int64_t n) {
  if (n <= 0) return {};
  return HostBuffer<float>(ledger, tag, static_cast<size_t>(n));
}

float* gs_at(HostBuffer<float>& b, int64_t offset) { return b.size() ? b.data() + offset : nullptr; }

// F distinct values of [0, m) (Floyd's algorithm), sorted; `mark` [m] is all zero on entry
// and on return.
void gs_draw_set(Rng& rng, int64_t m, int64_t f, uint32_t* out, std::vector<char>& mark) {
  for (int64_t j = m - f, t = 0; j < m; ++j, ++t) {
    auto c = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(j) + 1));
    if (mark[c]) c = static_cast<uint32_t>(j);
    mark[c] = 1;
    out[t] = c;
  }
  for (int64_t t = 0; t < f; ++t) mark[out[t]] = 0;
  std::sort(out, out + f);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// GroupSharedProjection

GroupSharedProjection::GroupSharedProjection(MemoryLedger& ledger, int64_t in, int64_t out,
                                             bool relu, const OptimizerConfig& optim,
                                             int64_t max_batch, uint64_t seed)
    : in_(in), out_(out), max_batch_(max_batch), relu_(relu), optim_(optim) {
  if (out_ <= 0) return;
  const int64_t pn = out_ * in_ + out_;
  p_ = gs_buffer(ledger, MemTag::weights, pn);
  s1_ = optimizer_state_buffer(ledger, optim_, 1, static_cast<size_t>(pn));
  s2_ = optimizer_state_buffer(ledger, optim_, 2, static_cast<size_t>(pn));
  dp_ = gs_buffer(ledger, MemTag::workspace, pn);
  u_ = gs_buffer(ledger, MemTag::workspace, max_batch_ * out_);
  du_ = gs_buffer(ledger, MemTag::workspace, max_batch_ * out_);
  const float scale = 1.0f / std::sqrt(static_cast<float>(in_));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < out_; ++r) {
    Rng rng = Rng::stream(seed, static_cast<uint64_t>(r));
    float* row = p_.data() + r * in_;
    for (int64_t j = 0; j < in_; ++j) row[j] = (2.0f * rng.uniformf() - 1.0f) * scale;
  }
}

void GroupSharedProjection::apply(ConstMatrix x, Matrix u) const {
  const float* c = p_.data() + out_ * in_;
  for (int64_t r = 0; r < x.rows; ++r) std::copy(c, c + out_, u.row(r));
  kernels::gemm_nt(x, ConstMatrix(p_.data(), out_, in_), u, 1.0f, 1.0f);
  if (relu_)
    for (int64_t r = 0; r < u.rows; ++r)
      for (int64_t j = 0; j < out_; ++j) u(r, j) = std::max(u(r, j), 0.0f);
}

Matrix GroupSharedProjection::forward(ConstMatrix x) {
  XMC_CHECK(x.rows <= max_batch_, "projection: batch of {} rows exceeds {}", x.rows, max_batch_);
  Matrix u(u_.data(), x.rows, out_);
  apply(x, u);
  return u;
}

void GroupSharedProjection::backward_update(ConstMatrix x, Matrix dh, float beta,
                                            const LrState& lr) {
  const int64_t rows = x.rows;
  Matrix du(du_.data(), rows, out_);
  if (relu_) {
    const float* u = u_.data();
    for (int64_t i = 0; i < rows * out_; ++i)
      if (u[i] <= 0.0f) du.data[i] = 0.0f;
  }
  ConstMatrix p(p_.data(), out_, in_);
  kernels::gemm_nn(du, p, dh, 1.0f, beta);
  kernels::gemm_tn(du, x, Matrix(dp_.data(), out_, in_));
  kernels::column_sums(du, dp_.data() + out_ * in_);
  optimizer_update(optim_, lr.lr, lr.step, p_.data(), dp_.data(), gs_at(s1_, 0), gs_at(s2_, 0),
                   static_cast<int64_t>(p_.size()));
}

void GroupSharedProjection::append_state(std::vector<TensorRef>& out, const std::string& prefix) {
  if (out_ <= 0) return;
  out.push_back({prefix + "/weight", {out_, in_}, p_.data()});
  out.push_back({prefix + "/bias", {out_}, p_.data() + out_ * in_});
  const int64_t pn = static_cast<int64_t>(p_.size());
  if (s1_.size()) out.push_back({prefix + "/opt1", {pn}, s1_.data()});
  if (s2_.size()) out.push_back({prefix + "/opt2", {pn}, s2_.data()});
}

int64_t GroupSharedProjection::bytes() const {
  if (out_ <= 0) return 0;
  const int64_t pn = out_ * in_ + out_;
  return 4 * (pn * (2 + optimizer_state_arrays(optim_)) + 2 * max_batch_ * out_);
}

// ---------------------------------------------------------------------------------------
// GroupSharedLayer

GroupSharedLayer::GroupSharedLayer(const LayerInit& init, const GroupSharedConfig& cfg)
    : OutputLayer(init.input_dim, init.num_labels, 0, init.num_labels),
      ledger_(&init.ctx->ledger()),
      group_(cfg.group_size),
      fan_in_(cfg.fan_in),
      head_(head_label_count(init.num_labels, cfg.head_fraction, cfg.group_size)),
      groups_((init.num_labels - head_ + cfg.group_size - 1) / cfg.group_size),
      m_(cfg.tail_projection > 0 ? cfg.tail_projection : init.input_dim),
      max_batch_(init.batch_size),
      chunk_(0),
      dropout_(cfg.dropout),
      loss_(parse_loss(cfg.loss)),
      grouping_(parse_grouping(cfg.grouping)),
      beta_(cfg.beta),
      kmeans_iters_(static_cast<int>(cfg.kmeans_iters)),
      rewire_cfg_(cfg.rewire),
      optim_(init.optim),
      seed_(init.seed),
      total_steps_(init.total_steps) {
  const int64_t d = init.input_dim, n = init.num_labels, g = group_, f = fan_in_;
  const int64_t t = n - head_;
  XMC_CHECK(d > 0 && n > 0 && max_batch_ > 0 && g > 0 && f > 0,
            "group_shared: d={} L={} B={} G={} F={}", d, n, max_batch_, g, f);
  if (loss_ != LossType::squared_hinge && loss_ != LossType::bce)
    throw_input("group_shared: loss '{}' is not supported (squared_hinge, bce)", cfg.loss);
  if (t > 0 && f > m_)
    throw_input("group_shared: fan_in {} exceeds the {} inputs of the tail ({})", f, m_,
                cfg.tail_projection > 0 ? "model.output.tail_projection" : "encoder output width");
  if (!init.label_freq.empty() && static_cast<int64_t>(init.label_freq.size()) != n)
    throw_error("group_shared: {} label frequencies for {} labels", init.label_freq.size(), n);
  if (t > 0) {
    const int64_t per_chunk = std::max(g, cfg.chunk_size / g * g);
    chunk_ = std::min(per_chunk, (t + g - 1) / g * g);
  }
  MemoryLedger& ledger = *ledger_;

  // Label order: frequency (a missing frequency list counts every label 0), then the tail
  // arranged by the grouping; semantic starts from the frequency order (see the header).
  order_ = HostBuffer<uint32_t>(ledger, MemTag::indices, static_cast<size_t>(n));
  pos_ = HostBuffer<uint32_t>(ledger, MemTag::indices, static_cast<size_t>(n));
  grouped_ = HostBuffer<uint32_t>(ledger, MemTag::indices, 1);
  {
    std::vector<int64_t> freq = init.label_freq;
    freq.resize(static_cast<size_t>(n), 0);
    auto order = frequency_order(freq);
    if (grouping_ == GroupingType::random) {
      Rng rng = Rng::stream(seed_, kGsShuffleStream);
      for (int64_t i = n - 1; i > head_; --i) {
        const auto j = head_ + static_cast<int64_t>(rng.below(static_cast<uint64_t>(i - head_ + 1)));
        std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
      }
    }
    std::copy(order.begin(), order.end(), order_.data());
    const auto pos = inverse_order(order);
    std::copy(pos.begin(), pos.end(), pos_.data());
  }

  // Head: a dense block over positions [0, H) on its (projected) input.
  head_proj_ = GroupSharedProjection(ledger, d, head_ > 0 ? cfg.head_dim : 0, false, optim_,
                                     max_batch_, Rng::stream(seed_, kGsProjStream).next());
  if (head_ > 0)
    head_block_.emplace(*init.ctx, cfg.head_dim > 0 ? cfg.head_dim : d, 0, head_, max_batch_,
                        cfg.chunk_size, loss_, optim_, Rng::stream(seed_, kGsHeadStream).next());

  // Tail: shared index sets, per-label weights and biases, optional ReLU projection.
  const int64_t tf = t * f;
  tail_proj_ = GroupSharedProjection(ledger, d, t > 0 ? cfg.tail_projection : 0, true, optim_,
                                     max_batch_, Rng::stream(seed_, kGsProjStream + 1).next());
  if (t > 0) {
    idx_ = HostBuffer<uint32_t>(ledger, MemTag::indices, static_cast<size_t>(groups_ * f));
    w_ = gs_buffer(ledger, MemTag::weights, tf);
    b_ = gs_buffer(ledger, MemTag::weights, t);
    w_s1_ = optimizer_state_buffer(ledger, optim_, 1, static_cast<size_t>(tf));
    b_s1_ = optimizer_state_buffer(ledger, optim_, 1, static_cast<size_t>(t));
    w_s2_ = optimizer_state_buffer(ledger, optim_, 2, static_cast<size_t>(tf));
    b_s2_ = optimizer_state_buffer(ledger, optim_, 2, static_cast<size_t>(t));
    ut_ = gs_buffer(ledger, MemTag::workspace, m_ * max_batch_);
    z_ = gs_buffer(ledger, MemTag::workspace, max_batch_ * chunk_);
    dw_ = gs_buffer(ledger, MemTag::workspace, chunk_ * f);
    db_ = gs_buffer(ledger, MemTag::workspace, chunk_);
  }
  if (dropout_ > 0.0) {
    xd_ = gs_buffer(ledger, MemTag::workspace, max_batch_ * d);
    mask_ = gs_buffer(ledger, MemTag::workspace, max_batch_ * d);
  }

  // One random index set per group, each from its own stream (thread-count independent).
  const uint64_t idx_seed = Rng::stream(seed_, kGsIndexStream).next();
#pragma omp parallel
  {
    std::vector<char> mark(static_cast<size_t>(m_), 0);
#pragma omp for schedule(static)
    for (int64_t k = 0; k < groups_; ++k) {
      Rng rng = Rng::stream(idx_seed, static_cast<uint64_t>(k));
      gs_draw_set(rng, m_, f, idx_.data() + k * f, mark);
    }
  }
  init_tail_weights();

  spdlog::info(
      "group_shared: L={}: dense head of {} labels{}, tail of {} labels in {} groups of G={} "
      "sharing F={} of {} inputs{} ({} grouping); tail weights {} ({:.1f}% of a dense "
      "{}×{} layer), index entries {} ({:.1f}% of fixed_fanin's)",
      n, head_, cfg.head_dim > 0 && head_ > 0 ? fmt::format(" on a {}→{} projection", d, cfg.head_dim) : std::string(),
      t, groups_, g, f, m_,
      tail_proj_.active() ? fmt::format(" after a {}→{} ReLU projection", d, m_) : std::string(),
      cfg.grouping, tf, 100.0 * static_cast<double>(tf) / static_cast<double>(std::max<int64_t>(1, t * d)), t, d,
      groups_ * f, 100.0 * static_cast<double>(groups_ * f) / static_cast<double>(std::max<int64_t>(1, tf)));
}

void GroupSharedLayer::init_tail_weights() {
  const int64_t t = tail_labels(), f = fan_in_;
  if (t == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(f));
  const uint64_t w_seed = Rng::stream(seed_, kGsWeightStream).next();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < t; ++r) {
    Rng rng = Rng::stream(w_seed, static_cast<uint64_t>(r));
    float* wr = w_.data() + r * f;
    for (int64_t j = 0; j < f; ++j) wr[j] = (2.0f * rng.uniformf() - 1.0f) * scale;
  }
  for (HostBuffer<float>* s : {&w_s1_, &w_s2_})
    std::fill(s->span().begin(), s->span().end(), 0.0f);
}

StepStats GroupSharedLayer::train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                                            const LrState& lr) {
  const int64_t bsz = h.rows, d = input_dim(), t = tail_labels(), g = group_, f = fan_in_;
  XMC_CHECK(bsz <= max_batch_, "batch of {} rows exceeds the workspace for {}", bsz, max_batch_);
  StepStats stats;
  Stopwatch sw;
  auto mark = [&](double GroupSharedTimings::*field) {
    timings_.*field += sw.seconds();
    sw.reset();
  };

  // The batch's positives at internal positions (sorted within a row, as the losses want).
  targets_.rows = bsz;
  targets_.cols = num_labels();
  targets_.indptr.assign(1, 0);
  targets_.indices.clear();
  for (int64_t i = 0; i < bsz; ++i) {
    const size_t start = targets_.indices.size();
    for (int64_t e = batch.labels.indptr[i]; e < batch.labels.indptr[i + 1]; ++e)
      targets_.indices.push_back(pos_[batch.labels.indices[static_cast<size_t>(e)]]);
    std::sort(targets_.indices.begin() + static_cast<std::ptrdiff_t>(start), targets_.indices.end());
    targets_.indptr.push_back(static_cast<int64_t>(targets_.indices.size()));
  }

  // x = dropout(h) [B×d].
  ConstMatrix x = h;
  if (dropout_ > 0.0) {
    Matrix xd(xd_.data(), bsz, d);
    for (int64_t r = 0; r < bsz; ++r) std::copy(h.row(r), h.row(r) + d, xd.row(r));
    Rng rng = Rng::stream(seed_ ^ kGsDropoutStream, static_cast<uint64_t>(lr.step));
    dropout_dense(xd, mask_.data(), dropout_, rng);
    x = xd;
  }
  mark(&GroupSharedTimings::forward);

  // Head: overwrites dh with its part of dL/dx (or zeroes dh without a head).
  double loss = 0.0;
  if (head_block_) {
    StepStats hs;
    if (head_proj_.active()) {
      ConstMatrix hin = head_proj_.forward(x);
      hs = head_block_->train_step(targets_, hin, head_proj_.grad_workspace(bsz), lr);
      head_proj_.backward_update(x, dh, 0.0f, lr);
    } else {
      hs = head_block_->train_step(targets_, x, dh, lr);
    }
    loss += hs.loss * static_cast<double>(bsz);
    stats.zero_grads += hs.zero_grads;
    stats.grads += hs.grads;
  } else {
    for (int64_t r = 0; r < bsz; ++r) std::fill(dh.row(r), dh.row(r) + d, 0.0f);
  }
  mark(&GroupSharedTimings::head);

  if (t > 0) {
    ConstMatrix u = tail_proj_.active() ? ConstMatrix(tail_proj_.forward(x)) : x;
    Matrix ut(ut_.data(), m_, bsz);
    kernels::transpose(u, ut);
    // du = dL/du [B×m]: the projection's workspace (zeroed), or dh itself (accumulating).
    Matrix du = dh;
    if (tail_proj_.active()) {
      du = tail_proj_.grad_workspace(bsz);
      std::fill(du.data, du.data + bsz * m_, 0.0f);
    }
    mark(&GroupSharedTimings::forward);
    int64_t tail_zero = 0;
    for (int64_t c0 = 0; c0 < t; c0 += chunk_) {
      const int64_t c = std::min(chunk_, t - c0);
      const uint32_t* idx = idx_.data() + (c0 / g) * f;
      const float* w = w_.data() + c0 * f;
      Matrix z(z_.data(), bsz, c);
      kernels::group_shared_forward(idx, w, b_.data() + c0, c, g, f, ut, z);
      mark(&GroupSharedTimings::forward);
      loss += elementwise_loss_grad(loss_, z, targets_, head_ + c0, bsz, &tail_zero);
      stats.grads += bsz * c;
      mark(&GroupSharedTimings::loss);
      kernels::group_shared_input_grad(idx, w, c, g, f, z, du);  // weights before the step
      mark(&GroupSharedTimings::backward_input);
      kernels::group_shared_weight_grad(idx, c, g, f, z, ut, dw_.data(), db_.data());
      mark(&GroupSharedTimings::backward_weight);
      update_tail(c0, c, lr);
      mark(&GroupSharedTimings::update);
    }
    stats.zero_grads += tail_zero;
    if (tail_proj_.active()) tail_proj_.backward_update(x, dh, 1.0f, lr);
    mark(&GroupSharedTimings::projection_backward);
  }
  if (dropout_ > 0.0) {
    const float* mk = mask_.data();
    for (int64_t r = 0; r < bsz; ++r) {
      float* row = dh.row(r);
      for (int64_t j = 0; j < d; ++j) row[j] *= mk[r * d + j];
    }
  }
  timings_.zero_grads += stats.zero_grads;
  timings_.grads += stats.grads;
  stats.loss = loss / static_cast<double>(bsz);
  return stats;
}

void GroupSharedLayer::update_tail(int64_t r0, int64_t n, const LrState& lr) {
  const int64_t wo = r0 * fan_in_;
  optimizer_update(optim_, lr.lr, lr.step, w_.data() + wo, dw_.data(), gs_at(w_s1_, wo),
                   gs_at(w_s2_, wo), n * fan_in_);
  OptimizerConfig no_decay = optim_;  // biases get no weight decay
  no_decay.weight_decay = 0.0;
  optimizer_update(no_decay, lr.lr, lr.step, b_.data() + r0, db_.data(), gs_at(b_s1_, r0),
                   gs_at(b_s2_, r0), n);
}

GroupSharedLayer::EvalInputs GroupSharedLayer::eval_inputs(ConstMatrix h) const {
  EvalInputs in;
  const int64_t rows = h.rows;
  in.head_in = h;
  if (head_proj_.active()) {
    in.head_buf.resize(static_cast<size_t>(rows * head_proj_.out_dim()));
    Matrix hp(in.head_buf.data(), rows, head_proj_.out_dim());
    head_proj_.apply(h, hp);
    in.head_in = hp;
  }
  if (tail_labels() > 0) {
    ConstMatrix u = h;
    if (tail_proj_.active()) {
      in.tail_buf.resize(static_cast<size_t>(rows * m_));
      Matrix um(in.tail_buf.data(), rows, m_);
      tail_proj_.apply(h, um);
      u = um;
    }
    in.ut_buf.resize(static_cast<size_t>(m_ * rows));
    Matrix ut(in.ut_buf.data(), m_, rows);
    kernels::transpose(u, ut);
    in.ut = ut;
  }
  return in;
}

void GroupSharedLayer::internal_scores(const EvalInputs& in, int64_t lo, Matrix out) const {
  const int64_t hi = lo + out.cols;
  if (lo < head_) {
    const int64_t hn = std::min(hi, head_) - lo;
    head_block_->scores(in.head_in, lo, Matrix(out.data, out.rows, hn, out.ld));
  }
  const int64_t s = std::max(lo, head_);
  if (s < hi) {
    const int64_t r0 = s - head_;
    XMC_CHECK(r0 % group_ == 0, "group_shared scores: tail position {} is not on a group boundary", r0);
    kernels::group_shared_forward(idx_.data() + (r0 / group_) * fan_in_, w_.data() + r0 * fan_in_,
                                  b_.data() + r0, hi - s, group_, fan_in_, in.ut,
                                  Matrix(out.data + (s - lo), out.rows, hi - s, out.ld));
  }
}

void GroupSharedLayer::scores_impl(ConstMatrix h, int64_t lo, Matrix out) const {
  // Internal scores of all labels, then out's columns in original label order.
  XMC_CHECK(lo == 0 && out.cols == num_labels(), "group_shared scores: labels [{}, {})", lo,
            lo + out.cols);
  const EvalInputs in = eval_inputs(h);
  std::vector<float> buf(static_cast<size_t>(h.rows * out.cols));
  Matrix all(buf.data(), h.rows, out.cols);
  internal_scores(in, 0, all);
  for (int64_t r = 0; r < h.rows; ++r)
    for (int64_t i = 0; i < out.cols; ++i) out(r, order_[static_cast<size_t>(i)]) = all(r, i);
}

TopK GroupSharedLayer::topk_impl(ConstMatrix h, int k) const {
  const EvalInputs in = eval_inputs(h);
  // Chunks are multiples of G and H is one too, so every tail chunk starts a group.
  const int64_t chunk = chunk_ > 0 ? chunk_ : num_labels();
  TopK top = stream_topk(h.rows, k, chunk,
                         [&](int64_t lo, Matrix out) { internal_scores(in, lo, out); });
  // Positions -> original ids; equal scores then rank by original id, as elsewhere.
  std::vector<std::pair<float, uint32_t>> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < top.rows; ++r) {
    uint32_t* lab = top.row_labels(r);
    float* sc = top.row_scores(r);
    for (int j = 0; j < k; ++j) {
      const uint32_t l = lab[j] == TopK::kNoLabel ? lab[j] : order_[lab[j]];
      row[static_cast<size_t>(j)] = {sc[j], l};
    }
    std::stable_sort(row.begin(), row.end(), [](const auto& a, const auto& b) {
      return ranks_before(a.first, a.second, b.first, b.second);
    });
    for (int j = 0; j < k; ++j) {
      sc[j] = row[static_cast<size_t>(j)].first;
      lab[j] = row[static_cast<size_t>(j)].second;
    }
  }
  return top;
}

void GroupSharedLayer::regroup_semantic(ConstMatrix x, const CsrMatrix& point_labels) {
  XMC_CHECK(point_labels.cols == num_labels() && x.rows == point_labels.rows && x.cols == input_dim(),
            "group_shared semantic grouping: x [{}×{}], labels [{}×{}], expected [N×{}], [N×{}]",
            x.rows, x.cols, point_labels.rows, point_labels.cols, input_dim(), num_labels());
  const int64_t t = tail_labels(), n = num_labels(), g = group_;
  grouped_[0] = 1;
  if (t == 0) return;
  Stopwatch sw;
  LedgerEntry scratch(*ledger_, MemTag::workspace, 4 * t * input_dim());
  const DenseMatrix c =
      label_centroids(x, point_labels, std::span<const uint32_t>(order_.data() + head_, static_cast<size_t>(t)));
  SemanticGroupingParams sp;
  sp.group = g;
  sp.beta = beta_;
  sp.kmeans_iters = kmeans_iters_;
  sp.seed = Rng::stream(seed_, kGsSemanticStream).next();
  const std::vector<int64_t> arr = semantic_arrangement(c.view(), sp);
  const double seconds = sw.seconds();
  // Cohesion against the frequency order (the arrangement before) and random groups.
  std::vector<int64_t> ident(static_cast<size_t>(t)), shuffled(static_cast<size_t>(t));
  std::iota(ident.begin(), ident.end(), int64_t{0});
  shuffled = ident;
  Rng rng = Rng::stream(seed_, kGsSemanticStream + 1);
  for (int64_t i = t - 1; i > 0; --i)
    std::swap(shuffled[static_cast<size_t>(i)], shuffled[rng.below(static_cast<uint64_t>(i) + 1)]);
  const double coh = group_cohesion(c.view(), arr, g);
  const double coh_freq = group_cohesion(c.view(), ident, g);
  const double coh_rand = group_cohesion(c.view(), shuffled, g);

  // Move the tail labels (and their biases with their moments) to the new arrangement;
  // the weights start again from the initial draw for the new groups.
  std::vector<uint32_t> old(order_.data() + head_, order_.data() + n);
  for (int64_t i = 0; i < t; ++i) order_[static_cast<size_t>(head_ + i)] = old[static_cast<size_t>(arr[static_cast<size_t>(i)])];
  for (int64_t i = 0; i < n; ++i) pos_[order_[static_cast<size_t>(i)]] = static_cast<uint32_t>(i);
  for (HostBuffer<float>* b : {&b_, &b_s1_, &b_s2_}) {
    if (!b->size()) continue;
    std::vector<float> prev(b->span().begin(), b->span().end());
    for (int64_t i = 0; i < t; ++i) (*b)[static_cast<size_t>(i)] = prev[static_cast<size_t>(arr[static_cast<size_t>(i)])];
  }
  init_tail_weights();
  spdlog::info(
      "group_shared: semantic grouping of {} tail labels into {} groups in {:.2f}s; cohesion "
      "(mean cosine to the group centroid) {:.4f} vs {:.4f} frequency order, {:.4f} random",
      t, groups_, seconds, coh, coh_freq, coh_rand);
}

bool GroupSharedLayer::rewire_due(int64_t step, int64_t total_steps) const {
  const RewireConfig& r = rewire_cfg_;
  if (r.interval <= 0 || r.fraction <= 0.0 || step <= 0 || step % r.interval != 0) return false;
  return static_cast<double>(step) <= r.until * static_cast<double>(total_steps);
}

void GroupSharedLayer::on_step_impl(const TrainerView& t) {
  if (grouping_ == GroupingType::semantic && !semantic_done()) {
    XMC_CHECK(t.train != nullptr && static_cast<bool>(t.embed_train),
              "group_shared: semantic grouping needs the training data and embed_train");
    const DenseMatrix x = t.embed_train();
    regroup_semantic(x.view(), t.train->labels);
  }
  const int64_t total = t.total_steps > 0 ? t.total_steps : total_steps_;
  if (!rewire_due(t.step, total)) return;
  const RewireStats s = rewire(t.step);
  const int64_t slots = groups_ * fan_in_;
  spdlog::info("group_shared: rewired {} of {} shared slots ({:.1f}%) at step {} in {:.3f}s",
               s.pruned, slots, 100.0 * static_cast<double>(s.pruned) / static_cast<double>(std::max<int64_t>(1, slots)),
               s.step, s.seconds);
}

void GroupSharedLayer::on_epoch_impl(const TrainerView& t) {
  const auto& tm = timings_;
  spdlog::info(
      "group_shared epoch {}: head {:.2f}s, tail forward {:.2f}s, loss {:.2f}s, backward "
      "{:.2f}s (input {:.2f}s, weight {:.2f}s), update {:.2f}s, projection backward {:.2f}s, "
      "rewiring {:.2f}s; zero output gradients {:.1f}%",
      t.epoch + 1, tm.head, tm.forward, tm.loss, tm.backward_input + tm.backward_weight,
      tm.backward_input, tm.backward_weight, tm.update, tm.projection_backward, tm.rewire,
      tm.grads > 0 ? 100.0 * static_cast<double>(tm.zero_grads) / static_cast<double>(tm.grads) : 0.0);
  timings_ = {};
}

RewireStats GroupSharedLayer::rewire(int64_t step) {
  Stopwatch sw;
  const int64_t t = tail_labels(), g = group_, f = fan_in_, slots = groups_ * f;
  RewireStats out;
  out.step = step;
  const auto k = std::llround(rewire_cfg_.fraction * static_cast<double>(slots));
  if (t == 0 || k <= 0 || f >= m_) {  // nothing to prune, or every input already used
    last_rewire_ = out;
    return out;
  }
  // Slot score: mean |w| over the group's labels (the last group may be partial).
  std::vector<float> score(static_cast<size_t>(slots));
#pragma omp parallel for schedule(static)
  for (int64_t q = 0; q < groups_; ++q) {
    const int64_t r0 = q * g, gn = std::min(g, t - r0);
    for (int64_t j = 0; j < f; ++j) {
      float s = 0.0f;
      for (int64_t r = r0; r < r0 + gn; ++r) s += std::abs(w_[static_cast<size_t>(r * f + j)]);
      score[static_cast<size_t>(q * f + j)] = s / static_cast<float>(gn);
    }
  }
  // The k smallest (score, slot) pairs: ties go to the lower slot.
  std::vector<int64_t> rank(static_cast<size_t>(slots));
  std::iota(rank.begin(), rank.end(), int64_t{0});
  std::nth_element(rank.begin(), rank.begin() + (k - 1), rank.end(), [&](int64_t a, int64_t b) {
    return std::make_pair(score[static_cast<size_t>(a)], a) < std::make_pair(score[static_cast<size_t>(b)], b);
  });
  std::vector<char> prune(static_cast<size_t>(slots), 0);
  for (int64_t i = 0; i < k; ++i) prune[static_cast<size_t>(rank[static_cast<size_t>(i)])] = 1;

  const uint64_t base = Rng::stream(seed_ ^ kGsRewireStream, static_cast<uint64_t>(step)).next();
  float* s1 = gs_at(w_s1_, 0);
  float* s2 = gs_at(w_s2_, 0);
  int64_t pruned = 0;
#pragma omp parallel reduction(+ : pruned)
  {
    std::vector<int64_t> slots_k;
    std::vector<uint32_t> old;
#pragma omp for schedule(static)
    for (int64_t q = 0; q < groups_; ++q) {
      slots_k.clear();
      for (int64_t j = 0; j < f; ++j)
        if (prune[static_cast<size_t>(q * f + j)]) slots_k.push_back(j);
      if (slots_k.empty()) continue;
      uint32_t* iq = idx_.data() + q * f;
      old.clear();
      for (int64_t j : slots_k) old.push_back(iq[j]);
      Rng rng = Rng::stream(base, static_cast<uint64_t>(q));
      regrow_inputs(iq, f, slots_k, old, m_, rng);
      // The slot's weights and moments restart at zero for every label of the group.
      const int64_t r0 = q * g, gn = std::min(g, t - r0);
      for (int64_t j : slots_k) {
        for (int64_t r = r0; r < r0 + gn; ++r) {
          const auto e = static_cast<size_t>(r * f + j);
          w_[e] = 0.0f;
          if (s1) s1[e] = 0.0f;
          if (s2) s2[e] = 0.0f;
        }
      }
      pruned += static_cast<int64_t>(slots_k.size());
    }
  }
  out.pruned = pruned;
  out.seconds = sw.seconds();
  timings_.rewire += out.seconds;
  last_rewire_ = out;
  return out;
}

std::vector<TensorRef> GroupSharedLayer::state_impl() {
  const int64_t n = num_labels(), t = tail_labels(), f = fan_in_;
  std::vector<TensorRef> out = {{"output/label_order", {n}, order_.data()},
                                {"output/label_position", {n}, pos_.data()},
                                {"output/semantic_done", {1}, grouped_.data()}};
  if (head_block_) {
    auto hs = head_block_->state("output/head/");
    out.insert(out.end(), hs.begin(), hs.end());
    head_proj_.append_state(out, "output/head/projection");
  }
  if (t > 0) {
    out.push_back({"output/indices", {groups_, f}, idx_.data()});
    out.push_back({"output/weight", {t, f}, w_.data()});
    out.push_back({"output/bias", {t}, b_.data()});
    if (w_s1_.size()) {
      out.push_back({"output/weight_opt1", {t, f}, w_s1_.data()});
      out.push_back({"output/bias_opt1", {t}, b_s1_.data()});
    }
    if (w_s2_.size()) {
      out.push_back({"output/weight_opt2", {t, f}, w_s2_.data()});
      out.push_back({"output/bias_opt2", {t}, b_s2_.data()});
    }
    tail_proj_.append_state(out, "output/tail_projection");
  }
  return out;
}

int64_t GroupSharedLayer::analytic_bytes_impl() const {
  const int64_t n = num_labels(), t = tail_labels(), f = fan_in_, d = input_dim(), bsz = max_batch_;
  const int64_t states = optimizer_state_arrays(optim_);
  int64_t bytes = 4 * (2 * n + 1);  // label order, positions, semantic flag
  if (head_block_) bytes += head_block_->analytic_bytes() + head_proj_.bytes();
  if (t > 0) {
    bytes += 4 * ((t * f + t) * (1 + states) + groups_ * f);
    bytes += 4 * (m_ * bsz + bsz * chunk_ + chunk_ * f + chunk_);
    bytes += tail_proj_.bytes();
  }
  if (dropout_ > 0.0) bytes += 4 * 2 * bsz * d;
  return bytes;
}

}  // namespace xmc
