#include "layers/group_shared.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>

#include "core/error.h"
#include "core/gpu.h"
#include "core/resources.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "dist/comm.h"
#include "layers/weight_init.h"
#include "ops/dense.h"
#include "ops/encoder.h"
#include "ops/fixed_fanin.h"  // transpose
#include "ops/group_shared.h"
#include "ops/topk.h"

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

// Fisher–Yates shuffle of a[0, n), from the back: n - 1 draws of rng.
template <class T>
void fisher_yates(T* a, int64_t n, Rng rng) {
  for (int64_t i = n - 1; i > 0; --i) std::swap(a[i], a[rng.below(static_cast<uint64_t>(i) + 1)]);
}

// The tail's place: this process's tail labels, groups of G, the group-shared ops.
FaninLayout tail_layout(const GroupSharedSplit& split, int64_t group, DensePrecision precision) {
  return {.name = "group_shared",
          .labels = split.tail,
          .group = group,
          .group_ops = true,
          .first = split.group0 * group,
          .projection_stream = kGsProjStream + 1,
          .precision = precision};
}

GroupSharedSplit group_shared_split(int64_t num_labels, double head_fraction, int64_t group,
                                    int shard, int shards) {
  GroupSharedSplit s;
  s.head_total = head_label_count(num_labels, head_fraction, group);
  const int64_t groups_total = (num_labels - s.head_total + group - 1) / group;
  const LabelRange h = shard_labels(s.head_total, shard, shards, group);
  const LabelRange k = shard_labels(groups_total, shard, shards);
  s.head0 = h.lo;
  s.head = h.size();
  s.group0 = k.lo;
  s.groups = k.size();
  s.tail = std::min(num_labels - s.head_total, k.hi * group) - k.lo * group;
  if (shards > 1 && ((s.head_total > 0 && s.head_total / group < shards) || groups_total < shards))
    throw_input(
        "group_shared over {} processes: the head of {} labels ({} groups of G = {}) and "
        "the tail of {} groups cannot give every process a part of each; raise "
        "head_fraction (or 0 for no head), lower group_size, or run fewer processes",
        shards, s.head_total, s.head_total / group, group, groups_total);
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// GroupSharedLayer

GroupSharedLayer::GroupSharedLayer(const LayerInit& init, const GroupSharedConfig& cfg)
    : OutputLayer(init),
      ctx_(init.ctx),
      seed_(init.seed),
      group_(cfg.group_size),
      split_(group_shared_split(init.num_labels, cfg.head_fraction, cfg.group_size, init.shard,
                                init.shards)),
      head_(split_.head),
      groups_(split_.groups),
      grouping_(cfg.grouping),
      beta_(cfg.beta),
      kmeans_iters_(static_cast<int>(cfg.kmeans_iters)),
      cfg_(cfg) {
  // Label-sharded (mpirun): this process holds its part of the one-process arrangement
  // (split_: a slice of the head, whole groups of the tail), every array drawn as the
  // one-process layer draws those rows and groups; the projections and the dropout masks
  // the same on every process, the projections' gradients summed over them.
  const int64_t d = init.input_dim, n = split_.head + split_.tail, g = group_, f = cfg.fan_in;
  const int64_t t = split_.tail, bsz = init.batch_size;
  set_held_labels(n);
  XMC_CHECK(n > 0 && bsz > 0, "group_shared: L={} B={}", n, bsz);
  if (!init.label_freq.empty() && static_cast<int64_t>(init.label_freq.size()) != init.num_labels)
    throw_error("group_shared: {} label frequencies for {} labels", init.label_freq.size(),
                init.num_labels);
  Context& ctx = *init.ctx;
  MemoryLedger& ledger = ctx.ledger();

  // Label order over all L labels (every process the same): frequency (a missing frequency
  // list counts every label 0), then the tail arranged by the grouping; semantic starts
  // from the frequency order (see the header).
  const int64_t all = init.num_labels, h_all = split_.head_total;
  order_ = HostBuffer<uint32_t>(ledger, MemTag::indices, static_cast<size_t>(all));
  pos_ = HostBuffer<uint32_t>(ledger, MemTag::indices, static_cast<size_t>(all));
  grouped_ = HostBuffer<uint32_t>(ledger, MemTag::indices, 1);
  {
    std::vector<int64_t> freq = init.label_freq;
    freq.resize(static_cast<size_t>(all), 0);
    auto order = frequency_order(freq);
    if (grouping_ == GroupingType::random)
      fisher_yates(order.data() + h_all, all - h_all, Rng::stream(seed_, kGsShuffleStream));
    std::copy(order.begin(), order.end(), order_.data());
    const auto pos = inverse_order(order);
    std::copy(pos.begin(), pos.end(), pos_.data());
  }

  // Head: a dense block over positions [0, H) on its (projected) input.
  const DensePrecision precision = dense_precision(cfg.precision, cfg.stochastic_rounding);
  if (precision.bf16() && t > 0 && !ctx.on_gpu())
    throw_input(
        "model.output.precision: group_shared with precision bf16 on device cpu: the tail's "
        "bf16 kernels exist on device cuda only (use precision fp32 on the CPU)");
  if (precision.bf16() && t > 0 && f > 256)
    throw_input(
        "group_shared: fan_in {} with precision bf16: the bf16 kernels stage the whole "
        "[F×64] tile and take F <= 256 (use precision fp32)",
        f);
  if (ctx.on_gpu()) set_device_views(true);
  head_proj_ = Projection(ctx, d, head_ > 0 ? cfg.head_dim : 0, Projection::Kind::affine,
                          init.optim, bsz, Rng::stream(seed_, kGsProjStream));
  if (head_ > 0)
    head_block_.emplace(ctx, cfg.head_dim > 0 ? cfg.head_dim : d, split_.head0, head_, bsz,
                        cfg.chunk_size, cfg.loss, init.optim,
                        Rng::stream(seed_, kGsHeadStream).next(), precision);
  // Label-sharded: every process holds a head part and a tail part when the layer has
  // them (group_shared_split checks it), so each projection is on every process.
  if (Comm* c = init.shard_comm()) head_proj_.set_comm(c);

  // Tail: shared index sets, per-label weights and biases, optional ReLU projection; the
  // initial sets and weights drawn on the host (the moments start at zero).
  block_ = FaninBlock(init, cfg, tail_layout(split_, g, precision));
  if (t > 0) {
    draw_tail_indices(block_.indices().stage_for_write());
    block_.indices().commit();
    block_.init_weights(Rng::stream(seed_, kGsWeightStream).next());
  }

  const int64_t tf = t * f, m = block_.input_width();
  spdlog::info(
      "group_shared: L={}: dense head of {} labels{}, tail of {} labels in {} groups of G={} "
      "sharing F={} of {} inputs{} ({} grouping); tail weights {} ({:.1f}% of a dense "
      "{}×{} layer), index entries {} ({:.1f}% of fixed_fanin's)",
      n, head_,
      cfg.head_dim > 0 && head_ > 0 ? fmt::format(" on a {}→{} projection", d, cfg.head_dim)
                                    : std::string(),
      t, groups_, g, f, m,
      t > 0 && cfg.projection > 0 ? fmt::format(" after a {}→{} ReLU projection", d, m)
                                  : std::string(),
      to_string(cfg.grouping), tf,
      100.0 * static_cast<double>(tf) / static_cast<double>(std::max<int64_t>(1, t * d)), t, d,
      groups_ * f,
      100.0 * static_cast<double>(groups_ * f) / static_cast<double>(std::max<int64_t>(1, tf)));
}

void GroupSharedLayer::draw_tail_indices(uint32_t* idx) const {
  // One random index set per group, each from its own stream (thread-count independent).
  const int64_t f = block_.fan_in(), m = block_.input_width();
  const uint64_t idx_seed = Rng::stream(seed_, kGsIndexStream).next();
#pragma omp parallel
  {
    std::vector<char> mark(static_cast<size_t>(m), 0);
#pragma omp for schedule(static)
    for (int64_t k = 0; k < groups_; ++k) {
      Rng rng = Rng::stream(idx_seed, static_cast<uint64_t>(split_.group0 + k));
      gs_draw_set(rng, m, f, idx + k * f, mark);
    }
  }
}

void GroupSharedLayer::build_targets(const Batch& batch, int64_t rows) {
  // The batch's positives among this layer's labels at their positions in the whole
  // arrangement (sorted within a row, as the losses want).
  CsrMatrix& tg = block_.targets().fill();
  tg.rows = rows;
  tg.cols = num_labels();
  tg.indptr.assign(1, 0);
  tg.indices.clear();
  const int64_t h0 = split_.head0, h1 = h0 + head_, t0 = tail_position(0), t1 = t0 + tail_labels();
  for (int64_t i = 0; i < rows; ++i) {
    const size_t start = tg.indices.size();
    for (int64_t e = batch.labels.indptr[i]; e < batch.labels.indptr[i + 1]; ++e) {
      const uint32_t p = pos_[batch.labels.indices[static_cast<size_t>(e)]];
      if ((p >= h0 && p < h1) || (p >= t0 && p < t1)) tg.indices.push_back(p);
    }
    std::sort(tg.indices.begin() + static_cast<std::ptrdiff_t>(start), tg.indices.end());
    tg.indptr.push_back(static_cast<int64_t>(tg.indices.size()));
  }
}

StepStats GroupSharedLayer::train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                                            const LrState& lr) {
  const Context& ctx = *ctx_;
  const int64_t bsz = h.rows;
  StepStats stats;
  FaninTimings& tm = block_.timings();
  Stopwatch sw;  // each phase adds sw.lap() to its timing

  build_targets(batch, bsz);

  // x = dropout(h) [B×d]; the mask is drawn on the host from the same stream on both
  // devices (dropout_mask).
  const ConstMatrix x = block_.dropout(h, kGsDropoutStream, lr.step);
  tm.forward += sw.lap();

  // Head: overwrites dh with its part of dL/dx (or zeroes dh without a head).
  double loss = 0.0;
  const CsrMatrix& targets = block_.targets().host();
  if (head_block_) {
    const bool proj = head_proj_.active();
    const StepStats hs = proj ? head_block_->train_step(targets, head_proj_.forward(x),
                                                        head_proj_.grad_workspace(bsz), lr)
                              : head_block_->train_step(targets, x, dh, lr);
    if (proj) head_proj_.backward_update(x, dh, 0.0f, lr);
    loss += hs.loss * static_cast<double>(bsz);
    stats.zero_grads += hs.zero_grads;
    stats.grads += hs.grads;
  } else {
    ops::set_zero(ctx, dh);
  }
  tm.head += sw.lap();

  if (tail_labels() > 0) {
    // The tail adds its part of dL/dx to dh (through its projection, or directly); its
    // chunk losses are added to the head's.
    block_.targets().upload();
    const gpu::LossAccum acc = block_.train_step(x, dh, 1.0f, lr, tail_position(0), loss);
    loss = acc.loss;
    stats.zero_grads += static_cast<int64_t>(acc.zero_grads);
    stats.grads += bsz * tail_labels();
  }
  block_.dropout_grad(dh);
  tm.zero_grads += stats.zero_grads;
  tm.grads += stats.grads;
  stats.loss = loss / static_cast<double>(bsz);
  return stats;
}

