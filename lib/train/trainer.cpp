#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>

#include "core/buffer.h"
#include "core/cuda_context.h"
#include "core/debug_hooks.h"
#include "core/error.h"
#include "core/memory_ledger.h"
#include "core/resources.h"
#include "data/batcher.h"
#include "model/schedule.h"
#include "train/evaluation.h"
#include "train/model.h"
#include "train/progress.h"
#include "train/run_data.h"
#include "train/run_files.h"
#include "train/signals.h"

namespace xmc {
namespace fs = std::filesystem;

std::string run_directory(const ExperimentConfig& cfg, const TrainOptions& opt) {
  if (!opt.out_dir.empty()) return opt.out_dir;
  if (!cfg.out.empty()) return cfg.out;
  return (fs::path("runs") / cfg.name).string();
}

namespace {

// Wall time of an epoch's steps by phase (metrics.jsonl `phase_seconds`). Host time: on a
// CUDA Context the phases time launches and whatever waits, not the kernels.
struct StepPhases {
  double data = 0.0;              // next batch gathered and staged into the encoder
  double encoder_forward = 0.0;   // h of the staged batch
  double output = 0.0;            // the output layer's train_step (forward, loss, update)
  double reduce = 0.0;            // label-sharded: dL/dh and statistics over the ranks
  double encoder_backward = 0.0;  // the encoder's backward pass and update
  double output_refresh = 0.0;    // on_step: rewiring, index / table rebuilds
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(StepPhases, data, encoder_forward, output, reduce,
                                   encoder_backward, output_refresh)

// The training of a run, from the model to results.json, in the order train_run calls
// its steps: restore (--resume), begin, run_epochs, write_results.
class TrainLoop {
 public:
  // run: the run directory, nullptr on the ranks other than 0 of a label-sharded run
  // (comm: its processes; nullptr for one process), which write no file.
  TrainLoop(const ExperimentConfig& cfg, const TrainOptions& opt, Context& ctx, const RunData& data,
            const fs::path& dir, RunDirectory* run, const Resume& resume, TrainSummary& summary,
            Comm* comm);

  // --resume: the model and schedule from the checkpoint, loaded (and its checksums
  // verified) before anything in the directory changes.
  void restore();
  // Training starts: from here the directory holds this run (`begun` is set to it).
  void begin(fs::path& begun);
  // The epochs; false when a signal or halt_after_epoch stopped the run (summary says so).
  bool run_epochs();
  // The final evaluation (unless the last epoch's is at hand) and results.json.
  void write_results(const Stopwatch& total_time);

 private:
  bool run_epoch(int64_t epoch);
  bool train_steps(int64_t epoch, Rng& dropout_rng, ResumePoint& at, const Stopwatch& epoch_time,
                   double& lr_factor);
  nlohmann::json epoch_line(int64_t epoch, const ResumePoint& at, double lr_factor) const;
  void evaluate_epoch(int64_t epoch, bool last, nlohmann::json& line);
  void checkpoint_epoch(int64_t epoch, bool last, const Rng& dropout_rng);
  bool stop_after_epoch(int64_t epoch, bool last);
  // SIGINT / SIGTERM seen (label-sharded: by any rank, agreed on in reduce_step, so that
  // every rank stops after the same step).
  int stop_signal() const { return comm_ != nullptr ? agreed_signal_ : stop_->signal(); }
  // Label-sharded: dL/dh and the step's loss statistics summed over the ranks.
  void reduce_step(Matrix dh, StepStats& s);
  DenseMatrix embed_train();
  void init_centroid_weights();
  TrainerView view(int64_t epoch) const;

