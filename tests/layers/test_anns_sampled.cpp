// Backend anns_sampled (ASTRA): candidate sets (no positive among the negatives, exact
// sizes), the gradient equals the dense loss gradient restricted to the candidates, the
// refresh schedule, the retrieved hard negatives, the double-buffered background refresh
// under stress, checkpoint state, and an end-to-end training run.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/dataset.h"
#include "layers/anns_sampled.h"
#include "layers/registry.h"
#include "support/test_support.h"
#include "support/layer_support.h"

using namespace xmc;
using namespace xmc::test;

namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

struct Setup {
  Context ctx{Device::cpu, 2};
  LayerInit init;
  Setup(int64_t d, int64_t num_labels, int64_t batch, int64_t n_train) {
    init.ctx = &ctx;
    init.input_dim = d;
    init.num_labels = num_labels;
    init.batch_size = batch;
    init.optim.type = OptimizerType::sgd;
    init.optim.lr = 1.0;
    init.seed = 3;
    init.num_train = n_train;
  }
};

// Batch of the given dataset rows with their positives (sorted).
Batch make_batch(int64_t num_labels, const std::vector<int64_t>& ids,
                 const std::vector<std::vector<uint32_t>>& pos) {
  Batch b;
  b.sparse = false;
  b.ids = ids;
  b.labels = CsrMatrix::from_rows(pos, num_labels);
  return b;
}

DenseMatrix random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  DenseMatrix m(rows, cols);
  Rng rng(seed);
  for (auto& x : m.values) x = static_cast<float>(rng.normal());
  return m;
}

// Training labels of n points: point i has positives {i % L, (3i+1) % L}.
Dataset make_train(int64_t n, int64_t num_labels) {
  Dataset ds;
  ds.features = DenseMatrix(n, 1);
  ds.labels.rows = n;
  ds.labels.cols = num_labels;
  for (int64_t i = 0; i < n; ++i) {
    std::set<uint32_t> s = {static_cast<uint32_t>(i % num_labels),
                            static_cast<uint32_t>((3 * i + 1) % num_labels)};
    for (auto l : s) ds.labels.indices.push_back(l);
    ds.labels.indptr.push_back(static_cast<int64_t>(ds.labels.indices.size()));
  }
  return ds;
}

Batch batch_of(const Dataset& ds, const std::vector<int64_t>& ids) {
  std::vector<std::vector<uint32_t>> pos;
  for (auto id : ids)
    pos.emplace_back(ds.labels.row_indices(id), ds.labels.row_indices(id) + ds.labels.row_nnz(id));
  return make_batch(ds.num_labels(), ids, pos);
}

// Checks one batch's candidates: positives first and exactly the batch's positives, no
// negative is a positive, no duplicates, hard negatives (minus positives) all present,
// and the size is |P| + |hard \ P| + min(k_r, what is left).
void check_candidates(const AnnsSampledLayer& layer, const SampledCandidates& c, const Batch& b,
                      int64_t k_r, bool with_hard) {
  const int64_t num_labels = layer.num_labels();
  REQUIRE(static_cast<int64_t>(c.ptr.size()) == b.size() + 1);
  for (int64_t i = 0; i < b.size(); ++i) {
    std::set<uint32_t> pos(b.labels.row_indices(i), b.labels.row_indices(i) + b.labels.row_nnz(i));
    std::set<uint32_t> seen, negs;
    int64_t npos = 0;
    for (int64_t p = c.ptr[static_cast<size_t>(i)]; p < c.ptr[static_cast<size_t>(i) + 1]; ++p) {
      const uint32_t l = c.labels[static_cast<size_t>(p)];
      REQUIRE(l < num_labels);
      CHECK(seen.insert(l).second);  // no duplicates
      if (c.positive[static_cast<size_t>(p)]) {
        CHECK(pos.count(l) == 1);
        CHECK(negs.empty());  // positives come first
        ++npos;
      } else {
        CHECK(pos.count(l) == 0);  // no positive among the negatives
        negs.insert(l);
      }
    }
    CHECK(npos == static_cast<int64_t>(pos.size()));
    std::set<uint32_t> hard;
    if (with_hard)
      for (uint32_t l : layer.hard_negatives(b.ids[static_cast<size_t>(i)]))
        if (l != kNone && pos.count(l) == 0) hard.insert(l);
    for (auto l : hard) CHECK(negs.count(l) == 1);
    const int64_t left = num_labels - static_cast<int64_t>(pos.size() + hard.size());
    CHECK(static_cast<int64_t>(negs.size()) ==
          static_cast<int64_t>(hard.size()) + std::min(k_r, left));
  }
}

}  // namespace

