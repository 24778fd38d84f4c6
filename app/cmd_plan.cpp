// xmctrain plan: predicted peak memory, step and epoch time, and fit of the output-layer
// backends for a problem shape (lib/plan/plan.h), before anything is trained.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench/ceilings.h"
#include "bench/layer_step_bench.h"
#include "commands.h"
#include "config/config_loader.h"
#include "core/blas_kernels.h"
#include "core/error.h"
#include "core/resources.h"
#include "layers/registry.h"
#include "plan/plan.h"

namespace xmc::app {

namespace {

struct PlanOpts {
  std::string config;
  std::vector<std::string> sets;
  int64_t labels = 0, dim = 0, points = 0, test_points = -1, batch = 0;
  double labels_per_point = 0.0;
  std::string device = "cpu";
  std::string memory;
  std::vector<std::string> backends;
  std::string ceilings;
  double gemm_gflops = 0.0, memory_gbps = 0.0, fanin_gflops = 0.0;
  int threads = 0;
  bool json = false;
};

// The fan-in ops' rate: given, or (CPU) measured now at each backend's shape (about half
// a second per shape), or the GEMM rate (a GPU plan without --fanin-gflops).
void resolve_fanin_rate(const PlanOpts& o, Device device, Ceilings& c) {
  if (o.fanin_gflops > 0) {
    const double r = o.fanin_gflops;
    c.fanin_gflops = [r](const FaninShape&) { return r; };
    c.fanin_source = fmt::format("{} GFLOP/s given on the command line", r);
    return;
  }
  if (device == Device::cuda) return;
  auto measured = std::make_shared<std::map<FaninShape, double>>();
  const int threads = o.threads;
  c.fanin_gflops = [measured, threads](const FaninShape& s) {
    auto it = measured->find(s);
    if (it != measured->end()) return it->second;
    const Context ctx(Device::cpu, threads);
    const double r = bench::measure_fanin_gflops(s.batch, s.inputs, s.fan_in, s.group);
    return measured->emplace(s, r).first->second;
  };
  c.fanin_source =
      "measured now on this CPU at each backend's shape (B, m, F, G; 8192 labels, every "
      "gradient nonzero: squared hinge's zero gradients make the real step faster)";
}

// The sampled backends' host work: measured now on a CPU plan, by running the layer's step
// at the probe shape (plan.h host_probe_shape; about a second per backend). A GPU plan
// leaves it out: one process draws on the device (no host work, the draw's bytes counted);
// a shared-set or label-sharded lsh's host sampler runs on the GPU machine's CPU, which
// this machine is not.
void resolve_host_work(const PlanOpts& o, Device device, Ceilings& c) {
  if (device == Device::cuda) return;
  const int threads = o.threads;
  c.measured_step = [threads](const LayerShape& s, const OutputSpec& spec) {
    return bench::measure_layer_step_seconds(s, spec, threads);
  };
  c.host_source =
      "measured now on this CPU: each sampled backend's step at a probe shape (at most 512 MiB "
      "of label rows and 8 192 points, random batches, a random stale hard set) less the model's "
      "price of its counted work there";
}

// GEMM and memory ceilings: given, from a file, from the cache `xmctrain bench ceilings`
// writes, or (CPU only) measured now in about a second.
Ceilings resolve_gemm_memory(const PlanOpts& o, Device device) {
  if (o.gemm_gflops > 0 || o.memory_gbps > 0) {
    if (!(o.gemm_gflops > 0 && o.memory_gbps > 0))
      throw_input("plan: --gemm-gflops and --memory-gbps go together (both positive)");
    return {.gemm_gflops = o.gemm_gflops,
            .memory_gbps = o.memory_gbps,
            .source = "given on the command line"};
  }
  auto from_file = [](const std::string& path, const std::string& how) {
    std::ifstream in(path);
    if (!in) throw_input("plan: cannot read the ceilings file '{}'", path);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw_input("plan: ceilings file '{}' is not JSON: {}", path, e.what());
    }
    Ceilings c = ceilings_from_json(j, "plan: ceilings file '" + path + "'");
    c.source = how + " " + path;
    if (j.contains("threads")) c.source += fmt::format(" ({} threads", j["threads"].get<int>());
    if (j.contains("measured_at"))
      c.source += fmt::format(", measured {}", j["measured_at"].get<std::string>());
    if (j.contains("threads")) c.source += ")";
    return c;
  };
  if (!o.ceilings.empty()) return from_file(o.ceilings, "file");
  if (device == Device::cuda)
    throw_input(
        "plan --device cuda needs the GPU's ceilings: --ceilings FILE (the JSON of `xmctrain "
        "bench dense --device cuda --json` on that GPU) or --gemm-gflops and --memory-gbps");
  const Context ctx(Device::cpu, o.threads);
  const std::string cache = bench::ceilings_cache_path(ctx.threads());
  // The cache holds if it was measured with the BLAS kernels this process runs (the sgemm
  // rate depends on them: core/blas_kernels.h); otherwise the ceilings are measured now.
  std::string why = fmt::format("no cache at {}", cache);
  if (std::filesystem::exists(cache)) {
    Ceilings c = from_file(cache, "cached by `xmctrain bench ceilings` in");
    if (c.blas_kernels == blas_kernels()) return c;
    why = fmt::format(
        "the cache at {} was measured with {} kernels, this process runs {}", cache,
        c.blas_kernels.empty() ? std::string("unrecorded BLAS") : "OpenBLAS " + c.blas_kernels,
        blas_kernels());
  }
  return {.gemm_gflops = bench::measure_sgemm_gflops(1024),
          .memory_gbps = bench::measure_memory_gbps(1LL << 28),
          .source = fmt::format("measured now with {} threads (quick: sgemm 1024³, 256 MiB; {}: "
                                "`xmctrain bench ceilings --threads {}` writes it)",
                                ctx.threads(), why, ctx.threads())};
}

// The machine's ceilings: given, from a file, from the cache `xmctrain bench ceilings`
// writes, or (CPU only) measured now in a few seconds.
Ceilings resolve_ceilings(const PlanOpts& o, Device device) {
  Ceilings c = resolve_gemm_memory(o, device);
  resolve_fanin_rate(o, device, c);
  resolve_host_work(o, device, c);
  return c;
}

// The problem: from the config's synthetic data, the command line overriding it.
PlanProblem make_problem(const PlanOpts& o, const ExperimentConfig& cfg, bool from_config) {
  PlanProblem p;
  p.device = o.device == "cuda" ? Device::cuda : Device::cpu;
  p.config = cfg;
  if (from_config && cfg.data.synth.enabled) {
    SynthConfig s = cfg.data.synth;
    s.resolve();
    p.labels = s.labels;
    p.features = s.features;
    p.points = s.train;
    p.test_points = s.test;
    p.sparse = s.format == "sparse";
    p.nnz_per_point = static_cast<double>(s.nnz);
    p.labels_per_point = s.labels_per_point;
  } else if (from_config && (o.labels == 0 || o.dim == 0 || o.points == 0)) {
    throw_input(
        "plan {}: data.synth is not enabled, so the data's shape is not in the config: give "
        "--labels, --dim and --points",
        o.config);
  } else {
    p.test_points = 0;
    p.labels_per_point = 5.0;
  }
  if (o.labels != 0) p.labels = o.labels;
  if (o.dim != 0) {
    p.features = o.dim;
    p.sparse = false;
  }
  if (o.points != 0) p.points = o.points;
  if (o.test_points >= 0) p.test_points = o.test_points;
  if (o.labels_per_point > 0) p.labels_per_point = o.labels_per_point;
  if (o.batch != 0) p.config.train.batch_size = o.batch;
  if (p.labels < 1) throw_input("plan: --labels must be at least 1 (got {})", p.labels);
  if (p.features < 1) throw_input("plan: --dim must be at least 1 (got {})", p.features);
  if (p.points < 1) throw_input("plan: --points must be at least 1 (got {})", p.points);
  if (p.labels > (int64_t{1} << 32))
    throw_input("plan: --labels {} exceeds 2^32 (label ids are uint32)", p.labels);
  if (p.config.train.batch_size < 1)
    throw_input("plan: --batch must be at least 1 (got {})", p.config.train.batch_size);
  if (p.sparse && p.config.model.encoder.empty())
    throw_input("plan: sparse input needs an encoder with a sparse_linear first layer");
  return p;
}

}  // namespace

