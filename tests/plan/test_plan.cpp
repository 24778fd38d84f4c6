// `xmctrain plan` (issue 41) checked against short real trainings of every backend, and its
// answers to impossible requests.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/blas_kernels.h"
#include "support/test_support.h"

using namespace xmc::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A small dense synthetic problem (8 steps of 256 points, 3000 labels, d = 64; dense with
// a linear encoder, so that plan's encoder part is checked too, the others without), one
// thread, one epoch, no checkpoint; anns_sampled's first index refresh after the run (a
// refresh builds an HNSW index the step does not need).
std::string plan_config(const fs::path& data, const std::string& backend) {
  const std::string extra = backend == "anns_sampled" ? ", start_epoch: 2" : "";
  const std::string encoder =
      backend == "dense" ? "[{type: linear, out: 96, activation: relu, dropout: 0.1}]" : "[]";
  return "name: plan-" + backend +
         "\nseed: 1\ndevice: cpu\nthreads: 1\n"
         "data:\n"
         "  train: {features: " +
         (data / "trn_X.npy").string() + ", labels: " + (data / "trn_X_Y.txt").string() +
         "}\n"
         "  test: {features: " +
         (data / "tst_X.npy").string() + ", labels: " + (data / "tst_X_Y.txt").string() +
         "}\n"
         "  synth: {enabled: true, format: dense, train: 2048, test: 500, labels: 3000, "
         "features: 64, clusters: 30, seed: 5}\n"
         "model:\n"
         "  encoder: " +
         encoder +
         "\n"
         "  output: {type: " +
         backend + extra +
         "}\n"
         "optim:\n"
         "  encoder: {type: adam, lr: 0.01}\n"
         "  output: {type: adam, lr: 0.01}\n"
         "train: {epochs: 1, batch_size: 256, checkpoint_every: 0, log_every_s: 100}\n"
         "eval: {k: 5}\n";
}

}  // namespace

// The acceptance of issue 41 asks for memory within 10% of the ledger's peak and the step
// within 30% on a quiet machine. Memory is deterministic, so 10% is asserted here. Time is
// not, on a shared CI machine (another build or test runs on the same cores; the ceilings
// are measured once, before the runs, under whatever load there was then; the sampled
// backends' host work is measured by plan itself, at its probe shape, when it runs). So CI
// asserts the prediction within a factor of 8 either way: what a wrong unit, a missing op
// or a formula off by a factor of B or d would break, and what noise does not; the 30%
// comparison is docs/benchmarks.md's, "Plan against measured runs".
TEST_CASE(
    "plan: predicted peak memory within 10% of the ledger and step time within 8x, every backend") {
  TempDir tmp;
  const fs::path ceilings = tmp / "ceilings.json";
  auto c = run_cli({"bench", "ceilings", "--threads", "1", "--out", ceilings.string(), "--json"});
  INFO(c.err);
  REQUIRE(c.exit_code == 0);
  for (const std::string backend :
       {"dense", "bottleneck", "fixed_fanin", "group_shared", "lsh_sampled", "anns_sampled"}) {
    INFO(backend);
    const fs::path cfg = tmp / (backend + ".yaml");
    write_file(cfg, plan_config(tmp / "data", backend));
    auto r = run_cli({"train", cfg.string(), "--out", (tmp / ("run_" + backend)).string()});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const json res = json::parse(read_file(tmp / ("run_" + backend) / "results.json"));
    auto p = run_cli(
        {"plan", cfg.string(), "--ceilings", ceilings.string(), "--threads", "1", "--json"});
    INFO(p.err);
    REQUIRE(p.exit_code == 0);
    const json plan = json::parse(p.out)["backends"][0];
    REQUIRE(plan["backend"] == backend);

    // The output layer's three parts are its formulas: equal to what the built layer reports.
    const json& m = plan["memory"];
    CHECK(m["output_layer"].get<double>() + m["optimizer"].get<double>() +
              m["workspace"].get<double>() ==
          res["output_layer_analytic_bytes"].get<double>());
    CHECK(res["output_layer_analytic_bytes"] == res["output_layer_bytes"]);
    const double peak = res["memory"]["host"]["total"]["peak"].get<double>();
    const double predicted = m["total"].get<double>();
    INFO("ledger peak " << peak << " predicted " << predicted);
    CHECK(predicted >= 0.9 * peak);
    CHECK(predicted <= 1.1 * peak);

    std::ifstream metrics(tmp / ("run_" + backend) / "metrics.jsonl");
    std::string line, last;
    while (std::getline(metrics, line))
      if (line.find("\"epoch_seconds\"") != std::string::npos) last = line;
    const json epoch = json::parse(last);
    const double step = epoch["epoch_seconds"].get<double>() / epoch["step"].get<double>();
    const double step_plan = plan["time"]["step_seconds"].get<double>();
    INFO("measured step " << step << " s, predicted " << step_plan << " s");
    CHECK(epoch["step"] == 8);
    CHECK(plan["time"]["steps_per_epoch"] == 8);
    // The sampled backends' host work is priced (measured at the probe shape), the
    // others have none.
    const bool sampled = backend == "lsh_sampled" || backend == "anns_sampled";
    CHECK(plan["time"]["host_candidates"] == sampled);
    if (sampled)
      CHECK(plan["time"]["host_seconds"].get<double>() > 0.0);
    else
      CHECK(plan["time"]["host_seconds"].get<double>() == 0.0);
    // Loose on purpose (CI machines are noisy): 8x.
    CHECK(step_plan > step / 8);
    CHECK(step_plan < step * 8);
  }
}

