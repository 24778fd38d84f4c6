// Gradient checks of the dense and bottleneck backends against finite differences of a
// double-precision reference (forward + loss written out here), and chunking invariance.
#include <hdf5.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "layers/bottleneck.h"
#include "layers/dense.h"
#include "layers/dense_block.h"
#include "layers/registry.h"
#include "support/layer_support.h"
#include "support/test_env.h"
#include "support/test_support.h"
#include "train/checkpoint.h"

using namespace xmc;
using namespace xmc::test;

namespace {

bool is_pos(const Batch& b, int64_t i, int64_t l) {
  for (int64_t p = b.labels.indptr[i]; p < b.labels.indptr[i + 1]; ++p)
    if (b.labels.indices[p] == l) return true;
  return false;
}

// Loss in double of logits z [B×L]: sum over labels, mean over the batch.
double ref_loss(const std::string& loss, const std::vector<double>& z, const Batch& b,
                int64_t num_labels) {
  const int64_t batch = b.size();
  double total = 0.0;
  for (int64_t i = 0; i < batch; ++i) {
    const double* zi = z.data() + i * num_labels;
    if (loss == "softmax") {
      const int64_t npos = b.labels.row_nnz(i);
      if (npos == 0) continue;
      double mx = -1e300;
      for (int64_t l = 0; l < num_labels; ++l) mx = std::max(mx, zi[l]);
      double s = 0.0;
      for (int64_t l = 0; l < num_labels; ++l) s += std::exp(zi[l] - mx);
      const double lse = mx + std::log(s);
      for (int64_t l = 0; l < num_labels; ++l)
        if (is_pos(b, i, l)) total += -(1.0 / static_cast<double>(npos)) * (zi[l] - lse);
      continue;
    }
    for (int64_t l = 0; l < num_labels; ++l) {
      const double y = is_pos(b, i, l) ? 1.0 : -1.0;
      if (loss == "bce") {
        total += std::log1p(std::exp(-y * zi[l]));
      } else {
        const double m = std::max(0.0, 1.0 - y * zi[l]);
        total += m * m;
      }
    }
  }
  return total / static_cast<double>(batch);
}

struct Params {
  std::vector<double> w, bias, p;  // p: bottleneck projection (empty for dense)
};

// Reference forward: z = (p ? h·Pᵀ : h)·Wᵀ + bias.
std::vector<double> ref_logits(const Params& prm, const std::vector<double>& h, int64_t batch,
                               int64_t d, int64_t dim, int64_t num_labels) {
  std::vector<double> u = h;
  int64_t width = d;
  if (!prm.p.empty()) {
    u.assign(static_cast<size_t>(batch * dim), 0.0);
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t j = 0; j < dim; ++j)
        for (int64_t t = 0; t < d; ++t) u[i * dim + j] += h[i * d + t] * prm.p[j * d + t];
    width = dim;
  }
  std::vector<double> z(static_cast<size_t>(batch * num_labels), 0.0);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t l = 0; l < num_labels; ++l) {
      double s = prm.bias[l];
      for (int64_t t = 0; t < width; ++t) s += u[i * width + t] * prm.w[l * width + t];
      z[i * num_labels + l] = s;
    }
  return z;
}

