// End-to-end: xmctrain train / eval / predict / --resume on a small synthetic dataset, and
// the failures a user meets first (bad config, unwritable output).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "io/load.h"
#include "support/test_support.h"
#include "train/checkpoint.h"

using namespace xmc::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json read_json(const fs::path& p) { return json::parse(read_file(p)); }

// P@1 of always predicting the most frequent training label.
double popularity_p1(const fs::path& train_labels, const fs::path& test_labels) {
  auto count = [](const fs::path& p) {
    std::ifstream in(p);
    int64_t n = 0, l = 0;
    in >> n >> l;
    std::string line;
    std::getline(in, line);
    std::vector<int64_t> freq(static_cast<size_t>(l), 0);
    std::vector<std::vector<int64_t>> rows;
    while (std::getline(in, line)) {
      std::vector<int64_t> row;
      std::istringstream ss(line);
      std::string tok;
      while (ss >> tok) {
        int64_t id = std::stoll(tok.substr(0, tok.find(':')));
        freq[static_cast<size_t>(id)]++;
        row.push_back(id);
      }
      rows.push_back(row);
    }
    return std::make_pair(freq, rows);
  };
  auto [train_freq, unused] = count(train_labels);
  auto [unused2, test_rows] = count(test_labels);
  const int64_t top = std::max_element(train_freq.begin(), train_freq.end()) - train_freq.begin();
  int64_t hits = 0;
  for (const auto& r : test_rows) hits += std::count(r.begin(), r.end(), top);
  return static_cast<double>(hits) / static_cast<double>(test_rows.size());
}

// `xmctrain train <dir>/c.yaml --out <dir>/<out> --json EXTRA...`, which must succeed: its
// JSON summary.
json train_json(const fs::path& dir, const std::string& out,
                const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"train", (dir / "c.yaml").string(), "--out",
                                   (dir / out).string(), "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

// The checkpoint of run <dir>/<out> evaluates to the run's P@1.
void check_checkpoint_p1(const fs::path& dir, const std::string& out, double p1) {
  auto e = run_cli({"eval", "--checkpoint", (dir / out / "checkpoint.h5").string(), "--json"});
  INFO(e.err);
  REQUIRE(e.exit_code == 0);
  CHECK(json::parse(e.out)["metrics"]["P@1"].get<double>() == Approx(p1).margin(1e-12));
}

// `train <dir>/c.yaml --out <dir>/<out> SETS` halted after epoch 1, then resumed: it ends
// with the whole run's metrics.
void check_resume(const fs::path& dir, const std::string& out, const std::vector<std::string>& sets,
                  const json& whole) {
  std::vector<std::string> args = {
      "train", (dir / "c.yaml").string(), "--out", (dir / out).string(), "--halt-after-epoch", "1"};
  args.insert(args.end(), sets.begin(), sets.end());
  auto part = run_cli(args);
  INFO(part.err);
  REQUIRE(part.exit_code == 0);
  std::vector<std::string> resume = sets;
  resume.push_back("--resume");
  CHECK(train_json(dir, out, resume)["metrics"] == whole["metrics"]);
}

// The small run of the lean-precision tests (fp32 Adam; the tests set the lean keys): a
// synthetic dense problem of 2000 labels × d = 128 (the weights dominate the layer's bytes,
// as at WordNet's 17k × 768), 3 epochs, written to <dir>/c.yaml.
void write_lean_config(const fs::path& dir) {
  const std::string data = (dir / "data").string();
  write_file(dir / "c.yaml",
             "name: lean\nseed: 7\ndevice: cpu\nthreads: 1\n"
             "data:\n"
             "  train: {features: " +
                 data + "/trn_X.npy, labels: " + data +
                 "/trn_X_Y.txt}\n"
                 "  test: {features: " +
                 data + "/tst_X.npy, labels: " + data +
                 "/tst_X_Y.txt}\n"
                 "  synth: {enabled: true, format: dense, train: 6000, test: 1500, labels: 2000, "
                 "features: 128, clusters: 20, seed: 3}\n"
                 "model:\n"
                 "  encoder: [{type: linear, out: 128, activation: relu}]\n"
                 "  output: {type: dense, loss: bce, chunk_size: 128}\n"
                 "optim:\n"
                 "  encoder: {type: adam, lr: 0.01}\n"
                 "  output: {type: adam, lr: 0.01}\n"
                 "train: {epochs: 3, batch_size: 128, log_every_s: 100}\n"
                 "eval: {k: 5}\n");
}

}  // namespace

