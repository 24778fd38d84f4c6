// Whole trainings through the trainer (run_training), on the CPU and on the device under
// test, over the shipped configs (configs/*.yaml: the small ones on synthetic data, and a few
// variants that reach other paths), shortened by --set overrides: 2 epochs of 4000
// generated points (2000 test points, 2000 labels), no learning-rate warm-up; the fan-in
// backends with a 256-wide projection (1024 shipped), a rate of 0.02 (0.005) and rewiring
// every 8 steps (100), so that they learn something in 32 steps (P@1 0.2 - 0.5 on the CPU;
// metrics near zero would agree whatever the device did). One table, one body: the per-backend
// training checks of the former parity binaries (dense, bottleneck, fixed_fanin,
// group_shared, lsh_sampled, anns_sampled) in one place.
//
// Per row: every epoch's training loss within loss_tol (relative) of the CPU run's; P@1,
// P@3, P@5 within p_tol; results.json names the device (and the GPU on CUDA); then each
// run's checkpoint is loaded on the other device (on the device the model was not trained
// on) and evaluated on the test set: P@1 and P@5 within 0.005 of that run's own (a bf16
// checkpoint is not loaded on the CPU, which refuses bf16). On the (cpu) run the device
// run is the CPU run itself (trained once), and its checkpoint is evaluated on the CPU.
//
// Tolerances: P@k 0.01 (rows of 2000 test points: 20 points), 0.02 where rewiring selects
// by a global |w| threshold (a weight within rounding of it can be pruned on one device and
// kept on the other); bf16 0.03. Losses 2% (5% with rewiring or semantic grouping, whose
// discrete choices may differ at near-ties, and in bf16).
#include <catch2/catch.hpp>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "io/load.h"
#include "layers/registry.h"
#include "support/device_test.h"
#include "support/test_support.h"
#include "train/evaluation.h"
#include "train/inference.h"
#include "train/run_files.h"
#include "train/trainer.h"

using namespace xmc;
using namespace xmc::test;
namespace fs = std::filesystem;

namespace {

struct Row {
  std::string name;
  std::string config;                    // configs/<config>.yaml
  std::vector<std::string> overrides;    // both runs (after the shortening)
  std::vector<std::string> device_only;  // the run on the device under test only (bf16)
  double p_tol = 0.01;
  double loss_tol = 0.02;
};

// The data both kinds of config read, generated once per process into `dir`.
std::vector<std::string> dense_data(const fs::path& dir) {
  const std::string d = (dir / "dense").string();
  return {"data.train.features=" + d + "/trn_X.npy",
          "data.train.labels=" + d + "/trn_X_Y.txt",
          "data.test.features=" + d + "/tst_X.npy",
          "data.test.labels=" + d + "/tst_X_Y.txt",
          "data.synth.train=4000",
          "data.synth.test=2000"};
}
// The sparse synthetic set of tools/bitcheck.sh (xmctrain synth --format sparse: 2000
// labels), smaller.
std::vector<std::string> sparse_data(const fs::path& dir) {
  const std::string d = (dir / "sparse").string();
  return {"data.train.path=" + d + "/train.txt",
          "data.test.path=" + d + "/test.txt",
          "data.synth.enabled=true",
          "data.synth.format=sparse",
          "data.synth.train=4000",
          "data.synth.test=2000",
          "data.synth.labels=2000",
          "data.synth.clusters=50",
          "data.synth.seed=0"};
}

std::vector<Row> rows(const fs::path& dir) {
  const auto dense = dense_data(dir), sparse = sparse_data(dir);
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<std::string> fanin = {"model.output.rewire.interval=8", "optim.output.lr=0.02",
                                          "optim.encoder.lr=0.02"};
  const auto ff = with(with(dense, fanin), {"model.output.intermediate=256"});
  const auto gs = with(with(dense, fanin), {"model.output.tail_projection=256"});
  return {
      {"quickstart", "quickstart", dense, {}},
      {"quickstart bf16", "quickstart", dense, {"model.output.precision=bf16"}, 0.03, 0.05},
      {"dense (sparse input)", "dense", sparse, {}},
      {"bottleneck", "bottleneck", dense, {}},
      {"fixed_fanin", "fixed_fanin", ff, {}, 0.02, 0.05},
      {"fixed_fanin bce, no intermediate, dropout",
       "fixed_fanin",
       with(ff,
            {"model.output.loss=bce", "model.output.intermediate=0", "model.output.dropout=0.1"}),
       {},
       0.02,
       0.05},
      {"group_shared", "group_shared", gs, {}, 0.01, 0.05},
      {"group_shared bf16", "group_shared", gs, {"model.output.precision=bf16"}, 0.03, 0.05},
      {"group_shared frequency grouping, head projection",
       "group_shared",
       with(gs, {"model.output.grouping=frequency", "model.output.head_dim=32"}),
       {},
       0.01,
       0.05},
      {"lsh_sampled", "lsh_sampled", with(sparse, {"model.output.rebuild_interval=10"}), {}},
      {"anns_sampled", "anns_sampled", dense, {}},
  };
}

struct Trained {
  ExperimentConfig cfg;
  nlohmann::json results;
  std::vector<double> losses;  // per epoch (metrics.jsonl)
};

double metric(const nlohmann::json& results, int at) {
  return results["metrics"]["P@" + std::to_string(at)].get<double>();
}

// The shipped config with the shortening, the row's overrides and `extra`, trained on
// `device` into dir/out.
Trained train(const Row& row, const std::vector<std::string>& extra, Device device,
              const fs::path& out) {
  std::vector<std::string> overrides = {"train.epochs=2", "threads=2",
                                        "optim.schedule.warmup_steps=0"};
  overrides.insert(overrides.end(), row.overrides.begin(), row.overrides.end());
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  Trained t;
  t.cfg = load_config(std::string(XMC_SOURCE_DIR) + "/configs/" + row.config + ".yaml", overrides,
                      output_types());
  TrainOptions opt;
  opt.device = std::string(to_string(device));
  opt.out_dir = out.string();
  opt.config_yaml = dump_config(t.cfg);
  t.results = run_training(t.cfg, opt).results;
  std::ifstream f(out / run_file::metrics);
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) t.losses.push_back(j["loss"].get<double>());
    }
  return t;
}