// The ceilings name the kernels OpenBLAS ran, and xmctrain never runs kernels below what
// the CPU supports: on a CPU that OpenBLAS does not recognise (it falls back to Prescott's
// SSE3 kernels, as on the dev VM) the binary restarts itself with OPENBLAS_CORETYPE set
// and says so; a core the user chose is kept.
TEST_CASE("bench ceilings: OpenBLAS runs kernels the CPU supports, or the ones the user set") {
  TempDir tmp;
  const fs::path out = tmp / "ceilings.json";
  auto a = run_cli({"bench", "ceilings", "--threads", "1", "--out", out.string(), "--json"});
  INFO(a.err);
  REQUIRE(a.exit_code == 0);
  const std::string kernels = json::parse(a.out)["ceilings"]["blas_kernels"];
  INFO("kernels " << kernels);
  CHECK(xmc::better_blas_kernels(kernels, xmc::cpu_vector_isa()).empty());
  // The restart is reported exactly when OpenBLAS alone would have chosen worse kernels.
  const bool fell_back =
      !xmc::better_blas_kernels(xmc::blas_kernels(), xmc::cpu_vector_isa()).empty();
  CHECK((a.err.find("OpenBLAS did not recognise this CPU") != std::string::npos) == fell_back);

  auto b = run_cli({"bench", "ceilings", "--threads", "1", "--out", out.string(), "--json"},
                   {{"OPENBLAS_CORETYPE", "Prescott"}});
  INFO(b.err);
  REQUIRE(b.exit_code == 0);
  CHECK(json::parse(b.out)["ceilings"]["blas_kernels"] == "Prescott");
  CHECK(b.err.find("OpenBLAS did not recognise") == std::string::npos);
  CHECK(json::parse(read_file(out))["ceilings"]["blas_kernels"] == "Prescott");
}

// plan's cached CPU ceilings hold only for the BLAS kernels they were measured with (a
// cache written while OpenBLAS ran its Prescott fallback has a quarter of the sgemm rate).
TEST_CASE("plan: a CPU ceilings cache measured with other BLAS kernels is measured again") {
  TempDir tmp;
  const std::vector<std::pair<std::string, std::string>> env = {
      {"XDG_CACHE_HOME", tmp.path().string()}};
  const std::vector<std::string> plan = {"plan",  "--labels",  "1000", "--dim",
                                         "64",    "--points",  "1000", "--backend",
                                         "dense", "--threads", "1",    "--json"};
  fs::create_directories(tmp / "xmctrain");
  const fs::path cache = tmp / "xmctrain" / "ceilings-cpu-1t.json";
  write_file(cache, R"({"ceilings": {"sgemm_gflops": 0.001, "memory_gbps": 0.001, "blas_kernels": )"
                    R"("NotACore"}, "threads": 1})");
  auto stale = run_cli(plan, env);
  INFO(stale.err);
  REQUIRE(stale.exit_code == 0);
  const json a = json::parse(stale.out)["ceilings"];
  CHECK(a["sgemm_gflops"].get<double>() > 0.1);  // measured now, not the cache's 0.001
  CHECK_THAT(a["source"].get<std::string>(),
             Catch::Matchers::Contains("measured with OpenBLAS NotACore kernels"));

  // `bench ceilings` rewrites the cache with this binary's kernels: plan takes it.
  auto c = run_cli({"bench", "ceilings", "--threads", "1"}, env);
  INFO(c.err);
  REQUIRE(c.exit_code == 0);
  auto fresh = run_cli(plan, env);
  INFO(fresh.err);
  REQUIRE(fresh.exit_code == 0);
  const json b = json::parse(fresh.out)["ceilings"];
  CHECK_THAT(b["source"].get<std::string>(), Catch::Matchers::Contains("cached by"));
  CHECK(b["sgemm_gflops"] == json::parse(read_file(cache))["ceilings"]["sgemm_gflops"]);
}

