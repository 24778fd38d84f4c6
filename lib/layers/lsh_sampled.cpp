#include "layers/lsh_sampled.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <type_traits>

#include "core/error.h"
#include "core/resources.h"
#include "core/rng.h"
#include "dist/comm.h"
#include "ops/lsh.h"
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

// The slots of one point's padded row in the device draw when it has few positives (at most
// max_candidates): ops::lsh_candidate_slots (this process's share of the bounds).
int64_t draw_slots(const LayerShape& s, const LshSampledConfig& cfg) {
  return ops::lsh_candidate_slots(1, s.shard_share(cfg.max_candidates),
                                  s.shard_share(cfg.min_candidates), s.labels());
}

// The device draw's scratch (ops::LshDrawWork) per slice, for a batch whose largest row has
// max_np positives and max_q query vectors: the map of its labels (keys, vals, used: map
// entries), the labels its buckets list and their ranks (reach), its uniform padding
// (rest). Slices: a row each on the GPU, a thread each on the CPU.
struct DrawScratch {
  int64_t map = 0, reach = 0, rest = 0;
  static int64_t slices(bool gpu, int64_t rows, int threads) {
    return gpu ? rows : std::max(1, threads);
  }
  // Each array holds at least one entry (LshSampledLayer::reserve_scratch).
  double bytes(int64_t slices) const {
    const auto entries = [&](int64_t per) {
      return static_cast<double>(std::max<int64_t>(slices * per, 1));
    };
    return 4.0 * (3.0 * entries(map) + 2.0 * entries(reach) + entries(rest)) + 8.0 * entries(reach);
  }
};
DrawScratch draw_scratch(int64_t max_np, int64_t max_q, int64_t tables, int64_t capacity,
                         int64_t min_candidates, int64_t n) {
  DrawScratch s;
  s.reach = max_q * tables * capacity;
  const int64_t target = std::min(min_candidates, n);
  s.map = 256;
  while (s.map < 2 * (max_np + s.reach + target) + 2) s.map *= 2;
  s.rest = 2 * target > n ? n : 0;
  return s;
}
// The scratch reserved at construction (and planned): a row of one positive and one query
// vector (query none: no tables read); a batch with more grows it.
DrawScratch reserved_scratch(const LayerShape& s, const LshSampledConfig& cfg) {
  const bool reads = cfg.query != LshQuery::none;
  return draw_scratch(1, reads ? 1 : 0, reads ? cfg.tables : 0, cfg.bucket_capacity,
                      s.shard_share(cfg.min_candidates), s.labels());
}