GroupSharedLayer::EvalInputs GroupSharedLayer::eval_inputs(ConstMatrix h) const {
  EvalInputs in;
  in.head_in = head_proj_.apply_into(h, in.head_buf);
  if (tail_labels() > 0) in.tail = block_.eval_input(h);
  return in;
}

void GroupSharedLayer::internal_scores(const EvalInputs& in, int64_t lo, Matrix out) const {
  const int64_t hi = lo + out.cols;
  if (lo < head_) {
    const int64_t hn = std::min(hi, head_) - lo;
    head_block_->scores(in.head_in, split_.head0 + lo, Matrix(out.data, out.rows, hn, out.ld));
  }
  const int64_t s = std::max(lo, head_);
  if (s < hi) {
    const int64_t r0 = s - head_;
    XMC_CHECK(r0 % group_ == 0, "group_shared scores: tail position {} is not on a group boundary",
              r0);
    block_.forward(r0, in.tail, Matrix(out.data + (s - lo), out.rows, hi - s, out.ld));
  }
}

void GroupSharedLayer::scores_impl(ConstMatrix h, int64_t lo, Matrix out) const {
  // Internal scores of all labels, put in original label order on the host (tests and
  // small L only: 2·B·L floats moved on the GPU; top-k does not do this).
  XMC_CHECK(lo == 0 && out.cols == num_labels() && shard_labels() == num_labels(),
            "group_shared scores: labels [{}, {}) (all labels of a one-process layer only)", lo,
            lo + out.cols);
  const int64_t n = num_labels();
  std::vector<float> internal(static_cast<size_t>(h.rows * n)), orig(internal.size());
  const EvalInputs in = eval_inputs(h);
  Buffer<float> z(*ctx_, MemTag::workspace, internal.size());
  internal_scores(in, 0, Matrix(z.data(), h.rows, n));
  z.copy_to_host(internal.data(), internal.size());
  for (int64_t r = 0; r < h.rows; ++r)
    for (int64_t i = 0; i < n; ++i)
      orig[static_cast<size_t>(r * n + order_[static_cast<size_t>(i)])] =
          internal[static_cast<size_t>(r * n + i)];
  ops::copy_from_host(*ctx_, orig.data(), out);
}

