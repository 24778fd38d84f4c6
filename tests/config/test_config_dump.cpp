#include <catch2/catch.hpp>

#include "config/config_loader.h"
#include "fake_output_types.h"

using namespace xmc;
using xmc::test::fake_output_types;
using xmc::test::FakeSparseConfig;

namespace {
ExperimentConfig parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_config(text, "config.yaml", overrides, fake_output_types());
}
}  // namespace

TEST_CASE("the resolved dump lists every key and loads back to the same config") {
  ExperimentConfig defaults = parse("");
  std::string yaml = dump_config(defaults);
  INFO(yaml);
  // Every section and a sample of leaf keys with their default values.
  for (const char* s : {"name: run",
                        "seed: 0",
                        "device: auto",
                        "out: \"\"",
                        "data:",
                        "train:",
                        "hdf5_dataset: features",
                        "cache: true",
                        "family: auto",
                        "synth:",
                        "labels_per_point: 3.0",
                        "encoder: []",
                        "output:",
                        "type: dense",
                        "chunk_size: 8192",
                        "lr: 0.001",
                        "eps: 1e-08",
                        "schedule:",
                        "epochs: 5",
                        "log_every_s: 10.0",
                        "search: exact",
                        "ef: 100"})
    CHECK(yaml.find(s) != std::string::npos);
  // Descriptions are comments.
  CHECK(yaml.find("# Points per mini-batch") != std::string::npos);
  CHECK(parse(yaml) == defaults);

  const char* text = R"(
name: "yes # 'q' \"dq\" \\ [x]"
seed: 18446744073709551615
device: cuda
out: "runs/with: colon"
data:
  train: {path: "data/a b.txt", index_base: 1}
  propensity: {a: 0.55, b: 1.5}
  synth: {alpha: 0.1, noise: 0.30000000000000004}
model:
  encoder: [{type: sparse_linear, out: 1024, dropout: 0.25}, {out: 3, activation: none}]
  output: {type: fake_sparse, fan_in: 3, rewire: {fraction: 0.125}, extra: [{interval: 2}]}
optim:
  output: {type: adamw, lr: 3.0e-4, weight_decay: 0.01}
  schedule: {type: plateau, patience: 3, factor: 0.1}
train: {epochs: 3, shuffle: false}
eval: {k: 1}
)";
  ExperimentConfig c = parse(text, {"threads=4"});
  CHECK(c.seed == 18446744073709551615ULL);
  CHECK(c.name == "yes # 'q' \"dq\" \\ [x]");
  std::string dumped = dump_config(c);
  INFO(dumped);
  ExperimentConfig back = parse(dumped);
  CHECK(back == c);
  CHECK(back.data.synth.noise == 0.30000000000000004);
  CHECK(back.out == "runs/with: colon");
  CHECK(back.model.output.as<FakeSparseConfig>().extra.at(0).interval == 2);
  // The dump is a fixed point.
  CHECK(dump_config(back) == dumped);
  // Equality sees differences, including inside model.output.
  ExperimentConfig other = parse(text, {"threads=4", "model.output.rewire.interval=7"});
  CHECK_FALSE(other == c);
  other = parse(text, {"threads=4", "model.encoder[1].out=4"});
  CHECK_FALSE(other == c);
}
