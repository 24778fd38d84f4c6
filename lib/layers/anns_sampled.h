#pragma once
// Backend `anns_sampled` (ASTRA): W [L×d] + bias trained on sampled candidates. Each step
// a point's candidates are its positives, its stale hard negatives (minus positives) and
// k_r uniform random labels (minus positives and the hard ones); the loss (bce or
// squared hinge) runs over those candidates only, and only the touched rows of W, b and
// their optimizer state are updated.
//
// Hard negatives: uniform negatives only for the first τs epochs; after epoch τs, τs+τr,
// τs+2τr, ... (1-based; not after the last epoch) every training point is embedded with
// the current encoder, an HNSW index (inner product) is built over [w_l | b_l] and the
// k_h best-scoring labels of [h_i | 1] are kept per point (uint32 [N×k_h]) until the next
// refresh. Build + retrieval run in a background thread into a second buffer while
// training continues on the old set; the new set is swapped in at the start of the first
// step after it is complete (double-buffered). With `synchronous: true` the refresh runs
// inside on_epoch. `retrieval: exact` replaces the index by the exact top-k_h of h·W^T + b:
// the block's streamed top-k (ops/topk.h) on the Context's device, on the training thread
// whatever `synchronous` says (a chunked GEMM: seconds at millions of labels on a GPU).
//
// Determinism: in background mode the step at which a new set arrives depends on timing,
// so runs (and --resume) are reproducible only with `synchronous: true` (which also builds
// the index from one thread, so the graph is the same every run). A checkpoint
// holds the set in use; a refresh still in flight when it is written is not saved.
//
// Label-sharded (mpirun, docs/distributed.md): each process holds its labels' rows and its
// share of k_h and k_r (LayerInit::shard_share), builds its own index over them (as ASTRA
// keeps one index per GPU shard) and draws a point's candidates among its labels; bce and
// squared hinge decompose over labels, so nothing else crosses between the processes.
//
// W, b and their optimizer state live in a SampledBlock (layers/sampled_block.h; device
// views on a CUDA Context, output_layer.h). One step on both devices, every op on the
// Context's device: the batch's ids and positives copied there (on a CUDA Context the
// step's only upload), the draw (ops::draw_candidates, from the hard set there: a device
// copy uploaded at each swap on the GPU), the packing into a CSR, then
// SampledBlock::train_step_drawn (the grouping by label, the loss, the updates; on the GPU
// three small read-backs a step: the entries, the touched labels, the loss). Each hnsw refresh (and
// each hnsw evaluation index build) reads [W | b] on the host (L×(d+1) floats downloaded on the
// GPU); an exact refresh scores on the device, its queries uploaded in blocks of eval rows.
// embed_train brings the embeddings down. `search: hnsw` stays on the host index (the query rows
// are downloaded on the GPU).
#include <cstdint>
#include <future>
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
#include "sampling/hnsw_index.h"

namespace xmc {

XMC_NAMED_ENUM(AnnsSearch, exact, hnsw);
XMC_NAMED_ENUM(NegativeWeight, none, unbiased);

struct AnnsSampledConfig {
  LossType loss = LossType::bce;
  int64_t hard_negatives = 32;    // k_h
  int64_t random_negatives = 64;  // k_r
  int64_t start_epoch = 1;        // τs
  int64_t refresh_every = 1;      // τr
  bool synchronous = false;
  int64_t m = 16;
  int64_t ef_construction = 200;
  int64_t ef = 64;
  AnnsSearch retrieval = AnnsSearch::hnsw;
  NegativeWeight negative_weight = NegativeWeight::none;
  double hard_weight = 0.03;
  AnnsSearch search = AnnsSearch::exact;
  int64_t recall_sample = 64;
  int64_t chunk_size = 8192;

