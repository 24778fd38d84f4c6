#include "layers/anns_sampled.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <span>
#include <thread>

#include "core/error.h"
#include "core/resources.h"
#include "core/rng.h"
#include "ops/dense.h"
#include "ops/sampled.h"
#include "ops/topk.h"

namespace xmc {

namespace {

constexpr uint32_t kNone = ops::kNoCandidate;  // an empty slot of a hard set

// Positives a point is reserved for up front (a batch with more grows the workspaces).
constexpr int64_t kDrawPositives = 8;

// Entries per point reserved up front: k_h + k_r + a few positives (this process's share).
int64_t per_point_entries(const LayerShape& s, const AnnsSampledConfig& cfg) {
  return std::min(s.labels(), s.shard_share(cfg.hard_negatives) +
                                  s.shard_share(cfg.random_negatives) + kDrawPositives);
}

// The draw's slots a point is reserved: its positives, k_h hard and min(k_r, L) uniform
// negatives (ops::candidate_slots with a hard set).
int64_t reserved_slots(int64_t labels, int64_t k_h, int64_t k_r) {
  return kDrawPositives + k_h + std::min(k_r, labels);
}

// Bytes of the draw's arrays (AnnsSampledLayer::reserve_draw; each at least one element):
// ids, counts [rows] and row offsets [rows + 1] twice (int64), the positives (uint32), and
// per slot label twice (uint32), flag twice (uint8) and weight twice (float).
double draw_bytes(int64_t rows, int64_t cap, int64_t npos) {
  const auto at_least_one = [](int64_t n) { return static_cast<double>(std::max<int64_t>(n, 1)); };
  return 8.0 * (2.0 * at_least_one(rows) + 2.0 * at_least_one(rows + 1)) +
         4.0 * at_least_one(npos) + 18.0 * at_least_one(rows * cap);
}

}  // namespace

AnnsSampledLayer::AnnsSampledLayer(const LayerInit& init, const AnnsSampledConfig& cfg)
    : OutputLayer(init),
      d_(init.input_dim),
      n_train_(init.num_train),
      k_h_(init.shard_share(cfg.hard_negatives)),
      k_r_(init.shard_share(cfg.random_negatives)),
      chunk_(std::min(cfg.chunk_size, shard_labels())),
      cfg_(cfg),
      seed_(init.seed),
      draw_seed_(Rng::shard_seed(init.seed, init.label_lo)),
      ctx_(init.ctx) {
  XMC_CHECK(ctx_ != nullptr, "anns_sampled: no context");
  if (cfg_.loss == LossType::softmax)
    throw_input("anns_sampled: loss 'softmax' is not supported, expected bce or squared_hinge");
  if (n_train_ < 1)
    throw_input("anns_sampled needs the number of training points (got {})", n_train_);
  // Label-sharded (mpirun): this process's labels [lo, lo + n), local ids 0..n-1 in the
  // block, the candidate lists and the hard sets; its share of k_h and k_r.
  const int64_t n = shard_labels();
  auto& ledger = ctx_->ledger();
  // Per-step entries reserved up front: B points × (k_h + k_r + a few positives).
  const int64_t batch = std::max<int64_t>(init.batch_size, 1);
  block_ = SampledBlock(*ctx_, init.optim, label_lo(), n, d_, seed_, batch, chunk_,
                        batch * per_point_entries(shape(), cfg), /*drawn=*/true);
  set_device_views(ctx_->on_gpu());
  for (auto& h : hard_) {
    h = HostBuffer<uint32_t>(ledger, MemTag::indices, static_cast<size_t>(n_train_ * k_h_));
    std::fill(h.data(), h.data() + h.size(), kNone);
  }
  if (ctx_->on_gpu() && k_h_ > 0) {
    hard_dev_ = Buffer<uint32_t>(*ctx_, MemTag::indices, static_cast<size_t>(n_train_ * k_h_));
    upload_hard_set();
  }
  reserve_draw(batch, reserved_slots(n, k_h_, k_r_), batch * kDrawPositives);
}

void AnnsSampledLayer::reserve_draw(int64_t rows, int64_t cap, int64_t npos) {
  Context& ctx = *ctx_;
  DeviceDraw& w = draw_;
  constexpr MemTag ws = MemTag::workspace;
  for (Buffer<int64_t>* b : {&w.ids, &w.count}) ensure_size(*b, ctx, ws, rows);
  for (Buffer<int64_t>* b : {&w.pos_ptr, &w.ptr}) ensure_size(*b, ctx, ws, rows + 1);
  ensure_size(w.pos, ctx, ws, npos);
  for (Buffer<uint32_t>* b : {&w.label, &w.out_label}) ensure_size(*b, ctx, ws, rows * cap);
  for (Buffer<uint8_t>* b : {&w.positive, &w.out_positive}) ensure_size(*b, ctx, ws, rows * cap);
  for (Buffer<float>* b : {&w.weight, &w.out_weight}) ensure_size(*b, ctx, ws, rows * cap);
}

void AnnsSampledLayer::upload_hard_set() {
  if (hard_dev_.empty()) return;
  hard_dev_.copy_from_host(hard_[front_].data(), hard_[front_].size());
}

AnnsSampledLayer::~AnnsSampledLayer() {
  if (worker_.valid()) worker_.wait();
  log_eval_recall();
}

void AnnsSampledLayer::log_eval_recall() const {
  if (recall_total_ == 0 || recall_logged_) return;
  spdlog::info("anns_sampled: hnsw eval recall@{} against exact top-k: {:.4f} ({} sampled points)",
               recall_k_, eval_recall(), recall_points_);
  recall_logged_ = true;
}

std::span<const uint32_t> AnnsSampledLayer::hard_negatives(int64_t point) const {
  XMC_CHECK(point >= 0 && point < n_train_, "hard_negatives: point {} outside [0, {})", point,
            n_train_);
  return {hard_[front_].data() + point * k_h_, static_cast<size_t>(k_h_)};
}

ops::CandidateCsr AnnsSampledLayer::draw_step(const Batch& batch, int64_t step) {
  const int64_t rows = batch.size();
  // The positives among this layer's labels, in local ids.
  CsrMatrix scratch;
  const CsrMatrix& labels = local_labels(batch.labels, scratch);
  const bool use_hard = has_hard_negatives() && k_h_ > 0;
  for (int64_t id : batch.ids)
    XMC_CHECK(!use_hard || (id >= 0 && id < n_train_),
              "batch row id {} outside the {} training points", id, n_train_);
  const ops::CandidateDraw draw{.labels = shard_labels(),
                                .hard = !use_hard        ? nullptr
                                        : ctx_->on_gpu() ? hard_dev_.data()
                                                         : hard_[front_].data(),
                                .points = n_train_,
                                .k_h = k_h_,
                                .k_r = k_r_,
                                .seed = draw_seed_,
                                .step = step,
                                .hard_weight = static_cast<float>(cfg_.hard_weight),
                                .unbiased = cfg_.negative_weight == NegativeWeight::unbiased};
  int64_t max_pos = 0;
  for (int64_t i = 0; i < rows; ++i) max_pos = std::max(max_pos, labels.row_nnz(i));
  const int64_t cap = ops::candidate_slots(draw, max_pos);
  Context& ctx = *ctx_;
  DeviceDraw& w = draw_;
  const auto npos = static_cast<int64_t>(labels.indices.size());
  reserve_draw(rows, cap, npos);
  w.ids.copy_from_host(batch.ids.data(), static_cast<size_t>(rows));
  w.pos_ptr.copy_from_host(labels.indptr.data(), static_cast<size_t>(rows + 1));
  w.pos.copy_from_host(labels.indices.data(), static_cast<size_t>(npos));
  ops::draw_candidates(ctx, draw, w.ids.data(), w.pos_ptr.data(), w.pos.data(), rows, cap,
                       w.label.data(), w.positive.data(), w.weight.data(), w.count.data());
  const int64_t nnz = ops::compact_candidates(
      ctx, rows, cap, w.label.data(), w.positive.data(), w.weight.data(), w.count.data(), w.scratch,
      w.ptr.data(), w.out_label.data(), w.out_positive.data(), w.out_weight.data());
  return {w.ptr.data(), w.out_label.data(), rows, nnz};
}

SampledCandidates AnnsSampledLayer::sample_candidates(const Batch& batch, int64_t step) {
  const ops::CandidateCsr cand = draw_step(batch, step);
  const auto nnz = static_cast<size_t>(cand.nnz);
  SampledCandidates c;
  c.ptr.resize(static_cast<size_t>(cand.rows + 1));
  c.labels.resize(nnz);
  c.positive.resize(nnz);
  c.weight.resize(nnz);
  draw_.ptr.copy_to_host(c.ptr.data(), c.ptr.size());
  draw_.out_label.copy_to_host(c.labels.data(), nnz);
  draw_.out_positive.copy_to_host(c.positive.data(), nnz);
  draw_.out_weight.copy_to_host(c.weight.data(), nnz);
  return c;
}

StepStats AnnsSampledLayer::train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                                            const LrState& lr) {
  install_refresh(/*block=*/false);
  log_eval_recall();  // of the evaluation that ran since the last step
  XMC_CHECK(batch.size() == h.rows, "anns_sampled: a batch of {} rows for h of {}", batch.size(),
            h.rows);
  const ops::CandidateCsr cand = draw_step(batch, lr.step);
  // dh with the weights before the update, then the update of the touched rows.
  const SampledBlock::DrawnStepLoss r = block_.train_step_drawn(
      cand, draw_.out_positive.data(), draw_.out_weight.data(), cfg_.loss, h, dh, lr);
  ++version_;
  return {.loss = r.loss / static_cast<double>(h.rows), .zero_grads = r.zeros, .grads = cand.nnz};
}

