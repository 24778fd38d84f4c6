// The sampled backends (lsh_sampled, anns_sampled) and their SampledBlock on the device
// under test against the same on the CPU (formerly the plain main()
// test_cuda_parity_sampled; its row-gathered update is in tests/ops, its trainings in
// test_parity_training). A CPU layer and the layer under test are built from the same
// LayerInit (same seed: identical initial parameters) and fed the same batches and h:
// forward scores, each train_step (loss, gradient counts, dh, parameters and optimizer
// state after the update), several steps across LSH table refreshes / an ANNS index
// refresh, checkpoint staging, exact and approximate top-k. Odd sizes throughout (d = 37,
// L = 301, B = 29).
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "layers/anns_sampled.h"
#include "layers/lsh_sampled.h"
#include "layers/sampled_block.h"
#include "parity_support.h"

using namespace xmc;
using namespace xmc::parity;

namespace {

LayerInit layer_init(Context& ctx, const OptimizerConfig& optim, int64_t d, int64_t labels,
                     int64_t batch, int64_t n_train) {
  LayerInit init;
  init.ctx = &ctx;
  init.input_dim = d;
  init.num_labels = labels;
  init.batch_size = batch;
  init.optim = optim;
  init.seed = 1234;
  init.num_train = n_train;
  init.total_steps = 100;
  return init;
}

// Float state within 1e-6 + 1e-4 relative (second moments 1e-8 + 1e-3); integer state
// (LSH tables, hard-negative sets) equal on at least min_equal of the entries.
StateTolerance sampled_tolerance(double min_equal = 1.0) {
  return {.abs = 1e-6, .rel = 1e-4, .opt2_abs = 1e-8, .opt2_rel = 1e-3, .min_equal = min_equal};
}

// The bytes recorded on the Context's own device (device memory on CUDA, host on the CPU).
int64_t device_bytes(const Context& ctx) {
  return ctx.ledger().total_current(ctx.on_gpu() ? MemSpace::device : MemSpace::host);
}

}  // namespace

// A block's ledger growth at construction against its analytic size, for every update
// rule; its initial weights bit for bit those of the CPU block of the same seed; the ledger
// back to the Context's own bytes when the blocks are gone.
DEVICE_TEST("sampled block: ledger == analytic size, the CPU block's initial weights",
            "[sampled]") {
  Context cpu;
  const int64_t before = device_bytes(ctx);
  const int64_t n = 1001, d = 37;
  for (const OptimizerConfig& cfg : optimizers()) {
    INFO(describe(cfg));
    const int64_t at = device_bytes(ctx);
    SampledBlock block(ctx, cfg, 0, n, d, 77, 29, 257, 29 * 40);
    expect_close("ledger bytes of a sampled block == analytic",
                 static_cast<double>(device_bytes(ctx) - at),
                 static_cast<double>(block.analytic_bytes()), 0, 0);
    SampledBlock ref(cpu, cfg, 0, n, d, 77, 29, 257, 29 * 40);
    const ConstMatrix wg = block.host_weights(), wr = ref.host_weights();
    expect_close("sampled block initial weights", std::vector<float>(wg.data, wg.data + n * d),
                 std::vector<float>(wr.data, wr.data + n * d), 0, 0);
    block.release_host();
  }
  expect_close("ledger back to the context's bytes", static_cast<double>(device_bytes(ctx)),
               static_cast<double>(before), 0, 0);
}