TEST_CASE("train then eval of the checkpoint then predict then eval of the predictions agree") {
  TempDir tmp;
  write_file(tmp / "c.yaml", small_train_config(tmp / "data", 5));
  auto r = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "run").string(), "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  json res = json::parse(r.out);
  for (auto f : {"config.resolved.yaml", "metrics.jsonl", "results.json", "checkpoint.h5"})
    CHECK(fs::exists(tmp / "run" / f));
  CHECK(res == read_json(tmp / "run" / "results.json"));
  const double p1 = res["metrics"]["P@1"].get<double>();
  // Floor: the popularity baseline (always the most frequent training label, about 0.2
  // here) is what a model that ignores the features gets. The generator's oracle (true
  // prototype similarity) reaches about 0.65 on this small, noisy problem, and 5 epochs
  // reach about 0.55-0.6; the floor asks for 2.5x the baseline and 0.25 above it.
  const double pop = popularity_p1(tmp / "data" / "trn_X_Y.txt", tmp / "data" / "tst_X_Y.txt");
  INFO("P@1 " << p1 << " popularity " << pop);
  CHECK(pop > 0.1);
  CHECK(p1 > std::max(2.5 * pop, pop + 0.25));

  // metrics.jsonl: one object per epoch with the required fields.
  std::ifstream in(tmp / "run" / "metrics.jsonl");
  std::string line;
  int epochs = 0;
  while (std::getline(in, line)) {
    json j = json::parse(line);
    ++epochs;
    CHECK(j["epoch"] == epochs);
    for (auto key : {"loss", "epoch_seconds", "samples_per_s", "metrics", "memory", "peak_rss_bytes"})
      CHECK(j.contains(key));
    // The phases split the epoch's steps: each non-negative, together within its time.
    double phases = 0.0;
    for (auto key : {"data", "encoder_forward", "output", "reduce", "encoder_backward",
                     "output_refresh"}) {
      INFO(key);
      const double t = j["phase_seconds"].at(key).get<double>();
      CHECK(t >= 0.0);
      phases += t;
    }
    CHECK(j["phase_seconds"]["output"].get<double>() > 0.0);
    CHECK(phases <= j["epoch_seconds"].get<double>());
    CHECK(phases >= 0.5 * j["epoch_seconds"].get<double>());
  }
  CHECK(epochs == 5);

  // eval --checkpoint reproduces the final metrics.
  auto e = run_cli({"eval", "--checkpoint", (tmp / "run" / "checkpoint.h5").string(), "--json"});
  INFO(e.err);
  REQUIRE(e.exit_code == 0);
  json ej = json::parse(e.out)["metrics"];
  for (auto& [key, value] : res["metrics"].items()) {
    INFO(key);
    CHECK(ej[key].get<double>() == Approx(value.get<double>()).margin(1e-12));
  }

  // predict writes top-k; scoring that file gives the same metrics again.
  auto p = run_cli({"predict", "--checkpoint", (tmp / "run" / "checkpoint.h5").string(),
                    "--features", (tmp / "data" / "tst_X.npy").string(), "--labels",
                    (tmp / "data" / "tst_X_Y.txt").string(), "--k", "5", "--out",
                    (tmp / "pred.txt").string()});
  INFO(p.err);
  REQUIRE(p.exit_code == 0);
  auto ep = run_cli({"eval", "--predictions", (tmp / "pred.txt").string(), "--data",
                     (tmp / "data" / "tst_X_Y.txt").string(), "--train",
                     (tmp / "data" / "trn_X_Y.txt").string(), "--json"});
  INFO(ep.err);
  REQUIRE(ep.exit_code == 0);
  json pj = json::parse(ep.out)["metrics"];
  for (auto key : {"P@1", "P@5", "nDCG@3", "PSP@1", "PSP@5", "R@5"})
    CHECK(pj[key].get<double>() == Approx(res["metrics"][key].get<double>()).margin(1e-9));
}

