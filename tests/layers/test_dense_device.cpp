// Device selection and the device-related options of the dense backends, testable
// without a GPU: which backends have a CUDA path, bf16 weights and state on the CPU (and
// the combinations refused, with the key named), that device cuda is refused without CUDA or a GPU
// (and for backends without a CUDA path) — never a silent CPU fallback — and that
// checkpoint staging (sync_state) leaves a CPU layer's state untouched.
#include <catch2/catch.hpp>
#include <vector>

#include "core/error.h"
#include "core/gpu.h"
#include "layers/bottleneck.h"
#include "layers/dense.h"
#include "layers/fixed_fanin.h"
#include "layers/group_shared.h"
#include "layers/registry.h"
#include "support/layer_support.h"
#include "train/model.h"

using namespace xmc;
using Catch::Matchers::Contains;

namespace {
LayerInit small_init(Context& ctx) {
  LayerInit init;
  init.ctx = &ctx;
  init.input_dim = 4;
  init.num_labels = 10;
  init.batch_size = 2;
  return init;
}
}  // namespace

TEST_CASE("every registered backend has a CUDA path") {
  for (const auto& b : output_backends()) {
    INFO(b.config.name);
    CHECK(b.cuda);
    CHECK(backend_has_cuda(b.config.name));
  }
  CHECK(output_backends().size() == 6);
  CHECK_FALSE(backend_has_cuda("no_such_backend"));
}

TEST_CASE("bf16 on the CPU: dense and bottleneck take it, the bad combinations are refused") {
  Context ctx(Device::cpu, 1);
  DenseConfig c;
  c.precision = Precision::bf16;
  c.stochastic_rounding = true;
  {
    DenseLayer layer(small_init(ctx), c);
    // 10 labels × 4 in bf16 (80 bytes) where fp32 takes 160.
    CHECK(ctx.ledger().current(MemTag::weights) == 10 * 4 * 2 + 10 * 4);
  }
  BottleneckConfig b;
  b.dim = 3;
  b.precision = Precision::bf16;
  { BottleneckLayer layer(small_init(ctx), b); }
  DenseConfig sr;
  sr.stochastic_rounding = true;
  CHECK_THROWS_WITH(DenseLayer(small_init(ctx), sr), Contains("stochastic_rounding"));
  // bf16 optimizer state needs bf16 weights, and names the key.
  LayerInit init = small_init(ctx);
  init.optim.state_precision = StatePrecision::bf16;
  CHECK_THROWS_AS(DenseLayer(init, DenseConfig{}), InputError);
  CHECK_THROWS_WITH(DenseLayer(init, DenseConfig{}), Contains("optim.output.state_precision"));
  { DenseLayer layer(init, c); }
  // group_shared's tail has no CPU bf16 kernels.
  GroupSharedConfig g;
  g.precision = Precision::bf16;
  CHECK_THROWS_WITH(GroupSharedLayer(small_init(ctx), g), Contains("model.output.precision"));
  // Nothing leaked into the ledger by the refused layers.
  CHECK(ctx.ledger().total_current() == 0);
}