// lsh_sampled: softmax / bce × embedding / label / no queries × per-point / shared
// candidates × simhash / dwta × the four update rules, tables refreshed every 2 steps
// (updated rows, or all): initial state and scores, 5 steps (the tables after a refresh
// from the device's weights may differ only where a projection's sign flipped by rounding:
// >= 99.9% of the entries equal), both refreshed twice, then the CPU state loaded into the
// layer under test (the checkpoint load path) and top-1/5 allowing ties. Then eval_search
// lsh: retrieval on the host from the downloaded h, scores of the retrieved labels on the
// device — the same tables give the same candidates: top-5 and the recall within 0.02.
DEVICE_TEST("lsh_sampled layer: steps across table refreshes, state load, top-k match the CPU",
            "[sampled]") {
  const int64_t d = 37, n = 301, batch = 29, n_train = 500;
  struct Case {
    std::string name;
    std::string loss, query, reinsert, hash;
    bool shared;
    OptimizerConfig optim;
  };
  const auto opts = optimizers();
  const std::vector<Case> cases = {
      {"softmax embedding", "softmax", "embedding", "updated", "simhash", false, opts[2]},
      {"bce label", "bce", "label", "updated", "dwta", false, opts[1]},
      {"softmax none shared", "softmax", "none", "updated", "simhash", true, opts[3]},
      {"bce embedding shared all", "bce", "embedding", "all", "simhash", true, opts[0]},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name << " " << describe(c.optim)) {
      Rng rng(401);
      // chunk_size 128: several label chunks, the last one partial.
      const std::string yaml =
          "{type: lsh_sampled, loss: " + c.loss + ", query: " + c.query +
          ", reinsert: " + c.reinsert + ", hash: " + c.hash +
          ", shared_candidates: " + (c.shared ? "true" : "false") +
          ", k: 4, tables: 8, bucket_capacity: 16, max_candidates: " + (c.shared ? "120" : "40") +
          ", min_candidates: " + (c.shared ? "60" : "16") +
          ", rebuild_interval: 2, chunk_size: 128}";
      Context cpu;
      auto ref = make_layer<LshSampledLayer>(layer_init(cpu, c.optim, d, n, batch, n_train), yaml);
      auto got = make_layer<LshSampledLayer>(layer_init(ctx, c.optim, d, n, batch, n_train), yaml);
      CHECK(got->device_views() == ctx.on_gpu());
      compare_state("initial", snapshot(*got), snapshot(*ref), sampled_tolerance());
      const auto h0 = random_floats(rng, 7 * d);
      expect_close("initial scores", layer_scores(*got, ctx, h0, 7), layer_scores(*ref, cpu, h0, 7),
                   1e-5, 1e-4);
      for (int64_t step = 1; step <= 5; ++step) {
        const std::string sn = "step " + std::to_string(step);
        const Batch b = random_batch(rng, batch, n, 4, n_train);
        compare_step(sn, *ref, *got, ctx, b, random_floats(rng, static_cast<size_t>(batch * d)),
                     {c.optim.lr, step});
        TrainerView view;
        view.step = step;
        view.total_steps = 100;
        ref->on_step(view);
        got->on_step(view);
        compare_state(sn, snapshot(*got), snapshot(*ref), sampled_tolerance(0.999));
      }
      if (c.query != "none") {
        INFO("both refreshed twice");
        CHECK(ref->next_refresh_step() == 6);
        CHECK(got->next_refresh_step() == 6);
      }
      // Identical tables and parameters from here on: the checkpoint load path.
      load_state(*got, snapshot(*ref));
      compare_state("after a state copy", snapshot(*got), snapshot(*ref), sampled_tolerance());
      const auto h = random_floats(rng, 40 * d);
      for (int k : {1, 5}) compare_layer_topk("", *ref, *got, ctx, h, 40, k);
    }
  }
  SECTION("eval_search lsh") {
    Rng rng(403);
    const std::string yaml =
        "{type: lsh_sampled, eval_search: lsh, eval_candidates: 50, k: 3, tables: 6, "
        "chunk_size: 100}";
    Context cpu;
    auto ref = make_layer<LshSampledLayer>(layer_init(cpu, opts[2], d, n, batch, n_train), yaml);
    auto got = make_layer<LshSampledLayer>(layer_init(ctx, opts[2], d, n, batch, n_train), yaml);
    const int64_t rows = 45;
    compare_layer_topk("eval_search lsh", *ref, *got, ctx,
                       random_floats(rng, static_cast<size_t>(rows * d)), rows, 5);
    expect_close("eval_search lsh recall", got->last_eval_recall(), ref->last_eval_recall(), 0.02,
                 0);
    INFO("recall measured");
    CHECK(got->last_eval_recall() >= 0.0);
  }
}

