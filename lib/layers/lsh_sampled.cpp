#include "layers/lsh_sampled.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <span>

#include "core/error.h"
#include "core/resources.h"
#include "core/rng.h"
#include "dist/comm.h"
#include "ops/sampled.h"

namespace xmc {

namespace {

// The entries of a step as a CSR over the batch: point i's candidates are row i. A shared
// candidate set (one row) is repeated for every point (each point scores it).
CsrMatrix per_point(CsrMatrix cand, int64_t nb, bool shared) {
  if (!shared) return cand;
  CsrMatrix out;
  out.rows = nb;
  out.cols = cand.cols;
  out.indices.reserve(static_cast<size_t>(nb) * cand.indices.size());
  for (int64_t i = 0; i < nb; ++i) {
    out.indices.insert(out.indices.end(), cand.indices.begin(), cand.indices.end());
    out.indptr.push_back(out.nnz());
  }
  return out;
}

// dL/dz / B of every entry in place of its score (ops/loss.h candidate_loss_grad, the
// entries flagged positive from each point's labels, in the candidates' ids); returns the
// loss summed over the points (not divided by B) and counts the zero gradients; shards:
// the label-sharded softmax's reductions (nullptr in one process).
double lsh_loss_grad(LossType loss, const CsrMatrix& labels, const ops::CandidateCsr& csr,
                     float* zg, int64_t& zeros, const RowReductions* shards) {
  std::vector<uint8_t> positive(static_cast<size_t>(csr.nnz));
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t i = 0; i < csr.rows; ++i) {
    std::vector<uint32_t> pos(labels.row_indices(i), labels.row_indices(i) + labels.row_nnz(i));
    std::sort(pos.begin(), pos.end());
    for (int64_t e = csr.indptr[i]; e < csr.indptr[i + 1]; ++e)
      positive[static_cast<size_t>(e)] = std::binary_search(pos.begin(), pos.end(), csr.labels[e]);
  }
  return candidate_loss_grad(loss, csr.indptr, csr.rows, positive.data(), nullptr, csr.rows, zg,
                             &zeros, shards);
}

bool uses_tables(const LshSampledConfig& cfg) {
  return cfg.query != LshQuery::none || cfg.eval_search == LshEvalSearch::lsh;
}

// Entries per point reserved up front: the cap, or the padding target (this process's share).
int64_t per_point_candidates(const LayerShape& s, const LshSampledConfig& cfg) {
  return std::min(s.labels(),
                  std::max(s.shard_share(cfg.max_candidates), s.shard_share(cfg.min_candidates)));
}

// The tables' parameters of a config (seed: the layer's).
LshParams lsh_params(const LshSampledConfig& cfg, uint64_t seed) {
  return {.family = cfg.hash,
          .k = static_cast<int>(cfg.k),
          .tables = static_cast<int>(cfg.tables),
          .capacity = static_cast<int>(cfg.bucket_capacity),
          .policy = cfg.insertion,
          .sparse_projection = cfg.projection == LshProjection::sparse,
          .density = cfg.projection_density,
          .bin = static_cast<int>(cfg.dwta_bin),
          .seed = seed ^ 0x15B7AB1E5ULL};
}

// The host memory the layer allocates, checked before any of it is: the weights and their
// optimizer state (on the GPU only the initial weights pass through the host) and the
// LSH tables, whose 2^bits buckets per table grow fastest (k: 24 asks for 2^24 buckets).
void check_memory_plan_lsh(const LayerInit& init, const LshSampledConfig& cfg, const LshParams& p,
                           bool on_gpu) {
  const int64_t labels = init.label_end() - init.label_lo;
  const double n = static_cast<double>(labels), d = static_cast<double>(init.input_dim);
  const double states = optimizer_state_arrays(init.optim);
  const double params = on_gpu ? 4.0 * n * d : 4.0 * (n * d + n) * (1.0 + states);
  const double tables = uses_tables(cfg) ? LshTables::planned_bytes(labels, p) : 0.0;
  const int64_t bits = LshHasher::bits_for(p);
  check_memory_plan(
      params + 4.0 * n + tables,
      fmt::format("model.output (lsh_sampled): {} for {} labels × d = {} ({}) and {} LSH "
                  "tables × 2^{} buckets × {} slots ({})",
                  on_gpu ? "the initial weights" : "the weights and optimizer state",
                  labels, init.input_dim, format_bytes(params), p.tables, bits, p.capacity,
                  format_bytes(tables)),
      "lower model.output.k (each table has 2^k buckets" +
          std::string(p.family == LshFamily::dwta ? ", 2^(k·⌈log2 dwta_bin⌉) for dwta" : "") +
          "), model.output.tables or model.output.bucket_capacity");
}

}  // namespace

