#pragma once
// OutputLayer: one class per backend. Public non-virtual methods check shapes (throwing
// with the actual values) and time; the backends implement the private virtual *_impl.
// A layer works on the label range [lo, hi) of a model with L labels in total (one range
// per process when sharded); labels are global ids.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/matrix.h"
#include "core/tensor_ref.h"
#include "data/batch.h"
#include "layers/layer_bytes.h"
#include "layers/layer_init.h"
#include "ops/topk.h"

namespace xmc {

struct StepStats {
  double loss = 0.0;        // summed over labels, averaged over the batch
  int64_t zero_grads = 0;   // output-gradient entries that were exactly zero
  int64_t grads = 0;        // output-gradient entries computed
  double seconds = 0.0;     // wall time of train_step
};

// Learning rate for this step (schedule applied) and the 1-based count of updates.
struct LrState {
  double lr = 0.0;
  int64_t step = 1;
};

struct Dataset;

// What a hook may look at: the trainer's progress, the training data, and a way to embed
// every training point with the current encoder (no dropout) — h [N×d], row i = point i.
struct TrainerView {
  int64_t step = 0;         // completed steps
  int64_t total_steps = 0;  // planned steps of the whole run
  int epoch = 0;            // 0-based current epoch
  int epochs = 0;
  const Dataset* train = nullptr;
  std::function<DenseMatrix()> embed_train;  // may be empty in unit tests
};

// Device views: a layer built on a CUDA Context (device_views() true) keeps its parameters
// on the GPU, and every matrix it is given or fills — h, dh, the scores' out — is a DEVICE
// view (pointers into GPU memory, on the Context's stream); batch labels and TopK stay on
// the host. On a CPU Context every view is a host view.
class OutputLayer {
 public:
  virtual ~OutputLayer() = default;
  OutputLayer(const OutputLayer&) = delete;
  OutputLayer& operator=(const OutputLayer&) = delete;

  // h [B×d] batch input; batch.labels are the positives (global ids).
  // Computes the loss, updates own parameters, writes dL/dh [B×d] into dh (overwrites).
  StepStats train_step(const Batch& batch, ConstMatrix h, Matrix dh, const LrState& lr);
  // Top-k labels (global ids) of each row of h [B×d], exact, streamed over label chunks.
  TopK topk(ConstMatrix h, int k) const;
  // Scores of every label in [lo, hi) for h [B×d] into out [B×(hi-lo)] (tests, small L),
  // in blocks of eval_rows() rows.
  void scores(ConstMatrix h, Matrix out) const;

  void on_step(const TrainerView& t) { on_step_impl(t); }
  void on_epoch(const TrainerView& t) { on_epoch_impl(t); }

  // Parameters and optimizer state, for checkpoints (names begin with "output/"). A
  // device-resident layer returns host copies: call sync_state(to_host) first.
  std::vector<TensorRef> state() { return state_impl(); }
  // No-op on the CPU. Save: sync_state(to_host), write state(), sync_state(release).
  // Load: sync_state(to_host), read into state(), sync_state(to_device).
  void sync_state(StateSync s) { sync_state_impl(s); }
  // Sets the output bias of every label the layer holds to bias[l] (bias [L] by label id:
  // initialisation, e.g. the label log-prior), on whichever device the layer lives: host
  // copies of state(), changed, then uploaded — the path a checkpoint load takes.
  void init_bias(std::span<const float> bias);
  // Sets the weight row of each label in `labels` (global ids; those the layer holds) to
  // row l of w [L×d], the way init_bias sets the bias: for the layers that score label l by
  // one fp32 weight row over their whole input ("output/weight" [labels held × d], no
  // fan-in indices: dense, lsh_sampled, anns_sampled, the backends with_weight_rows names).
  void init_weight_rows(ConstMatrix w, std::span<const int64_t> labels);
  // Whether backend `type` has such rows (fp32 weights: a bf16 dense layer's host copy is
  // fp32 too, rounded back on upload).
  static bool with_weight_rows(std::string_view type) {
    return type == "dense" || type == "lsh_sampled" || type == "anns_sampled";
  }
  bool device_views() const { return device_views_; }
  // Analytic size in bytes of the long-lived buffers: weights + optimizer state +
  // workspace (for the ledger cross-check): the backend's planned_bytes (layer_bytes.h) of
  // its config and shape(), the formula `xmctrain plan` predicts with.
  int64_t analytic_bytes() const { return analytic_bytes_impl(); }
  // What the layer was built for besides its config (d, L, the labels held, B, N, optimizer).
  const LayerShape& shape() const { return shape_; }

  int64_t input_dim() const { return input_dim_; }
  int64_t num_labels() const { return num_labels_; }
  int64_t label_lo() const { return lo_; }
  int64_t label_hi() const { return hi_; }
  // The labels this layer holds: hi − lo (all of num_labels() unless label-sharded), or
  // what a backend whose shard is not [lo, hi) says (set_held_labels).
  int64_t shard_labels() const { return held_ < 0 ? hi_ - lo_ : held_; }

 protected:
  // Over labels [lo, hi) (init's range by default) of init's d and L.
  explicit OutputLayer(const LayerInit& init) : OutputLayer(init, init.label_lo, init.label_end()) {}
  OutputLayer(const LayerInit& init, int64_t lo, int64_t hi);
  // Backends with a CUDA path call this when built on a CUDA Context.
  void set_device_views(bool on) { device_views_ = on; }
  // labels [B×L] restricted to this layer's [lo, hi) in local ids 0..hi-lo-1: labels itself
  // when the layer holds every label, else scratch, filled (CsrMatrix::column_range).
  const CsrMatrix& local_labels(const CsrMatrix& labels, CsrMatrix& scratch) const {
    if (lo_ == 0 && hi_ == num_labels_) return labels;
    scratch = labels.column_range(lo_, hi_);
    return scratch;
  }
  // A backend holding other labels than [lo, hi) (group_shared's part of its arrangement;
  // [lo, hi) is then the shard's place in the checkpoint index only).
  void set_held_labels(int64_t n) { held_ = n; }
  // Rows per evaluation block (scores, top-k): all on the CPU, the batch size on the GPU.
  int64_t eval_rows() const { return eval_rows_; }

 private:
  virtual StepStats train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                                    const LrState& lr) = 0;
  virtual void scores_impl(ConstMatrix h, int64_t lo, Matrix out) const = 0;
  virtual TopK topk_impl(ConstMatrix h, int k) const = 0;
  virtual void on_step_impl(const TrainerView&) {}
  virtual void on_epoch_impl(const TrainerView&) {}
  virtual std::vector<TensorRef> state_impl() = 0;
  virtual void sync_state_impl(StateSync) {}
  // Writes bias [L] (by label id) into the output-bias tensors among refs (state_impl()
  // after sync_state(to_host)). Default: the one ref named ".../bias" of shape {hi-lo}, in
  // label order; a backend that stores its labels in another order or in parts overrides it.
  virtual void init_bias_impl(std::vector<TensorRef>& refs, std::span<const float> bias);
  virtual int64_t analytic_bytes_impl() const = 0;

  int64_t input_dim_;
  int64_t num_labels_;
  int64_t lo_;
  int64_t hi_;
  int64_t eval_rows_;
  LayerShape shape_;
  bool device_views_ = false;
  int64_t held_ = -1;
};

}  // namespace xmc
