#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/config_loader.h"
#include "core/cuda_context.h"
#include "core/debug_hooks.h"
#include "core/error.h"
#include "core/memory_ledger.h"
#include "core/resources.h"
#include "data/batcher.h"
#include "data/synthetic.h"
#include "eval/filter.h"
#include "io/load.h"
#include "model/schedule.h"
#include "train/evaluation.h"
#include "train/model.h"
#include "train/progress.h"
#include "train/run_files.h"

namespace xmc {
namespace fs = std::filesystem;

namespace {

io::DataSource to_source(const DataSourceConfig& c, bool cache) {
  io::DataSource s;
  s.path = c.path;
  s.features = c.features;
  s.labels = c.labels;
  s.format = c.format;
  s.hdf5_dataset = c.hdf5_dataset;
  s.read.index_base = static_cast<int>(c.index_base);
  s.read.use_cache = cache;
  return s;
}

ScheduleConfig to_schedule_config(const ScheduleSpec& s) {
  ScheduleConfig c;
  c.type = parse_schedule(s.type);
  c.warmup_steps = s.warmup_steps;
  c.min_factor = s.min_factor;
  c.patience = static_cast<int>(s.patience);
  c.factor = s.factor;
  return c;
}

bool is_set(const DataSourceConfig& c) { return !c.path.empty() || !c.features.empty(); }

// Where a checkpoint stands: after `epoch` whole epochs and `epoch_step` steps of the next
// one (> 0 only for a checkpoint taken on SIGINT / SIGTERM), with the running sums of that
// epoch and the dropout stream positioned before its next batch.
struct ResumePoint {
  int64_t epoch = 0;
  int64_t step = 0;
  int64_t epoch_step = 0;
  std::array<uint64_t, 4> rng{};
  double loss_sum = 0.0;
  int64_t zero_grads = 0, grads = 0;
  double seconds = 0.0;  // training time of the partial epoch
  std::string config_yaml;
};

void save_checkpoint(const fs::path& file, Model& model, const std::string& config_yaml,
                     const ResumePoint& p, const LrSchedule& schedule) {
  CheckpointWriter w(file.string());
  w.write_string("meta/config_yaml", config_yaml);
  model.save_state(w);
  w.write_i64("meta/epoch", {p.epoch});
  w.write_i64("meta/step", {p.step});
  w.write_i64("meta/epoch_step", {p.epoch_step, p.zero_grads, p.grads});
  w.write_f64("meta/epoch_partial", {p.loss_sum, p.seconds});
  w.write_u64("meta/rng_state", {p.rng.begin(), p.rng.end()});
  w.write_f64("meta/schedule", {schedule.plateau_factor(), schedule.best_metric(),
                                static_cast<double>(schedule.bad_evals())});
  w.commit();
}

// The position and config of a checkpoint (checkpoints of older versions have no
// epoch_step: they were all taken at the end of an epoch).
ResumePoint read_resume_point(const CheckpointReader& r) {
  ResumePoint p;
  p.config_yaml = r.read_string("meta/config_yaml");
  p.epoch = r.read_i64("meta/epoch").at(0);
  p.step = r.read_i64("meta/step").at(0);
  if (r.has("meta/epoch_step")) {
    auto es = r.read_i64("meta/epoch_step");
    auto ep = r.read_f64("meta/epoch_partial");
    if (es.size() != 3 || ep.size() != 2)
      throw_input("{}: meta/epoch_step must have 3 entries and meta/epoch_partial 2", r.path());
    p.epoch_step = es[0];
    p.zero_grads = es[1];
    p.grads = es[2];
    p.loss_sum = ep[0];
    p.seconds = ep[1];
  }
  auto st = r.read_u64("meta/rng_state");
  if (st.size() != 4) throw_input("{}: meta/rng_state must have 4 entries", r.path());
  p.rng = {st[0], st[1], st[2], st[3]};
  return p;
}

// SIGINT / SIGTERM while installed: the first one is recorded (the trainer stops after the
// current step); the handler then resets, so a second one ends the process at once.
std::atomic<int> g_stop_signal{0};

void record_stop_signal(int sig) { g_stop_signal.store(sig); }

class StopSignals {
 public:
  StopSignals() {
    g_stop_signal.store(0);
    struct sigaction sa {};
    sa.sa_handler = record_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  int signal() const { return g_stop_signal.load(); }

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

// The keys whose values differ between the checkpoint's config and this one, less the
// resume-free keys (listed separately in `free`).
std::vector<ConfigChange> significant_changes(const std::string& before, const std::string& after,
                                              std::vector<ConfigChange>& free) {
  std::vector<ConfigChange> out;
  for (auto& c : config_changes(before, after)) {
    const auto& keys = resume_free_keys();
    if (std::find(keys.begin(), keys.end(), c.key) != keys.end())
      free.push_back(std::move(c));
    else
      out.push_back(std::move(c));
  }
  return out;
}

std::string change_keys(const std::vector<ConfigChange>& changes) {
  std::string s;
  for (const auto& c : changes) s += (s.empty() ? "" : ", ") + c.key;
  return s;
}

std::string describe_changes(const std::vector<ConfigChange>& changes) {
  std::string s;
  for (const auto& c : changes)
    s += fmt::format("{}{} {} -> {}", s.empty() ? "" : ", ", c.key, c.before, c.after);
  return s;
}

}  // namespace

void ensure_synthetic_data(const ExperimentConfig& cfg) {
  const SynthSpec& sp = cfg.data.synth;
  if (!sp.enabled) return;
  const bool dense = sp.format == "dense";
  // The files write_synthetic produces, in the folder of data.train.
  const DataSourceConfig& tr = cfg.data.train;
  const DataSourceConfig& te = cfg.data.test;
  const std::string anchor = dense ? tr.features : tr.path;
  if (anchor.empty())
    throw_input(
        "data.synth.enabled: set data.train.{} to the file to generate "
        "(e.g. datasets/synth/{})",
        dense ? "features" : "path", dense ? "trn_X.npy" : "train.txt");
  const fs::path dir = fs::path(anchor).parent_path();
  struct Expect {
    const char* key;
    std::string value;
    const char* file;
  };
  std::vector<Expect> expected;
  if (dense) {
    expected = {{"data.train.features", tr.features, "trn_X.npy"},
                {"data.train.labels", tr.labels, "trn_X_Y.txt"},
                {"data.test.features", te.features, "tst_X.npy"},
                {"data.test.labels", te.labels, "tst_X_Y.txt"}};
  } else {
    expected = {{"data.train.path", tr.path, "train.txt"}, {"data.test.path", te.path, "test.txt"}};
  }
  for (const auto& e : expected) {
    if (fs::path(e.value) != dir / e.file)
      throw_input("data.synth.enabled: {} is '{}', but the generator writes '{}'", e.key, e.value,
                  (dir / e.file).string());
  }
  SynthConfig sc;
  sc.train = sp.train;
  sc.test = sp.test;
  sc.labels = sp.labels;
  sc.features = sp.features;
  sc.clusters = sp.clusters;
  sc.alpha = sp.alpha;
  sc.labels_per_point = sp.labels_per_point;
  sc.noise = sp.noise;
  sc.nnz = sp.nnz;
  sc.seed = sp.seed;
  sc.format = sp.format;
  sc.resolve();
  if (synthetic_files_current(sc, dir.string(), "data.synth.")) return;
  Stopwatch sw;
  SynthData data = generate_synthetic(sc);
  write_synthetic(data, sc, dir.string());
  spdlog::info("generated synthetic data in {} ({:.1f}s; oracle P@1 {:.3f}, popularity P@1 {:.3f})",
               dir.string(), sw.seconds(), data.oracle_p1, data.popularity_p1);
}

std::string run_directory(const ExperimentConfig& cfg, const TrainOptions& opt) {
  if (!opt.out_dir.empty()) return opt.out_dir;
  if (!cfg.out.empty()) return cfg.out;
  return (fs::path("runs") / cfg.name).string();
}

const std::vector<std::string>& resume_free_keys() {
  static const std::vector<std::string> keys = {"out", "device", "threads", "train.log_every_s"};
  return keys;
}

namespace {

// The whole run; `begun` is set to the run directory once training has begun there (from
// then on a failure is recorded in it).
TrainSummary train_run(const ExperimentConfig& cfg, const TrainOptions& opt, fs::path& begun) {
  Stopwatch total_time;
  const Device device =
      training_device(opt.device.empty() ? cfg.device : opt.device, cfg.model.output.type);
  Context ctx(device, static_cast<int>(cfg.threads));

  // The run directory is checked first, so a bad path or a run already there fails in a
  // second; nothing is written to it until training starts (run.begin()).
  const fs::path dir = run_directory(cfg, opt);
  RunDirectory run(dir, opt.resume      ? RunMode::resume
                        : opt.overwrite ? RunMode::overwrite
                                        : RunMode::fresh);
  const fs::path ckpt_file = run.file(run_file::checkpoint);
  const fs::path metrics_file = run.file(run_file::metrics);
  const fs::path results_file = run.file(run_file::results);
  TrainSummary summary;
  summary.run_dir = dir.string();

  // --resume: the checkpoint's position and config, checked before the data is loaded.
  ResumePoint from;
  std::vector<ConfigChange> changes;
  if (opt.resume) {
    from = read_resume_point(CheckpointReader(ckpt_file.string()));
    std::vector<ConfigChange> free;
    changes = significant_changes(from.config_yaml, opt.config_yaml, free);
    if (!changes.empty() && !opt.allow_config_change)
      throw_input(
          "--resume: the config differs from the one the run was trained with in {} ({}). "
          "Resume with the run's config ({}), pass --allow-config-change to continue with the "
          "new values (the change is recorded in metrics.jsonl), or start a new run in another "
          "--out",
          change_keys(changes), describe_changes(changes),
          run.file(run_file::config).string());
    if (!free.empty()) spdlog::info("resume: {}", describe_changes(free));
    if (from.epoch > cfg.train.epochs)
      throw_input("--resume: the checkpoint is at epoch {}, beyond train.epochs = {}", from.epoch,
                  cfg.train.epochs);
    if (from.epoch == cfg.train.epochs && from.epoch_step == 0 && changes.empty() &&
        fs::exists(results_file)) {
      std::ifstream in(results_file);
      summary.results = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (!summary.results.is_discarded()) {
        summary.complete = true;
        spdlog::info("{}: the run is complete ({} epochs); results.json is kept", dir.string(),
                     from.epoch);
        return summary;
      }
    }
  }

  // Data.
  ensure_synthetic_data(cfg);
  if (!is_set(cfg.data.train)) throw_input("data.train: no training data given (path or features)");
  if (!is_set(cfg.data.test)) throw_input("data.test: no test data given (path or features)");
  Stopwatch load_time;
  const Dataset train = io::load_dataset(to_source(cfg.data.train, cfg.data.cache));
  const Dataset test = io::load_dataset(to_source(cfg.data.test, cfg.data.cache));
  io::check_compatible(train, test);
  LedgerEntry data_mem(ctx.ledger(), MemTag::data,
                       static_cast<int64_t>(train.bytes() + test.bytes()));
  spdlog::info("data: {} train / {} test points, D={}, L={} ({:.1f}s)", train.num_points(),
               test.num_points(), train.num_features(), train.num_labels(), load_time.seconds());

  ModelMeta meta;
  meta.input_dim = train.num_features();
  meta.num_labels = train.num_labels();
  meta.n_train = train.num_points();
  meta.sparse_input = train.sparse();
  meta.label_freq = label_frequencies(train.labels);

  FilterSet filter;
  if (!cfg.data.filter.empty()) filter = read_filter_file(cfg.data.filter);
  EvalSettings es;
  es.k = static_cast<int>(cfg.eval.k);
  es.batch_size = cfg.eval.batch_size;
  es.filter = filter.empty() ? nullptr : &filter;
  es.inv_prop = model_propensities(cfg.data, cfg.data.propensity, meta);

  const int64_t batch_size = cfg.train.batch_size;
  const int64_t steps_per_epoch = (train.num_points() + batch_size - 1) / batch_size;
  const int64_t total_steps = cfg.train.epochs * steps_per_epoch;
  Model model(ctx, cfg, meta, total_steps);
  LrSchedule schedule(to_schedule_config(cfg.optim.schedule), total_steps);
  spdlog::info("model: encoder {}→{}, output '{}' over {} labels: {:.1f} MiB (analytic {:.1f} MiB)",
               meta.input_dim, model.encoder().output_dim(), cfg.model.output.type, meta.num_labels,
               model.output_ledger_bytes() / 1048576.0,
               model.output().analytic_bytes() / 1048576.0);

  int64_t step = 0;
  if (opt.resume) {
    // Loaded (and its checksums verified) before anything in the directory changes.
    CheckpointReader r(ckpt_file.string());
    model.load_state(r);
    step = from.step;
    auto sch = r.read_f64("meta/schedule");
    if (sch.size() != 3) throw_input("{}: meta/schedule must have 3 entries", ckpt_file.string());
    schedule.restore(sch[0], sch[1], static_cast<int>(sch[2]));
    if (from.epoch_step >= steps_per_epoch)
      throw_input("{}: the checkpoint is at step {} of epoch {}, which has {} steps",
                  ckpt_file.string(), from.epoch_step, from.epoch + 1, steps_per_epoch);
  }
  // Training starts: from here the directory holds this run.
  run.begin(opt.config_yaml);
  begun = dir;
  double train_seconds = 0.0;
  double last_epoch_seconds = 0.0;
  nlohmann::json last_metrics;
  if (opt.resume) {
    for (const auto& rec : keep_metrics_lines(metrics_file, from.epoch)) {
      last_epoch_seconds = rec.value("epoch_seconds", 0.0);
      train_seconds += last_epoch_seconds;
    }
    if (!changes.empty()) {
      nlohmann::json rec;
      rec["after_epoch"] = from.epoch;
      rec["after_step"] = from.step;
      for (const auto& c : changes)
        rec["config_change"][c.key] = {{"old", c.before}, {"new", c.after}};
      append_line(metrics_file, rec.dump());
      spdlog::warn("resume with a changed config (recorded in metrics.jsonl): {}",
                   describe_changes(changes));
    }
    spdlog::info("resumed from {} at epoch {}, step {}", ckpt_file.string(),
                 from.epoch + (from.epoch_step > 0 ? 1 : 0), step);
  }

  const int64_t d = model.encoder().output_dim();
  // dL/dh: host memory on the CPU, device memory on the GPU (the layers' device views).
  HostBuffer<float> dh_host;
  gpu::DeviceBuffer<float> dh_dev;
  float* dh_data = nullptr;
  if (ctx.on_gpu()) {
    dh_dev = gpu::DeviceBuffer<float>(ctx.ledger(), MemTag::activations,
                                      static_cast<size_t>(batch_size * d));
    dh_data = dh_dev.data();
    spdlog::info("device: cuda, {}", ctx.cuda().info().name);
  } else {
    dh_host =
        HostBuffer<float>(ctx.ledger(), MemTag::activations, static_cast<size_t>(batch_size * d));
    dh_data = dh_host.data();
  }
  Batcher batcher(train, batch_size, cfg.seed, cfg.train.shuffle);

  // Embeds every training point with the current encoder (ANNS refresh).
  std::function<DenseMatrix()> embed_train = [&]() {
    DenseMatrix out(train.num_points(), d);
    Rng unused(0);
    std::vector<int64_t> ids;
    for (int64_t r0 = 0; r0 < train.num_points(); r0 += cfg.eval.batch_size) {
      const int64_t n = std::min(cfg.eval.batch_size, train.num_points() - r0);
      ids.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = r0 + i;
      Batch b = gather_batch(train, ids);
      model.embed(b, Matrix(out.values.data() + r0 * d, n, d));
    }
    return out;
  };

  StopSignals stop;
  // Two batches in flight: batch i+1 is gathered and staged (on the GPU: its host→device
  // copy starts on a side stream) while batch i trains.
  std::array<Batch, 2> batches;
  for (int64_t epoch = from.epoch; epoch < cfg.train.epochs; ++epoch) {
    const bool last = epoch + 1 == cfg.train.epochs;
    batcher.start_epoch(epoch);
    Rng dropout_rng = Rng::stream(cfg.seed ^ 0xd50d50ULL, static_cast<uint64_t>(epoch));
    // This epoch's running sums; a checkpoint taken mid-epoch carries them.
    ResumePoint at;
    at.epoch = epoch;
    if (epoch == from.epoch && from.epoch_step > 0) {
      batcher.skip(from.epoch_step);
      dropout_rng.set_state(from.rng);
      at = from;
    }
    Progress progress(fmt::format("epoch {}/{}", epoch + 1, cfg.train.epochs), steps_per_epoch,
                      batch_size, cfg.train.log_every_s);
    Stopwatch epoch_time;
    double lr_factor = 1.0;
    int cur = 0;
    at.rng = dropout_rng.state();
    bool have = batcher.next(batches[0]);
    if (have) model.encoder().stage(batches[0], /*training=*/true, dropout_rng);
    while (have) {
      const Batch& batch = batches[static_cast<size_t>(cur)];
      lr_factor = schedule.factor(step);
      ++step;
      debug_signal_point(step);
      ConstMatrix h = model.encoder().forward_staged();
      at.rng = dropout_rng.state();  // before the next batch is staged
      have = batcher.next(batches[static_cast<size_t>(cur ^ 1)]);
      if (have) model.encoder().stage(batches[static_cast<size_t>(cur ^ 1)], true, dropout_rng);
      Matrix dh(dh_data, batch.size(), d);
      StepStats s =
          model.output().train_step(batch, h, dh, {cfg.optim.output.lr * lr_factor, step});
      model.encoder().backward_update(dh, cfg.optim.encoder.lr * lr_factor, step);
      if (!std::isfinite(s.loss))
        throw_error("training diverged at epoch {}, step {}: loss is {}", epoch + 1, step, s.loss);
      at.loss_sum += s.loss;
      at.zero_grads += s.zero_grads;
      at.grads += s.grads;
      ++at.epoch_step;
      TrainerView view{
          step,   total_steps, static_cast<int>(epoch), static_cast<int>(cfg.train.epochs),
          &train, embed_train};
      model.output().on_step(view);
      progress.update(at.epoch_step, at.loss_sum / static_cast<double>(at.epoch_step));
      cur ^= 1;
      if (stop.signal() != 0 && have) {
        // Mid-epoch: the checkpoint resumes at the next batch of this epoch.
        at.step = step;
        at.seconds += epoch_time.seconds();
        save_checkpoint(ckpt_file, model, opt.config_yaml, at, schedule);
        summary.stop_signal = stop.signal();
        spdlog::warn("stopped by signal {} after step {} (epoch {}); checkpoint written",
                     stop.signal(), step, epoch + 1);
        return summary;
      }
    }
    progress.finish();
    model.output().on_epoch({step, total_steps, static_cast<int>(epoch),
                             static_cast<int>(cfg.train.epochs), &train, embed_train});
    last_epoch_seconds = at.seconds + epoch_time.seconds();
    train_seconds += last_epoch_seconds;
    const int64_t steps = std::max<int64_t>(at.epoch_step, 1);

    nlohmann::json line;
    line["epoch"] = epoch + 1;
    line["step"] = step;
    line["loss"] = at.loss_sum / static_cast<double>(steps);
    line["epoch_seconds"] = last_epoch_seconds;
    line["samples_per_s"] = static_cast<double>(train.num_points()) / last_epoch_seconds;
    line["lr_factor"] = lr_factor;
    line["zero_grad_fraction"] =
        at.grads > 0 ? static_cast<double>(at.zero_grads) / static_cast<double>(at.grads) : 0.0;

    const bool eval_due =
        last || (cfg.train.eval_every > 0 && (epoch + 1) % cfg.train.eval_every == 0);
    if (eval_due) {
      EvalResult ev = evaluate_dataset(model, test, es);
      last_metrics = ev.metrics.to_json();
      summary.metrics_table = ev.metrics.table();
      line["metrics"] = last_metrics;
      line["eval_seconds"] = ev.seconds;
      schedule.report_metric(ev.metrics.p.at(0));
      spdlog::info("epoch {}: loss {:.5f}, P@1 {:.4f}, {:.1f}s", epoch + 1,
                   line["loss"].get<double>(), ev.metrics.p.at(0), last_epoch_seconds);
    } else {
      spdlog::info("epoch {}: loss {:.5f}, {:.1f}s", epoch + 1, line["loss"].get<double>(),
                   last_epoch_seconds);
    }
    line["memory"] = ctx.ledger().report();
    line["peak_rss_bytes"] = peak_rss_bytes();

    // The metrics line first, then the checkpoint: a kill between the two makes the resumed
    // run drop the line (it is past the checkpoint) and train that epoch again, so every
    // epoch is logged exactly once.
    append_line(metrics_file, line.dump());
    debug_kill_point("after_metrics", epoch + 1);
    const bool ckpt_due =
        last || stop.signal() != 0 ||
        (cfg.train.checkpoint_every > 0 && (epoch + 1) % cfg.train.checkpoint_every == 0);
    if (ckpt_due) {
      ResumePoint end;
      end.epoch = epoch + 1;
      end.step = step;
      end.rng = dropout_rng.state();
      save_checkpoint(ckpt_file, model, opt.config_yaml, end, schedule);
    }
    debug_kill_point("after_checkpoint", epoch + 1);

    if (stop.signal() != 0) {
      summary.stop_signal = stop.signal();
      spdlog::warn("stopped by signal {} at the end of epoch {}; checkpoint written", stop.signal(),
                   epoch + 1);
      return summary;
    }
    if (opt.halt_after_epoch > 0 && epoch + 1 == opt.halt_after_epoch && !last) {
      spdlog::warn("halting after epoch {} as requested", epoch + 1);
      summary.halted = true;
      return summary;
    }
  }

  // Resumed after the last epoch's checkpoint (killed before results.json): evaluate the
  // final model again.
  if (last_metrics.is_null()) {
    EvalResult ev = evaluate_dataset(model, test, es);
    last_metrics = ev.metrics.to_json();
    summary.metrics_table = ev.metrics.table();
  }

  nlohmann::json& res = summary.results;
  res["name"] = cfg.name;
  res["device"] = std::string(to_string(ctx.device()));
  if (ctx.on_gpu()) res["gpu"] = ctx.cuda().info().name;
  res["threads"] = ctx.threads();
  res["backend"] = cfg.model.output.type;
  res["epochs"] = cfg.train.epochs;
  res["steps"] = step;
  res["train_points"] = train.num_points();
  res["test_points"] = test.num_points();
  res["num_labels"] = meta.num_labels;
  res["input_dim"] = meta.input_dim;
  res["metrics"] = last_metrics;
  res["train_seconds"] = train_seconds;
  res["last_epoch_seconds"] = last_epoch_seconds;
  res["samples_per_s"] =
      last_epoch_seconds > 0 ? static_cast<double>(train.num_points()) / last_epoch_seconds : 0.0;
  res["total_seconds"] = total_time.seconds();
  res["memory"] = ctx.ledger().report();
  res["output_layer_bytes"] = model.output_ledger_bytes();
  res["output_layer_analytic_bytes"] = model.output().analytic_bytes();
  res["peak_rss_bytes"] = peak_rss_bytes();
  res["run_dir"] = dir.string();
  write_text_atomic(results_file, res.dump(2) + "\n");
  return summary;
}

}  // namespace

TrainSummary run_training(const ExperimentConfig& cfg, const TrainOptions& opt) {
  fs::path begun;
  try {
    return train_run(cfg, opt, begun);
  } catch (const std::exception& e) {
    // A run that failed after training began says why in its directory (`xmctrain
    // report` shows it); one that failed before left nothing there.
    if (!begun.empty()) record_run_failure(begun, e.what());
    throw;
  }
}

}  // namespace xmc