// The GPU refresh's reserved arrays (RefreshWork): for `reinsert: updated`, chunks of
// `rows` updated labels (ids, their rows of W and their codes); for `reinsert: all`, the
// build's projections of `block` rows at a time; for FIFO tables, the writes' passes of at
// most `entries` writes (ops::lsh_table_writes: keys and values twice, then CUB's temporary
// storage, which planned_bytes does not count: it is known only on the GPU; the reservoir
// writes a table per thread, without them).
struct RefreshSizes {
  int64_t rows = 0, entries = 0, block = 0;
  static RefreshSizes of(int64_t n, const LshSampledConfig& cfg) {
    RefreshSizes r;
    const bool all = cfg.reinsert == LshReinsert::all;
    const int64_t chunk = std::clamp<int64_t>(n, 1, 16384);
    r.rows = all ? 0 : chunk;
    r.block = all ? std::clamp<int64_t>(n, 1, 4096) : 0;
    r.entries = cfg.insertion == BucketPolicy::fifo
                    ? std::clamp<int64_t>(2 * chunk * cfg.tables, 2, ops::kLshWriteEntries)
                    : 0;
    return r;
  }
  double bytes(int64_t d, const LshSampledConfig& cfg) const {
    const auto rr = static_cast<double>(rows), tables = static_cast<double>(cfg.tables);
    return 4.0 * rr * (1.0 + static_cast<double>(d) + tables) +
           16.0 * static_cast<double>(entries) +
           4.0 * static_cast<double>(block) * tables * static_cast<double>(cfg.k);
  }
};

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
  device_draw_ = comm_ == nullptr && !cfg.shared_candidates;
  block_ = SampledBlock(*init.ctx, init.optim, label_lo(), n, d, init.seed, batch,
                        std::min(cfg.chunk_size, n), batch * per_point_candidates(shape(), cfg),
                        device_draw_);
  set_device_views(init.ctx->on_gpu());
  dirty_ = Buffer<uint32_t>(*init.ctx, MemTag::index, static_cast<size_t>(n));
  if (device_draw_) {
    // The draw's padded rows and their packing, reserved for a batch of few positives
    // (grown by a step that needs more).
    Context& ctx = *init.ctx;
    const int64_t slots = batch * draw_slots(shape(), cfg);
    for (Buffer<uint32_t>* b : {&work_.label, &work_.out_label})
      ensure_size(*b, ctx, MemTag::workspace, slots);
    for (Buffer<uint8_t>* b : {&work_.positive, &work_.out_positive})
      ensure_size(*b, ctx, MemTag::workspace, slots);
    ensure_size(work_.count, ctx, MemTag::workspace, batch);
    ensure_size(work_.ptr, ctx, MemTag::workspace, batch + 1);
    const DrawScratch sz = reserved_scratch(shape(), cfg);
    reserve_scratch(DrawScratch::slices(ctx.on_gpu(), batch, ctx.threads()), sz.map, sz.reach,
                    sz.rest);
  }
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
    if (init.ctx->on_gpu() && device_draw_) {
      // The device copies: the hash functions' arrays once, the tables as built.
      Context& ctx = *init.ctx;
      const LshHasher::Arrays a = tables_->hasher().arrays();
      auto copy = [&](auto& buf, auto src) {  // the family's arrays; the others stay empty
        buf = std::remove_reference_t<decltype(buf)>(ctx, MemTag::index, src.size());
        buf.copy_from_host(src.data(), src.size());
      };
      copy(dev_.proj, a.proj);
      copy(dev_.sign, a.sp_sign);
      copy(dev_.ptr, a.sp_ptr);
      copy(dev_.idx, a.sp_idx);
      copy(dev_.bins, a.bin_idx);
      const auto state = tables_->state("");
      auto room = [&](auto& buf, int i) {
        buf = std::remove_reference_t<decltype(buf)>(
            ctx, MemTag::index, static_cast<size_t>(state[static_cast<size_t>(i)].numel()));
      };
      room(dev_.slots, 0);
      room(dev_.size, 1);
      room(dev_.seen, 2);
      room(dev_.where, 3);
      room(dev_.rng, 4);
      upload_tables();
      const RefreshSizes r = RefreshSizes::of(n, cfg);
      refresh_.ids = Buffer<uint32_t>(ctx, MemTag::workspace, static_cast<size_t>(r.rows));
      refresh_.codes =
          Buffer<uint32_t>(ctx, MemTag::workspace, static_cast<size_t>(r.rows * cfg.tables));
      refresh_.rows = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(r.rows * d));
      refresh_.projections =
          Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(r.block * cfg.tables * cfg.k));
      refresh_.writes =
          Buffer<uint8_t>(ctx, MemTag::workspace, ops::lsh_write_scratch_bytes(ctx, r.entries));
    }
  }
}

ops::LshHashView LshSampledLayer::hash_view() const {
  ops::LshHashView h = tables_->hasher().view();
  if (!ctx_->on_gpu()) return h;
  h.proj = dev_.proj.data();
  h.sp_ptr = dev_.ptr.data();
  h.sp_idx = dev_.idx.data();
  h.sp_sign = dev_.sign.data();
  h.bin_idx = dev_.bins.data();
  return h;
}