// anns_sampled: bce / squared hinge, uniform negatives weighted or not (hard_weight 0.25
// with unbiased), the four update rules: initial state and scores, 2 steps of uniform
// negatives, a synchronous index refresh over [W | b] downloaded from the device with the
// same embeddings (the trainer's embed_train) — the hard-negative sets may differ only at
// near-ties: >= 95% agree —, the CPU state loaded (identical hard sets from there), 3 more
// steps, top-1/5 allowing ties. Then search: hnsw right after construction: bit-identical
// weights and a single-threaded build give the same index, so the same labels and scores
// exactly, and the recall against exact search within 0.02.
DEVICE_TEST("anns_sampled layer: steps across an index refresh, state load, top-k match the CPU",
            "[sampled]") {
  const int64_t d = 37, n = 301, batch = 29, n_train = 211;
  const auto opts = optimizers();
  struct Case {
    std::string loss, negative_weight;
    OptimizerConfig optim;
    std::string retrieval = "hnsw";
  };
  const std::vector<Case> cases = {{"bce", "none", opts[2]},
                                   {"squared_hinge", "none", opts[1]},
                                   {"bce", "unbiased", opts[3]},
                                   {"bce", "none", opts[0]},
                                   {"bce", "none", opts[2], "exact"}};
  for (const auto& c : cases) {
    const bool unbiased = c.negative_weight == "unbiased";
    DYNAMIC_SECTION(c.loss << " " << c.negative_weight << " " << describe(c.optim) << " "
                           << c.retrieval) {
      Rng rng(405);
      // The embeddings a refresh sees (the trainer's embed_train), the same on both devices.
      DenseMatrix embedded(n_train, d);
      for (auto& x : embedded.values) x = 2.0f * rng.uniformf() - 1.0f;
      // synchronous: a deterministic single-threaded index build.
      const std::string yaml = "{type: anns_sampled, loss: " + c.loss +
                               ", negative_weight: " + c.negative_weight +
                               ", hard_weight: " + (unbiased ? "0.25" : "1.0") +
                               ", hard_negatives: 8, random_negatives: 13, synchronous: true, "
                               "chunk_size: 128, retrieval: " +
                               c.retrieval + "}";
      Context cpu;
      auto ref = make_layer<AnnsSampledLayer>(layer_init(cpu, c.optim, d, n, batch, n_train), yaml);
      auto got = make_layer<AnnsSampledLayer>(layer_init(ctx, c.optim, d, n, batch, n_train), yaml);
      CHECK(got->device_views() == ctx.on_gpu());
      compare_state("initial", snapshot(*got), snapshot(*ref), sampled_tolerance());
      const auto h0 = random_floats(rng, 5 * d);
      expect_close("initial scores", layer_scores(*got, ctx, h0, 5), layer_scores(*ref, cpu, h0, 5),
                   1e-5, 1e-4);
      int64_t step = 0;
      auto steps = [&](int count) {
        for (int s = 0; s < count; ++s) {
          ++step;
          const std::string sn = "step " + std::to_string(step);
          const Batch b = random_batch(rng, batch, n, 4, n_train);
          compare_step(sn, *ref, *got, ctx, b, random_floats(rng, static_cast<size_t>(batch * d)),
                       {c.optim.lr, step});
          compare_state(sn, snapshot(*got), snapshot(*ref), sampled_tolerance());
        }
      };
      steps(2);  // uniform negatives only
      TrainerView view;
      view.step = step;
      view.epoch = 0;
      view.epochs = 3;
      view.embed_train = [&] { return embedded; };
      ref->on_epoch(view);
      got->on_epoch(view);
      CHECK(ref->has_hard_negatives());
      CHECK(got->has_hard_negatives());
      int64_t same = 0, total = 0;
      for (int64_t p = 0; p < n_train; ++p) {
        const auto a = ref->hard_negatives(p);
        const auto b = got->hard_negatives(p);
        for (size_t j = 0; j < a.size(); ++j) {
          ++total;
          same += std::find(b.begin(), b.end(), a[j]) != b.end();
        }
      }
      INFO("hard negative sets agree on " << same << " of " << total);
      CHECK(static_cast<double>(same) >= 0.95 * static_cast<double>(total));
      load_state(*got, snapshot(*ref));  // identical hard sets from here on
      compare_state("after a state copy", snapshot(*got), snapshot(*ref), sampled_tolerance());
      steps(3);
      const auto h = random_floats(rng, 40 * d);
      for (int k : {1, 5}) compare_layer_topk("", *ref, *got, ctx, h, 40, k);
    }
  }
  SECTION("search hnsw") {
    Rng rng(407);
    const std::string yaml =
        "{type: anns_sampled, search: hnsw, synchronous: true, "
        "recall_sample: 20}";
    Context cpu;
    auto ref = make_layer<AnnsSampledLayer>(layer_init(cpu, opts[2], d, n, batch, n_train), yaml);
    auto got = make_layer<AnnsSampledLayer>(layer_init(ctx, opts[2], d, n, batch, n_train), yaml);
    const int64_t rows = 33;
    const auto h = random_floats(rng, static_cast<size_t>(rows * d));
    const TopK a = ref->topk(ConstMatrix(h.data(), rows, d), 5);
    auto h_dev = put(ctx, h);
    const TopK b = got->topk(ConstMatrix(h_dev.data(), rows, d), 5);
    INFO("search hnsw: the same labels");
    CHECK(a.labels == b.labels);
    expect_close("search hnsw: the same scores", b.scores, a.scores, 0, 0);
    expect_close("search hnsw: recall against exact", got->eval_recall(), ref->eval_recall(), 0.02,
                 0);
  }
}