// One SGD step with lr = 1 exposes the gradient as (old - new); dh comes back directly.
// Bottleneck: P steps by projection_lr times its gradient (0: P stays).
void gradient_check(const std::string& backend, const std::string& loss, int64_t chunk,
                    double projection_lr = 1.0) {
  const int64_t batch = 4, d = 5, num_labels = 7, dim = 3;
  Context ctx(Device::cpu, 2);
  LayerInit init = layer_init(ctx, d, num_labels, batch);
  init.optim.type = OptimizerType::sgd;
  init.optim.lr = 1.0;
  init.seed = 3;
  std::unique_ptr<OutputLayer> layer;
  if (backend == "dense") {
    DenseConfig c;
    c.loss = parse_enum<LossType>(loss, "loss");
    c.chunk_size = chunk;
    layer = std::make_unique<DenseLayer>(init, c);
  } else {
    BottleneckConfig c;
    c.loss = parse_enum<LossType>(loss, "loss");
    c.chunk_size = chunk;
    c.dim = dim;
    c.projection_lr = projection_lr;
    layer = std::make_unique<BottleneckLayer>(init, c);
  }
  // Row 2 has no positives; row 3 has several.
  Batch b = make_batch(num_labels, {{1}, {0, 6}, {}, {2, 3, 5}});
  Rng rng(11);
  std::vector<float> hf(static_cast<size_t>(batch * d));
  for (auto& x : hf) x = static_cast<float>(rng.normal());
  std::vector<double> h(hf.begin(), hf.end());

  const std::string wname = backend == "dense" ? "output/weight" : "output/dense/weight";
  const std::string bname = backend == "dense" ? "output/bias" : "output/dense/bias";
  auto state = layer->state();
  Params prm{to_double(find(state, wname)), to_double(find(state, bname)), {}};
  if (backend == "bottleneck") prm.p = to_double(find(state, "output/projection/weight"));

  auto f = [&] {
    return ref_loss(loss, ref_logits(prm, h, batch, d, dim, num_labels), b, num_labels);
  };
  const double ref = f();

  std::vector<float> dhf(static_cast<size_t>(batch * d));
  StepStats s = layer->train_step(b, ConstMatrix(hf.data(), batch, d),
                                  Matrix(dhf.data(), batch, d), {1.0, 1});
  CHECK(s.loss == Approx(ref).epsilon(1e-4));

  auto after = layer->state();
  auto w_new = to_double(find(after, wname));
  auto b_new = to_double(find(after, bname));
  for (size_t i = 0; i < prm.w.size(); ++i)
    check_close(prm.w[i] - w_new[i], fd(prm.w, i, f), "dW[" + std::to_string(i) + "]");
  for (size_t i = 0; i < prm.bias.size(); ++i)
    check_close(prm.bias[i] - b_new[i], fd(prm.bias, i, f), "db[" + std::to_string(i) + "]");
  if (backend == "bottleneck") {
    auto p_new = to_double(find(after, "output/projection/weight"));
    for (size_t i = 0; i < prm.p.size(); ++i)
      check_close(prm.p[i] - p_new[i], projection_lr * fd(prm.p, i, f),
                  "dP[" + std::to_string(i) + "]");
  }
  for (size_t i = 0; i < h.size(); ++i)
    check_close(dhf[i], fd(h, i, f), "dh[" + std::to_string(i) + "]");
}

}  // namespace

TEST_CASE("dense layer gradients match finite differences") {
  for (std::string loss : {"bce", "squared_hinge", "softmax"}) {
    for (int64_t chunk : {7, 3}) {  // one chunk, and chunks of 3 + 3 + 1 labels
      DYNAMIC_SECTION(loss << " chunk " << chunk) { gradient_check("dense", loss, chunk); }
    }
  }
}

TEST_CASE("bottleneck layer gradients match finite differences") {
  for (std::string loss : {"bce", "squared_hinge", "softmax"}) {
    for (int64_t chunk : {7, 2}) {
      DYNAMIC_SECTION(loss << " chunk " << chunk) { gradient_check("bottleneck", loss, chunk); }
    }
  }
}

TEST_CASE("bottleneck with projection_lr: P steps at that multiple of the lr, or stays") {
  // The dense part's and dh's gradients are those of the trained P; only P's step changes.
  for (double plr : {0.5, 0.0}) {
    for (std::string loss : {"bce", "softmax"}) {
      DYNAMIC_SECTION(loss << " projection_lr " << plr) {
        gradient_check("bottleneck", loss, 2, plr);
      }
    }
  }
  // Fixed, P keeps no optimizer state and no gradient buffer: Adam's two arrays are gone
  // from the ledger, the analytic size and the checkpoint's tensors.
  auto build = [](Context& ctx, double plr) {
    LayerInit init = layer_init(ctx, 64, 500, 16);
    init.optim.type = OptimizerType::adam;
    BottleneckConfig c;
    c.dim = 32;
    c.chunk_size = 128;
    c.projection_lr = plr;
    return std::make_unique<BottleneckLayer>(init, c);
  };
  Context ct(Device::cpu, 1), cf(Device::cpu, 1);
  auto trained = build(ct, 1.0);
  auto fixed = build(cf, 0.0);
  CHECK(ct.ledger().total_current() == trained->analytic_bytes());
  CHECK(cf.ledger().total_current() == fixed->analytic_bytes());
  CHECK(trained->analytic_bytes() - fixed->analytic_bytes() == 4 * 3 * 32 * 64);
  auto names = [](std::vector<TensorRef> st) {
    std::set<std::string> n;
    for (const auto& t : st) n.insert(t.name);
    return n;
  };
  CHECK(names(trained->state()).count("output/projection/opt1") == 1);
  CHECK(names(fixed->state()).count("output/projection/opt1") == 0);
  CHECK(names(fixed->state()).count("output/projection/opt2") == 0);
  CHECK(names(fixed->state()).count("output/projection/weight") == 1);
}

