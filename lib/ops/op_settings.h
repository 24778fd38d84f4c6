#pragma once
// The plain settings the op families take on both devices (ops/, cuda/): which loss,
// which optimizer with its hyper-parameters. Parsing and printing them is model/'s
// (ops/loss.h, ops/optimizer.h), which include this file.
namespace xmc {

enum class LossType { bce, squared_hinge, softmax };

enum class OptimizerType { sgd, adam, adamw };

struct OptimizerConfig {
  OptimizerType type = OptimizerType::adam;
  double lr = 1e-3;
  double momentum = 0.0;      // sgd
  double weight_decay = 0.0;  // sgd: L2 added to the gradient; adamw: decoupled
  double beta1 = 0.9;         // adam, adamw
  double beta2 = 0.999;
  double eps = 1e-8;
  bool operator==(const OptimizerConfig&) const = default;
};

// How many state arrays (each as long as the parameters) the optimizer needs:
// sgd 0 (momentum 0) or 1; adam/adamw 2.
inline int optimizer_state_arrays(const OptimizerConfig& cfg) {
  if (cfg.type == OptimizerType::sgd) return cfg.momentum != 0.0 ? 1 : 0;
  return 2;
}

}  // namespace xmc
