#include "plan/plan.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/resources.h"
#include "layers/registry.h"
#include "ops/optimizer.h"

namespace xmc {

namespace {

double states(const OptimizerConfig& o) { return optimizer_state_arrays(o); }

// The encoder's bytes, as its layers allocate them: parameters [(in+1)×out] and their
// optimizer state; linear: the gradient [(in+1)×out]; the batch buffers (input copy,
// output, dz, dx; grown to the larger of the training and evaluation batch).
// sparse_linear's touched-row gradient [rows touched × out] is counted at B·nnz rows.
double encoder_bytes(const PlanProblem& p) {
  const auto& layers = p.config.model.encoder;
  const double b = static_cast<double>(p.config.train.batch_size);
  const double rows = std::max(b, static_cast<double>(p.config.eval.batch_size));
  double in = static_cast<double>(p.features), bytes = 0.0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const double out = static_cast<double>(layers[i].out), pn = (in + 1.0) * out;
    bytes += 4.0 * pn * (1.0 + states(p.config.optim.encoder));
    if (layers[i].type == "sparse_linear") {
      const double touched = std::min(in, b * p.nnz_per_point);
      bytes += 4.0 * (out + rows * out + b * out + touched * out);  // db, h, dz, row gradients
    } else {
      bytes += 4.0 * (pn + rows * (in + out) + b * out + (i > 0 ? b * in : 0.0));
    }
    in = out;
  }
  return bytes;
}

// The datasets as the ledger counts them (tag data): features and labels of both splits.
double data_bytes(const PlanProblem& p) {
  const double n = static_cast<double>(p.points + p.test_points);
  const double labels = 8.0 * (n + 2.0) + 4.0 * n * p.labels_per_point;  // indptr, indices
  const double features = p.sparse ? 8.0 * (n + 2.0) + 8.0 * n * p.nnz_per_point
                                   : 4.0 * n * static_cast<double>(p.features);
  return labels + features;
}

// The trainer's buffers beside the layers: dL/dh [B×d] and the encoder's two staging slots
// (each allocated at twice the batch it grows for: both at 2B rows in training, one grown to
// 2E for the evaluation batches of E rows), and evaluation's largest transient workspace:
// the streamed top-k's score chunk [E × chunk] (chunk: the backend's, 8192 labels by
// default) with the layer's evaluation input [E × d]. E = min(eval.batch_size, test points).
double other_bytes(const PlanProblem& p, const LayerShape& s) {
  const double b = static_cast<double>(p.config.train.batch_size);
  const double rows = static_cast<double>(std::min(p.config.eval.batch_size, p.test_points));
  const double staged_row =
      p.sparse ? 12.0 * p.nnz_per_point + 8.0 : 4.0 * static_cast<double>(p.features);
  const ConfigNode* c = p.config.model.output.fields.find("chunk_size");
  const double chunk = std::min(static_cast<double>(s.labels()),
                                c != nullptr && c->is_scalar() ? std::stod(c->scalar) : 8192.0);
  const double d = static_cast<double>(s.input_dim);
  return 4.0 * b * d + (4.0 * b + (rows > b ? 2.0 * rows : 0.0)) * staged_row +
         4.0 * rows * (chunk + d);
}

// One step of the encoder and the batch staging (the output layer's is the backend's).
StepWork encoder_step(const PlanProblem& p) {
  const double b = static_cast<double>(p.config.train.batch_size);
  StepWork w;
  w.bytes +=
      p.sparse ? 2.0 * 12.0 * b * p.nnz_per_point : 2.0 * 4.0 * b * static_cast<double>(p.features);
  double in = static_cast<double>(p.features);
  const auto& layers = p.config.model.encoder;
  for (size_t i = 0; i < layers.size(); ++i) {
    const double out = static_cast<double>(layers[i].out);
    if (layers[i].type == "sparse_linear") {
      const double nnz = b * p.nnz_per_point, touched = std::min(in, nnz);
      w.gemm_flops += 4.0 * nnz * out;  // forward and the touched rows' gradient
      w.bytes +=
          4.0 * (2.0 * nnz * out + touched * out * (3.0 + 2.0 * states(p.config.optim.encoder)));
    } else {
      w.gemm_flops += (i > 0 ? 6.0 : 4.0) * b * in * out;  // no dx for the first layer
      w.bytes +=
          4.0 * ((in + 1.0) * out * (3.0 + 2.0 * states(p.config.optim.encoder)) + 3.0 * b * out);
    }
    in = out;
  }
  return w;
}

int64_t encoder_output_dim(const PlanProblem& p) {
  return p.config.model.encoder.empty() ? p.features : p.config.model.encoder.back().out;
}

MemoryPlan memory_of(const PlanProblem& p, const OutputBackend& backend) {
  const LayerShape s = plan_shape(p);
  const LayerBytes layer = backend.planned_bytes(s, p.config.model.output);
  return {.output_layer = layer.params,
          .optimizer = layer.optimizer,
          .workspace = layer.workspace,
          .encoder = encoder_bytes(p),
          .data = data_bytes(p),
          .other = other_bytes(p, s)};
}

std::string gib(double bytes) { return fmt::format("{:.3f}", bytes / 1073741824.0); }

std::string seconds_text(double s) {
  if (s < 1.0) return fmt::format("{:.1f} ms", 1e3 * s);
  if (s < 120.0) return fmt::format("{:.2f} s", s);
  if (s < 7200.0) return fmt::format("{:.1f} min", s / 60.0);
  return fmt::format("{:.1f} h", s / 3600.0);
}

}  // namespace