TEST_CASE("an interrupted run resumed gives the same final metrics") {
  TempDir tmp;
  write_file(tmp / "c.yaml", small_train_config(tmp / "data", 3));
  auto full = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "a").string(), "--json"});
  INFO(full.err);
  REQUIRE(full.exit_code == 0);
  auto part = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "b").string(),
                       "--halt-after-epoch", "1"});
  INFO(part.err);
  REQUIRE(part.exit_code == 0);
  CHECK_FALSE(fs::exists(tmp / "b" / "results.json"));
  auto resumed = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "b").string(),
                          "--resume", "--json"});
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  json a = json::parse(full.out)["metrics"], b = json::parse(resumed.out)["metrics"];
  CHECK(a == b);
  // metrics.jsonl of the resumed run has each epoch once.
  std::ifstream in(tmp / "b" / "metrics.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) CHECK(json::parse(line)["epoch"] == ++n);
  CHECK(n == 3);
}

// The small version of configs/wordnet_dense_lean.yaml against fp32 Adam: the output layer
// in bf16 with stochastic rounding, Adam with beta1 = 0 and its one state array in bf16,
// narrow label chunks. 2000 labels × d = 128 (the weights dominate the layer's bytes, as
// at WordNet's 17k × 768). The lean layer's ledger bytes are at most 35% of fp32 Adam's;
// its P@1 after 3 epochs at most 2 points below (the WordNet table holds the 0.3 target:
// docs/benchmarks.md, "Lean precision on WordNet"); its checkpoint (bf16 weights and
// state, saved as fp32) evaluates to the run's metrics; a run halted after epoch 1 and
// resumed ends where the whole run does (the bf16 state and the rounding draws restart
// exactly). Then the same with optim.output.rowwise, and fp8 weights (below).
TEST_CASE(
    "the lean bf16 and fp8 dense modes: a third / a tenth of fp32 Adam's bytes, P@1, checkpoints") {
  TempDir tmp;
  write_lean_config(tmp.path());
  const std::vector<std::string> lean = {
      "--set", "model.output.precision=bf16",    "--set", "model.output.stochastic_rounding=true",
      "--set", "model.output.chunk_size=32",     "--set", "optim.output.beta1=0",
      "--set", "optim.output.state_precision=bf16"};
  const json base = train_json(tmp.path(), "base"), thin = train_json(tmp.path(), "lean", lean);
  const double base_bytes = base["output_layer_bytes"].get<double>();
  const double lean_bytes = thin["output_layer_bytes"].get<double>();
  INFO("output layer: fp32 Adam " << base_bytes << " bytes, lean " << lean_bytes);
  CHECK(lean_bytes == thin["output_layer_analytic_bytes"].get<double>());
  CHECK(lean_bytes <= 0.35 * base_bytes);
  const double p1 = thin["metrics"]["P@1"].get<double>();
  INFO("P@1: fp32 Adam " << base["metrics"]["P@1"].get<double>() << ", lean " << p1);
  CHECK(p1 >= base["metrics"]["P@1"].get<double>() - 0.02);
  CHECK(p1 > 0.3);  // far above chance: it learned

  check_checkpoint_p1(tmp.path(), "lean", p1);

  // optim.output.rowwise: one second moment per label row, so the label weights keep no
  // per-weight state: at most 20% of fp32 Adam's bytes; its checkpoint (weight_opt2 of
  // shape [labels]) evaluates to the run's metrics.
  std::vector<std::string> row = lean;
  row.insert(row.end(), {"--set", "optim.output.rowwise=true"});
  const json rw = train_json(tmp.path(), "row", row);
  const double row_p1 = rw["metrics"]["P@1"].get<double>();
  INFO("rowwise: " << rw["output_layer_bytes"].get<double>() << " bytes, P@1 " << row_p1);
  CHECK(rw["output_layer_bytes"].get<double>() <= 0.2 * base_bytes);
  CHECK(row_p1 >= base["metrics"]["P@1"].get<double>() - 0.02);
  check_checkpoint_p1(tmp.path(), "row", row_p1);

  // fp8 weights (e4m3, a scale per row) with stochastic rounding and row-wise Adam: a byte a
  // weight; at most 12% of fp32 Adam's bytes, P@1 at most 2 points below (the WordNet table:
  // docs/benchmarks.md, "Lean precision on WordNet"); the checkpoint (saved as fp32, each
  // row re-scaled on load to the same codes) evaluates to the run's metrics, and a run
  // halted after epoch 1 and resumed ends where the whole run does.
  const std::vector<std::string> fp8 = {
      "--set", "model.output.precision=fp8", "--set", "model.output.stochastic_rounding=true",
      "--set", "model.output.chunk_size=32", "--set", "optim.output.beta1=0",
      "--set", "optim.output.rowwise=true"};
  const json f8 = train_json(tmp.path(), "fp8", fp8);
  const double f8_p1 = f8["metrics"]["P@1"].get<double>();
  INFO("fp8 rowwise: " << f8["output_layer_bytes"].get<double>() << " bytes, P@1 " << f8_p1);
  CHECK(f8["output_layer_bytes"].get<double>() == f8["output_layer_analytic_bytes"].get<double>());
  CHECK(f8["output_layer_bytes"].get<double>() <= 0.12 * base_bytes);
  CHECK(f8_p1 >= base["metrics"]["P@1"].get<double>() - 0.02);
  check_checkpoint_p1(tmp.path(), "fp8", f8_p1);
  check_resume(tmp.path(), "part8", fp8, f8);
  // group_shared keeps fp32 or bf16: fp8 is refused with the key's name and the choices.
  auto gs8 = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "gs8").string(), "--set",
                      "model.output.type=group_shared", "--set", "model.output.precision=fp8"});
  CHECK(gs8.exit_code != 0);
  CHECK(gs8.err.find("model.output.precision: expected one of fp32, bf16, got 'fp8'") !=
        std::string::npos);

  check_resume(tmp.path(), "part", lean, thin);
}