LshSampledLayer::LshSampledLayer(const LayerInit& init, const LshSampledConfig& cfg)
    : OutputLayer(init),
      ctx_(init.ctx),
      comm_(init.shard_comm()),
      cfg_(cfg),
      eval_candidates_(init.shard_share(cfg.eval_candidates)) {
  XMC_CHECK(init.ctx != nullptr, "lsh_sampled needs a context");
  if (cfg_.loss == LossType::squared_hinge)
    throw_input("lsh_sampled supports loss softmax or bce, not '{}'", to_string(cfg.loss));
  // Label-sharded (mpirun): this process's labels [lo, lo + n) with their own tables, in
  // local ids 0..n-1 inside the block, the tables and the sampler; its share of the
  // per-point candidate budget (LayerInit::shard_share).
  const int64_t n = shard_labels(), d = init.input_dim;
  auto& ledger = init.ctx->ledger();
  const LshParams p = lsh_params(cfg, init.seed);
  check_memory_plan_lsh(init, cfg, p, init.ctx->on_gpu());
  // Per-step entries reserved up front: B points × (the cap, or the padding target).
  const int64_t batch = std::max<int64_t>(init.batch_size, 1);
  const int64_t max_cand = init.shard_share(cfg.max_candidates);
  const int64_t min_cand = init.shard_share(cfg.min_candidates);
  block_ = SampledBlock(*init.ctx, init.optim, label_lo(), n, d, init.seed, batch,
                        std::min(cfg.chunk_size, n), batch * per_point_candidates(shape(), cfg));
  set_device_views(init.ctx->on_gpu());
  dirty_ = HostBuffer<uint32_t>(ledger, MemTag::index, static_cast<size_t>(n));
  sched_ = HostBuffer<int64_t>(ledger, MemTag::index, 2);
  sched_[0] = cfg.rebuild_interval;

  // Each shard its own random draws (one process: lo = 0, the seed as before).
  const CandidateParams cp{.query = cfg.query,
                           .max_candidates = max_cand,
                           .min_candidates = min_cand,
                           .shared = cfg.shared_candidates,
                           .seed = Rng::shard_seed(init.seed ^ 0xC4D1DA7E5ULL, label_lo())};
  sampler_ = std::make_unique<CandidateSampler>(n, cp);
  // The sampled softmax's normaliser over every process's candidates.
  if (comm_ != nullptr) shards_ = row_reductions(*comm_);
  if (uses_tables(cfg)) {
    tables_ = std::make_unique<LshTables>(ledger, d, n, p);
    tables_->build(block_.host_weights());
    block_.release_host();
  }
}

CsrMatrix LshSampledLayer::candidates(const Batch& batch, ConstMatrix h, int64_t step) {
  CsrMatrix scratch;
  return draw(batch, local_labels(batch.labels, scratch), h, step);
}

CsrMatrix LshSampledLayer::draw(const Batch& batch, const CsrMatrix& positives, ConstMatrix h,
                                int64_t step) {
  const int64_t nb = h.rows, d = input_dim();
  const LshQuery query = sampler_->params().query;
  // Host inputs of the table queries: h for embedding queries, the current vectors of the
  // batch's positives for label queries (downloads on the GPU: B×d, |positives|×d floats).
  const HostView hq(*ctx_, query == LshQuery::embedding ? h : ConstMatrix(nullptr, nb, d));
  std::vector<uint32_t> pos_ids;  // global ids
  if (query == LshQuery::label) {
    pos_ids = batch.labels.indices;
    std::sort(pos_ids.begin(), pos_ids.end());
    pos_ids.erase(std::unique(pos_ids.begin(), pos_ids.end()), pos_ids.end());
  }
  const std::vector<float> w_pos = label_vectors(pos_ids);
  const LabelVectors wq{ConstMatrix(w_pos.data(), static_cast<int64_t>(pos_ids.size()), d),
                        pos_ids};
  // A shard keeps its own positives (local ids) and queries with all of the point's.
  return sampler_->sample(tables_.get(), hq.view(), wq, positives, static_cast<uint64_t>(step),
                          &batch.labels);
}

