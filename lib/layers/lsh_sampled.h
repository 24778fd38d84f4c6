#pragma once
// Backend `lsh_sampled` (LNS, SLIDE): W [L×d] + bias; each step scores and updates only
// each point's candidates = positives ∪ labels retrieved from LSH tables over the rows of
// W (hard negatives that adapt to the input and the parameters), padded with uniform
// random labels. The tables are refreshed every R steps (interval optionally growing by a
// factor after each refresh) by re-inserting the labels updated since the last refresh.
//
// CPU training: points of a batch in parallel (OpenMP) compute their candidate logits,
// loss gradient and dh; the per-candidate gradients are then grouped by label and each
// touched row of W is summed and updated by one thread — no races, deterministic for any
// thread count. The optimizer is lazy (as sparse Adam): only touched rows and their state
// move, with the global step for Adam's bias correction; weight decay applies to touched
// rows only.
// Evaluation: exact top-k over all labels (default), or `eval_search: lsh` — top-k over
// the labels retrieved by h, with its recall@k against exact logged.
//
// Label-sharded (mpirun, docs/distributed.md): each process holds its labels' rows, its
// own tables over them and its share of max_candidates / min_candidates /
// eval_candidates; a point's
// candidates there are its positives among those labels ∪ the labels its tables retrieve
// (label queries hash the vectors of all the point's positives, all-reduced) ∪ uniform
// padding. Softmax normalises over every process's candidates (pass-1 statistics merged).
//
// Both devices run this one path (W, b and their optimizer state in a SampledBlock,
// layers/sampled_block.h; device views on a CUDA Context, output_layer.h). In one process
// with a set per point (the default) the step is drawn on the Context's device: the query
// codes (ops::lsh_hash_rows of h, or of the positives' rows gathered from W), the draw
// (ops::lsh_draw_candidates over the tables' arrays) and its packing, then
// SampledBlock::train_step_drawn (grouping, loss, gradients, updates); a GPU keeps copies
// of the hash functions and the tables in device memory and refreshes them there
// (reinsert: the updated rows gathered and hashed on the device; all: every row hashed by
// GEMM), downloading them only for checkpoints and `eval_search: lsh`. Label-sharded runs
// and shared candidate sets keep the host sampler (CandidateSampler over the host tables:
// on the GPU h or the positives' vectors downloaded each step, the loss on the host).
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/field_constraints.h"
#include "core/memory_ledger.h"
#include "layers/layer_init.h"
#include "layers/output_layer.h"
#include "layers/sampled_block.h"
#include "ops/loss.h"
#include "ops/lsh.h"
#include "ops/optimizer.h"
#include "sampling/lsh.h"
#include "sampling/lsh_candidates.h"

namespace xmc {

XMC_NAMED_ENUM(LshProjection, dense, sparse);
XMC_NAMED_ENUM(LshReinsert, updated, all);
XMC_NAMED_ENUM(LshEvalSearch, exact, lsh);

struct LshSampledConfig {
  LossType loss = LossType::softmax;
  LshFamily hash = LshFamily::simhash;
  int64_t k = 6;
  int64_t tables = 32;
  int64_t bucket_capacity = 128;
  BucketPolicy insertion = BucketPolicy::fifo;
  LshProjection projection = LshProjection::dense;
  double projection_density = 1.0 / 3.0;
  int64_t dwta_bin = 8;
  LshQuery query = LshQuery::embedding;
  int64_t max_candidates = 1024;
  int64_t min_candidates = 256;
  bool shared_candidates = false;
  int64_t rebuild_interval = 50;
  double rebuild_growth = 1.0;
  LshReinsert reinsert = LshReinsert::updated;
  LshEvalSearch eval_search = LshEvalSearch::exact;
  int64_t eval_candidates = 4096;
  int64_t chunk_size = 8192;