void AnnsSampledLayer::scores_impl(ConstMatrix h, int64_t lo, Matrix out) const {
  block_.scores(h, lo, out);
}

namespace {
// [m | last] [rows×(cols+1)]: the HNSW space's vectors [w_l | b_l] (last = b) and queries
// [h_i | 1] (last = nullptr), so that a query's inner product includes the bias.
DenseMatrix with_last_column(ConstMatrix m, const float* last) {
  DenseMatrix v(m.rows, m.cols + 1);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m.rows; ++i) {
    std::copy(m.row(i), m.row(i) + m.cols, v.values.data() + i * (m.cols + 1));
    v.values[static_cast<size_t>(i * (m.cols + 1) + m.cols)] = last ? last[i] : 1.0f;
  }
  return v;
}
}  // namespace

DenseMatrix AnnsSampledLayer::augmented_weights() const {
  // Host W and b: the arrays themselves on the CPU, copies (L×d + L floats) on the GPU.
  DenseMatrix v = with_last_column(block_.host_weights(), block_.host_bias());
  block_.release_host();
  return v;
}

TopK AnnsSampledLayer::topk_impl(ConstMatrix h, int k) const {
  auto exact_topk = [this](ConstMatrix q, int kk) { return block_.topk(q, kk, eval_rows()); };
  if (cfg_.search == AnnsSearch::exact) return exact_topk(h, k);
  if (!eval_index_ || index_version_ != version_) {
    log_eval_recall();
    Stopwatch sw;
    eval_index_.reset();
    HnswParams p{cfg_.m, cfg_.ef_construction, cfg_.ef, cfg_.synchronous};
    eval_index_ = std::make_unique<HnswIndex>(augmented_weights().view(), p, seed_ ^ 0xe7a1ULL,
                                              &ctx_->ledger());
    index_version_ = version_;
    recall_hits_ = recall_total_ = recall_points_ = 0;
    recall_logged_ = false;
    spdlog::info("anns_sampled: eval index over {} labels built in {:.2f}s", shard_labels(),
                 sw.seconds());
  }
  // The index is on the host: a device layer downloads the query rows (rows×d floats).
  const HostView hv(*ctx_, h);
  const DenseMatrix q = with_last_column(hv.view(), nullptr);
  TopK out = TopK::padded(h.rows, k);
  eval_index_->search(q.view(), k, out.labels.data(), out.scores.data());
  for (uint32_t& l : out.labels)  // the index's local ids to global ones
    if (l != TopK::kNoLabel) l = static_cast<uint32_t>(l + label_lo());
  // Recall against exact top-k on the first recall_sample rows of this call.
  const int64_t sample = std::min(cfg_.recall_sample, h.rows);
  if (sample > 0) {
    TopK exact = exact_topk(h.rows_range(0, sample), k);
    recall_points_ += sample;
    recall_k_ = k;
    for (int64_t i = 0; i < sample; ++i) {
      const uint32_t* a = out.row_labels(i);
      for (int j = 0; j < k; ++j) {
        const uint32_t l = exact.row_labels(i)[j];
        if (l == TopK::kNoLabel) continue;
        recall_hits_ += std::count(a, a + k, l);
        ++recall_total_;
      }
    }
    spdlog::debug("anns_sampled: hnsw eval recall@{} so far {:.4f}", k, eval_recall());
  }
  return out;
}