// optim.output.kahan on the lean runs: bf16 weights with row-wise Adam (nearest rounding)
// and fp8 weights, each with a bf16 compensation per weight. The ledger holds exactly 2
// bytes a weight more than the same run without it (and equals the analytic bytes); P@1
// is at most 2 points below the uncompensated run's (the WordNet table: docs/benchmarks.md,
// "Lean precision on WordNet"); the checkpoint (the compensation saved as
// output/weight_kahan) evaluates to the run's metrics, and a run halted after epoch 1 and
// resumed ends where the whole run does. Layers and weights without it refuse the key.
TEST_CASE("Kahan compensation of the lean dense modes: its bytes, P@1, checkpoints, refusals") {
  TempDir tmp;
  write_lean_config(tmp.path());
  const std::vector<std::string> row = {
      "--set", "model.output.precision=bf16", "--set", "model.output.chunk_size=32",
      "--set", "optim.output.beta1=0",        "--set", "optim.output.rowwise=true"};
  std::vector<std::string> kahan = row;
  kahan.insert(kahan.end(), {"--set", "optim.output.kahan=true"});
  const json plain = train_json(tmp.path(), "row", row),
             comp = train_json(tmp.path(), "kahan", kahan);
  const double weights = 2000.0 * 128.0;
  const double bytes = comp["output_layer_bytes"].get<double>();
  CHECK(bytes == comp["output_layer_analytic_bytes"].get<double>());
  CHECK(bytes - plain["output_layer_bytes"].get<double>() == 2.0 * weights);
  const double p1 = comp["metrics"]["P@1"].get<double>();
  INFO("P@1: rowwise bf16 " << plain["metrics"]["P@1"].get<double>() << ", with kahan " << p1);
  CHECK(p1 >= plain["metrics"]["P@1"].get<double>() - 0.02);
  CHECK(comp["metrics"] != plain["metrics"]);  // the option is applied
  check_checkpoint_p1(tmp.path(), "kahan", p1);
  check_resume(tmp.path(), "part", kahan, comp);
  // fp8 weights (stochastic rounding, row-wise Adam) with a compensation: 3 bytes a weight.
  const std::vector<std::string> fp8 = {
      "--set", "model.output.precision=fp8", "--set", "model.output.stochastic_rounding=true",
      "--set", "model.output.chunk_size=32", "--set", "optim.output.beta1=0",
      "--set", "optim.output.rowwise=true",  "--set", "optim.output.kahan=true"};
  const json f8 = train_json(tmp.path(), "fp8", fp8);
  CHECK(f8["output_layer_bytes"].get<double>() == f8["output_layer_analytic_bytes"].get<double>());
  CHECK(f8["output_layer_bytes"].get<double>() - bytes == -weights + 4.0 * 2000);  // + row scales
  CHECK(f8["metrics"]["P@1"].get<double>() >= plain["metrics"]["P@1"].get<double>() - 0.02);

  // Refused: fp32 weights, the fan-in layers, the encoder.
  const auto refused = [&](const std::vector<std::string>& sets, const std::string& says) {
    std::vector<std::string> args = {"train", (tmp / "c.yaml").string(), "--out",
                                     (tmp / "no").string()};
    args.insert(args.end(), sets.begin(), sets.end());
    auto r = run_cli(args);
    INFO(r.err);
    CHECK(r.exit_code != 0);
    CHECK(r.err.find(says) != std::string::npos);
    CHECK_FALSE(fs::exists(tmp / "no" / "checkpoint.h5"));  // nothing trained or written
    CHECK_FALSE(fs::exists(tmp / "no" / "results.json"));
  };
  refused({"--set", "optim.output.kahan=true"}, "optim.output.kahan: Kahan compensation keeps");
  refused({"--set", "optim.output.kahan=true", "--set", "model.output.type=fixed_fanin"},
          "optim.output.kahan: Kahan compensation is for the dense label weights");
  refused({"--set", "optim.encoder.kahan=true"}, "optim.encoder.kahan: the encoder keeps fp32");
}