// Every weight precision: bf16 and fp8 weights are widened a chunk (7 labels) at a time
// into the block's chunk workspace, for the score matrix of all 50 labels too.
TEST_CASE("dense top-k equals the top-k of the full score matrix") {
  const int64_t batch = 6, d = 8, num_labels = 50;
  const Precision precision = GENERATE(Precision::fp32, Precision::bf16, Precision::fp8);
  INFO("precision " << to_string(precision));
  Context ctx(Device::cpu, 2);
  LayerInit init = layer_init(ctx, d, num_labels, batch);
  init.seed = 5;
  DenseConfig c;
  c.chunk_size = 7;
  c.precision = precision;
  DenseLayer layer(init, c);
  Rng rng(2);
  std::vector<float> h(static_cast<size_t>(batch * d));
  for (auto& x : h) x = static_cast<float>(rng.normal());
  std::vector<float> all(static_cast<size_t>(batch * num_labels));
  layer.scores(ConstMatrix(h.data(), batch, d), Matrix(all.data(), batch, num_labels));
  TopK top = layer.topk(ConstMatrix(h.data(), batch, d), 5);
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<int> order(static_cast<size_t>(num_labels));
    for (int l = 0; l < num_labels; ++l) order[l] = l;
    std::sort(order.begin(), order.end(), [&](int a, int b2) {
      return all[i * num_labels + a] > all[i * num_labels + b2];
    });
    for (int j = 0; j < 5; ++j) CHECK(top.row_labels(i)[j] == static_cast<uint32_t>(order[j]));
  }
}

TEST_CASE("dense layer memory in the ledger equals the analytic size") {
  Context ctx(Device::cpu, 1);
  LayerInit init = layer_init(ctx, 64, 1000, 32);
  init.optim.type = OptimizerType::adam;
  DenseConfig c;
  c.chunk_size = 256;
  DenseLayer layer(init, c);
  const int64_t expected = 4 * ((1000 * 64 + 1000) * 3 + 32 * 256 + 256 * 64 + 256);
  CHECK(layer.analytic_bytes() == expected);
  CHECK(ctx.ledger().total_current() == expected);
  CHECK(ctx.ledger().current(MemTag::optimizer) == 4 * 2 * (1000 * 64 + 1000));
}

TEST_CASE("registry lists the backends and rejects an unknown one") {
  std::vector<std::string> names;
  for (const auto& b : output_backends()) names.push_back(b.config.name);
  // Every backend once; the baselines first.
  REQUIRE(names.size() >= 2);
  CHECK(names[0] == "dense");
  CHECK(names[1] == "bottleneck");
  CHECK(std::set<std::string>(names.begin(), names.end()).size() == names.size());
  Context ctx(Device::cpu, 1);
  LayerInit init = layer_init(ctx, 4, 10, 2);
  OutputSpec spec;
  spec.type = "densee";
  try {
    create_output_layer(init, spec);
    FAIL("expected an error");
  } catch (const InputError& e) {
    std::string msg = e.what();
    CHECK(msg.find("densee") != std::string::npos);
    CHECK(msg.find("dense") != std::string::npos);
    CHECK(msg.find("bottleneck") != std::string::npos);
  }
}