TEST_CASE("fp8 on the CPU: dense and bottleneck take it, the bad combinations are refused") {
  Context ctx(Device::cpu, 1);
  DenseConfig c;
  c.precision = Precision::fp8;
  c.stochastic_rounding = true;
  {
    DenseLayer layer(small_init(ctx), c);
    // 10 labels × 4: a byte a weight, a float per row's scale, the fp32 bias.
    CHECK(ctx.ledger().current(MemTag::weights) == 10 * 4 + 10 * 4 + 10 * 4);
    CHECK(ctx.ledger().total_current() == layer.analytic_bytes());
  }
  BottleneckConfig b;
  b.dim = 3;
  b.precision = Precision::fp8;
  {
    BottleneckLayer layer(small_init(ctx), b);
    CHECK(ctx.ledger().total_current() == layer.analytic_bytes());
  }
  // The lean optimizers: Adam without a first moment (fp32 v), row-wise Adam.
  LayerInit lean = small_init(ctx);
  lean.optim.type = OptimizerType::adam;
  lean.optim.beta1 = 0.0;
  { DenseLayer layer(lean, c); }
  lean.optim.rowwise = true;
  {
    DenseLayer layer(lean, c);
    CHECK(ctx.ledger().current(MemTag::optimizer) == 10 * 4 + 10 * 4);
  }
  // bf16 optimizer state is bf16 weights' only, and names the key.
  LayerInit init = small_init(ctx);
  init.optim.state_precision = StatePrecision::bf16;
  CHECK_THROWS_WITH(DenseLayer(init, c), Contains("optim.output.state_precision"));
  // Lazy updates keep fp32 weights.
  DenseConfig lazy = c;
  lazy.sparse_gradient = 0.01;
  lazy.lazy_update = true;
  CHECK_THROWS_WITH(DenseLayer(small_init(ctx), lazy), Contains("model.output.lazy_update"));
  CHECK(ctx.ledger().total_current() == 0);
}

TEST_CASE(
    "optim.output.rowwise: one moment per label row in the ledger, refused where it cannot apply") {
  Context ctx(Device::cpu, 1);
  LayerInit init = small_init(ctx);
  init.optim.type = OptimizerType::adam;
  init.optim.beta1 = 0.0;
  init.optim.rowwise = true;
  {
    DenseLayer layer(init, DenseConfig{});
    // The weights' state is one float per label (10), the bias's one per label too.
    CHECK(ctx.ledger().current(MemTag::optimizer) == 10 * 4 + 10 * 4);
    CHECK(ctx.ledger().total_current() == layer.analytic_bytes());
  }
  LayerInit with_m = init;
  with_m.optim.beta1 = 0.9;
  CHECK_THROWS_WITH(DenseLayer(with_m, DenseConfig{}), Contains("beta1: 0"));
  FixedFaninConfig ff;
  ff.fan_in = 2;
  CHECK_THROWS_WITH(FixedFaninLayer(init, ff), Contains("optim.output.rowwise"));
  CHECK(ctx.ledger().total_current() == 0);
}

TEST_CASE("device cuda is refused without CUDA or a GPU, auto falls back only with a warning") {
  if (gpu::built_with_cuda() && !gpu::query_devices().empty()) {
    // A GPU machine: cuda and auto resolve to the GPU for every backend.
    for (const auto& b : output_backends()) {
      INFO(b.config.name);
      CHECK(training_device("cuda", b.config.name) == Device::cuda);
      CHECK(training_device("auto", b.config.name) == Device::cuda);
    }
  } else {
    CHECK_THROWS_AS(training_device("cuda", "dense"), InputError);
    CHECK_THROWS_AS(training_device("cuda", "fixed_fanin"), InputError);
    CHECK(training_device("auto", "dense") == Device::cpu);
    CHECK(training_device("auto", "lsh_sampled") == Device::cpu);
  }
  CHECK(training_device("cpu", "fixed_fanin") == Device::cpu);
  CHECK_THROWS_WITH(training_device("tpu", "dense"), Contains("tpu"));
}

TEST_CASE("checkpoint staging is a no-op for CPU layers") {
  Context ctx(Device::cpu, 1);
  BottleneckConfig c;
  c.dim = 3;
  auto layer = std::make_unique<BottleneckLayer>(small_init(ctx), c);
  CHECK_FALSE(layer->device_views());
  auto before = layer->state();
  std::vector<std::vector<float>> copies;
  for (auto& t : before) {
    const float* p = std::get<float*>(t.data);
    copies.emplace_back(p, p + t.numel());
  }
  for (auto s : {StateSync::to_host, StateSync::to_device, StateSync::release})
    layer->sync_state(s);
  auto after = layer->state();
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    CHECK(after[i].name == before[i].name);
    CHECK(std::get<float*>(after[i].data) == std::get<float*>(before[i].data));
    const float* p = std::get<float*>(after[i].data);
    CHECK(std::vector<float>(p, p + after[i].numel()) == copies[i]);
  }
}