void GroupSharedLayer::to_original_ids(TopK& top) const {
  TopKAccumulator acc(top.rows, top.k);
  for (size_t e = 0; e < top.labels.size(); ++e) {
    const uint32_t l = top.labels[e];
    acc.add(static_cast<int64_t>(e) / top.k, l == TopK::kNoLabel ? l : order_[position(l)],
            top.scores[e]);
  }
  top = acc.result();
}

TopK GroupSharedLayer::topk_impl(ConstMatrix h, int k) const {
  // Over internal positions in chunks (multiples of G, and H is one too, so every tail
  // chunk starts a group), ties to the lower position; then only the k kept entries per
  // row are mapped to original ids (equal scores rank by original id).
  const int64_t chunk = block_.chunk() > 0 ? block_.chunk() : shard_labels();
  std::optional<EvalInputs> in;
  TopK top = xmc::stream_topk(
      *ctx_, h.rows, k, eval_rows(), shard_labels(), chunk, 0,
      [&](int64_t r0, int64_t rows) { in.emplace(eval_inputs(h.rows_range(r0, rows))); },
      [&](int64_t lo, Matrix z) { internal_scores(*in, lo, z); });
  to_original_ids(top);
  return top;
}

void GroupSharedLayer::regroup_semantic(ConstMatrix x, const CsrMatrix& point_labels) {
  XMC_CHECK(
      point_labels.cols == num_labels() && x.rows == point_labels.rows && x.cols == input_dim(),
      "group_shared semantic grouping: x [{}×{}], labels [{}×{}], expected [N×{}], [N×{}]", x.rows,
      x.cols, point_labels.rows, point_labels.cols, input_dim(), num_labels());
  // Label-sharded: each process arranges its own tail labels (its segment of the order).
  const int64_t t = tail_labels(), t0 = tail_position(0), g = group_;
  grouped_[0] = 1;
  if (t == 0) return;
  Stopwatch sw;
  LedgerEntry scratch(ctx_->ledger(), MemTag::workspace, 4 * t * input_dim());
  const DenseMatrix c = label_centroids(
      x, point_labels, std::span<const uint32_t>(order_.data() + t0, static_cast<size_t>(t)));
  SemanticGroupingParams sp;
  sp.group = g;
  sp.beta = beta_;
  sp.kmeans_iters = kmeans_iters_;
  sp.seed = shard_seed(Rng::stream(seed_, kGsSemanticStream).next());
  const std::vector<int64_t> arr = semantic_arrangement(c.view(), sp);
  const double seconds = sw.seconds();
  // Cohesion against the frequency order (the arrangement before) and random groups.
  std::vector<int64_t> ident(static_cast<size_t>(t)), shuffled(static_cast<size_t>(t));
  std::iota(ident.begin(), ident.end(), int64_t{0});
  shuffled = ident;
  fisher_yates(shuffled.data(), t, Rng::stream(seed_, kGsSemanticStream + 1));
  const double coh = group_cohesion(c.view(), arr, g);
  const double coh_freq = group_cohesion(c.view(), ident, g);
  const double coh_rand = group_cohesion(c.view(), shuffled, g);

  // Move the tail labels (and their biases with their moments) to the new arrangement;
  // the weights start again from the initial draw for the new groups.
  std::vector<uint32_t> old(order_.data() + t0, order_.data() + t0 + t);
  for (int64_t i = 0; i < t; ++i) {
    const uint32_t l = old[static_cast<size_t>(arr[static_cast<size_t>(i)])];
    order_[static_cast<size_t>(t0 + i)] = l;
    pos_[l] = static_cast<uint32_t>(t0 + i);
  }
  // On host copies of the tail (once per run; on the GPU T·(1+s) floats down and T·(F+1+s)
  // up, s = optimizer state arrays; the weights' moments are zeroed in place).
  LabelParams& p = block_.params();
  for (Buffer<float>* bb : {&p.b, &p.b_s1, &p.b_s2}) {
    if (bb->empty()) continue;
    float* b = bb->stage();
    const std::vector<float> prev(b, b + t);
    for (int64_t i = 0; i < t; ++i) b[i] = prev[static_cast<size_t>(arr[static_cast<size_t>(i)])];
    bb->commit();
  }
  block_.init_weights(Rng::stream(seed_, kGsWeightStream).next());
  for (WeightArray* b : {&p.w_s1, &p.w_s2}) {
    if (b->empty()) continue;
    if (b->bf16()) {
      b->stage_for_write();  // zeros
      b->commit();
    } else {
      ops::set_zero(*ctx_, Matrix(b->f32(), t, block_.fan_in()));
    }
  }
  spdlog::info(
      "group_shared: semantic grouping of {} tail labels into {} groups in {:.2f}s; cohesion "
      "(mean cosine to the group centroid) {:.4f} vs {:.4f} frequency order, {:.4f} random",
      t, groups_, seconds, coh, coh_freq, coh_rand);
}