double AnnsSampledLayer::eval_recall() const {
  if (recall_total_ == 0) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(recall_hits_) / static_cast<double>(recall_total_);
}

bool AnnsSampledLayer::refresh_due(int epochs_done, int epochs) const {
  if (k_h_ == 0) return false;
  if (epochs > 0 && epochs_done >= epochs) return false;  // no training follows
  if (epochs_done < cfg_.start_epoch) return false;
  return (epochs_done - cfg_.start_epoch) % cfg_.refresh_every == 0;
}

void AnnsSampledLayer::on_epoch_impl(const TrainerView& t) {
  if (!refresh_due(t.epoch + 1, t.epochs)) return;
  XMC_CHECK(static_cast<bool>(t.embed_train), "anns_sampled: refresh needs embed_train");
  start_refresh(t);
}

void AnnsSampledLayer::start_refresh(const TrainerView& t) {
  // One refresh at a time: a previous one still running is finished first.
  if (worker_.valid()) {
    spdlog::info("anns_sampled: waiting for the previous refresh before starting another");
    install_refresh(/*block=*/true);
  }
  Stopwatch sw;
  // The queries h_i, embedded on the training thread (the encoder changes while a worker
  // runs).
  DenseMatrix h = t.embed_train();
  XMC_CHECK(h.rows == n_train_ && h.cols == d_,
            "anns_sampled: embed_train gave [{}×{}], expected [{}×{}]", h.rows, h.cols, n_train_,
            d_);
  const double embed_s = sw.seconds();
  const uint64_t seed = seed_ ^ (0x5eedULL + static_cast<uint64_t>(started_));
  ++started_;
  const bool exact = cfg_.retrieval == AnnsSearch::exact;
  spdlog::info(
      "anns_sampled: refresh {} after epoch {}: embedded {} points in {:.2f}s ({})", started_,
      t.epoch + 1, n_train_, embed_s,
      exact ? "exact, on the training thread" : (cfg_.synchronous ? "synchronous" : "background"));
  if (exact) {
    // The streamed top-k of the block's own scores on the Context's device, with the
    // weights as they are now (no snapshot: nothing trains meanwhile).
    exact_hard_set(h.view());
    swap_in();
    return;
  }
  // Snapshots for the index (W changes while the worker runs): queries [h_i | 1]
  // [N×(d+1)], vectors [w_l | b_l] [L×(d+1)].
  auto queries = std::make_shared<DenseMatrix>(with_last_column(h.view(), nullptr));
  h = DenseMatrix();
  auto vectors = std::make_shared<DenseMatrix>(augmented_weights());
  // On a worker thread, or when synchronous on this one, inside install_refresh (which
  // rethrows an error of either).
  worker_ =
      std::async(cfg_.synchronous ? std::launch::deferred : std::launch::async,
                 [this, vectors, queries, seed] { compute_hard_set(*vectors, *queries, seed); });
  if (cfg_.synchronous) install_refresh(/*block=*/true);
}