ops::LshTablesView LshSampledLayer::tables_view() const {
  if (!tables_) return {};
  ops::LshTablesView v = tables_->view();
  if (!ctx_->on_gpu()) return v;
  v.slots = dev_.slots.data();
  v.size = dev_.size.data();
  v.seen = dev_.seen.data();
  v.where = dev_.where.data();
  v.rng = dev_.rng.data();
  return v;
}

void LshSampledLayer::copy_tables(bool to_device) const {
  // The host tables' arrays (state order: buckets, sizes, counts, label buckets, generators)
  // and their device copies.
  const auto state = tables_->state("");
  Buffer<uint32_t>* dev32[] = {&dev_.slots, &dev_.size, &dev_.seen, &dev_.where};
  for (size_t i = 0; i < 4; ++i) {
    auto* host = std::get<uint32_t*>(state[i].data);
    const auto count = static_cast<size_t>(state[i].numel());
    if (to_device)
      dev32[i]->copy_from_host(host, count);
    else
      dev32[i]->copy_to_host(host, count);
  }
  auto* rng = std::get<int64_t*>(state[4].data);
  const auto count = static_cast<size_t>(state[4].numel());
  if (to_device)
    dev_.rng.copy_from_host(rng, count);
  else
    dev_.rng.copy_to_host(rng, count);
  host_stale_ = false;
}

void LshSampledLayer::download_tables() const {
  if (host_stale_) copy_tables(false);
}

void LshSampledLayer::upload_tables() { copy_tables(true); }

std::vector<uint32_t> LshSampledLayer::take_dirty() {
  uint32_t* flags = dirty_.stage();  // the buffer itself on the CPU, a copy on the GPU
  std::vector<uint32_t> labels;
  for (size_t l = 0; l < dirty_.size(); ++l)
    if (flags[l]) labels.push_back(static_cast<uint32_t>(l));
  std::fill(flags, flags + dirty_.size(), 0u);
  dirty_.commit();
  return labels;
}

void LshSampledLayer::mark_dirty(std::span<const uint32_t> ids) {
  if (ids.empty()) return;
  const uint32_t* at = ids.data();
  if (ctx_->on_gpu()) {
    ensure_size(work_.ids, *ctx_, MemTag::workspace, static_cast<int64_t>(ids.size()));
    work_.ids.copy_from_host(ids.data(), ids.size());
    at = work_.ids.data();
  }
  ops::lsh_mark(*ctx_, dirty_.data(), at, static_cast<int64_t>(ids.size()));
}

