#pragma once
// `xmctrain plan`: predicted peak memory and step time of each output-layer backend for a
// problem shape, before anything is built or trained.
//
// Memory: the output layer's bytes are its backend's planned_bytes (layers/layer_bytes.h) —
// the function its analytic_bytes() returns once built, which tests and results.json check
// against the memory ledger — plus the encoder's parameters, optimizer state and batch
// buffers, the loaded datasets as the ledger counts them (tag data), the trainer's batch
// buffers (tag activations) and the evaluation's largest transient workspace.
// Time: the backend's planned_step (and the encoder's) priced at the machine's ceilings —
// FLOPs at the sgemm rate, bytes at the memory bandwidth, the fan-in ops' multiply-adds at
// their measured rates — summed (each op is taken as bound by one of them); the sampled
// backends' host work (StepWork::host_candidates) measured by running their step at a probe
// shape. The epoch is steps × step; evaluation, checkpoints and anns_sampled's refreshes
// are not included.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/experiment_config.h"
#include "core/context.h"
#include "layers/layer_bytes.h"

namespace xmc {

// The machine's ceilings a plan prices work at, and where they came from.
struct Ceilings {
  double gemm_gflops = 0.0;  // fp32 GEMM, GFLOP/s
  double memory_gbps = 0.0;  // memory bandwidth, GB/s (read + written)
  std::string source{};      // e.g. "file ~/.cache/xmctrain/ceilings-cpu-1t.json"
  // The OpenBLAS kernels the CPU ceilings were measured with ("blas_kernels" of the JSON;
  // empty when not recorded, and for a GPU's).
  std::string blas_kernels{};
  // The fan-in ops' rate (GFLOP/s) at a shape (the caller measures it); empty: the GEMM rate.
  std::function<double(const FaninShape&)> fanin_gflops{};
  std::string fanin_source{};  // how fanin_gflops is obtained
  // Seconds of one measured training step of the output layer `spec` builds at a shape
  // (the caller measures it; bench/layer_step_bench.h), for the steps whose work has
  // host_candidates; empty: that host work is not priced.
  std::function<double(const LayerShape&, const OutputSpec&)> measured_step{};
  std::string host_source{};  // how measured_step is obtained
};
// The "ceilings" object of a bench JSON: {"sgemm_gflops", "memory_gbps"[, "blas_kernels"]}
// (`bench ceilings`, `bench dense`, `bench fixed_fanin`) or {"fp32_tflops", "copy_gbs"} (bench
// dense
// --device cuda). InputError naming `what` when neither is there.
Ceilings ceilings_from_json(const nlohmann::json& j, const std::string& what);
// Seconds of a step's work at these ceilings: each kind of work at its own rate, summed.
double step_seconds(const StepWork& w, const Ceilings& c);

// The problem: the data's shape and a config (model.encoder, the optimizers, batch sizes;
// model.output is replaced per backend).
struct PlanProblem {
  Device device = Device::cpu;
  int64_t labels = 0;        // L
  int64_t features = 0;      // input dimension D of the data
  int64_t points = 0;        // training points N
  int64_t test_points = 0;   // test points (loaded beside the training data)
  bool sparse = false;       // sparse (CSR) features
  double nnz_per_point = 0;  // sparse: non-zeros per point
  double labels_per_point = 1.0;
  ExperimentConfig config;
};

struct MemoryPlan {
  double output_layer = 0.0;  // parameters (weights, biases, index sets, tables)
  double optimizer = 0.0;     // the output layer's optimizer state
  double workspace = 0.0;     // the output layer's workspaces
  double encoder = 0.0;       // parameters, optimizer state, workspaces, batch buffers
  double data = 0.0;          // training and test data (features, labels)
  double other = 0.0;         // the trainer's batch buffers, the evaluation's transient
  double total() const { return output_layer + optimizer + workspace + encoder + data + other; }
  // What the budget is compared with: the total, but on device cuda the datasets stay in
  // host memory, so without them.
  double budgeted(Device device) const { return device == Device::cuda ? total() - data : total(); }
};

struct TimePlan {
  StepWork work;              // output layer + encoder + batch staging
  double fanin_gflops = 0.0;  // the rate the fan-in ops were priced at (when there are any)
  // The host work of a step with host_candidates: the measured step at the probe shape
  // (host_probe_shape) less the model's price of the counted work at that shape.
  double host_seconds = 0.0;
  double step_seconds = 0.0;
  int64_t steps_per_epoch = 0;
  double epoch_seconds = 0.0;
};

struct BackendPlan {
  std::string backend;
  std::string error;  // the backend cannot take this problem (then nothing else is set)
  MemoryPlan memory;
  TimePlan time;
  bool fits = true;        // memory.budgeted(device) <= budget (true without a budget)
  int64_t max_labels = 0;  // largest L within the budget (0 without a budget or when none fits)
};

// The output layer's shape for problem p (d = the encoder's output width, or D).
LayerShape plan_shape(const PlanProblem& p);
// Where the host work of a sampled step is measured: s with at most 8 192 training points
// and as many labels as fit 512 MiB of label rows and optimizer state (at least 32 768, at
// most L): the work per step follows the candidates per point more than L, and the
// layer's arrays at L may not fit the machine running plan.
LayerShape host_probe_shape(const LayerShape& s);
// One backend (p.config.model.output is used as it is). budget: bytes, 0 = none.
BackendPlan plan_backend(const PlanProblem& p, const Ceilings& c, double budget);

// Markdown (a table of memory, a table of time and fit, the ceilings and notes) and JSON.
std::string plan_markdown(const PlanProblem& p, const Ceilings& c, double budget,
                          const std::vector<BackendPlan>& plans);
nlohmann::json plan_json(const PlanProblem& p, const Ceilings& c, double budget,
                         const std::vector<BackendPlan>& plans);

}  // namespace xmc