void GroupSharedLayer::on_step_impl(const TrainerView& t) {
  if (grouping_ == GroupingType::semantic && !semantic_done()) {
    XMC_CHECK(t.train != nullptr && static_cast<bool>(t.embed_train),
              "group_shared: semantic grouping needs the training data and embed_train");
    const DenseMatrix x = t.embed_train();
    regroup_semantic(x.view(), t.train->labels);
  }
  block_.rewire_when_due(t, "shared slots", [this](int64_t s) { return rewire(s); });
}

void GroupSharedLayer::on_epoch_impl(const TrainerView& t) {
  FaninTimings& tm = block_.timings();
  const double zero_pct =
      tm.grads > 0 ? 100.0 * static_cast<double>(tm.zero_grads) / static_cast<double>(tm.grads)
                   : 0.0;
  spdlog::info(
      "group_shared epoch {}: head {:.2f}s, tail forward {:.2f}s, loss {:.2f}s, backward "
      "{:.2f}s (input {:.2f}s, weight {:.2f}s), update {:.2f}s, projection backward {:.2f}s, "
      "rewiring {:.2f}s; zero output gradients {:.1f}%",
      t.epoch + 1, tm.head, tm.forward, tm.loss, tm.backward_input + tm.backward_weight,
      tm.backward_input, tm.backward_weight, tm.update, tm.intermediate_backward, tm.rewire,
      zero_pct);
  tm = {};
}