  const ExperimentConfig& cfg_;
  const TrainOptions& opt_;
  Context& ctx_;
  const RunData& data_;
  RunDirectory* run_;
  Comm* comm_;
  int64_t shard_step_ = -1;  // label-sharded: the step of this rank's shard file on disk
  int agreed_signal_ = 0;    // label-sharded: a stop signal any rank has seen (reduce_step)
  const ResumePoint& from_;
  const std::vector<ConfigChange>& changes_;
  TrainSummary& summary_;
  const fs::path ckpt_file_, metrics_file_;
  const int64_t batch_size_, steps_per_epoch_, total_steps_;
  Model model_;
  LrSchedule schedule_;
  int64_t step_ = 0;
  double train_seconds_ = 0.0;
  double last_epoch_seconds_ = 0.0;
  StepPhases phases_;  // of the epoch's steps run by this process
  nlohmann::json last_metrics_;
  bool evaluated_ = false;  // the final model was evaluated (every rank of a sharded run)
  // dL/dh: host memory on the CPU, device memory on the GPU (the layers' device views).
  Buffer<float> dh_;
  std::optional<Batcher> batcher_;
  std::optional<StopSignals> stop_;
  std::function<DenseMatrix()> embed_ = [this] { return embed_train(); };
  // Two batches in flight: batch i+1 is gathered and staged (on the GPU: its host→device
  // copy starts on a side stream) while batch i trains.
  std::array<Batch, 2> batches_;
};

TrainLoop::TrainLoop(const ExperimentConfig& cfg, const TrainOptions& opt, Context& ctx,
                     const RunData& data, const fs::path& dir, RunDirectory* run,
                     const Resume& resume, TrainSummary& summary, Comm* comm)
    : cfg_(cfg),
      opt_(opt),
      ctx_(ctx),
      data_(data),
      run_(run),
      comm_(comm),
      from_(resume.from),
      changes_(resume.changes),
      summary_(summary),
      ckpt_file_(dir / run_file::checkpoint),
      metrics_file_(dir / run_file::metrics),
      batch_size_(cfg.train.batch_size),
      steps_per_epoch_((data.train.num_points() + batch_size_ - 1) / batch_size_),
      total_steps_(cfg.train.epochs * steps_per_epoch_),
      model_(ctx, cfg, data.meta, total_steps_, comm),
      schedule_(cfg.optim.schedule, total_steps_) {
  spdlog::info("model: encoder {}→{}, output '{}' over {} labels: {:.1f} MiB (analytic {:.1f} MiB)",
               data.meta.input_dim, model_.encoder().output_dim(), cfg.model.output.type,
               data.meta.num_labels, model_.output_ledger_bytes() / 1048576.0,
               model_.output().analytic_bytes() / 1048576.0);
}

void TrainLoop::restore() {
  const ShardIndex idx =
      read_shard_index(CheckpointReader(ckpt_file_.string()), model_.meta().num_labels);
  const int processes = comm_ != nullptr ? comm_->size() : 1;
  if (idx.processes != processes)
    throw_input("--resume: {} holds a run over {} process(es); resume it with {}",
                ckpt_file_.string(), idx.processes,
                idx.processes == 1 ? std::string("one process (no mpirun)")
                                   : fmt::format("mpirun -np {}", idx.processes));
  const int rank = comm_ != nullptr ? comm_->rank() : 0;
  if (processes > 1 && (idx.ranges[static_cast<size_t>(rank)].lo != model_.output().label_lo() ||
                        idx.ranges[static_cast<size_t>(rank)].hi != model_.output().label_hi()))
    throw_input("--resume: {} shards the labels differently from this run", ckpt_file_.string());
  shard_step_ = processes > 1 ? idx.step : -1;
  CheckpointReader r(shard_file(ckpt_file_, idx.step, rank).string());
  // The encoder from rank 0's file (the set's index: the same step), the rest from ours.
  std::optional<CheckpointReader> index;
  if (rank > 0) index.emplace(ckpt_file_.string());
  model_.load_state(r, index ? &*index : nullptr);
  step_ = from_.step;
  auto sch = r.read_f64("meta/schedule");
  if (sch.size() != 3) throw_input("{}: meta/schedule must have 3 entries", ckpt_file_.string());
  schedule_.restore(sch[0], sch[1], static_cast<int>(sch[2]));
  if (from_.epoch_step >= steps_per_epoch_)
    throw_input("{}: the checkpoint is at step {} of epoch {}, which has {} steps",
                ckpt_file_.string(), from_.epoch_step, from_.epoch + 1, steps_per_epoch_);
}

void TrainLoop::begin(fs::path& begun) {
  if (run_ == nullptr) return;
  run_->begin(opt_.config_yaml);
  begun = run_->path();
  if (!opt_.resume) return;
  for (const auto& rec : keep_metrics_lines(metrics_file_, from_.epoch)) {
    last_epoch_seconds_ = rec.value("epoch_seconds", 0.0);
    train_seconds_ += last_epoch_seconds_;
  }
  if (!changes_.empty()) {
    nlohmann::json rec;
    rec["after_epoch"] = from_.epoch;
    rec["after_step"] = from_.step;
    for (const auto& c : changes_)
      rec["config_change"][c.key] = {{"old", c.before}, {"new", c.after}};
    append_line(metrics_file_, rec.dump());
    spdlog::warn("resume with a changed config (recorded in metrics.jsonl): {}",
                 describe_changes(changes_));
  }
  spdlog::info("resumed from {} at epoch {}, step {}", ckpt_file_.string(),
               from_.epoch + (from_.epoch_step > 0 ? 1 : 0), step_);
}

void TrainLoop::reduce_step(Matrix dh, StepStats& s) {
  XMC_CHECK(dh.ld == dh.cols, "reduce_step: dh must be contiguous");
  comm_->allreduce_sum_in(ctx_, std::span<float>(dh.data, static_cast<size_t>(dh.rows * dh.cols)));
  double stats[3] = {s.loss, static_cast<double>(s.zero_grads), static_cast<double>(s.grads)};
  comm_->allreduce_sum(std::span<double>(stats, 3));
  s.loss = stats[0];
  s.zero_grads = static_cast<int64_t>(stats[1]);
  s.grads = static_cast<int64_t>(stats[2]);
  float sig = static_cast<float>(stop_->signal());
  comm_->allreduce_max(std::span<float>(&sig, 1));
  agreed_signal_ = static_cast<int>(sig);
}

// model.weight_init: centroid — each label's weight row along the mean of its training
// points' encoder outputs, norm centroid_scale / (the points' mean norm); labels without
// points keep their random rows. One pass in order, batch by batch (no [N×d] copy).
void TrainLoop::init_centroid_weights() {
  const Dataset& train = data_.train;
  const int64_t d = model_.encoder().output_dim(), labels = model_.meta().num_labels;
  Stopwatch sw;
  // The sums, then the rows, in one [L×d] host array held until the rows are copied in.
  std::vector<float> w(static_cast<size_t>(labels * d), 0.0f);
  std::vector<int64_t> seen(static_cast<size_t>(labels), 0);
  std::vector<float> h(static_cast<size_t>(cfg_.eval.batch_size * d));
  double norms = 0.0;
  Batcher in_order(train, cfg_.eval.batch_size, 0, /*shuffle=*/false);
  in_order.start_epoch(0);
  Batch b;
  while (in_order.next(b)) {
    model_.embed(b, Matrix(h.data(), b.size(), d));
    for (int64_t i = 0; i < b.size(); ++i) {
      const float* hi = h.data() + i * d;
      double sq = 0.0;
      for (int64_t j = 0; j < d; ++j) sq += static_cast<double>(hi[j]) * hi[j];
      norms += std::sqrt(sq);
      for (int64_t p = b.labels.indptr[i]; p < b.labels.indptr[i + 1]; ++p) {
        const int64_t l = b.labels.indices[p];
        float* s = w.data() + l * d;
        for (int64_t j = 0; j < d; ++j) s[j] += hi[j];
        ++seen[static_cast<size_t>(l)];
      }
    }
  }
  const double mean_norm = norms / static_cast<double>(std::max<int64_t>(1, train.num_points()));
  std::vector<int64_t> rows;
  for (int64_t l = 0; l < labels; ++l) {
    float* s = w.data() + l * d;
    double sq = 0.0;
    for (int64_t j = 0; j < d; ++j) sq += static_cast<double>(s[j]) * s[j];
    if (seen[static_cast<size_t>(l)] == 0 || sq == 0.0 || mean_norm == 0.0) continue;
    const auto f = static_cast<float>(cfg_.model.centroid_scale / (std::sqrt(sq) * mean_norm));
    for (int64_t j = 0; j < d; ++j) s[j] *= f;
    rows.push_back(l);
  }
  model_.output().init_weight_rows(ConstMatrix(w.data(), labels, d), rows);
  spdlog::info(
      "weight_init centroid: {} of {} labels from their training points' mean (scale "
      "{}, mean norm {:.4g}), {:.2f} s",
      rows.size(), labels, cfg_.model.centroid_scale, mean_norm, sw.lap());
}

// Embeds every training point with the current encoder (ANNS refresh).
DenseMatrix TrainLoop::embed_train() {
  const Dataset& train = data_.train;
  const int64_t d = model_.encoder().output_dim();
  DenseMatrix out(train.num_points(), d);
  Batcher in_order(train, cfg_.eval.batch_size, 0, /*shuffle=*/false);
  in_order.start_epoch(0);
  Batch b;
  for (int64_t r0 = 0; in_order.next(b); r0 += b.size())
    model_.embed(b, Matrix(out.values.data() + r0 * d, b.size(), d));
  return out;
}

TrainerView TrainLoop::view(int64_t epoch) const {
  return {step_,        total_steps_, static_cast<int>(epoch), static_cast<int>(cfg_.train.epochs),
          &data_.train, embed_};
}

bool TrainLoop::run_epochs() {
  const auto n = static_cast<size_t>(batch_size_ * model_.encoder().output_dim());
  dh_ = Buffer<float>(ctx_, MemTag::activations, n);
  if (ctx_.on_gpu()) spdlog::info("device: cuda, {}", ctx_.cuda().info().name);
  if (!opt_.resume && cfg_.model.weight_init == "centroid") init_centroid_weights();
  batcher_.emplace(data_.train, batch_size_, cfg_.seed, cfg_.train.shuffle);
  stop_.emplace();
  for (int64_t epoch = from_.epoch; epoch < cfg_.train.epochs; ++epoch)
    if (!run_epoch(epoch)) return false;
  return true;
}

// One epoch: its steps, the epoch hook, the metrics line (with an evaluation when due),
// the checkpoint when due. False when the run stops (a signal or halt_after_epoch).
bool TrainLoop::run_epoch(int64_t epoch) {
  const bool last = epoch + 1 == cfg_.train.epochs;
  batcher_->start_epoch(epoch);
  Rng dropout_rng = Rng::stream(cfg_.seed ^ 0xd50d50ULL, static_cast<uint64_t>(epoch));
  // This epoch's running sums; a checkpoint taken mid-epoch carries them.
  ResumePoint at{.epoch = epoch};
  if (epoch == from_.epoch && from_.epoch_step > 0) {
    // Resumed mid-epoch: the batches and the dropout stream continue where they stopped.
    batcher_->skip(from_.epoch_step);
    dropout_rng.set_state(from_.rng);
    at = from_;
  }
  Stopwatch epoch_time;
  double lr_factor = 1.0;
  if (!train_steps(epoch, dropout_rng, at, epoch_time, lr_factor)) return false;
  model_.output().on_epoch(view(epoch));
  last_epoch_seconds_ = at.seconds + epoch_time.seconds();
  train_seconds_ += last_epoch_seconds_;
  nlohmann::json line = epoch_line(epoch, at, lr_factor);
  evaluate_epoch(epoch, last, line);
  line["memory"] = ctx_.ledger().report();
  line["peak_rss_bytes"] = peak_rss_bytes();
  // The metrics line first, then the checkpoint: a kill between the two makes the resumed
  // run drop the line (it is past the checkpoint) and train that epoch again, so every
  // epoch is logged exactly once.
  if (run_ != nullptr) append_line(metrics_file_, line.dump());
  debug_kill_point("after_metrics", epoch + 1);
  checkpoint_epoch(epoch, last, dropout_rng);
  debug_kill_point("after_checkpoint", epoch + 1);
  return !stop_after_epoch(epoch, last);
}

// The steps of one epoch, from `at` on; false when a signal stopped it mid-epoch (the
// checkpoint then resumes at the next batch of this epoch).
bool TrainLoop::train_steps(int64_t epoch, Rng& dropout_rng, ResumePoint& at,
                            const Stopwatch& epoch_time, double& lr_factor) {
  Progress progress(fmt::format("epoch {}/{}", epoch + 1, cfg_.train.epochs), steps_per_epoch_,
                    batch_size_, cfg_.train.log_every_s);
  const int64_t d = model_.encoder().output_dim();
  int cur = 0;
  phases_ = {};
  Stopwatch lap;  // each phase adds lap.lap(), the time since the previous one
  at.rng = dropout_rng.state();
  bool have = batcher_->next(batches_[0]);
  if (have) model_.encoder().stage(batches_[0], /*training=*/true, dropout_rng);
  phases_.data += lap.lap();
  while (have) {
    const Batch& batch = batches_[static_cast<size_t>(cur)];
    lr_factor = schedule_.factor(step_);
    ++step_;
    debug_signal_point(step_);
    ConstMatrix h = model_.encoder().forward_staged();
    phases_.encoder_forward += lap.lap();
    at.rng = dropout_rng.state();  // before the next batch is staged
    have = batcher_->next(batches_[static_cast<size_t>(cur ^ 1)]);
    if (have) model_.encoder().stage(batches_[static_cast<size_t>(cur ^ 1)], true, dropout_rng);
    phases_.data += lap.lap();
    Matrix dh(dh_.data(), batch.size(), d);
    StepStats s =
        model_.output().train_step(batch, h, dh, {cfg_.optim.output.lr * lr_factor, step_});
    phases_.output += lap.lap();
    if (comm_ != nullptr) reduce_step(dh, s);
    phases_.reduce += lap.lap();
    model_.encoder().backward_update(dh, cfg_.optim.encoder.lr * lr_factor, step_);
    phases_.encoder_backward += lap.lap();
    if (!std::isfinite(s.loss))
      throw_error("training diverged at epoch {}, step {}: loss is {}", epoch + 1, step_, s.loss);
    at.loss_sum += s.loss;
    at.zero_grads += s.zero_grads;
    at.grads += s.grads;
    ++at.epoch_step;
    model_.output().on_step(view(epoch));
    phases_.output_refresh += lap.lap();
    progress.update(at.epoch_step, at.loss_sum / static_cast<double>(at.epoch_step));
    cur ^= 1;
    if (stop_signal() != 0 && have) {
      at.step = step_;
      at.seconds += epoch_time.seconds();
      save_checkpoint(ckpt_file_, model_, opt_.config_yaml, at, schedule_, comm_, &shard_step_);
      summary_.stop_signal = stop_signal();
      spdlog::warn("stopped by signal {} after step {} (epoch {}); checkpoint written",
                   stop_signal(), step_, epoch + 1);
      return false;
    }
  }
  progress.finish();
  return true;
}

nlohmann::json TrainLoop::epoch_line(int64_t epoch, const ResumePoint& at, double lr_factor) const {
  const int64_t steps = std::max<int64_t>(at.epoch_step, 1);
  nlohmann::json line;
  line["epoch"] = epoch + 1;
  line["step"] = step_;
  line["loss"] = at.loss_sum / static_cast<double>(steps);
  line["epoch_seconds"] = last_epoch_seconds_;
  line["samples_per_s"] = static_cast<double>(data_.train.num_points()) / last_epoch_seconds_;
  line["lr_factor"] = lr_factor;
  line["zero_grad_fraction"] =
      at.grads > 0 ? static_cast<double>(at.zero_grads) / static_cast<double>(at.grads) : 0.0;
  line["phase_seconds"] = phases_;
  return line;
}

// The evaluation of the test set after the last epoch and every train.eval_every; its
// metrics go into the epoch's line and feed the plateau schedule.
void TrainLoop::evaluate_epoch(int64_t epoch, bool last, nlohmann::json& line) {
  const bool due = last || (cfg_.train.eval_every > 0 && (epoch + 1) % cfg_.train.eval_every == 0);
  if (!due) {
    spdlog::info("epoch {}: loss {:.5f}, {:.1f}s", epoch + 1, line["loss"].get<double>(),
                 last_epoch_seconds_);
    return;
  }
  EvalResult ev = evaluate_dataset(model_, data_.test, data_.es);
  evaluated_ = last;
  // Label-sharded: rank 0 scored the merged top-k; every rank's schedule sees its P@1.
  double p1 = ev.metrics.p.empty() ? 0.0 : ev.metrics.p[0];
  if (comm_ != nullptr) comm_->broadcast(std::as_writable_bytes(std::span<double>(&p1, 1)), 0);
  schedule_.report_metric(p1);
  if (ev.metrics.p.empty()) return;  // not rank 0
  last_metrics_ = ev.metrics.to_json();
  summary_.metrics_table = ev.metrics.table();
  line["metrics"] = last_metrics_;
  line["eval_seconds"] = ev.seconds;
  spdlog::info("epoch {}: loss {:.5f}, P@1 {:.4f}, {:.1f}s", epoch + 1, line["loss"].get<double>(),
               p1, last_epoch_seconds_);
}

// The checkpoint at the end of an epoch: after the last one, every
// train.checkpoint_every, and when a signal arrived during the epoch's last step.
void TrainLoop::checkpoint_epoch(int64_t epoch, bool last, const Rng& dropout_rng) {
  const bool due =
      last || stop_signal() != 0 ||
      (cfg_.train.checkpoint_every > 0 && (epoch + 1) % cfg_.train.checkpoint_every == 0);
  if (!due) return;
  const ResumePoint end{.epoch = epoch + 1, .step = step_, .rng = dropout_rng.state()};
  save_checkpoint(ckpt_file_, model_, opt_.config_yaml, end, schedule_, comm_, &shard_step_);
}

// True when the run stops after this epoch: a signal, or halt_after_epoch.
bool TrainLoop::stop_after_epoch(int64_t epoch, bool last) {
  if (stop_signal() != 0) {
    summary_.stop_signal = stop_signal();
    spdlog::warn("stopped by signal {} at the end of epoch {}; checkpoint written", stop_signal(),
                 epoch + 1);
    return true;
  }
  if (opt_.halt_after_epoch > 0 && epoch + 1 == opt_.halt_after_epoch && !last) {
    spdlog::warn("halting after epoch {} as requested", epoch + 1);
    summary_.halted = true;
    return true;
  }
  return false;
}

void TrainLoop::write_results(const Stopwatch& total_time) {
  // Resumed after the last epoch's checkpoint (killed before results.json): evaluate the
  // final model again (a collective in a label-sharded run: every rank takes part).
  if (!evaluated_) {
    EvalResult ev = evaluate_dataset(model_, data_.test, data_.es);
    evaluated_ = true;
    if (!ev.metrics.p.empty()) {
      last_metrics_ = ev.metrics.to_json();
      summary_.metrics_table = ev.metrics.table();
    }
  }
  // Label-sharded: every rank's figures, gathered for rank 0's results.json (a collective).
  nlohmann::json ranks = nlohmann::json::array();
  if (comm_ != nullptr) {
    constexpr int kFields = 5;
    std::vector<double> all(static_cast<size_t>(kFields * comm_->size()), 0.0);
    const double mine[kFields] = {static_cast<double>(peak_rss_bytes()),
                                  static_cast<double>(ctx_.ledger().total_peak(MemSpace::host) +
                                                      ctx_.ledger().total_peak(MemSpace::device)),
                                  static_cast<double>(model_.output_ledger_bytes()),
                                  comm_->comm_seconds(),
                                  static_cast<double>(model_.output().shard_labels())};
    std::copy(mine, mine + kFields, all.begin() + kFields * comm_->rank());
    comm_->allreduce_sum(std::span<double>(all));
    for (int r = 0; r < comm_->size(); ++r) {
      const double* f = all.data() + kFields * r;
      ranks.push_back({{"rank", r},
                       {"peak_rss_bytes", static_cast<int64_t>(f[0])},
                       {"ledger_peak_bytes", static_cast<int64_t>(f[1])},
                       {"output_layer_bytes", static_cast<int64_t>(f[2])},
                       {"comm_seconds", f[3]},
                       {"labels", static_cast<int64_t>(f[4])}});
    }
  }
  if (run_ == nullptr) return;  // rank > 0 of a label-sharded run: rank 0 reports
  const Dataset& train = data_.train;
  nlohmann::json& res = summary_.results;
  res["name"] = cfg_.name;
  res["device"] = std::string(to_string(ctx_.device()));
  if (ctx_.on_gpu()) res["gpu"] = ctx_.cuda().info().name;
  res["threads"] = ctx_.threads();
  res["backend"] = cfg_.model.output.type;
  res["epochs"] = cfg_.train.epochs;
  res["steps"] = step_;
  res["train_points"] = train.num_points();
  res["test_points"] = data_.test.num_points();
  res["num_labels"] = data_.meta.num_labels;
  res["input_dim"] = data_.meta.input_dim;
  res["metrics"] = last_metrics_;
  res["train_seconds"] = train_seconds_;
  res["last_epoch_seconds"] = last_epoch_seconds_;
  res["samples_per_s"] =
      last_epoch_seconds_ > 0 ? static_cast<double>(train.num_points()) / last_epoch_seconds_ : 0.0;
  res["total_seconds"] = total_time.seconds();
  res["memory"] = ctx_.ledger().report();
  res["output_layer_bytes"] = model_.output_ledger_bytes();
  res["output_layer_analytic_bytes"] = model_.output().analytic_bytes();
  res["peak_rss_bytes"] = peak_rss_bytes();
  if (comm_ != nullptr) {
    res["processes"] = comm_->size();
    res["labels_per_process"] = model_.output().label_hi() - model_.output().label_lo();
    res["comm_seconds"] = comm_->comm_seconds();  // rank 0's
    res["ranks"] = ranks;  // each rank's peak RSS, ledger peak, layer bytes, comm time
  }
  res["run_dir"] = run_->path().string();
  write_text_atomic(run_->file(run_file::results), res.dump(2) + "\n");
}

// The whole run; `begun` is set to the run directory once training has begun there (from
// then on a failure is recorded in it).
TrainSummary train_run(const ExperimentConfig& cfg, const TrainOptions& opt, Comm* comm,
                       fs::path& begun) {
  Stopwatch total_time;
  const Device device =
      training_device(opt.device.empty() ? cfg.device : opt.device, cfg.model.output.type);
  const bool root = comm == nullptr || comm->is_root();
  Context ctx(device, static_cast<int>(cfg.threads), device == Device::cuda ? rank_gpu(comm) : 0);
  // The run directory is checked first, so a bad path or a run already there fails in a
  // second; nothing is written to it until training starts (TrainLoop::begin). Only rank 0
  // of a label-sharded run has one.
  const fs::path dir = run_directory(cfg, opt);
  std::optional<RunDirectory> run;
  if (root)
    run.emplace(dir, opt.resume      ? RunMode::resume
                     : opt.overwrite ? RunMode::overwrite
                                     : RunMode::fresh);
  TrainSummary summary;
  summary.run_dir = dir.string();
  summary.quiet = !root;
  summary.processes = comm != nullptr ? comm->size() : 1;
  Resume resume;
  if (opt.resume && check_resume(cfg, opt, dir, resume, summary)) return summary;
  // Label-sharded: rank 0 loads first (it may generate the synthetic set and write the
  // data caches), the others then read what it wrote.
  std::optional<RunData> loaded;
  if (root) loaded.emplace(cfg, ctx);
  if (comm != nullptr) comm->barrier();
  if (!root) loaded.emplace(cfg, ctx);
  const RunData& data = *loaded;
  const GpuAttachment gpu_ranks(comm, ctx);  // released before ctx
  TrainLoop loop(cfg, opt, ctx, data, dir, run ? &*run : nullptr, resume, summary, comm);
  if (opt.resume) loop.restore();
  loop.begin(begun);
  if (loop.run_epochs()) loop.write_results(total_time);
  return summary;
}

}  // namespace

TrainSummary run_training(const ExperimentConfig& cfg, const TrainOptions& opt) {
  TrainSummary summary;
  run_in_job([&](Comm* comm) {
    fs::path begun;
    try {
      summary = train_run(cfg, opt, comm, begun);
    } catch (const std::exception& e) {
      // A run that failed after training began says why in its directory (`xmctrain
      // report` shows it); one that failed before left nothing there.
      if (!begun.empty()) record_run_failure(begun, e.what());
      throw;
    }
  });
  return summary;
}

}  // namespace xmc