// model.output.sparse_gradient on the small synthetic run: P@1 within 2 points of the
// exact run's, and a run halted after epoch 1 and resumed ends where the whole run does
// (the draws are keyed by the seed and the optimizer step). The WordNet figures:
// docs/benchmarks.md, "Sparse gradients".
TEST_CASE("the dense layer's sparse gradient: the exact run's P@1, resumes exactly") {
  TempDir tmp;
  write_file(tmp / "c.yaml", small_train_config(tmp / "data", 3));
  const std::vector<std::string> sparse = {"--set", "model.output.sparse_gradient=0.01"};
  const json exact = train_json(tmp.path(), "exact"), sg = train_json(tmp.path(), "sparse", sparse);
  const double p1 = sg["metrics"]["P@1"].get<double>();
  INFO("P@1: exact " << exact["metrics"]["P@1"].get<double>() << ", sparse " << p1);
  CHECK(p1 >= exact["metrics"]["P@1"].get<double>() - 0.02);
  CHECK(sg["metrics"] != exact["metrics"]);  // the option is applied
  check_resume(tmp.path(), "part", sparse, sg);
  // A threshold outside [0, 1] is refused with the key's name.
  auto bad = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "bad").string(), "--set",
                      "model.output.sparse_gradient=2"});
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("sparse_gradient") != std::string::npos);
}

// model.weight_init: centroid. With no encoder (h = the features) and an output step too
// small to move a float, the checkpoint holds the initial rows: label l's row is the mean of
// its training points' features scaled to centroid_scale / (the points' mean norm); a
// label without training points keeps its random row. docs/benchmarks.md, "Centroid
// initialisation".
TEST_CASE("weight_init centroid starts each label's row at its training points' mean") {
  TempDir tmp;
  write_file(tmp / "c.yaml", small_train_config(tmp / "data", 1));
  const std::vector<std::string> set = {
      "--set", "model.encoder=[]",        "--set", "optim.output.type=sgd",
      "--set", "optim.output.lr=1e-30",   "--set", "model.weight_init=centroid",
      "--set", "model.centroid_scale=2.5"};
  train_json(tmp.path(), "init", set);
  xmc::io::DataSource src;
  src.features = (tmp / "data" / "trn_X.npy").string();
  src.labels = (tmp / "data" / "trn_X_Y.txt").string();
  const xmc::Dataset train = xmc::io::load_dataset(src);
  const xmc::DenseMatrix& x = train.dense_features();
  const int64_t d = x.cols, labels = train.labels.cols;
  std::vector<double> sum(static_cast<size_t>(labels * d), 0.0), count(labels, 0.0);
  double norms = 0.0;
  for (int64_t i = 0; i < x.rows; ++i) {
    const float* xi = x.values.data() + i * d;
    double sq = 0.0;
    for (int64_t j = 0; j < d; ++j) sq += double{xi[j]} * xi[j];
    norms += std::sqrt(sq);
    for (int64_t p = train.labels.indptr[i]; p < train.labels.indptr[i + 1]; ++p) {
      const int64_t l = train.labels.indices[p];
      count[l] += 1.0;
      for (int64_t j = 0; j < d; ++j) sum[l * d + j] += xi[j];
    }
  }
  const double mean_norm = norms / static_cast<double>(x.rows);
  std::vector<float> w(static_cast<size_t>(labels * d)), b(static_cast<size_t>(labels));
  xmc::CheckpointReader ckpt((tmp / "init" / "checkpoint.h5").string());
  ckpt.read({"output/weight", {labels, d}, w.data()});
  int64_t centred = 0, unseen = 0;
  for (int64_t l = 0; l < labels; ++l) {
    INFO("label " << l << " with " << count[l] << " training points");
    if (count[l] == 0.0) {  // its random row: not zero, not a centroid
      ++unseen;
      CHECK(
          std::any_of(w.begin() + l * d, w.begin() + (l + 1) * d, [](float v) { return v != 0; }));
      continue;
    }
    double sq = 0.0;
    for (int64_t j = 0; j < d; ++j) sq += sum[l * d + j] * sum[l * d + j];
    const double f = 2.5 / (std::sqrt(sq) * mean_norm);
    for (int64_t j = 0; j < d; ++j)
      REQUIRE(w[l * d + j] == Approx(sum[l * d + j] * f).margin(1e-5).epsilon(1e-4));
    ++centred;
  }
  CHECK(centred > labels / 2);
  // A backend without a [labels × d] weight matrix is refused, naming the key.
  auto bad = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "bad").string(), "--set",
                      "model.weight_init=centroid", "--set", "model.output.type=fixed_fanin"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("model.weight_init: centroid") != std::string::npos);
  CHECK(!fs::exists(tmp / "bad" / "checkpoint.h5"));
}