  template <class V>
  void visit(V& v) {
    v.field("loss", loss, "Loss over each point's candidates",
            Choices{LossType::softmax, LossType::bce});
    v.field("hash", hash, "LSH family: signed random projections or densified winner-take-all");
    v.field("k", k, "Projections (simhash) or WTA codes (dwta) per table", Range{1, 24});
    v.field("tables", tables, "Number of hash tables", Range{1, 1024});
    v.field("bucket_capacity", bucket_capacity, "Labels kept per bucket", Range{1, 1 << 16});
    v.field("insertion", insertion, "What a full bucket does with a new label");
    v.field("projection", projection, "simhash projections: Gaussian, or sparse ±1");
    v.field("projection_density", projection_density,
            "Fraction of coordinates a sparse ±1 projection reads", Range{0.0, 1.0, true, false});
    v.field("dwta_bin", dwta_bin, "dwta: coordinates per WTA bin (⌈log2 bin⌉ bits per code)",
            Range{2, 256});
    v.field("query", query,
            "Table query: the embedding h, the true labels' weight vectors, or none (uniform "
            "random negatives only)");
    v.field("max_candidates", max_candidates,
            "Cap on positives ∪ retrieved labels per point (per batch when shared)",
            Range{1, 1 << 24});
    v.field("min_candidates", min_candidates,
            "Candidate sets are padded with uniform random labels up to this size",
            Range{0, 1 << 24});
    v.field("shared_candidates", shared_candidates, "One candidate set for the whole batch");
    v.field("rebuild_interval", rebuild_interval, "Steps between table refreshes (R)",
            Range{1, 1e12});
    v.field("rebuild_growth", rebuild_growth,
            "Each refresh multiplies the interval by this (1 = fixed; >1 = decaying schedule)",
            Range{1.0, 100.0});
    v.field("reinsert", reinsert,
            "Refresh re-inserts the labels updated since the last one, or rebuilds all");
    v.field("eval_search", eval_search,
            "Evaluation: exact scoring of all labels, or scoring of the labels retrieved by h");
    v.field("eval_candidates", eval_candidates, "eval_search lsh: labels scored per point",
            Range{1, 1 << 24});
    v.field("chunk_size", chunk_size, "Labels per chunk of exact scoring", Range{1, int64_t{1} << 24});
  }
};

class LshSampledLayer final : public OutputLayer {
 public:
  LshSampledLayer(const LayerInit& init, const LshSampledConfig& cfg);

  // The candidate sets train_step uses at `step` for this batch (tests, benchmarks), in
  // local label ids (label - label_lo()).
  CsrMatrix candidates(const Batch& batch, ConstMatrix h, int64_t step);
  // Refresh the tables now (what on_step does when the schedule says so).
  void refresh_tables();
  // Whether the step's candidates are drawn on the Context's device (one process, a set per
  // point) rather than by the host sampler.
  bool device_draw() const { return device_draw_; }
  const LshTables* tables() const { return tables_.get(); }
  // Recall@k of the last lsh-search evaluation against exact (-1 before any).
  double last_eval_recall() const { return last_recall_; }
  int64_t next_refresh_step() const { return sched_[0]; }
  // analytic_bytes() of a layer with this config and shape, before it is built
  // (layers/layer_bytes.h): the sampled block, dirty flags and schedule, the LSH tables.
  static LayerBytes planned_bytes(const LayerShape& shape, const LshSampledConfig& cfg);
  // One step: the sampled block over B × the reserved entries per point, hashing the
  // queries (tables × k projections of d, counted as simhash's also for dwta), and the
  // table rebuilds (every label hashed) spread over rebuild_interval steps.
  static StepWork planned_step(const LayerShape& shape, const LshSampledConfig& cfg);

 private:
  StepStats train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                            const LrState& lr) override;
  void scores_impl(ConstMatrix h, int64_t lo, Matrix out) const override;
  TopK topk_impl(ConstMatrix h, int k) const override;
  void on_step_impl(const TrainerView& t) override;
  std::vector<TensorRef> state_impl() override;
  void sync_state_impl(StateSync s) override;
  int64_t analytic_bytes_impl() const override;

