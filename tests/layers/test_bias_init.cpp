// model.bias_init: OutputLayer::init_bias sets the output bias of every label on every
// backend (the scores of h = 0 move by exactly the values given), and label_log_prior.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "layers/registry.h"
#include "train/model.h"

using namespace xmc;

namespace {

// Scores of h = 0 for every label (B = 2 rows; both rows must agree).
std::vector<float> zero_input_scores(const OutputLayer& layer) {
  const int64_t d = layer.input_dim(), n = layer.label_hi() - layer.label_lo();
  const DenseMatrix h(2, d);
  DenseMatrix out(2, n);
  Matrix o = out.view();
  layer.scores(h.view(), o);
  std::vector<float> s(o.row(0), o.row(0) + n);
  for (int64_t l = 0; l < n; ++l) REQUIRE(o(1, l) == s[static_cast<size_t>(l)]);
  return s;
}

}  // namespace

TEST_CASE("init_bias sets each label's output bias on every backend") {
  const std::vector<std::string> outputs = {
      "{type: dense}",
      "{type: bottleneck, dim: 4}",
      "{type: fixed_fanin, fan_in: 4, intermediate: 16}",
      "{type: group_shared, group_size: 4, fan_in: 4, head_fraction: 0.2, grouping: frequency}",
      "{type: lsh_sampled}",
      "{type: anns_sampled}",
  };
  const int64_t d = 8, L = 40;
  for (const auto& output : outputs) {
    SECTION(output) {
      const std::string yaml = "model: {output: " + output + "}\n";
      ExperimentConfig cfg = parse_config(yaml, "test.yaml", {}, output_types());
      Context ctx(Device::cpu, 1);
      LayerInit init;
      init.ctx = &ctx;
      init.input_dim = d;
      init.num_labels = L;
      init.batch_size = 4;
      init.optim.type = OptimizerType::adam;
      init.num_train = 100;
      init.total_steps = 10;
      // Frequencies out of label order, so that group_shared's positions differ from ids.
      for (int64_t l = 0; l < L; ++l) init.label_freq.push_back((l * 7) % L);
      auto layer = create_output_layer(init, cfg.model.output);
      const std::vector<float> before = zero_input_scores(*layer);
      std::vector<float> bias(static_cast<size_t>(L));
      for (int64_t l = 0; l < L; ++l) bias[static_cast<size_t>(l)] = -0.25f * static_cast<float>(l) + 1.0f;
      layer->init_bias(bias);
      const std::vector<float> after = zero_input_scores(*layer);
      for (int64_t l = 0; l < L; ++l) {
        INFO("label " << l);
        CHECK(after[static_cast<size_t>(l)] - before[static_cast<size_t>(l)] ==
              Approx(bias[static_cast<size_t>(l)]).margin(1e-6));
      }
      CHECK_THROWS(layer->init_bias(std::vector<float>(static_cast<size_t>(L - 1), 0.0f)));
    }
  }
}

TEST_CASE("label_log_prior is the log-odds of the smoothed training frequency") {
  const auto b = label_log_prior({0, 1, 99, 200}, 200);
  REQUIRE(b.size() == 4);
  const auto logit = [](double p) { return std::log(p / (1.0 - p)); };
  CHECK(b[0] == Approx(logit(0.5 / 201.0)));
  CHECK(b[1] == Approx(logit(1.5 / 201.0)));
  CHECK(b[2] == Approx(logit(99.5 / 201.0)));
  CHECK(b[3] == Approx(logit(200.5 / 201.0)));
  CHECK(std::isfinite(b[0]));
  CHECK(std::isfinite(b[3]));
}