Ceilings ceilings_from_json(const nlohmann::json& j, const std::string& what) {
  const nlohmann::json& c = j.contains("ceilings") ? j["ceilings"] : j;
  Ceilings out;
  if (c.contains("sgemm_gflops") && c.contains("memory_gbps")) {
    out.gemm_gflops = c["sgemm_gflops"].get<double>();
    out.memory_gbps = c["memory_gbps"].get<double>();
    out.blas_kernels = c.value("blas_kernels", std::string());
  } else if (c.contains("fp32_tflops") && c.contains("copy_gbs")) {
    out.gemm_gflops = 1e3 * c["fp32_tflops"].get<double>();
    out.memory_gbps = c["copy_gbs"].get<double>();
  } else {
    throw_input(
        "{}: no ceilings (expected \"sgemm_gflops\" and \"memory_gbps\", as `xmctrain bench "
        "ceilings --json` writes them, or \"fp32_tflops\" and \"copy_gbs\" of `xmctrain bench "
        "dense --device cuda --json`)",
        what);
  }
  if (!(out.gemm_gflops > 0) || !(out.memory_gbps > 0))
    throw_input("{}: ceilings must be positive (GEMM {} GFLOP/s, memory {} GB/s)", what,
                out.gemm_gflops, out.memory_gbps);
  return out;
}

double step_seconds(const StepWork& w, const Ceilings& c) {
  const double fanin =
      w.fanin_flops > 0 && c.fanin_gflops ? c.fanin_gflops(w.fanin) : c.gemm_gflops;
  return (w.gemm_flops / c.gemm_gflops + w.fanin_flops / fanin) / 1e9 +
         w.bytes / (c.memory_gbps * 1e9);
}

LayerShape plan_shape(const PlanProblem& p) {
  OptimizerConfig optim = p.config.optim.output;
  return {
      .gpu = p.device == Device::cuda,
      .input_dim = encoder_output_dim(p),
      .num_labels = p.labels,
      .label_lo = 0,
      .label_hi = p.labels,
      .batch = p.config.train.batch_size,
      .num_train = p.points,
      .optim = optim,
      .labels_per_point = p.labels_per_point,
      // the run's threads (config `threads`; 0: all cores)
      .threads = p.config.threads > 0 ? static_cast<int>(p.config.threads) : omp_get_num_procs()};
}

LayerShape host_probe_shape(const LayerShape& s) {
  LayerShape q = s;
  // Label rows of d + 1 floats with their optimizer state, within 512 MiB (at least 32 768).
  const double row = 4.0 * static_cast<double>(s.input_dim + 1) *
                     (1.0 + static_cast<double>(optimizer_state_arrays(s.optim)));
  const auto fit = static_cast<int64_t>(512.0 * 1048576.0 / row);
  q.num_labels = std::min<int64_t>(s.labels(), std::max<int64_t>(fit, 32768));
  q.label_lo = 0;
  q.label_hi = q.num_labels;
  q.num_train = std::min<int64_t>(s.num_train, 8192);
  return q;
}