  template <class V>
  void visit(V& v) {
    v.field("loss", loss, "Loss over the candidates (positives + sampled negatives)",
            Choices{LossType::bce, LossType::squared_hinge});
    v.field("hard_negatives", hard_negatives,
            "k_h: stale hard negatives retrieved per training point at each refresh (on "
            "WordNet, real data, 32 at hard_weight 0.1 beat random-only by 3.3 P@1 points; "
            "16 and 64 were within noise of 32 on the WordNet and GCIDE validation splits: "
            "docs/benchmarks.md, \"The other defaults on the validation splits\")",
            Range{0, 4096});
    v.field("random_negatives", random_negatives,
            "k_r: uniform random negatives drawn per point and step (32 and 128 within noise "
            "of 64 on the WordNet and GCIDE validation splits: docs/benchmarks.md, \"The "
            "other defaults on the validation splits\")",
            Range{0, 1 << 20});
    v.field("start_epoch", start_epoch,
            "τs: epochs trained with uniform negatives only before the first index refresh "
            "(2 within noise of 1 on the WordNet and GCIDE validation splits: "
            "docs/benchmarks.md, \"The other defaults on the validation splits\")",
            Range{1, 1 << 20});
    v.field("refresh_every", refresh_every,
            "τr: epochs between index refreshes (2 level with 1 on the tf-idf validation "
            "splits, 0.75 P@1 lower on WordNet's LSA input: docs/benchmarks.md, \"The other "
            "defaults on the validation splits\")",
            Range{1, 1 << 20});
    v.field("negative_weight", negative_weight,
            "Weight of each uniform negative: none (1) or unbiased ((labels left)/k_r, so the "
            "sampled loss estimates the dense loss; it collapses on real data: WordNet tf-idf "
            "P@1 34.7, GCIDE LSA 0.6 = popularity, docs/benchmarks.md)");
    v.field("hard_weight", hard_weight,
            "Loss weight of each stale hard negative (positives and uniform negatives weigh 1). "
            "0.03 was chosen on two real datasets, tf-idf and LSA inputs: its P@1 was the best "
            "of 1, 0.1, 0.03 and 0.01 on three (WordNet 70.7 / 49.2, GCIDE tf-idf 10.6) and "
            "0.01 points below it on GCIDE LSA (3.54 vs 3.55); weight 1 collapses at a refresh "
            "(WordNet LSA 43.5 -> 21.9), "
            "0.1 dips (34.9), 0.03 by 1.5. 0.1 keeps 0.9 more PSP@5 on WordNet tf-idf. The "
            "2k-label synthetic set wants 1 (configs/anns_sampled.yaml). docs/benchmarks.md, "
            "\"anns_sampled defaults on real data\"",
            Range{0, 1e6});
    v.field("retrieval", retrieval,
            "How a refresh finds each point's k_h best-scoring labels: hnsw (the index) or "
            "exact (the top-k_h of h·W^T + b over every label, N·L·d multiply-adds per "
            "refresh, streamed through the evaluation's top-k on the Context's device and run "
            "on the training thread whatever `synchronous` says; on the CPU faster than a "
            "one-thread index build while N is below ~1.4e5 points, whatever L: "
            "docs/benchmarks.md, \"anns_sampled's refresh by layer size\")",
            Choices{AnnsSearch::hnsw, AnnsSearch::exact});
    v.field("synchronous", synchronous,
            "Refresh inside on_epoch, index built single-threaded (deterministic, resumable); "
            "false: background thread, parallel build");
    v.field("m", m, "HNSW graph degree M", Range{2, 256});
    v.field("ef_construction", ef_construction, "HNSW candidate list size while building",
            Range{1, 1 << 16});
    v.field("ef", ef, "HNSW candidate list size while searching (retrieval and hnsw eval)",
            Range{1, 1 << 16});
    v.field("search", search, "Evaluation top-k: exact (streamed) or through the HNSW index");
    v.field("recall_sample", recall_sample,
            "search: hnsw — rows per top-k call also scored exactly to measure the index recall",
            Range{0, 1 << 20});
    v.field("chunk_size", chunk_size, "Labels per chunk of the exact top-k and scores",
            Range{1, int64_t{1} << 24});
  }
};

// Candidate sets of one batch (CSR over rows): positives first, then negatives.
struct SampledCandidates {
  std::vector<int64_t> ptr{0};     // [B+1]
  std::vector<uint32_t> labels;    // global ids
  std::vector<uint8_t> positive;   // 1 for a positive
  std::vector<float> weight;       // loss weight: 1 for positives, hard_weight for hard
                                   // negatives, 1 or (labels left)/k_r for uniform ones
};

class AnnsSampledLayer final : public OutputLayer {
 public:
  AnnsSampledLayer(const LayerInit& init, const AnnsSampledConfig& cfg);
  ~AnnsSampledLayer() override;

  // The candidates train_step uses for this batch at this step (deterministic in the
  // seed, the step and the dataset row; independent of the thread count), on the host.
  SampledCandidates sample_candidates(const Batch& batch, int64_t step);

