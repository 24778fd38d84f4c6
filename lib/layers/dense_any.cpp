#include "layers/dense_any.h"

#include "core/error.h"

namespace xmc {

gpu::DenseCudaOptions dense_precision_options(const Context& ctx, const std::string& precision,
                                              bool stochastic_rounding) {
  gpu::DenseCudaOptions o;
  if (precision == "bf16") {
    if (!ctx.on_gpu())
      throw_input("model.output.precision: bf16 weights need device cuda (the CPU path is fp32)");
    o.precision = gpu::WeightPrecision::bf16;
  } else if (precision != "fp32") {
    throw_input("model.output.precision: unknown '{}': expected fp32 or bf16", precision);
  }
  if (stochastic_rounding && o.precision != gpu::WeightPrecision::bf16)
    throw_input("model.output.stochastic_rounding needs precision bf16 (precision is {})",
                precision);
  o.stochastic_rounding = stochastic_rounding;
  return o;
}

AnyDenseBlock::AnyDenseBlock(Context& ctx, int64_t d, int64_t lo, int64_t n, int64_t max_batch,
                             int64_t chunk, LossType loss, const OptimizerConfig& optim,
                             uint64_t seed, gpu::DenseCudaOptions opts)
    : d_(d), n_(n) {
  if (ctx.on_gpu()) {
    gpu_ = std::make_unique<gpu::DenseBlockCuda>(ctx.cuda(), d, lo, n, max_batch, chunk, loss,
                                                 optim, seed, opts);
  } else {
    XMC_CHECK(opts.precision == gpu::WeightPrecision::fp32, "bf16 dense block on the CPU");
    cpu_ = std::make_unique<DenseBlock>(ctx, d, lo, n, max_batch, chunk, loss, optim, seed);
  }
}

AnyDenseBlock::~AnyDenseBlock() = default;

StepStats AnyDenseBlock::train_step(const CsrMatrix& targets, ConstMatrix h, Matrix dh,
                                    const LrState& lr) {
  return gpu_ ? gpu_->train_step(targets, h, dh, lr) : cpu_->train_step(targets, h, dh, lr);
}

void AnyDenseBlock::scores(ConstMatrix h, int64_t lo, Matrix out) const {
  if (gpu_) {
    gpu_->scores(h, lo, out);
  } else {
    cpu_->scores(h, lo, out);
  }
}

TopK AnyDenseBlock::topk_gpu(ConstMatrix h, int k) const {
  XMC_CHECK(gpu_ != nullptr, "device top-k of a CPU dense block");
  return gpu_->topk(h, k);
}

std::vector<TensorRef> AnyDenseBlock::state(const std::string& prefix) {
  if (cpu_) return cpu_->state(prefix);
  XMC_CHECK(staging_.staged(), "state() of a device dense block before sync_state(to_host)");
  // DenseBlock::state's names and shapes.
  auto& st = staging_.state();
  std::vector<TensorRef> out = {{prefix + "weight", {n_, d_}, st.weight.data()},
                                {prefix + "bias", {n_}, st.bias.data()}};
  if (!st.weight_opt1.empty()) {
    out.push_back({prefix + "weight_opt1", {n_, d_}, st.weight_opt1.data()});
    out.push_back({prefix + "bias_opt1", {n_}, st.bias_opt1.data()});
  }
  if (!st.weight_opt2.empty()) {
    out.push_back({prefix + "weight_opt2", {n_, d_}, st.weight_opt2.data()});
    out.push_back({prefix + "bias_opt2", {n_}, st.bias_opt2.data()});
  }
  return out;
}

void AnyDenseBlock::sync_state(StateSync s) {
  if (gpu_) staging_.sync(s, *gpu_);
}

int64_t AnyDenseBlock::analytic_bytes() const {
  return gpu_ ? gpu_->analytic_bytes() : cpu_->analytic_bytes();
}

int64_t AnyDenseBlock::chunk() const { return gpu_ ? gpu_->chunk() : cpu_->chunk(); }

}  // namespace xmc