// Issue 20, item 8: the dense block's memory is planned (the same formula as
// analytic_bytes) and checked against the memory budget before anything is allocated.
TEST_CASE("dense layer larger than the memory budget is refused before allocating") {
  Context ctx(Device::cpu, 1);
  // 2M × 256 floats × (weights + 2 Adam states) ≈ 5.7 GiB
  LayerInit init = layer_init(ctx, 256, 2'000'000, 64);
  init.optim.type = OptimizerType::adam;
  xmc::test::ScopedEnv limit("XMC_MEMORY_LIMIT", "1G");
  std::string m;
  try {
    DenseLayer layer(init, DenseConfig{});
  } catch (const InputError& e) {
    m = e.what();
  }
  CHECK_THAT(m, Catch::Matchers::Contains("2000000 labels × d = 256"));
  CHECK_THAT(m, Catch::Matchers::Contains("more than the 1.0 GiB available (XMC_MEMORY_LIMIT)"));
  CHECK_THAT(m, Catch::Matchers::Contains("optim.output.type"));
  CHECK(ctx.ledger().total_peak() == 0);
  // A layer that fits (its plan: 512 MiB of logits workspace and 19 MiB of weights), but
  // not with the sparse gradient's workspaces (2 arrays of batch × chunk: 1 GiB more):
  // refused naming what to change.
  init.num_labels = 100'000;
  init.input_dim = 16;
  init.batch_size = 2048;
  DenseConfig sparse;
  sparse.chunk_size = 65536;
  CHECK(DenseBlock::planned_bytes(false, 16, 100'000, 2048, 65536, LossType::bce, init.optim)
            .total() < 0.6 * (1 << 30));
  sparse.sparse_gradient = 0.01;
  CHECK_THROWS_AS(DenseLayer(init, sparse), InputError);
  CHECK_THROWS_WITH(DenseLayer(init, sparse),
                    Catch::Matchers::Contains("sparse_gradient") &&
                        Catch::Matchers::Contains("model.output.chunk_size"));
  // The plan is what a built block reports.
  init.num_labels = 1000;
  init.input_dim = 256;
  init.batch_size = 64;
  DenseLayer small(init, DenseConfig{});
  CHECK(static_cast<double>(small.analytic_bytes()) ==
        DenseBlock::planned_bytes(false, 256, 1000, 64, 8192, LossType::bce, init.optim).total());
}

// Checkpoint format 2 (issue 38) stores bottleneck's P as a Projection; a format-1 file
// (written before it, no meta/format) names its tensors output/projection,
// output/projection_opt1 and _opt2. The old layout is made here from a saved layer by
// renaming those datasets and dropping meta/format; a fresh layer reads it back whole.
TEST_CASE("bottleneck reads a checkpoint of format 1, the layout before its Projection") {
  Context ctx(Device::cpu, 1);
  LayerInit init = layer_init(ctx, 5, 6, 4);
  init.optim.type = OptimizerType::adam;
  init.optim.lr = 0.05;
  init.seed = 3;
  BottleneckConfig c;
  c.dim = 3;
  BottleneckLayer trained(init, c);
  Rng rng(5);
  std::vector<float> hv(4 * 5), dhv(hv.size());
  for (auto& x : hv) x = static_cast<float>(rng.normal());
  const ConstMatrix h(hv.data(), 4, 5);
  const Batch b = make_batch(6, {{1}, {0, 5}, {}, {2, 3}});
  for (int64_t step = 1; step <= 3; ++step)
    trained.train_step(b, h, Matrix(dhv.data(), 4, 5), {.lr = 0.05, .step = step});

  TempDir dir;
  const std::string path = (dir.path() / "old.h5").string();
  {
    CheckpointWriter w(path);
    for (const TensorRef& t : trained.state()) w.write(t);
    w.commit();
  }
  CHECK(CheckpointReader(path).format() == kCheckpointFormat);
  {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(f >= 0);
    CHECK(H5Ldelete(f, "meta/format", H5P_DEFAULT) >= 0);
    CHECK(H5Lmove(f, "output/projection", f, "p", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    for (const auto& [from, to] :
         {std::pair{"p/weight", "output/projection"}, std::pair{"p/opt1", "output/projection_opt1"},
          std::pair{"p/opt2", "output/projection_opt2"}})
      CHECK(H5Lmove(f, from, f, to, H5P_DEFAULT, H5P_DEFAULT) >= 0);
    H5Fclose(f);
  }
  const CheckpointReader old(path);
  CHECK(old.format() == 1);
  CHECK_FALSE(old.has("output/projection/weight"));

  init.seed = 4;  // other initial values, all replaced by the checkpoint's
  BottleneckLayer loaded(init, c);
  for (const TensorRef& t : loaded.state()) old.read(t);
  const auto want = trained.state(), got = loaded.state();
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(want[i].name);
    CHECK(got[i].name == want[i].name);
    CHECK(to_double(got[i]) == to_double(want[i]));
  }
  std::vector<float> zt(4 * 6), zl(zt.size());
  trained.scores(h, Matrix(zt.data(), 4, 6));
  loaded.scores(h, Matrix(zl.data(), 4, 6));
  CHECK(zl == zt);
}

TEST_CASE("dense layer with a sparse gradient: one SGD step applies the sparsified gradient") {
  // The CPU path builds G's non-zeros by row and by column and runs the two backward
  // products over them; here they are checked against the products in double of the
  // reference gradient sparsified with the same draws (DenseBlock::sparse_stream).
  const int64_t batch = 6, d = 5, num_labels = 40;
  const double threshold = 0.3;  // per point: most negatives' |σ(z)| at this scale is below
  Batch b = make_batch(num_labels, {{1}, {0, 6, 39}, {}, {2, 3, 5}, {17}, {20, 21}});
  Rng rng(7);
  std::vector<float> hf(static_cast<size_t>(batch * d));
  for (auto& x : hf) x = static_cast<float>(6.0 * rng.normal());  // logits spread over ±8
  std::vector<double> h(hf.begin(), hf.end());
  for (int64_t chunk : {int64_t{40}, int64_t{16}}) {
    DYNAMIC_SECTION("chunk " << chunk) {
      Context ctx(Device::cpu, 2);
      LayerInit init = layer_init(ctx, d, num_labels, batch);
      init.optim.type = OptimizerType::sgd;
      init.optim.lr = 1.0;
      init.seed = 3;
      DenseConfig c;
      c.chunk_size = chunk;
      c.sparse_gradient = threshold;
      DenseLayer layer(init, c);
      auto state = layer.state();
      Params prm{
          to_double(find(state, "output/weight")), to_double(find(state, "output/bias")), {}};
      const std::vector<double> z = ref_logits(prm, h, batch, d, d, num_labels);
      // G' = sparsify((σ(z) - y) / B) with the block's draws at step 1.
      const uint64_t stream = DenseBlock::sparse_stream(init.seed, 1);
      const auto t = static_cast<float>(threshold / batch);
      std::vector<double> g(z.size());
      int64_t zeros = 0, raised = 0;
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t l = 0; l < num_labels; ++l) {
          const double y = is_pos(b, i, l) ? 1.0 : 0.0;
          const double s = 1.0 / (1.0 + std::exp(-z[i * num_labels + l]));
          const auto gf = static_cast<float>((s - y) / batch);
          const float sp = gpu::sparsify_value(
              gf, t, gpu::rounding_bits(stream, static_cast<uint64_t>(i * num_labels + l)));
          zeros += sp == 0.0f;
          raised += sp != gf && sp != 0.0f;
          g[i * num_labels + l] = sp == gf ? (s - y) / batch : sp;
        }
      // The case exercises both outcomes and keeps some entries as they were.
      CHECK(zeros > batch * num_labels / 4);
      CHECK(raised > 5);
      CHECK(zeros + raised < batch * num_labels);

      std::vector<float> dhf(static_cast<size_t>(batch * d));
      layer.train_step(b, ConstMatrix(hf.data(), batch, d), Matrix(dhf.data(), batch, d), {1.0, 1});
      auto after = layer.state();
      const auto w_new = to_double(find(after, "output/weight"));
      const auto b_new = to_double(find(after, "output/bias"));
      for (int64_t l = 0; l < num_labels; ++l) {
        double db = 0.0;
        for (int64_t i = 0; i < batch; ++i) db += g[i * num_labels + l];
        check_close(prm.bias[l] - b_new[l], db, "db[" + std::to_string(l) + "]");
        for (int64_t k = 0; k < d; ++k) {
          double dw = 0.0;
          for (int64_t i = 0; i < batch; ++i) dw += g[i * num_labels + l] * h[i * d + k];
          check_close(prm.w[l * d + k] - w_new[l * d + k], dw,
                      "dW[" + std::to_string(l) + "," + std::to_string(k) + "]");
        }
      }
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t k = 0; k < d; ++k) {
          double dh = 0.0;
          for (int64_t l = 0; l < num_labels; ++l) dh += g[i * num_labels + l] * prm.w[l * d + k];
          check_close(dhf[i * d + k], dh,
                      "dh[" + std::to_string(i) + "," + std::to_string(k) + "]");
        }
    }
  }
}