  // The hard negatives in use for training point `point` [k_h] (UINT32_MAX = none).
  std::span<const uint32_t> hard_negatives(int64_t point) const;
  bool has_hard_negatives() const { return meta_[0] != 0; }
  int64_t refreshes_installed() const { return meta_[1]; }
  int64_t refreshes_started() const { return started_; }
  bool refresh_pending() const { return worker_.valid(); }
  // Blocks until a background refresh is complete and swaps it in.
  void wait_for_refresh();
  // search: hnsw — recall@k of the index against exact top-k over the sampled rows of
  // every top-k call since the index was last built (NaN before any).
  double eval_recall() const;
  // Tests: the worker pauses this long halfway through writing a new set, so a swap
  // before completion would expose a half-written set.
  void set_refresh_pause_for_testing(int milliseconds) { pause_ms_ = milliseconds; }
  // analytic_bytes() of a layer with this config and shape, before it is built
  // (layers/layer_bytes.h): the sampled block and the stale hard-negative tables (the HNSW
  // index of a refresh is not counted: it lives while a refresh runs).
  static LayerBytes planned_bytes(const LayerShape& shape, const AnnsSampledConfig& cfg);
  // One step: the sampled block over B × (k_h + k_r + the mean positives) entries. The
  // refreshes (index build and retrieval, every refresh_every epochs) are not included.
  static StepWork planned_step(const LayerShape& shape, const AnnsSampledConfig& cfg);

 private:
  StepStats train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                            const LrState& lr) override;
  void scores_impl(ConstMatrix h, int64_t lo, Matrix out) const override;
  TopK topk_impl(ConstMatrix h, int k) const override;
  void on_epoch_impl(const TrainerView& t) override;
  std::vector<TensorRef> state_impl() override;
  void sync_state_impl(StateSync s) override;
  int64_t analytic_bytes_impl() const override;

  // The step's candidates on the Context's device, in draw_ (a CSR over the batch rows):
  // the batch's ids and positives copied there (the only upload on a CUDA Context), then
  // ops::draw_candidates (from the hard set on that device) and ops::compact_candidates.
  ops::CandidateCsr draw_step(const Batch& batch, int64_t step);
  // draw_'s arrays for `rows` points of `cap` slots and `npos` positives in all (grown
  // only; the constructor reserves a batch of kDrawPositives positives a point).
  void reserve_draw(int64_t rows, int64_t cap, int64_t npos);
  // The device copy of the set in use (CUDA), after a swap or a checkpoint load.
  void upload_hard_set();
  bool refresh_due(int epochs_done, int epochs) const;
  // Logs the recall of the last hnsw evaluation once (info).
  void log_eval_recall() const;
  void start_refresh(const TrainerView& t);
  // Retrieval of k_h labels per point into the back buffer (runs on the worker thread).
  void compute_hard_set(const DenseMatrix& vectors, const DenseMatrix& queries,
                        uint64_t seed);
  // retrieval: exact — the k_h best-scoring labels of every row of queries (host [N×d])
  // into the back buffer: the block's streamed top-k on the Context's device.
  void exact_hard_set(ConstMatrix queries);
  // Waits for a finished (or, when block, any) background refresh, rethrows its error or
  // swaps its set in.
  void install_refresh(bool block);
  // The back buffer becomes the set in use.
  void swap_in();
  // [W | b] [L×(d+1)], the index's vectors.
  DenseMatrix augmented_weights() const;

  int64_t d_, n_train_, k_h_, k_r_, chunk_;
  AnnsSampledConfig cfg_;
  uint64_t seed_;
  uint64_t draw_seed_;  // uniform negatives: seed_, mixed with the first label of a shard
  Context* ctx_;
  // mutable: augmented_weights() reads W and b through host copies on the GPU.
  mutable SampledBlock block_;  // W, b and their optimizer state
  HostBuffer<uint32_t> hard_[2];     // [N×k_h] each: front (in use) and back (being written)
  Buffer<uint32_t> hard_dev_;        // CUDA: the device copy of the front set [N×k_h]
  // The step's candidate workspaces on the Context's device (draw_step), reserved at
  // construction and grown as batches need (ledger: workspace).
  struct DeviceDraw {
    Buffer<int64_t> ids, pos_ptr, count, ptr;  // [B], [B+1], [B], [B+1]
    Buffer<uint32_t> pos, label, out_label;    // [positives], [B×cap], [B×cap]
    Buffer<uint8_t> positive, out_positive, scratch;
    Buffer<float> weight, out_weight;
  };
  DeviceDraw draw_;
  int front_ = 0;
  int64_t meta_[2] = {0, 0};         // {hard set valid, refreshes installed}: checkpointed

  // Background refresh: the worker writes hard_[1 - front_]; only the training thread
  // swaps, after the worker's future is ready (get() rethrows the worker's error).
  std::future<void> worker_;
  int64_t started_ = 0;
  int pause_ms_ = 0;

  // search: hnsw — the index over the weights as of `index_version_`.
  int64_t version_ = 0;  // bumped by every train step
  mutable std::unique_ptr<HnswIndex> eval_index_;
  mutable int64_t index_version_ = -1;
  mutable int64_t recall_hits_ = 0, recall_total_ = 0, recall_points_ = 0;
  mutable int recall_k_ = 0;
  mutable bool recall_logged_ = false;
};

}  // namespace xmc