std::vector<float> LshSampledLayer::label_vectors(std::span<const uint32_t> ids) const {
  if (comm_ == nullptr) return block_.rows_to_host(ids);
  // Label-sharded: each process fills the rows it holds, the sum over the processes has
  // them all (|ids|×d floats all-reduced; every process lists the same ids).
  const int64_t d = input_dim();
  std::vector<uint32_t> mine;
  std::vector<size_t> at;
  for (size_t q = 0; q < ids.size(); ++q)
    if (ids[q] >= label_lo() && ids[q] < label_hi()) {
      mine.push_back(static_cast<uint32_t>(ids[q] - label_lo()));
      at.push_back(q);
    }
  const std::vector<float> rows = block_.rows_to_host(mine);
  std::vector<float> out(ids.size() * static_cast<size_t>(d), 0.0f);
  for (size_t j = 0; j < at.size(); ++j)
    std::copy_n(rows.data() + j * d, d, out.data() + at[j] * d);
  comm_->allreduce_sum(std::span<float>(out));
  return out;
}

StepStats LshSampledLayer::train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                                           const LrState& lr) {
  const int64_t nb = h.rows;
  CsrMatrix scratch;
  const CsrMatrix& positives = local_labels(batch.labels, scratch);
  const CsrMatrix entries =
      per_point(draw(batch, positives, h, lr.step), nb, cfg_.shared_candidates);
  const ops::CandidateCsr csr{entries.indptr.data(), entries.indices.data(), nb, entries.nnz()};
  double loss_sum = 0.0;
  int64_t zeros = 0;
  // The scores become dL/dlogit / B in place; dh with the weights before the update, then
  // the update of the touched rows.
  auto loss_grad = [&](std::span<float> zg) {
    loss_sum = lsh_loss_grad(cfg_.loss, positives, csr, zg.data(), zeros,
                             comm_ != nullptr ? &shards_ : nullptr);
  };
  for (uint32_t l : block_.train_step(csr, h, dh, lr, loss_grad)) dirty_[l] = 1;
  return {
      .loss = loss_sum * (1.0 / static_cast<double>(nb)), .zero_grads = zeros, .grads = csr.nnz};
}

void LshSampledLayer::refresh_tables() {
  if (!tables_) return;
  const int64_t n = shard_labels(), d = input_dim();
  if (cfg_.reinsert == LshReinsert::all) {
    // W on the host (a copy of L×d floats on the GPU), every rebuild interval.
    tables_->build(block_.host_weights());
    block_.release_host();
  } else {
    std::vector<uint32_t> labels;
    for (int64_t l = 0; l < n; ++l)
      if (dirty_[l]) labels.push_back(static_cast<uint32_t>(l));
    const std::vector<float> rows = block_.rows_to_host(labels);
    tables_->reinsert_rows(labels, ConstMatrix(rows.data(), static_cast<int64_t>(labels.size()), d));
  }
  std::fill(dirty_.data(), dirty_.data() + dirty_.size(), 0u);
}

void LshSampledLayer::on_step_impl(const TrainerView& t) {
  if (!tables_ || t.step < sched_[0]) return;
  refresh_tables();
  ++sched_[1];
  const double interval = static_cast<double>(cfg_.rebuild_interval) *
                          std::pow(cfg_.rebuild_growth, static_cast<double>(sched_[1]));
  sched_[0] = t.step + std::max<int64_t>(1, std::llround(std::min(interval, 1e15)));
}

void LshSampledLayer::scores_impl(ConstMatrix h, int64_t lo, Matrix out) const {
  block_.scores(h, lo, out);
}

TopK LshSampledLayer::topk_impl(ConstMatrix h, int k) const {
  if (cfg_.eval_search == LshEvalSearch::lsh) return lsh_topk(h, k);
  return block_.topk(h, k, eval_rows());
}