// A dense or bottleneck layer (bottleneck: projection width dim) of Adam lr 0.01 over
// chunks of 128 labels, with this sparse gradient and lazy update; the ledger is checked
// against its analytic bytes.
static std::unique_ptr<OutputLayer> sparse_dense_layer(Context& ctx, const std::string& backend,
                                                       int64_t d, int64_t num_labels, int64_t batch,
                                                       uint64_t seed, int64_t dim, double threshold,
                                                       bool lazy) {
  LayerInit init = layer_init(ctx, d, num_labels, batch);
  init.optim.type = OptimizerType::adam;
  init.optim.lr = 0.01;
  init.seed = seed;
  std::unique_ptr<OutputLayer> layer;
  if (backend == "dense") {
    DenseConfig c;
    c.chunk_size = 128;
    c.sparse_gradient = threshold;
    c.lazy_update = lazy;
    layer = std::make_unique<DenseLayer>(init, c);
  } else {
    BottleneckConfig c;
    c.chunk_size = 128;
    c.dim = dim;
    c.sparse_gradient = threshold;
    c.lazy_update = lazy;
    layer = std::make_unique<BottleneckLayer>(init, c);
  }
  CHECK(ctx.ledger().total_current() == layer->analytic_bytes());
  return layer;
}

TEST_CASE("dense and bottleneck with a sparse gradient: below every entry they train exactly") {
  // A threshold below every |g| keeps G whole: the sparse products (CPU) must then give the
  // GEMMs' steps, over several chunks and threads.
  const int64_t batch = 16, d = 24, num_labels = 300;
  auto run = [&](const std::string& backend, double threshold) {
    Context ctx(Device::cpu, 2);
    auto layer = sparse_dense_layer(ctx, backend, d, num_labels, batch, 9, 16, threshold, false);
    if (backend == "dense" && threshold > 0.0) {
      DenseConfig c, plain;
      c.chunk_size = plain.chunk_size = 128;
      c.sparse_gradient = threshold;
      CHECK(DenseLayer::planned_bytes(layer->shape(), c).total() >
            DenseLayer::planned_bytes(layer->shape(), plain).total());
    }
    Rng rng(4);
    std::vector<std::vector<uint32_t>> pos(static_cast<size_t>(batch));
    for (auto& p : pos) p = {static_cast<uint32_t>(rng.below(num_labels))};
    Batch b = make_batch(num_labels, pos);
    std::vector<float> hf(static_cast<size_t>(batch * d)), dh(hf.size());
    for (auto& x : hf) x = static_cast<float>(rng.normal());
    std::vector<float> dhs;
    for (int64_t step = 1; step <= 3; ++step) {
      layer->train_step(b, ConstMatrix(hf.data(), batch, d), Matrix(dh.data(), batch, d),
                        {0.01, step});
      dhs.insert(dhs.end(), dh.begin(), dh.end());
    }
    const std::string w = backend == "dense" ? "output/weight" : "output/dense/weight";
    return std::make_pair(floats(layer->state(), w), dhs);
  };
  for (std::string backend : {"dense", "bottleneck"}) {
    DYNAMIC_SECTION(backend) {
      const auto exact = run(backend, 0.0);
      const auto sparse = run(backend, 1e-30);
      REQUIRE(exact.first.size() == sparse.first.size());
      for (size_t i = 0; i < exact.first.size(); ++i)
        REQUIRE(sparse.first[i] == Approx(exact.first[i]).margin(1e-6).epsilon(1e-5));
      for (size_t i = 0; i < exact.second.size(); ++i)
        REQUIRE(sparse.second[i] == Approx(exact.second[i]).margin(1e-7).epsilon(1e-4));
    }
  }
}