void AnnsSampledLayer::compute_hard_set(const DenseMatrix& vectors, const DenseMatrix& queries,
                                        uint64_t seed) {
  HostBuffer<uint32_t>& back = hard_[1 - front_];
  std::fill(back.data(), back.data() + back.size(), kNone);
  Stopwatch sw;
  LedgerEntry snapshot(ctx_->ledger(), MemTag::workspace,
                       static_cast<int64_t>(vectors.bytes() + queries.bytes()));
  const int k = static_cast<int>(k_h_);
  // Two halves, so that a test pause in between exposes any early swap.
  const int64_t half = n_train_ / 2;
  HnswIndex index(vectors.view(), HnswParams{cfg_.m, cfg_.ef_construction, cfg_.ef, cfg_.synchronous}, seed,
                  &ctx_->ledger());
  const double build_s = sw.seconds();
  sw.reset();
  index.search(queries.view().rows_range(0, half), k, back.data(), nullptr);
  if (pause_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms_));
  index.search(queries.view().rows_range(half, n_train_ - half), k, back.data() + half * k_h_,
               nullptr);
  spdlog::info("anns_sampled: index over {} labels built in {:.2f}s ({:.1f} MiB), {} points "
               "retrieved (k_h={}) in {:.2f}s",
               vectors.rows, build_s, index.bytes() / 1048576.0, n_train_, k_h_, sw.seconds());
}

