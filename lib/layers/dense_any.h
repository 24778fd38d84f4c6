#pragma once
// AnyDenseBlock: the dense block of the dense and bottleneck backends on the Context's
// device — a DenseBlock (host, fp32) on a CPU Context, a gpu::DenseBlockCuda (fp32 or bf16
// weights) on a CUDA one. Matrix arguments are host views on the CPU and DEVICE views on
// the GPU (output_layer.h). Checkpoint names and shapes are the same on both devices, so a
// checkpoint written on one loads on the other (bf16 weights are saved as fp32).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/tensor_ref.h"
#include "layers/dense_block_cuda.h"
#include "layers/dense_block.h"
#include "layers/host_staging.h"
#include "layers/output_layer.h"

namespace xmc {

// precision: "fp32" | "bf16" (bf16: CUDA only, InputError on the CPU);
// stochastic_rounding: bf16 only (InputError otherwise).
gpu::DenseCudaOptions dense_precision_options(const Context& ctx, const std::string& precision,
                                              bool stochastic_rounding);

class AnyDenseBlock {
 public:
  AnyDenseBlock(Context& ctx, int64_t d, int64_t lo, int64_t n, int64_t max_batch, int64_t chunk,
                LossType loss, const OptimizerConfig& optim, uint64_t seed,
                gpu::DenseCudaOptions opts);
  ~AnyDenseBlock();
  AnyDenseBlock(const AnyDenseBlock&) = delete;
  AnyDenseBlock& operator=(const AnyDenseBlock&) = delete;

  bool on_gpu() const { return gpu_ != nullptr; }
  StepStats train_step(const CsrMatrix& targets, ConstMatrix h, Matrix dh, const LrState& lr);
  void scores(ConstMatrix h, int64_t lo, Matrix out) const;
  // GPU only: exact top-k on the device (DenseBlockCuda::topk).
  TopK topk_gpu(ConstMatrix h, int k) const;
  std::vector<TensorRef> state(const std::string& prefix);
  void sync_state(StateSync s);
  int64_t analytic_bytes() const;
  int64_t chunk() const;

 private:
  std::unique_ptr<DenseBlock> cpu_;
  std::unique_ptr<gpu::DenseBlockCuda> gpu_;
  int64_t d_, n_;
  HostStaging<gpu::DenseBlockCuda::HostState> staging_;  // host copies for checkpoints (GPU)
};

}  // namespace xmc