TopK LshSampledLayer::lsh_topk(ConstMatrix h, int k) const {
  // The tables are queried on the host: a device layer downloads h (rows×d floats).
  const HostView hv(*ctx_, h);
  const CsrMatrix r = sampler_->retrieve_rows(*tables_, hv.view(), eval_candidates_);
  // Scores of the retrieved labels: gathered dot products.
  const std::vector<float> z =
      block_.candidate_scores({r.indptr.data(), r.indices.data(), h.rows, r.nnz()}, h);
  TopKAccumulator acc(h.rows, k);
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t i = 0; i < h.rows; ++i)
    for (int64_t e = r.indptr[i]; e < r.indptr[i + 1]; ++e)
      acc.add(i, static_cast<uint32_t>(label_lo() + r.indices[e]), z[e]);
  TopK approx = acc.result();
  // Recall@k against exact scoring, reported so the approximation is never silent.
  const TopK exact = block_.topk(h, k, eval_rows());
  int64_t hit = 0, total = 0;
  for (int64_t i = 0; i < h.rows; ++i) {
    const uint32_t* e = exact.row_labels(i);
    const uint32_t* a = approx.row_labels(i);
    for (int q = 0; q < k; ++q) {
      if (e[q] == TopK::kNoLabel) continue;
      ++total;
      hit += std::find(a, a + k, e[q]) != a + k ? 1 : 0;
    }
  }
  last_recall_ = total ? static_cast<double>(hit) / static_cast<double>(total) : 0.0;
  spdlog::info("lsh_sampled eval_search=lsh: recall@{} against exact scoring {:.4f} ({} points)",
               k, last_recall_, h.rows);
  return approx;
}

std::vector<TensorRef> LshSampledLayer::state_impl() {
  const int64_t n = shard_labels();
  // The same names and shapes on both devices (a device layer's from its host copies).
  std::vector<TensorRef> out = block_.state();
  out.push_back({"output/lsh/dirty", {n}, dirty_.data()});
  out.push_back({"output/lsh/schedule", {2}, sched_.data()});
  if (tables_)
    for (auto& t : tables_->state("output/lsh/")) out.push_back(std::move(t));
  return out;
}

void LshSampledLayer::sync_state_impl(StateSync s) { block_.sync_state(s); }

int64_t LshSampledLayer::analytic_bytes_impl() const {
  return planned_bytes(shape(), cfg_).rounded();
}

StepWork LshSampledLayer::planned_step(const LayerShape& s, const LshSampledConfig& cfg) {
  const double b = static_cast<double>(std::max<int64_t>(s.batch, 1));
  const double n = static_cast<double>(s.labels()), d = static_cast<double>(s.input_dim);
  StepWork w = SampledBlock::planned_step(s.optim, s.labels(), s.input_dim,
                                          b * static_cast<double>(per_point_candidates(s, cfg)));
  if (!uses_tables(cfg)) return w;
  const double hash = 2.0 * static_cast<double>(cfg.tables * cfg.k) * d;  // per vector
  const double queries = cfg.query == LshQuery::label  ? b * s.labels_per_point
                         : cfg.query == LshQuery::none ? 0.0
                                                       : b;
  w.gemm_flops += hash * queries;
  if (cfg.rebuild_interval > 0) {
    const double per = 1.0 / static_cast<double>(cfg.rebuild_interval);
    w.gemm_flops += per * hash * n;
    w.bytes += per * 4.0 * n * (d + 2.0 * static_cast<double>(cfg.tables));
  }
  return w;
}

LayerBytes LshSampledLayer::planned_bytes(const LayerShape& s, const LshSampledConfig& cfg) {
  const int64_t n = s.labels(), batch = std::max<int64_t>(s.batch, 1);
  LayerBytes bytes = SampledBlock::planned_bytes(s.gpu, s.optim, n, s.input_dim, batch,
                                                 batch * per_point_candidates(s, cfg));
  bytes.params += 4.0 * static_cast<double>(n) + 16.0;  // dirty flags, schedule
  if (uses_tables(cfg)) bytes.params += LshTables::planned_bytes(n, lsh_params(cfg, 0));
  return bytes;
}

}  // namespace xmc