// A run's checkpoint loaded on `device` and evaluated on the config's test set: P@1..5.
std::vector<double> evaluate_checkpoint(const Trained& t, Device device) {
  LoadedModel lm = load_model(t.results["run_dir"].get<std::string>() + "/" + run_file::checkpoint,
                              std::string(to_string(device)), 2);
  CHECK(lm.ctx->device() == device);
  const DataSourceConfig& c = t.cfg.data.test;
  io::DataSource src;
  src.path = c.path;
  src.features = c.features;
  src.labels = c.labels;
  src.format = c.format;
  src.hdf5_dataset = c.hdf5_dataset;
  src.read.index_base = static_cast<int>(c.index_base);
  const Dataset test = io::load_dataset(src);
  EvalSettings es;
  es.k = 5;
  return evaluate_dataset(*lm.model, test, es).metrics.p;
}

// The checkpoint of run `t` (trained on `trained_on`) evaluated on `device`.
void check_checkpoint_on(const std::string& what, const Trained& t, Device device) {
  const std::vector<double> p = evaluate_checkpoint(t, device);
  REQUIRE(p.size() >= 5);
  for (int k : {1, 5})
    expect_close(what + " checkpoint evaluated on " + std::string(to_string(device)) + ": P@" +
                     std::to_string(k),
                 p[static_cast<size_t>(k - 1)], metric(t.results, k), 0.005, 0);
}

}  // namespace

DEVICE_TEST(
    "training: the shipped configs train alike on the CPU and the device, checkpoints "
    "load across",
    "[training]") {
  // One folder and one set of CPU runs per process: sections rerun the body.
  static TempDir dir;
  static std::map<std::string, Trained> cpu_runs;
  const Device dev = ctx.device();
  for (const Row& row : rows(dir.path())) {
    const bool cuda_only = !row.device_only.empty();  // bf16: the CPU refuses it
    if (cuda_only && !ctx.on_gpu()) continue;
    DYNAMIC_SECTION(row.name) {
      // The CPU reference (the same for a row and its bf16 variant).
      std::string key = row.config;
      for (const auto& o : row.overrides) key += " " + o;
      if (!cpu_runs.count(key))
        cpu_runs.emplace(key, train(row, {}, Device::cpu,
                                    dir.path() / ("cpu-" + std::to_string(cpu_runs.size()))));
      const Trained& ref = cpu_runs.at(key);
      std::string folder = "dev-" + row.name;
      for (char& ch : folder)
        if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-') ch = '_';
      const Trained got =
          ctx.on_gpu() ? train(row, row.device_only, dev, dir.path() / folder) : ref;
      INFO(row.name << ": P@1 " << metric(ref.results, 1) << " / " << metric(got.results, 1)
                    << ", P@5 " << metric(ref.results, 5) << " / " << metric(got.results, 5)
                    << " (cpu / " << to_string(dev) << ")");
      CHECK(got.results["device"] == std::string(to_string(dev)));
      if (ctx.on_gpu()) CHECK(got.results.contains("gpu"));
      REQUIRE(ref.losses.size() == 2);
      REQUIRE(got.losses.size() == ref.losses.size());
      for (size_t e = 0; e < ref.losses.size(); ++e)
        expect_close("epoch " + std::to_string(e + 1) + " loss", got.losses[e], ref.losses[e], 0,
                     row.loss_tol);
      for (int k : {1, 3, 5})
        expect_close("P@" + std::to_string(k), metric(got.results, k), metric(ref.results, k),
                     row.p_tol, 0);
      // Each checkpoint on the other device (the (cpu) run: its one checkpoint on the CPU).
      check_checkpoint_on("the CPU run's", ref, dev);
      if (ctx.on_gpu() && !cuda_only)
        check_checkpoint_on(std::string("the ") + std::string(to_string(dev)) + " run's", got,
                            Device::cpu);
    }
  }
}