TEST_CASE("anns_sampled candidates: no positive among the negatives, exact set sizes") {
  const int64_t d = 8, num_labels = 200, n = 50;
  Setup s(d, num_labels, 16, n);
  AnnsSampledConfig cfg;
  cfg.hard_negatives = 10;
  cfg.random_negatives = 20;
  cfg.synchronous = true;
  AnnsSampledLayer layer(s.init, cfg);
  Dataset train = make_train(n, num_labels);
  std::vector<int64_t> ids = {0, 7, 13, 21, 49};
  Batch b = batch_of(train, ids);

  SECTION("uniform negatives only before the first refresh") {
    CHECK_FALSE(layer.has_hard_negatives());
    auto c = layer.sample_candidates(b, 1);
    check_candidates(layer, c, b, cfg.random_negatives, false);
    // Deterministic in (seed, step, point); different at another step.
    auto again = layer.sample_candidates(b, 1);
    CHECK(again.labels == c.labels);
    CHECK(layer.sample_candidates(b, 2).labels != c.labels);
  }
  SECTION("stale hard negatives plus uniform ones after a refresh") {
    DenseMatrix h = random_matrix(n, d, 5);
    TrainerView view;
    view.epoch = 0;
    view.epochs = 5;
    view.train = &train;
    view.embed_train = [&] { return h; };
    layer.on_epoch(view);
    REQUIRE(layer.has_hard_negatives());
    check_candidates(layer, layer.sample_candidates(b, 3), b, cfg.random_negatives, true);
    // The hard negatives of a point often include its own positives (the index does not
    // know them); make sure the test exercised that case at least once over all points.
    int64_t overlaps = 0;
    for (int64_t i = 0; i < n; ++i) {
      std::set<uint32_t> pos(train.labels.row_indices(i),
                             train.labels.row_indices(i) + train.labels.row_nnz(i));
      for (auto l : layer.hard_negatives(i)) overlaps += static_cast<int64_t>(pos.count(l));
    }
    std::vector<int64_t> all(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
    Batch whole = batch_of(train, all);
    check_candidates(layer, layer.sample_candidates(whole, 4), whole, cfg.random_negatives, true);
    INFO("hard negatives that were positives: " << overlaps);
    CHECK(overlaps > 0);
  }
  SECTION("fewer labels left than k_r: every remaining label is a negative") {
    Setup small(d, 12, 4, n);
    AnnsSampledLayer tiny(small.init, cfg);
    Batch bt = make_batch(12, {0, 1}, {{0, 5}, {}});
    auto c = tiny.sample_candidates(bt, 1);
    check_candidates(tiny, c, bt, cfg.random_negatives, false);
    CHECK(c.ptr[1] - c.ptr[0] == 12);
    CHECK(c.ptr[2] - c.ptr[1] == 12);
  }
}

// One SGD step with lr = 1 exposes the gradient as old - new; the reference is the dense
// loss of all labels restricted to the step's candidates, in double.
TEST_CASE("anns_sampled gradient equals the dense gradient restricted to the candidates") {
  for (double hard_weight : {1.0, 0.25})
  for (std::string weighting : {"none", "unbiased"})
  for (std::string loss : {"bce", "squared_hinge"}) {
    DYNAMIC_SECTION(loss << " negative_weight " << weighting << " hard_weight " << hard_weight) {
      const int64_t d = 6, num_labels = 40, n = 30, batch = 5;
      Setup s(d, num_labels, batch, n);
      AnnsSampledConfig cfg;
      cfg.loss = parse_enum<LossType>(loss, "loss");
      cfg.negative_weight = parse_enum<NegativeWeight>(weighting, "negative_weight");
      cfg.hard_weight = hard_weight;
      cfg.hard_negatives = 6;
      cfg.random_negatives = 5;
      cfg.synchronous = true;
      AnnsSampledLayer layer(s.init, cfg);
      Dataset train = make_train(n, num_labels);
      DenseMatrix emb = random_matrix(n, d, 8);
      TrainerView view;
      view.epochs = 3;
      view.train = &train;
      view.embed_train = [&] { return emb; };
      layer.on_epoch(view);  // hard negatives in use
      REQUIRE(layer.has_hard_negatives());

      // A batch with a point without positives.
      Batch b = make_batch(num_labels, {2, 9, 11, 17, 29}, {{1, 4}, {}, {7}, {0, 39}, {20}});
      DenseMatrix h = random_matrix(batch, d, 9);
      const int64_t step = 4;
      SampledCandidates c = layer.sample_candidates(b, step);

      auto state = layer.state();
      const auto w = to_double(find(state, "output/weight"));
      const auto bias = to_double(find(state, "output/bias"));
      // Reference gradients in double.
      std::vector<double> gw(w.size(), 0.0), gb(bias.size(), 0.0), gh(h.values.size(), 0.0);
      double ref_loss = 0.0;
      int64_t hard_entries = 0;
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t p = c.ptr[static_cast<size_t>(i)]; p < c.ptr[static_cast<size_t>(i) + 1]; ++p) {
          const uint32_t l = c.labels[static_cast<size_t>(p)];
          const double y = c.positive[static_cast<size_t>(p)] ? 1.0 : -1.0;
          double z = bias[l];
          for (int64_t j = 0; j < d; ++j) z += w[l * d + j] * h.values[static_cast<size_t>(i * d + j)];
          double g;
          if (loss == "bce") {
            ref_loss += std::log1p(std::exp(-y * z));
            g = -y / (1.0 + std::exp(y * z));
          } else {
            const double m = std::max(0.0, 1.0 - y * z);
            ref_loss += m * m;
            g = -2.0 * y * m;
          }
          // Positives weigh 1, hard negatives hard_weight, uniform negatives (labels
          // left)/k_r when unbiased, else 1.
          const double wt = c.weight[static_cast<size_t>(p)];
          const auto hard = layer.hard_negatives(b.ids[static_cast<size_t>(i)]);
          const bool is_hard = !c.positive[static_cast<size_t>(p)] &&
                               std::find(hard.begin(), hard.end(), l) != hard.end();
          if (c.positive[static_cast<size_t>(p)]) {
            CHECK(wt == 1.0);
          } else if (is_hard) {
            CHECK(wt == Approx(hard_weight));
            ++hard_entries;
          } else {
            CHECK((wt == 1.0 || (weighting == "unbiased" && wt > 1.0)));
          }
          if (wt != 1.0) ref_loss += (wt - 1.0) * (loss == "bce" ? std::log1p(std::exp(-y * z))
                                                                : std::pow(std::max(0.0, 1.0 - y * z), 2));
          g *= wt / static_cast<double>(batch);
          for (int64_t j = 0; j < d; ++j) {
            gw[l * d + j] += g * h.values[static_cast<size_t>(i * d + j)];
            gh[static_cast<size_t>(i * d + j)] += g * w[l * d + j];
          }
          gb[l] += g;
        }
      ref_loss /= static_cast<double>(batch);
      CHECK(hard_entries >= batch);  // the hard weights were checked

      std::vector<float> dh(static_cast<size_t>(batch * d), 123.0f);
      StepStats st = layer.train_step(b, h.view(), Matrix(dh.data(), batch, d), {1.0, step});
      CHECK(st.loss == Approx(ref_loss).epsilon(1e-5));
      CHECK(st.grads == static_cast<int64_t>(c.labels.size()));
      auto after = layer.state();
      const auto w2 = to_double(find(after, "output/weight"));
      const auto b2 = to_double(find(after, "output/bias"));
      std::set<uint32_t> touched(c.labels.begin(), c.labels.end());
      for (int64_t l = 0; l < num_labels; ++l) {
        for (int64_t j = 0; j < d; ++j) {
          const auto k = static_cast<size_t>(l * d + j);
          if (touched.count(static_cast<uint32_t>(l)) == 0) {
            CHECK(w2[k] == w[k]);  // untouched rows do not move
          } else {
            INFO("dW[" << l << "," << j << "]");
            CHECK(w[k] - w2[k] == Approx(gw[k]).margin(1e-5));
          }
        }
        INFO("db[" << l << "]");
        CHECK(bias[static_cast<size_t>(l)] - b2[static_cast<size_t>(l)] ==
              Approx(gb[static_cast<size_t>(l)]).margin(1e-5));
      }
      for (size_t k = 0; k < dh.size(); ++k) {
        INFO("dh[" << k << "]");
        CHECK(dh[k] == Approx(gh[k]).margin(1e-5));
      }
    }
  }
}