CsrMatrix LshSampledLayer::candidates(const Batch& batch, ConstMatrix h, int64_t step) {
  download_tables();  // the host sampler reads the host tables (GPU: refreshed on the device)
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

void LshSampledLayer::reserve_scratch(int64_t slices, int64_t map, int64_t reach, int64_t rest) {
  Context& ctx = *ctx_;
  DrawWork& w = work_;
  constexpr MemTag ws = MemTag::workspace;
  for (Buffer<uint32_t>* b : {&w.keys, &w.vals, &w.used}) ensure_size(*b, ctx, ws, slices * map);
  for (Buffer<uint32_t>* b : {&w.retrieved, &w.rank_label})
    ensure_size(*b, ctx, ws, std::max<int64_t>(slices * reach, 1));
  ensure_size(w.rank, ctx, ws, std::max<int64_t>(slices * reach, 1));
  ensure_size(w.rest, ctx, ws, std::max<int64_t>(slices * rest, 1));
}

ops::CandidateCsr LshSampledLayer::draw_step(const Batch& batch, const CsrMatrix& positives,
                                             ConstMatrix h, int64_t step) {
  Context& ctx = *ctx_;
  DrawWork& w = work_;
  constexpr MemTag ws = MemTag::workspace;
  const int64_t rows = h.rows, n = shard_labels(), d = input_dim();
  const CandidateParams& cp = sampler_->params();
  const LshQuery query = tables_ ? cp.query : LshQuery::none;
  const int nt = query == LshQuery::none ? 0 : tables_->tables();
  // Each row's query vectors (h's row, or the rows of W of its labels: in one process the
  // batch's global ids are the block's) and their codes.
  std::vector<int64_t> qptr(static_cast<size_t>(rows + 1), 0);
  if (query == LshQuery::embedding)
    for (int64_t i = 0; i < rows; ++i) qptr[static_cast<size_t>(i + 1)] = i + 1;
  if (query == LshQuery::label) qptr = batch.labels.indptr;
  const int64_t nq = qptr.back();
  ensure_size(w.qptr, ctx, ws, rows + 1);
  w.qptr.copy_from_host(qptr.data(), qptr.size());
  ensure_size(w.codes, ctx, ws, std::max<int64_t>(nq * nt, 1));
  if (query == LshQuery::embedding) {
    ops::lsh_hash_rows(ctx, hash_view(), h, w.codes.data(), nullptr, 0, false);
  } else if (query == LshQuery::label && nq > 0) {
    ensure_size(w.qids, ctx, ws, nq);
    w.qids.copy_from_host(batch.labels.indices.data(), static_cast<size_t>(nq));
    ensure_size(w.gathered, ctx, ws, nq * d);
    ops::gather_rows(ctx, block_.weights().data, w.qids.data(), nq, d, w.gathered.data());
    ops::lsh_hash_rows(ctx, hash_view(), ConstMatrix(w.gathered.data(), nq, d), w.codes.data(),
                       nullptr, 0, false);
  }
  // The positives (local ids) and the scratch of the largest row.
  const auto npos = static_cast<int64_t>(positives.indices.size());
  ensure_size(w.pos_ptr, ctx, ws, rows + 1);
  w.pos_ptr.copy_from_host(positives.indptr.data(), static_cast<size_t>(rows + 1));
  ensure_size(w.pos, ctx, ws, std::max<int64_t>(npos, 1));
  w.pos.copy_from_host(positives.indices.data(), static_cast<size_t>(npos));
  int64_t max_np = 0, max_q = 0;
  for (int64_t i = 0; i < rows; ++i) {
    max_np = std::max(max_np, positives.row_nnz(i));
    max_q = std::max(max_q, qptr[static_cast<size_t>(i + 1)] - qptr[static_cast<size_t>(i)]);
  }
  const ops::LshTablesView v = tables_view();
  const DrawScratch sz =
      draw_scratch(max_np, max_q, nt, tables_ ? v.capacity : 0, cp.min_candidates, n);
  const int64_t map = sz.map, reach = sz.reach, rest = sz.rest;
  const int64_t slices = DrawScratch::slices(ctx.on_gpu(), rows, omp_get_max_threads());
  reserve_scratch(slices, map, reach, rest);
  const ops::LshDrawWork work{.slices = slices,
                              .keys = w.keys.data(),
                              .vals = w.vals.data(),
                              .used = w.used.data(),
                              .map_size = map,
                              .retrieved = w.retrieved.data(),
                              .rank = w.rank.data(),
                              .rank_label = w.rank_label.data(),
                              .reach = reach,
                              .rest = w.rest.data(),
                              .rest_size = rest};
  // The padded rows, then packed (the host sampler's seeds: the same sets on both paths).
  const int64_t cap = ops::lsh_candidate_slots(max_np, cp.max_candidates, cp.min_candidates, n);
  for (Buffer<uint32_t>* b : {&w.label, &w.out_label}) ensure_size(*b, ctx, ws, rows * cap);
  for (Buffer<uint8_t>* b : {&w.positive, &w.out_positive}) ensure_size(*b, ctx, ws, rows * cap);
  ensure_size(w.count, ctx, ws, rows);
  ensure_size(w.ptr, ctx, ws, rows + 1);
  const uint64_t step_seed = mix64(cp.seed ^ mix64(static_cast<uint64_t>(step)));
  ops::lsh_draw_candidates(ctx, v, w.codes.data(), w.qptr.data(), w.pos_ptr.data(), w.pos.data(),
                           rows, cp.max_candidates, cp.min_candidates, n, step_seed, work, cap,
                           w.label.data(), w.positive.data(), w.count.data());
  const int64_t nnz = ops::compact_candidates(ctx, rows, cap, w.label.data(), w.positive.data(),
                                              nullptr, w.count.data(), w.scratch, w.ptr.data(),
                                              w.out_label.data(), w.out_positive.data(), nullptr);
  return {w.ptr.data(), w.out_label.data(), rows, nnz};
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
  if (device_draw_) {
    // Drawn on the Context's device; dh with the weights before the update, then the update
    // of the touched rows, which the next refresh re-inserts.
    const ops::CandidateCsr cand = draw_step(batch, positives, h, lr.step);
    const SampledBlock::DrawnStepLoss r =
        block_.train_step_drawn(cand, work_.out_positive.data(), nullptr, cfg_.loss, h, dh, lr);
    ops::lsh_mark(*ctx_, dirty_.data(), r.touched, r.touched_count);
    return {
        .loss = r.loss * (1.0 / static_cast<double>(nb)), .zero_grads = r.zeros, .grads = cand.nnz};
  }
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
  mark_dirty(block_.train_step(csr, h, dh, lr, loss_grad));
  return {
      .loss = loss_sum * (1.0 / static_cast<double>(nb)), .zero_grads = zeros, .grads = csr.nnz};
}

void LshSampledLayer::refresh_tables() {
  if (!tables_) return;
  const int64_t d = input_dim();
  const std::vector<uint32_t> labels = take_dirty();
  Context& ctx = *ctx_;
  if (ctx.on_gpu() && device_draw_) {
    // The device tables: every row hashed by GEMM, or the updated rows gathered and hashed
    // one by one (as the host re-inserts them) a chunk at a time, then the tables' writes
    // (in order: a chunk's after the one before).
    const ops::LshTablesView v = tables_view();
    const RefreshSizes r = RefreshSizes::of(shard_labels(), cfg_);
    if (cfg_.reinsert == LshReinsert::all) {
      ops::lsh_build(ctx, hash_view(), v, block_.weights(), refresh_.projections.data(), r.block,
                     refresh_.writes, r.entries);
    } else {
      for (size_t c0 = 0; c0 < labels.size(); c0 += static_cast<size_t>(r.rows)) {
        const int64_t m = std::min<int64_t>(r.rows, static_cast<int64_t>(labels.size() - c0));
        refresh_.ids.copy_from_host(labels.data() + c0, static_cast<size_t>(m));
        ops::gather_rows(ctx, block_.weights().data, refresh_.ids.data(), m, d,
                         refresh_.rows.data());
        ops::lsh_reinsert(ctx, hash_view(), v, refresh_.ids.data(),
                          ConstMatrix(refresh_.rows.data(), m, d), refresh_.codes.data(),
                          refresh_.writes, r.entries);
      }
    }
    host_stale_ = true;
    return;
  }
  if (cfg_.reinsert == LshReinsert::all) {
    // W on the host (a copy of L×d floats on the GPU), every rebuild interval.
    tables_->build(block_.host_weights());
    block_.release_host();
  } else {
    const std::vector<float> rows = block_.rows_to_host(labels);
    tables_->reinsert_rows(labels, ConstMatrix(rows.data(), static_cast<int64_t>(labels.size()), d));
  }
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
  // The tables are queried on the host: a device layer downloads h (rows×d floats), and the
  // device tables when they moved since the last download.
  if (ctx_->on_gpu() && device_draw_) download_tables();
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
  out.push_back({"output/lsh/dirty", {n}, dirty_.host_data()});
  out.push_back({"output/lsh/schedule", {2}, sched_.data()});
  if (tables_)
    for (auto& t : tables_->state("output/lsh/")) out.push_back(std::move(t));
  return out;
}

void LshSampledLayer::sync_state_impl(StateSync s) {
  block_.sync_state(s);
  dirty_.sync(s);
  if (!tables_ || !ctx_->on_gpu() || !device_draw_) return;
  // The host tables are the checkpoint's arrays: current before a save, uploaded after a
  // load.
  if (s == StateSync::to_host) download_tables();
  if (s == StateSync::to_device) upload_tables();
}

int64_t LshSampledLayer::analytic_bytes_impl() const {
  return planned_bytes(shape(), cfg_).rounded();
}

StepWork LshSampledLayer::planned_step(const LayerShape& s, const LshSampledConfig& cfg) {
  const double b = static_cast<double>(std::max<int64_t>(s.batch, 1));
  const double n = static_cast<double>(s.labels()), d = static_cast<double>(s.input_dim);
  // One process with a set per point draws on the Context's device: on a GPU no host work,
  // the draw's bytes counted (label-sharded runs and shared sets keep the host sampler).
  const bool drawn = s.shards == 1 && !cfg.shared_candidates;
  StepWork w = SampledBlock::planned_step(s.optim, s.labels(), s.input_dim,
                                          b * static_cast<double>(per_point_candidates(s, cfg)),
                                          /*host=*/!(s.gpu && drawn));
  if (!uses_tables(cfg)) return w;
  const double hash = 2.0 * static_cast<double>(cfg.tables * cfg.k) * d;  // per vector
  const double queries = cfg.query == LshQuery::label  ? b * s.labels_per_point
                         : cfg.query == LshQuery::none ? 0.0
                                                       : b;
  w.gemm_flops += hash * queries;
  // Each bucket entry the queries reach: its slot read, the map's key and count read and
  // written, a retrieved label's rank key and label written (32 bytes).
  if (drawn) w.bytes += 32.0 * queries * static_cast<double>(cfg.tables * cfg.bucket_capacity);
  if (cfg.rebuild_interval > 0) {
    const double per = 1.0 / static_cast<double>(cfg.rebuild_interval);
    w.gemm_flops += per * hash * n;
    w.bytes += per * 4.0 * n * (d + 2.0 * static_cast<double>(cfg.tables));
  }
  return w;
}

LayerBytes LshSampledLayer::planned_bytes(const LayerShape& s, const LshSampledConfig& cfg) {
  const int64_t n = s.labels(), batch = std::max<int64_t>(s.batch, 1);
  const bool drawn = s.shards == 1 && !cfg.shared_candidates;  // device_draw_
  LayerBytes bytes = SampledBlock::planned_bytes(s.gpu, s.optim, n, s.input_dim, batch,
                                                 batch * per_point_candidates(s, cfg), drawn);
  bytes.params += 4.0 * static_cast<double>(n) + 16.0;  // dirty flags, schedule
  // The device draw's padded rows and packing (label, flag twice each), counts, row offsets.
  if (drawn) {
    bytes.workspace += 10.0 * static_cast<double>(batch * draw_slots(s, cfg)) +
                       8.0 * static_cast<double>(2 * batch + 1);
    // The draw's scratch.
    bytes.workspace += reserved_scratch(s, cfg).bytes(DrawScratch::slices(s.gpu, batch, s.threads));
  }
  if (!uses_tables(cfg)) return bytes;
  const LshParams p = lsh_params(cfg, 0);
  const double tables = LshTables::planned_bytes(n, p);
  bytes.params += tables;
  if (s.gpu && drawn) {  // the device copies of the tables and of the hash functions' arrays
    bytes.params += tables + LshHasher::planned_bytes(s.input_dim, p);
    bytes.workspace += RefreshSizes::of(n, cfg).bytes(s.input_dim, cfg);  // the refresh's
  }
  return bytes;
}

}  // namespace xmc