TEST_CASE("a run killed with SIGKILL mid-training resumes to the same final metrics") {
  TempDir tmp;
  // Larger epochs than small_train_config's, so the kill lands inside a later epoch.
  std::string cfg = small_train_config(tmp / "data", 8);
  cfg.replace(cfg.find("train: 3000"), 11, "train: 20000");
  write_file(tmp / "c.yaml", cfg);
  auto full = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "a").string(), "--json"});
  INFO(full.err);
  REQUIRE(full.exit_code == 0);

  const fs::path dir = tmp / "b";
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Child: the real binary, output discarded.
    const std::string out = dir.string(), conf = (tmp / "c.yaml").string();
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);
    execl(XMC_BINARY, XMC_BINARY, "train", conf.c_str(), "--out", out.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  // Kill as soon as the first checkpoint exists (epoch 1 done, epoch 2 running). The
  // deadline only bounds a hung child on a slow or loaded machine: a kill before the first
  // checkpoint would test nothing, so it fails here, not in the resume below.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(600);
  while (!fs::exists(dir / "checkpoint.h5") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const bool checkpointed = fs::exists(dir / "checkpoint.h5");
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(checkpointed);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE_FALSE(fs::exists(dir / "results.json"));  // it was killed before the end

  auto resumed = run_cli({"train", (tmp / "c.yaml").string(), "--out", dir.string(), "--resume",
                          "--json"});
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(json::parse(full.out)["metrics"] == json::parse(resumed.out)["metrics"]);
  // No temporary checkpoint file is left behind.
  for (auto& e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("bad configs fail fast with exit code 2 and name the key") {
  TempDir tmp;
  struct Case {
    std::string yaml, expect;
  };
  std::vector<Case> cases = {
      {"train: {epochs: 2, batch_sise: 3}\n", "batch_size"},
      {"train: {epochs: -3}\n", "train.epochs"},
      {"model: {output: {type: densee}}\n", "densee"},
      {"optim: {output: {type: adamm}}\n", "optim.output.type"},
  };
  for (const auto& c : cases) {
    write_file(tmp / "bad.yaml", c.yaml);
    // "Fast" is checked by what happened, not by a clock (a loaded CI machine is slow):
    // rejected before any data was generated or the run directory was made.
    auto r = run_cli({"train", (tmp / "bad.yaml").string(), "--out", (tmp / "run").string()});
    INFO(c.yaml << " -> " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.expect) != std::string::npos);
    CHECK_FALSE(fs::exists(tmp / "run"));
    CHECK(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator{}) ==
          1);  // only bad.yaml: nothing else was written
  }
}

TEST_CASE("an unwritable output directory fails before training starts") {
  TempDir tmp;
  write_file(tmp / "c.yaml", small_train_config(tmp / "data", 1));
  write_file(tmp / "file", "x");
  auto r = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "file" / "run").string()});
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("run directory") != std::string::npos);
  // Nothing was generated or trained.
  CHECK_FALSE(fs::exists(tmp / "data"));
}

TEST_CASE("device cuda without CUDA support or a GPU fails clearly") {
  TempDir tmp;
  write_file(tmp / "c.yaml", small_train_config(tmp / "data", 1));
  auto r = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "run").string(),
                    "--device", "cuda"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("cuda") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "run" / "checkpoint.h5"));
}