TEST_CASE("anns_sampled refreshes exactly at the scheduled epochs") {
  const int64_t d = 4, num_labels = 30, n = 20;
  Dataset train = make_train(n, num_labels);
  for (bool sync : {true, false}) {
    DYNAMIC_SECTION((sync ? "synchronous" : "background")) {
      Setup s(d, num_labels, 4, n);
      AnnsSampledConfig cfg;
      cfg.hard_negatives = 5;
      cfg.start_epoch = 2;
      cfg.refresh_every = 3;
      cfg.synchronous = sync;
      AnnsSampledLayer layer(s.init, cfg);
      int calls = 0;
      std::vector<int> refresh_after;  // 1-based epochs after which embed_train ran
      DenseMatrix emb = random_matrix(n, d, 1);
      TrainerView view;
      view.epochs = 12;
      view.train = &train;
      const int epochs = 12;
      for (int e = 0; e < epochs; ++e) {
        view.epoch = e;
        view.embed_train = [&] {
          ++calls;
          refresh_after.push_back(e + 1);
          return emb;
        };
        layer.on_epoch(view);
        if (!sync) layer.wait_for_refresh();
        CHECK(layer.refreshes_started() == calls);
        CHECK(layer.refreshes_installed() == calls);
        CHECK(layer.has_hard_negatives() == (calls > 0));
      }
      // After epochs τs, τs+τr, ...; none after the last epoch (12).
      CHECK(refresh_after == std::vector<int>{2, 5, 8, 11});
    }
  }
}