RewireStats GroupSharedLayer::rewire(int64_t step) {
  const int64_t t = tail_labels(), g = group_, f = block_.fan_in(), slots = groups_ * f;
  // On host copies of the indices, weights and moments (biases stay): on the GPU a round
  // trip of K·F·4 + T·F·(w + 4s) bytes each way (w = 4 fp32 | 2 bf16, s = state arrays).
  // Each group regrows its own slots, whose weights and moments restart at zero for every
  // label of the group.
  const uint64_t base =
      shard_seed(Rng::stream(seed_ ^ kGsRewireStream, static_cast<uint64_t>(step)).next());
  return block_.rewire(step, base, [&](int64_t k, const float* w) {
    // Slot score: mean |w| over the group's labels (the last group may be partial).
    std::vector<float> score(static_cast<size_t>(slots));
#pragma omp parallel for schedule(static)
    for (int64_t q = 0; q < groups_; ++q) {
      const int64_t r0 = q * g, gn = std::min(g, t - r0);
      for (int64_t j = 0; j < f; ++j) {
        float s = 0.0f;
        for (int64_t r = r0; r < r0 + gn; ++r) s += std::abs(w[r * f + j]);
        score[static_cast<size_t>(q * f + j)] = s / static_cast<float>(gn);
      }
    }
    // The k lowest scores (ties to the lower slot).
    return lowest_slots(score.data(), slots, k);
  });
}