  TopK lsh_topk(ConstMatrix h, int k) const;
  // The step's candidate sets (local ids); positives: the batch's among this layer's
  // labels, local ids (local_labels).
  CsrMatrix draw(const Batch& batch, const CsrMatrix& positives, ConstMatrix h, int64_t step);
  // The draw's scratch arrays (DrawWork: keys, vals, used; retrieved, rank, rank_label;
  // rest) for `slices` slices of map / reach / rest entries, grown only.
  void reserve_scratch(int64_t slices, int64_t map, int64_t reach, int64_t rest);
  // The same sets drawn on the Context's device and packed there (device_draw_): a CSR over
  // the batch in work_ (its positive flags in work_.out_positive).
  ops::CandidateCsr draw_step(const Batch& batch, const CsrMatrix& positives, ConstMatrix h,
                              int64_t step);
  // The hash functions and the tables as views on the Context's device (the host arrays on
  // the CPU, dev_'s copies on the GPU).
  ops::LshHashView hash_view() const;
  ops::LshTablesView tables_view() const;
  // GPU: the tables' device copies to the host tables (when stale) and back, through
  // copy_tables (to_device: host to device).
  void download_tables() const;
  void upload_tables();
  void copy_tables(bool to_device) const;
  // The labels updated since the last refresh, ascending; the flags cleared.
  std::vector<uint32_t> take_dirty();
  // Flags the labels ids (host) as updated.
  void mark_dirty(std::span<const uint32_t> ids);
  // Host rows [|ids|×d] of W for the global label ids (label-sharded: from every process).
  std::vector<float> label_vectors(std::span<const uint32_t> ids) const;

  Context* ctx_;
  Comm* comm_;  // the label shards' processes; nullptr in one process
  RowReductions shards_;  // their reductions (label-sharded softmax), set with comm_
  LshSampledConfig cfg_;
  int64_t eval_candidates_;  // eval_search lsh: this process's share of eval_candidates
  // mutable: evaluation scores the candidates through the block's staging workspace.
  mutable SampledBlock block_;  // W, b and their optimizer state
  std::unique_ptr<LshTables> tables_;  // null when query = none
  // mutable: evaluation through the tables uses the sampler's per-thread scratch.
  mutable std::unique_ptr<CandidateSampler> sampler_;
  Buffer<uint32_t> dirty_;         // [L] 1 = updated since the last refresh (Context's device)
  HostBuffer<int64_t> sched_;      // [2] next refresh step, refreshes so far
  mutable double last_recall_ = -1.0;
  bool device_draw_ = false;
  // GPU with device_draw_: copies of the hash functions' arrays and of the tables (ledger:
  // index); the host tables are then the checkpoints' and eval_search's staging. mutable:
  // the const readers (evaluation) refresh the staging from them.
  struct DeviceTables {
    Buffer<float> proj, sign;
    Buffer<int64_t> ptr, rng;
    Buffer<uint32_t> idx, bins, slots, size, seen, where;
  };
  mutable DeviceTables dev_;
  mutable bool host_stale_ = false;  // the device tables moved since the last download
  // The device draw's per-step arrays (grown as needed; ledger: workspace).
  struct DrawWork {
    Buffer<uint32_t> codes, qids, pos, label, out_label, keys, vals, used, retrieved, rank_label,
        rest, ids;
    Buffer<uint64_t> rank;
    Buffer<int64_t> qptr, pos_ptr, count, ptr;
    Buffer<uint8_t> positive, out_positive, scratch;
    Buffer<float> gathered;
  } work_;
  // GPU with device_draw_: the refresh's arrays, reserved at construction (ledger:
  // workspace): the updated labels a chunk at a time (ids, rows gathered from W, their
  // codes), the table writes' sort, a rebuild's projections.
  struct RefreshWork {
    Buffer<uint32_t> ids, codes;
    Buffer<float> rows, projections;
    Buffer<uint8_t> writes;
  } refresh_;
};

}  // namespace xmc