void AnnsSampledLayer::exact_hard_set(ConstMatrix queries) {
  // The block's exact top-k_h (h·W^T + b, label chunks of chunk_size streamed through the
  // top-k of ops/topk.h on the Context's device), eval_rows() queries at a time on the GPU
  // (uploaded into one workspace), 1024 on the CPU (the rows themselves; a [1024×chunk]
  // score block). Global ids to local ones; a row with fewer than k_h labels keeps kNone
  // pads.
  static_assert(TopK::kNoLabel == kNone);
  Stopwatch sw;
  HostBuffer<uint32_t>& back = hard_[1 - front_];
  const int k = static_cast<int>(k_h_);
  const int64_t block =
      std::max<int64_t>(1, std::min(ctx_->on_gpu() ? eval_rows() : 1024, queries.rows));
  Buffer<float> staged;
  if (ctx_->on_gpu())
    staged = Buffer<float>(*ctx_, MemTag::workspace, static_cast<size_t>(block * d_));
  for (int64_t r0 = 0; r0 < queries.rows; r0 += block) {
    const int64_t m = std::min(block, queries.rows - r0);
    ConstMatrix q = queries.rows_range(r0, m);
    if (ctx_->on_gpu()) {
      staged.copy_from_host(q.data, static_cast<size_t>(m * d_));
      q = ConstMatrix(staged.data(), m, d_);
    }
    const TopK t = block_.topk(q, k, m);
    uint32_t* out = back.data() + r0 * k_h_;
    for (size_t j = 0; j < t.labels.size(); ++j)
      out[j] = t.labels[j] == TopK::kNoLabel
                   ? kNone
                   : static_cast<uint32_t>(t.labels[j] - static_cast<uint32_t>(label_lo()));
  }
  spdlog::info("anns_sampled: exact top-{} of {} points over {} labels on the {} in {:.2f}s", k_h_,
               queries.rows, shard_labels(), ctx_->on_gpu() ? "GPU" : "CPU", sw.seconds());
}

void AnnsSampledLayer::install_refresh(bool block) {
  if (!worker_.valid()) return;  // nothing was started
  if (!block && worker_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
  worker_.get();  // the refresh's error, if any (the future is released either way)
  swap_in();
}

void AnnsSampledLayer::swap_in() {
  front_ = 1 - front_;
  meta_[0] = 1;
  ++meta_[1];
  upload_hard_set();
}

void AnnsSampledLayer::wait_for_refresh() { install_refresh(/*block=*/true); }

std::vector<TensorRef> AnnsSampledLayer::state_impl() {
  // The same names and shapes on both devices (a device layer's from its host copies).
  std::vector<TensorRef> out = block_.state();
  if (k_h_ > 0) out.push_back({"output/hard_negatives", {n_train_, k_h_}, hard_[front_].data()});
  out.push_back({"output/anns_meta", {2}, meta_});
  return out;
}

void AnnsSampledLayer::sync_state_impl(StateSync s) {
  block_.sync_state(s);
  // After a checkpoint was read: the next refresh seeds its index as the uninterrupted run
  // did (every installed refresh was started; one in flight at the save is not saved).
  if (s == StateSync::to_device) {
    started_ = meta_[1];
    upload_hard_set();  // the set read from the checkpoint
  }
}

int64_t AnnsSampledLayer::analytic_bytes_impl() const {
  return planned_bytes(shape(), cfg_).rounded();
}

StepWork AnnsSampledLayer::planned_step(const LayerShape& s, const AnnsSampledConfig& cfg) {
  const double entries = std::min(
      static_cast<double>(s.labels()),
      static_cast<double>(s.shard_share(cfg.hard_negatives) + s.shard_share(cfg.random_negatives)) +
          s.labels_per_point);
  // The draw, grouping and loss run on the Context's device: host work on a CPU only.
  return SampledBlock::planned_step(s.optim, s.labels(), s.input_dim,
                                    static_cast<double>(std::max<int64_t>(s.batch, 1)) * entries,
                                    /*host=*/!s.gpu);
}

LayerBytes AnnsSampledLayer::planned_bytes(const LayerShape& s, const AnnsSampledConfig& cfg) {
  const int64_t batch = std::max<int64_t>(s.batch, 1);
  LayerBytes bytes = SampledBlock::planned_bytes(s.gpu, s.optim, s.labels(), s.input_dim, batch,
                                                 batch * per_point_entries(s, cfg),
                                                 /*drawn=*/true);
  // The two hard-negative tables [N×k_h] (front and back, uint32), and on the GPU the
  // device copy of the front one.
  bytes.params += (s.gpu ? 12.0 : 8.0) * static_cast<double>(s.num_train) *
                  static_cast<double>(s.shard_share(cfg.hard_negatives));
  // The draw's arrays (reserve_draw at construction).
  bytes.workspace += draw_bytes(batch,
                                reserved_slots(s.labels(), s.shard_share(cfg.hard_negatives),
                                               s.shard_share(cfg.random_negatives)),
                                batch * kDrawPositives);
  return bytes;
}

}  // namespace xmc