TEST_CASE("anns_sampled hard negatives are the best-scoring labels of each point") {
  const int64_t d = 8, num_labels = 300, n = 40;
  Setup s(d, num_labels, 8, n);
  AnnsSampledConfig cfg;
  cfg.hard_negatives = 10;
  cfg.synchronous = true;
  // hnsw: recall >= 0.9; exact (label chunks of 37, so the top-k merges across chunks):
  // exactly the brute-force top-10.
  cfg.retrieval = GENERATE(AnnsSearch::hnsw, AnnsSearch::exact);
  cfg.chunk_size = 37;
  const double min_recall = cfg.retrieval == AnnsSearch::exact ? 1.0 : 0.9;
  AnnsSampledLayer layer(s.init, cfg);
  Dataset train = make_train(n, num_labels);
  DenseMatrix emb = random_matrix(n, d, 2);
  TrainerView view;
  view.epochs = 4;
  view.train = &train;
  view.embed_train = [&] { return emb; };
  layer.on_epoch(view);
  // Exact top-10 by score (w·h + b) against the stored hard negatives.
  DenseMatrix all(n, num_labels);
  layer.scores(emb.view(), all.view());
  int64_t hits = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<std::pair<float, uint32_t>> sc;
    for (int64_t l = 0; l < num_labels; ++l)
      sc.emplace_back(-all.values[static_cast<size_t>(i * num_labels + l)], static_cast<uint32_t>(l));
    std::partial_sort(sc.begin(), sc.begin() + 10, sc.end());
    auto hard = layer.hard_negatives(i);
    for (int j = 0; j < 10; ++j)
      hits += std::count(hard.begin(), hard.end(), sc[static_cast<size_t>(j)].second);
  }
  const double recall = static_cast<double>(hits) / static_cast<double>(n * 10);
  INFO(to_string(cfg.retrieval) << ": recall of the hard negatives " << recall);
  CHECK(recall >= min_recall);
}