BackendPlan plan_backend(const PlanProblem& p, const Ceilings& c, double budget) {
  BackendPlan out;
  out.backend = p.config.model.output.type;
  const OutputBackend& backend = find_output_backend(out.backend);
  if (p.device == Device::cuda && !backend.cuda) {
    out.error = "no CUDA path";
    return out;
  }
  try {
    out.memory = memory_of(p, backend);
    const StepWork w = backend.planned_step(plan_shape(p), p.config.model.output) + encoder_step(p);
    out.time.work = w;
    out.time.step_seconds = step_seconds(w, c);
    if (w.host_candidates && c.measured_step) {
      const LayerShape probe = host_probe_shape(plan_shape(p));
      const double modelled = step_seconds(backend.planned_step(probe, p.config.model.output), c);
      out.time.host_seconds =
          std::max(0.0, c.measured_step(probe, p.config.model.output) - modelled);
      out.time.step_seconds += out.time.host_seconds;
    }
    if (w.fanin_flops > 0)
      out.time.fanin_gflops = c.fanin_gflops ? c.fanin_gflops(w.fanin) : c.gemm_gflops;
    const int64_t b = p.config.train.batch_size;
    out.time.steps_per_epoch = (p.points + b - 1) / b;
    out.time.epoch_seconds = out.time.step_seconds * static_cast<double>(out.time.steps_per_epoch);
  } catch (const InputError& e) {
    out.error = e.what();
    return out;
  }
  if (budget > 0) {
    out.fits = out.memory.budgeted(p.device) <= budget;
    // The largest L within the budget: memory grows with L; bisection on the same formulas.
    auto fits = [&](int64_t labels) {
      PlanProblem q = p;
      q.labels = labels;
      try {
        return memory_of(q, backend).budgeted(p.device) <= budget;
      } catch (const InputError&) {
        return false;
      }
    };
    int64_t lo = 0, hi = 1;
    while (hi < (int64_t{1} << 40) && fits(hi)) {
      lo = hi;
      hi *= 2;
    }
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (fits(mid) ? lo : hi) = mid;
    }
    out.max_labels = lo;
  }
  return out;
}

namespace {
// How the sampled backends' host work is priced: measured (c.host_source), "not priced", or
// none at all (no backend planned has any: on a GPU one process draws on the device).
std::string host_source(const Ceilings& c, const std::vector<BackendPlan>& plans) {
  if (c.measured_step) return c.host_source;
  const bool host_work = std::any_of(plans.begin(), plans.end(), [](const BackendPlan& b) {
    return b.error.empty() && b.time.work.host_candidates;
  });
  return host_work ? "not priced"
                   : "none (one process draws its candidates on the device: the draw's bytes are "
                     "counted)";
}
}  // namespace