TEST_CASE("dense and bottleneck with lazy updates: touched rows step as without, the rest wait") {
  // DenseBlock::set_sparse_gradient(threshold, lazy): each chunk updates only the label rows
  // whose column of the sparsified G has a non-zero. From a zero optimizer state the first
  // step is the plain sparse step bit for bit (a row without gradient does not move); at
  // the second, every row either steps exactly as without lazy (it is touched: same state,
  // same gradient) or keeps its weight, bias and both Adam moments (it waits), where without
  // lazy Adam's first moment still moves the rows touched before.
  // Batch 4 and threshold 1 (0.25 an entry): an entry of |g| ≈ 0.5/4 survives with
  // probability about 1/2, so a column of 4 entries is empty now and then.
  const int64_t batch = 4, d = 8, num_labels = 300;
  // Chunks of 128 labels: three, the last one partial.
  auto make = [&](const std::string& backend, bool lazy, Context& ctx) {
    return sparse_dense_layer(ctx, backend, d, num_labels, batch, 5, 6, 1.0, lazy);
  };
  Rng rng(11);
  std::vector<Batch> batches;
  std::vector<std::vector<float>> hs;
  for (int s = 0; s < 2; ++s) {
    std::vector<std::vector<uint32_t>> pos(static_cast<size_t>(batch));
    for (auto& p : pos) p = {static_cast<uint32_t>(rng.below(num_labels))};
    batches.push_back(make_batch(num_labels, pos));
    hs.emplace_back(static_cast<size_t>(batch * d));
    for (auto& x : hs.back()) x = static_cast<float>(rng.normal());
  }
  for (std::string backend : {"dense", "bottleneck"}) {
    DYNAMIC_SECTION(backend) {
      const std::string pre = backend == "dense" ? "output/" : "output/dense/";
      const std::vector<std::string> names = {"weight", "bias", "weight_opt1", "weight_opt2"};
      Context ca(Device::cpu, 2), cb(Device::cpu, 2);
      auto plain = make(backend, false, ca);
      auto lazy = make(backend, true, cb);
      const int64_t width = backend == "dense" ? d : 6;
      std::vector<float> dh_plain(static_cast<size_t>(batch * d)), dh_lazy(dh_plain.size());
      auto step = [&](int s) {
        const ConstMatrix h(hs[s].data(), batch, d);
        plain->train_step(batches[s], h, Matrix(dh_plain.data(), batch, d), {0.01, s + 1});
        lazy->train_step(batches[s], h, Matrix(dh_lazy.data(), batch, d), {0.01, s + 1});
      };
      step(0);
      CHECK(dh_lazy == dh_plain);
      for (const auto& n : names) {
        INFO(n);
        CHECK(floats(lazy->state(), pre + n) == floats(plain->state(), pre + n));
      }
      std::map<std::string, std::vector<double>> before;
      for (const auto& n : names) before[n] = floats(lazy->state(), pre + n);
      step(1);
      CHECK(dh_lazy == dh_plain);  // the same weights before the step
      std::map<std::string, std::vector<double>> got, want;
      for (const auto& n : names) {
        got[n] = floats(lazy->state(), pre + n);
        want[n] = floats(plain->state(), pre + n);
      }
      auto row = [&](const std::vector<double>& v, int64_t r, int64_t w) {
        return std::vector<double>(v.begin() + r * w, v.begin() + (r + 1) * w);
      };
      int64_t stepped = 0, waited = 0, waited_moving = 0;
      for (int64_t r = 0; r < num_labels; ++r) {
        bool same_as_plain = true, same_as_before = true;
        for (const auto& n : names) {
          const int64_t w = n == "bias" ? 1 : width;
          same_as_plain = same_as_plain && row(got[n], r, w) == row(want[n], r, w);
          same_as_before = same_as_before && row(got[n], r, w) == row(before[n], r, w);
        }
        INFO("row " << r);
        CHECK((same_as_plain || same_as_before));
        if (!same_as_before) ++stepped;
        if (same_as_before && !same_as_plain) {
          ++waited;
          waited_moving += row(want["weight"], r, width) != row(before["weight"], r, width);
        }
      }
      // Both kinds occur, and waiting rows that plain Adam moves by their first moment.
      CHECK(stepped > 0);
      CHECK(waited > 0);
      CHECK(waited_moving > 0);
    }
  }
}

TEST_CASE("lazy updates without a sparse gradient, or with bf16 weights, are refused") {
  Context ctx(Device::cpu, 1);
  LayerInit init = layer_init(ctx, 8, 50, 4);
  DenseConfig c;
  c.lazy_update = true;
  CHECK_THROWS_AS(DenseLayer(init, c), InputError);
  CHECK_THROWS_WITH(DenseLayer(init, c), Catch::Matchers::Contains("sparse_gradient > 0"));
  c.sparse_gradient = 0.01;
  c.precision = Precision::bf16;
  CHECK_THROWS_WITH(DenseLayer(init, c), Catch::Matchers::Contains("lazy_update needs fp32"));
  c.precision = Precision::fp32;
  DenseLayer ok(init, c);  // fp32 with a threshold: accepted
  CHECK(ok.analytic_bytes() == ctx.ledger().total_current());
}
