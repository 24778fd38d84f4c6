#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/cuda_context.h"
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

void save_checkpoint(const fs::path& file, Model& model, const TrainOptions& opt, int64_t epoch,
                     int64_t step, const LrSchedule& schedule, const Rng& rng) {
  CheckpointWriter w(file.string());
  w.write_string("meta/config_yaml", opt.config_yaml);
  model.save_state(w);
  w.write_i64("meta/epoch", {epoch});
  w.write_i64("meta/step", {step});
  auto st = rng.state();
  w.write_u64("meta/rng_state", {st.begin(), st.end()});
  w.write_f64("meta/schedule",
              {schedule.plateau_factor(), schedule.best_metric(),
               static_cast<double>(schedule.bad_evals())});
  w.commit();
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
    throw_input("data.synth.enabled: set data.train.{} to the file to generate "
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

TrainSummary run_training(const ExperimentConfig& cfg, const TrainOptions& opt) {
  Stopwatch total_time;
  const Device device =
      training_device(opt.device.empty() ? cfg.device : opt.device, cfg.model.output.type);
  Context ctx(device, static_cast<int>(cfg.threads));

  // The run directory is prepared first, so a bad path fails in a second.
  const fs::path dir = run_directory(cfg, opt);
  const fs::path ckpt_file = dir / "checkpoint.h5";
  const fs::path metrics_file = dir / "metrics.jsonl";
  prepare_run_directory(dir);
  if (opt.resume && !fs::exists(ckpt_file))
    throw_input("--resume: no checkpoint at '{}'", ckpt_file.string());
  remove_stale_temporaries(dir);
  write_text_atomic(dir / "config.resolved.yaml", opt.config_yaml);

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
               test.num_points(), train.num_features(), train.num_labels(),
               load_time.seconds());

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
               meta.input_dim, model.encoder().output_dim(), cfg.model.output.type,
               meta.num_labels, model.output_ledger_bytes() / 1048576.0,
               model.output().analytic_bytes() / 1048576.0);

  int64_t start_epoch = 0;
  int64_t step = 0;
  Rng rng(cfg.seed);
  if (opt.resume) {
    CheckpointReader r(ckpt_file.string());
    model.load_state(r);
    start_epoch = r.read_i64("meta/epoch").at(0);
    step = r.read_i64("meta/step").at(0);
    auto st = r.read_u64("meta/rng_state");
    if (st.size() != 4) throw_input("{}: meta/rng_state must have 4 entries", ckpt_file.string());
    rng.set_state({st[0], st[1], st[2], st[3]});
    auto sch = r.read_f64("meta/schedule");
    if (sch.size() != 3) throw_input("{}: meta/schedule must have 3 entries", ckpt_file.string());
    schedule.restore(sch[0], sch[1], static_cast<int>(sch[2]));
    keep_metrics_lines(metrics_file, start_epoch);
    spdlog::info("resumed from {} at epoch {}, step {}", ckpt_file.string(), start_epoch, step);
  } else {
    std::error_code ec;
    fs::remove(metrics_file, ec);
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
    dh_host = HostBuffer<float>(ctx.ledger(), MemTag::activations,
                                static_cast<size_t>(batch_size * d));
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

  TrainSummary summary;
  nlohmann::json last_metrics;
  double train_seconds = 0.0;
  double last_epoch_seconds = 0.0;
  // Two batches in flight: batch i+1 is gathered and staged (on the GPU: its host→device
  // copy starts on a side stream) while batch i trains.
  std::array<Batch, 2> batches;
  for (int64_t epoch = start_epoch; epoch < cfg.train.epochs; ++epoch) {
    const bool last = epoch + 1 == cfg.train.epochs;
    batcher.start_epoch(epoch);
    Rng dropout_rng = Rng::stream(cfg.seed ^ 0xd50d50ULL, static_cast<uint64_t>(epoch));
    Progress progress(fmt::format("epoch {}/{}", epoch + 1, cfg.train.epochs), steps_per_epoch,
                      batch_size, cfg.train.log_every_s);
    Stopwatch epoch_time;
    double loss_sum = 0.0;
    int64_t steps = 0, zero_grads = 0, grads = 0;
    double lr_factor = 1.0;
    int cur = 0;
    bool have = batcher.next(batches[0]);
    if (have) model.encoder().stage(batches[0], /*training=*/true, dropout_rng);
    while (have) {
      const Batch& batch = batches[static_cast<size_t>(cur)];
      lr_factor = schedule.factor(step);
      ++step;
      ConstMatrix h = model.encoder().forward_staged();
      have = batcher.next(batches[static_cast<size_t>(cur ^ 1)]);
      if (have) model.encoder().stage(batches[static_cast<size_t>(cur ^ 1)], true, dropout_rng);
      Matrix dh(dh_data, batch.size(), d);
      StepStats s = model.output().train_step(batch, h, dh,
                                              {cfg.optim.output.lr * lr_factor, step});
      model.encoder().backward_update(dh, cfg.optim.encoder.lr * lr_factor, step);
      if (!std::isfinite(s.loss))
        throw_error("training diverged at epoch {}, step {}: loss is {}", epoch + 1, step,
                    s.loss);
      loss_sum += s.loss;
      zero_grads += s.zero_grads;
      grads += s.grads;
      ++steps;
      TrainerView view{step, total_steps, static_cast<int>(epoch),
                       static_cast<int>(cfg.train.epochs), &train, embed_train};
      model.output().on_step(view);
      progress.update(steps, loss_sum / static_cast<double>(steps));
      cur ^= 1;
    }
    progress.finish();
    model.output().on_epoch({step, total_steps, static_cast<int>(epoch),
                             static_cast<int>(cfg.train.epochs), &train, embed_train});
    last_epoch_seconds = epoch_time.seconds();
    train_seconds += last_epoch_seconds;

    nlohmann::json line;
    line["epoch"] = epoch + 1;
    line["step"] = step;
    line["loss"] = loss_sum / static_cast<double>(std::max<int64_t>(steps, 1));
    line["epoch_seconds"] = last_epoch_seconds;
    line["samples_per_s"] = static_cast<double>(train.num_points()) / last_epoch_seconds;
    line["lr_factor"] = lr_factor;
    line["zero_grad_fraction"] =
        grads > 0 ? static_cast<double>(zero_grads) / static_cast<double>(grads) : 0.0;

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

    const bool ckpt_due =
        last || (cfg.train.checkpoint_every > 0 && (epoch + 1) % cfg.train.checkpoint_every == 0);
    if (ckpt_due) save_checkpoint(ckpt_file, model, opt, epoch + 1, step, schedule, dropout_rng);
    append_line(metrics_file, line.dump());

    if (opt.halt_after_epoch > 0 && epoch + 1 == opt.halt_after_epoch && !last) {
      spdlog::warn("halting after epoch {} as requested", epoch + 1);
      summary.halted = true;
      return summary;
    }
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
  res["samples_per_s"] = static_cast<double>(train.num_points()) / last_epoch_seconds;
  res["total_seconds"] = total_time.seconds();
  res["memory"] = ctx.ledger().report();
  res["output_layer_bytes"] = model.output_ledger_bytes();
  res["output_layer_analytic_bytes"] = model.output().analytic_bytes();
  res["peak_rss_bytes"] = peak_rss_bytes();
  res["run_dir"] = dir.string();
  write_text_atomic(dir / "results.json", res.dump(2) + "\n");
  return summary;
}

}  // namespace xmc