std::vector<TensorRef> GroupSharedLayer::state_impl() {
  const int64_t n = num_labels();
  std::vector<TensorRef> out = {{"output/label_order", {n}, order_.data()},
                                {"output/label_position", {n}, pos_.data()},
                                {"output/semantic_done", {1}, grouped_.data()}};
  if (head_block_) {
    auto hs = head_block_->state("output/head/");
    out.insert(out.end(), hs.begin(), hs.end());
    head_proj_.append_state(out, "output/head/projection");
  }
  // The same names and shapes on both devices; on the GPU the host copies.
  block_.append_state(out, "output/tail_projection");
  return out;
}

// Biases live by this layer's position (head 0..H-1, tail H..), label order_ of the
// position in the whole arrangement; bias [L] by label id.
void GroupSharedLayer::init_bias_impl(std::vector<TensorRef>& refs, std::span<const float> bias) {
  const auto fill = [&](const std::string& name, int64_t first, int64_t count) {
    if (count == 0) return;
    auto r =
        std::find_if(refs.begin(), refs.end(), [&](const TensorRef& t) { return t.name == name; });
    XMC_CHECK(r != refs.end() && r->numel() == count, "init_bias: no {} of {} values", name, count);
    float* b = std::get<float*>(r->data);
    for (int64_t i = 0; i < count; ++i)
      b[i] = bias[order_[static_cast<size_t>(position(first + i))]];
  };
  fill("output/head/bias", 0, head_);
  fill("output/bias", head_, tail_labels());
}

void GroupSharedLayer::sync_state_impl(StateSync s) {
  if (head_block_) head_block_->sync_state(s);
  head_proj_.sync_state(s);
  block_.sync_state(s);
}

int64_t GroupSharedLayer::analytic_bytes_impl() const {
  return planned_bytes(shape(), cfg_).rounded();
}

StepWork GroupSharedLayer::planned_step(const LayerShape& s, const GroupSharedConfig& cfg) {
  const GroupSharedSplit split =
      group_shared_split(s.num_labels, cfg.head_fraction, cfg.group_size, s.shard, s.shards);
  const DensePrecision precision{.weights = cfg.precision};
  StepWork w;
  if (split.head > 0) {
    w += DenseBlock::planned_step(cfg.head_dim > 0 ? cfg.head_dim : s.input_dim, split.head,
                                  s.batch, cfg.loss, s.optim);
    w += Projection::planned_step(s.input_dim, cfg.head_dim, Projection::Kind::affine, s.optim,
                                  s.batch);
  }
  return w + FaninBlock::planned_step(s.input_dim, s.batch, s.optim, cfg,
                                      tail_layout(split, cfg.group_size, precision));
}

LayerBytes GroupSharedLayer::planned_bytes(const LayerShape& s, const GroupSharedConfig& cfg) {
  const GroupSharedSplit split =
      group_shared_split(s.num_labels, cfg.head_fraction, cfg.group_size, s.shard, s.shards);
  const DensePrecision precision{.weights = cfg.precision,
                                 .stochastic_rounding = cfg.stochastic_rounding};
  LayerBytes bytes;
  // label order, positions (host, over all labels), semantic flag
  bytes.params = 4.0 * (2.0 * static_cast<double>(s.num_labels) + 1.0);
  if (split.head > 0) {
    bytes +=
        DenseBlock::planned_bytes(s.gpu, cfg.head_dim > 0 ? cfg.head_dim : s.input_dim, split.head,
                                  s.batch, cfg.chunk_size, cfg.loss, s.optim, precision.weights);
    bytes += Projection::planned_bytes(s.input_dim, cfg.head_dim, Projection::Kind::affine, s.optim,
                                       s.batch);
  }
  // the tail, its projection, dropout
  return bytes + FaninBlock::planned_bytes(s.gpu, s.input_dim, s.batch, s.optim, cfg,
                                           tail_layout(split, cfg.group_size, precision));
}

}  // namespace xmc
