#pragma once
// The plain settings the op families take on both devices (kernels/, cuda/): which loss,
// which optimizer with its hyper-parameters. Parsing and printing them is model/'s
// (model/loss.h, model/optimizer.h), which include this file.
namespace xmc {

enum class LossType { bce, squared_hinge, softmax };

enum class OptimizerType { sgd, adam, adamw };

struct OptimizerConfig {
  OptimizerType type = OptimizerType::adam;
  double lr = 1e-3;
  double momentum = 0.0;       // sgd
  double weight_decay = 0.0;   // sgd: L2 added to the gradient; adamw: decoupled
  double beta1 = 0.9;          // adam, adamw
  double beta2 = 0.999;
  double eps = 1e-8;
};

}  // namespace xmc