std::string plan_markdown(const PlanProblem& p, const Ceilings& c, double budget,
                          const std::vector<BackendPlan>& plans) {
  std::string s = fmt::format(
      "# xmctrain plan: L = {} labels, d = {}, N = {} training points ({} test), device {}\n\n",
      p.labels, encoder_output_dim(p), p.points, p.test_points, to_string(p.device));
  s += fmt::format(
      "Input: {} features{}, {:.1f} labels per point; encoder: {} layers; batch {}, "
      "optimizer {} (output), evaluation batch {}.\n\n",
      p.features,
      p.sparse ? fmt::format(" (sparse, {:.0f} non-zeros per point)", p.nnz_per_point) : " (dense)",
      p.labels_per_point, p.config.model.encoder.size(), p.config.train.batch_size,
      to_string(p.config.optim.output.type), p.config.eval.batch_size);
  s += fmt::format(
      "Ceilings: GEMM {:.1f} GFLOP/s, memory {:.1f} GB/s — {}. Fan-in ops: {}. Sampled "
      "backends' host work: {}.\n\n",
      c.gemm_gflops, c.memory_gbps, c.source, c.fanin_gflops ? c.fanin_source : "at the GEMM rate",
      host_source(c, plans));
  s += "## Predicted peak memory (GiB)\n\n"
       "| backend | output layer | optimizer | workspace | encoder | data | other | peak |\n"
       "|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& b : plans) {
    if (!b.error.empty()) {
      s += fmt::format("| {} | {} | | | | | | |\n", b.backend, b.error);
      continue;
    }
    const MemoryPlan& m = b.memory;
    s += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", b.backend, gib(m.output_layer),
                     gib(m.optimizer), gib(m.workspace), gib(m.encoder), gib(m.data), gib(m.other),
                     gib(m.total()));
  }
  s += "\n## Predicted time and fit\n\n";
  s += budget > 0 ? fmt::format("Memory budget: {}{}.\n\n", format_bytes(budget),
                                p.device == Device::cuda
                                    ? " of device memory (the peak without the data, which stays "
                                      "in host memory)"
                                    : "")
                  : "No memory budget given (--memory).\n\n";
  s += "| backend | GEMM GFLOP | fan-in GFLOP (at GFLOP/s) | GB moved | host (measured) | step | "
       "epoch | fits | largest L |\n|---|---:|---:|---:|---:|---:|---:|:---:|---:|\n";
  for (const auto& b : plans) {
    if (!b.error.empty()) continue;
    const TimePlan& t = b.time;
    s += fmt::format("| {} | {:.2f} | {} | {:.3f} | {} | {} | {} ({} steps) | {} | {} |\n",
                     b.backend, t.work.gemm_flops / 1e9,
                     t.work.fanin_flops > 0 ? fmt::format("{:.2f} (at {:.1f})",
                                                          t.work.fanin_flops / 1e9, t.fanin_gflops)
                                            : std::string("-"),
                     t.work.bytes / 1e9,
                     !t.work.host_candidates ? std::string("-")
                     : c.measured_step       ? seconds_text(t.host_seconds)
                                             : std::string("not priced"),
                     seconds_text(t.step_seconds), seconds_text(t.epoch_seconds), t.steps_per_epoch,
                     budget > 0 ? (b.fits ? "yes" : "no") : "-",
                     budget > 0 ? fmt::format("{}", b.max_labels) : "-");
  }
  s += "\nOutput layer, optimizer and workspace are the backends' analytic formulas (what "
       "analytic_bytes() reports and the tests check against the memory ledger); other = the "
       "trainer's batch buffers and evaluation's transient score chunk. Time = GEMM FLOPs at the "
       "GEMM ceiling + the fan-in ops' FLOPs at their measured rates + bytes at the memory "
       "ceiling; the sampled backends' host work (candidate draws, LSH lookups, grouping by "
       "label, the candidate loss) is their step measured at a probe shape (at most 512 MiB "
       "of label rows, 8 192 points) less the model's price of the counted work there (\"not "
       "priced\": left out, the step is predicted short; on a GPU one process draws on the "
       "device, \"-\": no host work); the epoch leaves out evaluation, checkpoints and "
       "anns_sampled's index refreshes.\n";
  return s;
}

nlohmann::json plan_json(const PlanProblem& p, const Ceilings& c, double budget,
                         const std::vector<BackendPlan>& plans) {
  nlohmann::json j;
  j["problem"] = {{"labels", p.labels},
                  {"input_dim", encoder_output_dim(p)},
                  {"features", p.features},
                  {"points", p.points},
                  {"test_points", p.test_points},
                  {"sparse", p.sparse},
                  {"labels_per_point", p.labels_per_point},
                  {"batch_size", p.config.train.batch_size},
                  {"device", std::string(to_string(p.device))}};
  j["ceilings"] = {{"sgemm_gflops", c.gemm_gflops},
                   {"memory_gbps", c.memory_gbps},
                   {"source", c.source},
                   {"fanin_source", c.fanin_gflops ? c.fanin_source : "the GEMM rate"},
                   {"host_source", host_source(c, plans)}};
  j["memory_budget_bytes"] = budget;
  j["backends"] = nlohmann::json::array();
  for (const auto& b : plans) {
    nlohmann::json e = {{"backend", b.backend}};
    if (!b.error.empty()) {
      e["error"] = b.error;
      j["backends"].push_back(e);
      continue;
    }
    const MemoryPlan& m = b.memory;
    e["memory"] = {{"output_layer", m.output_layer},
                   {"optimizer", m.optimizer},
                   {"workspace", m.workspace},
                   {"encoder", m.encoder},
                   {"data", m.data},
                   {"other", m.other},
                   {"total", m.total()},
                   {"budgeted", m.budgeted(p.device)}};
    e["time"] = {{"gemm_flops", b.time.work.gemm_flops},
                 {"fanin_flops", b.time.work.fanin_flops},
                 {"fanin_gflops", b.time.fanin_gflops},
                 {"bytes", b.time.work.bytes},
                 {"host_candidates", b.time.work.host_candidates},
                 {"host_seconds", b.time.host_seconds},
                 {"step_seconds", b.time.step_seconds},
                 {"steps_per_epoch", b.time.steps_per_epoch},
                 {"epoch_seconds", b.time.epoch_seconds}};
    if (budget > 0) {
      e["fits"] = b.fits;
      e["max_labels"] = b.max_labels;
    }
    j["backends"].push_back(e);
  }
  return j;
}

}  // namespace xmc
