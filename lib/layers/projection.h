#pragma once
// Projection: a dense layer u = act(x·Pᵀ + c) in front of an output layer's own layer
// (group_shared's head projection, the fan-in block's ReLU projection: fixed_fanin's
// intermediate layer and group_shared's tail projection; bottleneck's P, without c). P
// [out×in] and c [out] in one array [out×in + out] (c = 0 at start, P uniform
// (±1/sqrt(in))), its optimizer state, gradient and the batch workspaces u, du [B×out]:
// Buffers on the Context's device, every matrix argument a DEVICE view on a CUDA Context.
// Empty (out = 0) = identity. lr_scale multiplies the optimizer's lr for P and c; 0 keeps
// them at their start (fixed: no gradient, no update, no optimizer state or dP buffer).
// Checkpoint names: <prefix>/weight [out×in], <prefix>/bias [out], <prefix>/opt1,
// <prefix>/opt2 [out×in + out] (linear: [out×in], no bias; fixed: no opt1, opt2).
#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/matrix.h"
#include "core/rng.h"
#include "core/tensor_ref.h"
#include "layers/layer_bytes.h"
#include "layers/output_layer.h"  // LrState
#include "ops/optimizer.h"

namespace xmc {

class Comm;

class Projection {
 public:
  // affine: u = x·Pᵀ + c; relu: u = relu(x·Pᵀ + c), P by init_uniform_rows from
  // init.next(). linear: u = x·Pᵀ without c, P drawn from `init` itself in row-major order
  // (bottleneck's P and draw before it was a Projection).
  enum class Kind { affine, relu, linear };
  Projection() = default;
  Projection(Context& ctx, int64_t in, int64_t out, Kind kind, const OptimizerConfig& optim,
             int64_t max_batch, Rng init, float lr_scale = 1.0f);

  bool active() const { return out_ > 0; }
  // lr_scale 0: P and c stay at their start.
  static bool fixed(float lr_scale) { return lr_scale == 0.0f; }
  // u [rows×out] of x [rows×in] (evaluation; u is the caller's).
  void apply(ConstMatrix x, Matrix u) const;
  // Evaluation input: x itself when inactive, else its projection into buf (a workspace
  // Buffer of rows×out, allocated here; the view lives as long as buf).
  ConstMatrix apply_into(ConstMatrix x, Buffer<float>& buf) const;
  // Training forward into the workspace u [B×out].
  Matrix forward(ConstMatrix x);
  // The workspace du [B×out] for the caller to fill.
  Matrix grad_workspace(int64_t rows) { return {du_.data(), rows, out_}; }
  // With du = dL/du filled: through the ReLU, dh = du·P + beta·dh (P before the step),
  // then one optimizer step of P and c (lr × lr_scale; none when fixed).
  void backward_update(ConstMatrix x, Matrix dh, float beta, const LrState& lr);
  // Label-sharded run: the processes holding the other labels, each with a
  // copy of this projection; backward_update sums dP and dc over them before the update,
  // so the copies stay identical (each rank's du is its labels' share).
  void set_comm(Comm* comm) { comm_ = comm; }
  // Host copies (sync_state(to_host) first on the GPU).
  void append_state(std::vector<TensorRef>& out, const std::string& prefix);
  void sync_state(StateSync s);
  int64_t bytes() const;  // planned_bytes of this projection
  // Bytes of every buffer above for these sizes (out = 0: none; layers/layer_bytes.h).
  static LayerBytes planned_bytes(int64_t in, int64_t out, Kind kind, const OptimizerConfig& optim,
                                  int64_t max_batch, float lr_scale = 1.0f);
  // The work of one training step: forward and backward GEMMs, the update of P and c.
  static StepWork planned_step(int64_t in, int64_t out, Kind kind, const OptimizerConfig& optim,
                               int64_t batch, float lr_scale = 1.0f);

 private:
  Context* ctx_ = nullptr;
  Comm* comm_ = nullptr;
  int64_t in_ = 0, out_ = 0, max_batch_ = 0, pn_ = 0;  // pn: out×in (+ out with c)
  Kind kind_ = Kind::affine;
  OptimizerConfig optim_;
  float lr_scale_ = 1.0f;           // 0: fixed
  Buffer<float> p_, s1_, s2_, dp_;  // [pn] each (state empty when unused; fixed: s1_, s2_, dp_)
  Buffer<float> u_, du_;            // [B×out]
};

}  // namespace xmc