// The worker pauses halfway through writing the new set; training steps keep running and
// each checks that the set it reads is complete (every entry valid, distinct per point).
TEST_CASE("anns_sampled background refresh never exposes a half-written set") {
  const int64_t d = 8, num_labels = 64, n = 400, batch = 16;
  Setup s(d, num_labels, batch, n);
  s.init.optim.lr = 0.01;
  AnnsSampledConfig cfg;
  cfg.hard_negatives = 8;
  cfg.random_negatives = 4;
  cfg.synchronous = false;
  AnnsSampledLayer layer(s.init, cfg);
  layer.set_refresh_pause_for_testing(20);
  Dataset train = make_train(n, num_labels);
  TrainerView view;
  view.epochs = 1000;
  view.train = &train;
  int64_t step = 0, steps_while_pending = 0, swaps_in_step = 0;
  std::vector<float> dh(static_cast<size_t>(batch * d));
  auto check_set = [&] {
    if (!layer.has_hard_negatives()) return;
    for (int64_t i = 0; i < n; ++i) {
      auto hn = layer.hard_negatives(i);
      std::set<uint32_t> u(hn.begin(), hn.end());
      if (u.size() != hn.size() || u.count(kNone) != 0) {
        FAIL("point " << i << " reads an incomplete hard set at step " << step);
      }
    }
  };
  // One training step on the next batch, counting whether a refresh was in flight before
  // it and whether the step swapped one in; the set in use is checked after it.
  auto one_step = [&] {
    if (layer.refresh_pending()) ++steps_while_pending;
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < batch; ++i) ids.push_back((step * batch + i) % n);
    Batch b = batch_of(train, ids);
    DenseMatrix h = random_matrix(batch, d, static_cast<uint64_t>(step));
    ++step;
    const int64_t before = layer.refreshes_installed();
    layer.train_step(b, h.view(), Matrix(dh.data(), batch, d), {0.01, step});
    swaps_in_step += layer.refreshes_installed() - before;
    check_set();
  };
  const int refreshes = 12;
  for (int r = 0; r < refreshes; ++r) {
    DenseMatrix emb = random_matrix(n, d, static_cast<uint64_t>(100 + r));
    view.epoch = r;
    view.embed_train = [&] { return emb; };
    layer.on_epoch(view);  // starts refresh r (finishing r-1 first if still running)
    for (int t = 0; t < 10; ++t) {
      one_step();
      // Slow steps in the second half of each round: some refreshes finish while
      // training runs and are swapped in by a step rather than by the next on_epoch.
      if (t >= 5) std::this_thread::sleep_for(std::chrono::milliseconds(8));
    }
  }
  // Whether a round's refresh finished during its steps depends on the scheduler (on a
  // loaded machine none may): one more refresh, stepped through until a step swaps it in
  // (bounded wait), so that path is checked on every run.
  {
    DenseMatrix emb = random_matrix(n, d, 99);
    view.epoch = refreshes;
    view.embed_train = [&] { return emb; };
    layer.on_epoch(view);
    const int64_t before = layer.refreshes_installed();
    for (int t = 0; t < 3000 && layer.refreshes_installed() == before; ++t) {
      one_step();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  layer.wait_for_refresh();
  check_set();
  CHECK(layer.refreshes_started() == refreshes + 1);
  CHECK(layer.refreshes_installed() == refreshes + 1);
  INFO("steps run while a refresh was in flight: " << steps_while_pending);
  CHECK(steps_while_pending > 0);
  INFO("refreshes swapped in at the start of a step: " << swaps_in_step);
  CHECK(swaps_in_step > 0);
}

TEST_CASE("anns_sampled state holds the hard set and the schedule, with fixed shapes") {
  const int64_t d = 4, num_labels = 30, n = 20;
  Setup s(d, num_labels, 4, n);
  s.init.optim.type = OptimizerType::adam;
  AnnsSampledConfig cfg;
  cfg.hard_negatives = 5;
  cfg.synchronous = true;
  AnnsSampledLayer a(s.init, cfg), b(s.init, cfg);
  Dataset train = make_train(n, num_labels);
  DenseMatrix emb = random_matrix(n, d, 4);
  TrainerView view;
  view.epochs = 3;
  view.train = &train;
  view.embed_train = [&] { return emb; };
  a.on_epoch(view);
  auto sa = a.state(), sb = b.state();
  REQUIRE(sa.size() == sb.size());
  CHECK(find(sa, "output/hard_negatives").shape == std::vector<int64_t>{n, 5});
  CHECK(find(sa, "output/anns_meta").shape == std::vector<int64_t>{2});
  CHECK(find(sa, "output/weight_opt2").shape == std::vector<int64_t>{num_labels, d});
  // Copy a's state into b (what a checkpoint load does): b then has a's hard set.
  for (size_t i = 0; i < sa.size(); ++i) {
    REQUIRE(sa[i].name == sb[i].name);
    REQUIRE(sa[i].shape == sb[i].shape);
    std::visit([&](auto* src) {
      using T = std::remove_pointer_t<decltype(src)>;
      std::copy(src, src + sa[i].numel(), std::get<T*>(sb[i].data));
    }, sa[i].data);
  }
  CHECK(b.has_hard_negatives());
  CHECK(b.refreshes_installed() == 1);
  for (int64_t i = 0; i < n; ++i) {
    auto x = a.hard_negatives(i), y = b.hard_negatives(i);
    CHECK(std::equal(x.begin(), x.end(), y.begin()));
  }
  // W, b and Adam's two states; the step's workspaces since they go through the ledger
  // (layers/sampled_block.h: scores of batch × min(L, k_h + k_r + 8) entries, the weight
  // gradient of min(L, 1024) rows and their bias, the drawn step's grouping of the entries:
  // 24 bytes an entry and one more row offset); the draw's arrays (a batch of 4 points of
  // 8 positives, 5 hard and min(64, L) uniform slots: ids and counts [4], row offsets [5]
  // twice, 32 positives, 18 bytes a slot); the two hard sets.
  const int64_t entries = 4 * std::min<int64_t>(num_labels, 5 + 64 + 8);
  const int64_t grad_rows = std::min<int64_t>(num_labels, 1024);
  const int64_t draw =
      8 * (2 * 4 + 2 * 5) + 4 * 32 + 18 * 4 * (8 + 5 + std::min<int64_t>(64, num_labels));
  CHECK(a.analytic_bytes() == 4 * (num_labels * d + num_labels) * 3 +
                                  4 * (entries + grad_rows * d + grad_rows) + (24 * entries + 8) +
                                  draw + 2 * 4 * n * 5);
  CHECK(s.ctx.ledger().current(MemTag::indices) == 2 * (2 * 4 * n * 5));
}

TEST_CASE("anns_sampled hnsw evaluation reports its recall against exact top-k") {
  const int64_t d = 16, num_labels = 2000, n = 10;
  Setup s(d, num_labels, 4, n);
  AnnsSampledConfig cfg;
  cfg.search = AnnsSearch::hnsw;
  cfg.recall_sample = 100;
  cfg.synchronous = true;
  AnnsSampledLayer layer(s.init, cfg);
  CHECK(std::isnan(layer.eval_recall()));
  DenseMatrix h = random_matrix(200, d, 6);
  TopK t = layer.topk(h.view(), 5);
  REQUIRE(t.rows == 200);
  const double recall = layer.eval_recall();
  INFO("recall@5 " << recall);
  CHECK(recall >= 0.9);
  CHECK(recall <= 1.0);
  // Scores are the exact scores of the returned labels.
  DenseMatrix all(200, num_labels);
  layer.scores(h.view(), all.view());
  for (int64_t i = 0; i < 200; ++i)
    CHECK(t.row_scores(i)[0] ==
          Approx(all.values[static_cast<size_t>(i * num_labels + t.row_labels(i)[0])]).margin(1e-4));
}

TEST_CASE("anns_sampled trains end to end and resumes to the same metrics") {
  using namespace xmc::test;
  namespace fs = std::filesystem;
  TempDir tmp;
  const fs::path data = tmp / "data";
  const std::string config =
      "name: anns\nseed: 7\ndevice: cpu\nthreads: 2\n"
      "data:\n"
      "  train: {features: " + (data / "trn_X.npy").string() +
      ", labels: " + (data / "trn_X_Y.txt").string() + "}\n"
      "  test: {features: " + (data / "tst_X.npy").string() +
      ", labels: " + (data / "tst_X_Y.txt").string() + "}\n"
      "  synth: {enabled: true, format: dense, train: 3000, test: 1000, labels: 300, "
      "features: 64, clusters: 20, seed: 3}\n"
      "model:\n"
      "  encoder: [{type: linear, out: 64, activation: relu}]\n"
      "  output: {type: anns_sampled, hard_negatives: 16, random_negatives: 16, "
      "start_epoch: 1, refresh_every: 1, synchronous: true}\n"
      "optim:\n"
      "  encoder: {type: adam, lr: 0.01}\n"
      "  output: {type: adam, lr: 0.01}\n"
      "train: {epochs: 3, batch_size: 128, log_every_s: 100}\n"
      "eval: {k: 5}\n";
  write_file(tmp / "c.yaml", config);
  auto full = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "a").string(), "--json"});
  INFO(full.err);
  REQUIRE(full.exit_code == 0);
  CHECK(full.err.find("anns_sampled: index over 300 labels built") != std::string::npos);
  auto res = nlohmann::json::parse(full.out);
  const double p1 = res["metrics"]["P@1"].get<double>();
  INFO("P@1 " << p1);
  CHECK(p1 > 0.5);  // 300 labels in 20 clusters: chance is well below 0.1
  auto part = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "b").string(),
                       "--halt-after-epoch", "2"});
  REQUIRE(part.exit_code == 0);
  auto resumed = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "b").string(),
                          "--resume", "--json"});
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(nlohmann::json::parse(resumed.out)["metrics"] == res["metrics"]);
}