TEST_CASE("plan: impossible requests exit 2 with a message") {
  const std::vector<std::string> ceil = {"--gemm-gflops", "10", "--memory-gbps", "10"};
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "plan");
    args.insert(args.end(), ceil.begin(), ceil.end());
    return run_cli(args);
  };
  auto r = run({"--labels", "0", "--dim", "64", "--points", "1000"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Matchers::Contains("--labels must be at least 1"));
  r = run({"--labels", "1000", "--dim", "64", "--points", "1000", "--backend", "densest"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Matchers::Contains("densest"));
  CHECK_THAT(r.err, Catch::Matchers::Contains("group_shared"));  // the known ones listed
  r = run({"--labels", "1000000", "--dim", "768", "--points", "1000", "--memory", "1MiB"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Matchers::Contains("no backend fits the memory budget of 1.0 MiB"));
  // What the layer's constructor refuses, plan refuses (fixed_fanin's default F is 64).
  r = run({"--labels", "1000", "--dim", "32", "--points", "1000", "--backend", "fixed_fanin"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Matchers::Contains("fan_in 64 exceeds the 32 inputs"));
  r = run({"--labels", "1000", "--dim", "64", "--points", "1000", "--memory", "lots"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Matchers::Contains("--memory='lots'"));
  r = run_cli({"plan", "--labels", "1000", "--dim", "64", "--points", "1000", "--device", "cuda"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Matchers::Contains("needs the GPU's ceilings"));
}

// On a GPU one process draws the sampled backends' candidates on the device: no host work
// (nothing measured here stands for it), the step priced from the counted work (lsh: the
// draw's bytes counted too); lsh_sampled's shared sets keep the host sampler: not priced.
TEST_CASE("plan: the sampled backends' device draw on cuda has no host work") {
  const std::vector<std::string> base = {
      "plan",     "--labels", "100000",        "--dim",  "256",           "--points", "50000",
      "--device", "cuda",     "--gemm-gflops", "100000", "--memory-gbps", "3000",     "--json"};
  auto plan_of = [&](const std::string& backend, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--backend", backend});
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_cli(args);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return json::parse(r.out);
  };
  for (const std::string backend : {"lsh_sampled", "anns_sampled"}) {
    INFO(backend);
    const json j = plan_of(backend);
    const json t = j["backends"][0]["time"];
    CHECK(t["host_candidates"] == false);
    CHECK(t["host_seconds"].get<double>() == 0.0);
    CHECK(t["step_seconds"].get<double>() > 0.0);
  }
  // lsh's draw: 32 bytes a reached bucket entry (256 points × 32 tables × 128 slots).
  const double lsh = plan_of("lsh_sampled")["backends"][0]["time"]["bytes"].get<double>();
  const double shared =
      plan_of("lsh_sampled",
              {"--set", "model.output.shared_candidates=true"})["backends"][0]["time"]["bytes"]
          .get<double>();
  CHECK(lsh - shared == Approx(32.0 * 256 * 32 * 128));
  const json h = plan_of("lsh_sampled", {"--set", "model.output.shared_candidates=true"});
  CHECK(h["backends"][0]["time"]["host_candidates"] == true);
  CHECK(h["ceilings"]["host_source"] == "not priced");
  // The Markdown says which.
  std::vector<std::string> md(base.begin(), base.end() - 1);
  md.insert(md.end(), {"--backend", "anns_sampled"});
  auto r = run_cli(md);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Matchers::Contains("one process draws its candidates on the device"));
}

TEST_CASE("plan: all six backends, Markdown and JSON, fit and the largest L within the budget") {
  auto r = run_cli({"plan", "--labels", "100000", "--dim", "256", "--points", "50000", "--memory",
                    "1GiB", "--gemm-gflops", "100", "--memory-gbps", "20", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  REQUIRE(j["backends"].size() == 6);
  for (const auto& b : j["backends"]) {
    INFO(b.dump());
    CHECK(!b.contains("error"));
    // Memory grows with L: the largest L that fits is within the budget, L + 1 not.
    CHECK(b["fits"] == (b["memory"]["total"].get<double>() <= 1073741824.0));
    CHECK(b["max_labels"].get<int64_t>() > 0);
    CHECK(b["time"]["steps_per_epoch"] == 196);
    CHECK(b["time"]["step_seconds"].get<double>() > 0);
  }
  // dense at L = max_labels fits, at max_labels + 1 it does not.
  const int64_t top = j["backends"][0]["max_labels"].get<int64_t>();
  for (int64_t l : {top, top + 1}) {
    auto q = run_cli({"plan", "--labels", std::to_string(l), "--dim", "256", "--points", "50000",
                      "--memory", "1GiB", "--backend", "dense", "--gemm-gflops", "100",
                      "--memory-gbps", "20", "--json"});
    if (l == top) {
      REQUIRE(q.exit_code == 0);
      CHECK(json::parse(q.out)["backends"][0]["fits"] == true);
    } else {
      CHECK(q.exit_code == 2);  // the only backend asked for does not fit
    }
  }
  auto md = run_cli({"plan", "--labels", "100000", "--dim", "256", "--points", "50000",
                     "--gemm-gflops", "100", "--memory-gbps", "20"});
  REQUIRE(md.exit_code == 0);
  CHECK_THAT(md.out, Catch::Matchers::Contains("| group_shared |"));
  CHECK_THAT(md.out, Catch::Matchers::Contains("given on the command line"));
}