Command register_plan(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "plan",
      "Predict, before training, each output-layer backend's peak memory (output layer, "
      "optimizer state, workspace, encoder, data), step and epoch time (FLOPs and bytes of a "
      "step at the machine's measured GEMM and memory ceilings; on a CPU the sampled "
      "backends' host work measured by running their step at a probe shape) and whether it "
      "fits a memory "
      "budget, with the largest L that does. Two forms: `plan CONFIG [--set k=v]...` (the "
      "config's backend and settings, its data.synth shape) or `plan --labels L --dim d "
      "--points N` (all six backends with their defaults, or --backend). Markdown, or JSON "
      "with --json. Ceilings: --gemm-gflops/--memory-gbps, --ceilings FILE, the cache written "
      "by `xmctrain bench ceilings`, or (CPU) measured quickly now; the report says which.");
  auto o = std::make_shared<PlanOpts>();
  sub->add_option("CONFIG", o->config,
                  "Experiment config (YAML): backend, its settings, encoder, optimizers, batch "
                  "sizes; the data's shape from data.synth unless given below");
  sub->add_option("--set", o->sets, "Config override key=value (repeatable), as for train");
  sub->add_option("--labels", o->labels, "Number of labels L");
  sub->add_option("--dim", o->dim,
                  "Input dimension d of the (dense) features; the output layer's input unless "
                  "the config has an encoder");
  sub->add_option("--points", o->points, "Training points N (an epoch is ceil(N / batch) steps)");
  sub->add_option("--test-points", o->test_points,
                  "Test points loaded beside the training data (default: the config's "
                  "data.synth.test, else 0)");
  sub->add_option("--labels-per-point", o->labels_per_point,
                  "Mean positive labels per point (default: data.synth's, else 5)");
  sub->add_option("--batch", o->batch,
                  "Training batch size (default: the config's train.batch_size, 256)");
  sub->add_option("--device", o->device, "Device the plan is for")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  sub->add_option("--memory", o->memory,
                  "Memory budget, e.g. 80GiB, 16G, 512M (powers of 1024): which backends fit, "
                  "and the largest L each fits");
  sub->add_option("--backend", o->backends,
                  "Backend(s) to plan (repeatable; default: the config's, or all six without a "
                  "config)");
  sub->add_option("--ceilings", o->ceilings,
                  "JSON file with the machine's ceilings: the output of `xmctrain bench "
                  "ceilings --json` (CPU) or `bench dense --device cuda --json` (GPU)");
  sub->add_option("--gemm-gflops", o->gemm_gflops, "GEMM ceiling in GFLOP/s (with --memory-gbps)");
  sub->add_option("--memory-gbps", o->memory_gbps,
                  "Memory bandwidth ceiling in GB/s (with --gemm-gflops)");
  sub->add_option("--fanin-gflops", o->fanin_gflops,
                  "Rate of the fan-in ops (fixed_fanin, group_shared's tail) in GFLOP/s; default: "
                  "measured now on the CPU at each backend's shape (device cuda: the GEMM rate)");
  sub->add_option("--threads", o->threads,
                  "CPU threads the ceilings are for (0 = all cores; default: the config's "
                  "`threads`, else 0): picks the cache file, or the threads of a measurement now")
      ->capture_default_str();
  sub->add_flag("--json", o->json, "Print JSON instead of Markdown");

  return {sub, [o, sub]() -> int {
            const Device device = o->device == "cuda" ? Device::cuda : Device::cpu;
            const bool from_config = !o->config.empty();
            const double budget = o->memory.empty()
                                      ? 0.0
                                      : static_cast<double>(parse_byte_size(o->memory, "--memory"));
            if (!o->memory.empty() && budget <= 0) throw_input("plan: --memory must be positive");
            std::vector<std::string> names = o->backends;
            ExperimentConfig base;
            if (from_config) {
              base = load_config(o->config, o->sets, output_types());
              // The ceilings for the threads the config trains with.
              if (sub->count("--threads") == 0) o->threads = static_cast<int>(base.threads);
              if (names.empty()) names = {base.model.output.type};
            } else if (names.empty()) {
              for (const auto& b : output_backends()) names.push_back(b.config.name);
            }
            for (const auto& n : names) (void)find_output_backend(n);  // unknown: exit 2
            // Each backend's config: the config's own settings for its backend, else the
            // backend's defaults (with the --set overrides that apply to it). Checked before
            // the ceilings are measured.
            std::vector<std::pair<PlanProblem, std::string>> todo;  // problem, or an error
            for (const auto& name : names) {
              ExperimentConfig cfg = base;
              std::string error;
              if (!from_config || name != base.model.output.type) {
                std::vector<std::string> sets = o->sets;
                sets.push_back("model.output.type=" + name);
                try {
                  cfg = from_config ? load_config(o->config, sets, output_types())
                                    : parse_config("{}\n", "plan", sets, output_types());
                } catch (const InputError& e) {
                  if (names.size() == 1) throw;
                  error = e.what();
                  cfg = base;
                  cfg.model.output.type = name;
                }
              }
              todo.emplace_back(make_problem(*o, cfg, from_config), error);
            }
            const Ceilings ceil = resolve_ceilings(*o, device);
            std::vector<BackendPlan> plans;
            for (const auto& [problem, error] : todo) {
              if (error.empty()) {
                plans.push_back(plan_backend(problem, ceil, budget));
                continue;
              }
              BackendPlan failed;
              failed.backend = problem.config.model.output.type;
              failed.error = error;
              plans.push_back(failed);
            }
            const PlanProblem& problem = todo.front().first;
            if (names.size() == 1 && !plans[0].error.empty())
              throw_input("plan: backend {}: {}", plans[0].backend, plans[0].error);
            if (budget > 0) {
              bool any = false;
              for (const auto& p : plans) any = any || (p.error.empty() && p.fits);
              if (!any) {
                std::cerr << plan_markdown(problem, ceil, budget, plans);
                throw_input("plan: no backend fits the memory budget of {} at L = {}",
                            format_bytes(budget), problem.labels);
              }
            }
            std::cout << (o->json ? plan_json(problem, ceil, budget, plans).dump(2) + "\n"
                                  : plan_markdown(problem, ceil, budget, plans));
            return 0;
          }};
}

}  // namespace xmc::app
