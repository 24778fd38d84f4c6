#include <catch2/catch.hpp>

#include "config/config_loader.h"
#include "core/error.h"
#include "core/launch_shape.h"
#include "fake_output_types.h"
#include "support/test_support.h"

using namespace xmc;
using xmc::test::fake_output_types;
using xmc::test::FakeDenseConfig;
using xmc::test::FakeSparseConfig;

namespace {

ExperimentConfig parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_config(text, "config.yaml", overrides, fake_output_types());
}

// The InputError message of parse(text, overrides); fails the test when nothing is thrown.
std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    parse(text, overrides);
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("no InputError for:\n" << text);
  return {};
}

}  // namespace

TEST_CASE("an empty config gives every default") {
  ExperimentConfig c = parse("");
  CHECK(c.name == "run");
  CHECK(c.seed == 0);
  CHECK(c.device == "auto");
  CHECK(c.threads == 0);
  CHECK(c.out.empty());
  CHECK(c.data.train.format == "auto");
  CHECK(c.data.train.hdf5_dataset == "features");
  CHECK(c.data.test.index_base == 0);
  CHECK(c.data.cache);
  CHECK(c.data.propensity.a == 0.0);
  CHECK(c.data.propensity.family == "auto");
  CHECK(c.data.filter.empty());
  CHECK_FALSE(c.data.synth.enabled);
  CHECK(c.data.synth.train == 20000);
  CHECK(c.data.synth.labels_per_point == 3.0);
  CHECK(c.model.encoder.empty());
  CHECK(c.model.output.type == "dense");
  CHECK(c.model.output.as<FakeDenseConfig>().chunk_size == 8192);
  CHECK(c.optim.encoder.type == OptimizerType::adam);
  CHECK(c.optim.output.lr == 1e-3);
  CHECK(c.optim.output.eps == 1e-8);
  CHECK(c.optim.schedule.type == ScheduleType::constant);
  CHECK(c.optim.schedule.factor == 0.5);
  CHECK(c.train.epochs == 5);
  CHECK(c.train.batch_size == 256);
  CHECK(c.train.log_every_s == 10.0);
  CHECK(c.train.shuffle);
  CHECK(c.eval.k == 5);
  CHECK(c.eval.batch_size == 1024);
  CHECK(c.eval.search == "exact");
  CHECK(c.eval.ef == 100);
  // A default-constructed config equals the parsed empty one except for the resolved output.
  ExperimentConfig d;
  // Unresolved until loaded against the output types.
  CHECK_FALSE(d.model.output.config.has_value());
  CHECK_THROWS_AS(d.model.output.as<FakeDenseConfig>(), Error);
  CHECK_FALSE(d == c);
  d.model.output = c.model.output;
  CHECK(d == c);
}

TEST_CASE("a full config parses to the written values") {
  const char* text = R"(
name: amazon670k-sparse
seed: 42
device: cpu
threads: 8
out: runs/a
data:
  train: {features: data/trn_X.npy, labels: data/trn_X_Y.txt, format: split, index_base: 1}
  test:
    path: data/test.txt
    format: xc
    hdf5_dataset: X
  cache: false
  propensity: {a: 0.6, b: 2.6, family: amazon}
  filter: data/filter.txt
  synth: {enabled: true, format: sparse, train: 100, test: 10, labels: 30, features: 50,
          clusters: 3, alpha: 0.5, labels_per_point: 2.5, noise: 0.1, nnz: 7, seed: 9}
model:
  encoder:
    - {type: sparse_linear, out: 1024, activation: relu, dropout: 0.1}
    - {type: linear, out: 256, activation: none}
  output:
    type: fake_sparse
    fan_in: 32
    rewire: {interval: 2500, fraction: 0.2}
    extra: [{interval: 5}, {fraction: 0.5}]
optim:
  encoder: {type: adam, lr: 1.0e-3}
  output: {type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 1.0e-4}
  schedule: {type: cosine, warmup_steps: 500, min_factor: 0.01}
train: {epochs: 10, batch_size: 128, eval_every: 2, checkpoint_every: 0, log_every_s: 2.5,
        shuffle: false}
eval: {k: 10, batch_size: 64, search: hnsw, ef: 200}
)";
  ExperimentConfig c = parse(text);
  CHECK(c.name == "amazon670k-sparse");
  CHECK(c.seed == 42);
  CHECK(c.device == "cpu");
  CHECK(c.threads == 8);
  CHECK(c.out == "runs/a");
  CHECK(c.data.train.features == "data/trn_X.npy");
  CHECK(c.data.train.labels == "data/trn_X_Y.txt");
  CHECK(c.data.train.format == "split");
  CHECK(c.data.train.index_base == 1);
  CHECK(c.data.train.path.empty());
  CHECK(c.data.test.path == "data/test.txt");
  CHECK(c.data.test.format == "xc");
  CHECK(c.data.test.hdf5_dataset == "X");
  CHECK_FALSE(c.data.cache);
  CHECK(c.data.propensity.a == 0.6);
  CHECK(c.data.propensity.b == 2.6);
  CHECK(c.data.propensity.family == "amazon");
  CHECK(c.data.filter == "data/filter.txt");
  CHECK(c.data.synth.enabled);
  CHECK(c.data.synth.format == "sparse");
  CHECK(c.data.synth.train == 100);
  CHECK(c.data.synth.test == 10);
  CHECK(c.data.synth.labels == 30);
  CHECK(c.data.synth.features == 50);
  CHECK(c.data.synth.clusters == 3);
  CHECK(c.data.synth.alpha == 0.5);
  CHECK(c.data.synth.labels_per_point == 2.5);
  CHECK(c.data.synth.noise == 0.1);
  CHECK(c.data.synth.nnz == 7);
  CHECK(c.data.synth.seed == 9);
  REQUIRE(c.model.encoder.size() == 2);
  CHECK(c.model.encoder[0] == EncoderLayerConfig{"sparse_linear", 1024, "relu", 0.1});
  CHECK(c.model.encoder[1] == EncoderLayerConfig{"linear", 256, "none", 0.0});
  CHECK(c.model.output.type == "fake_sparse");
  const auto& out = c.model.output.as<FakeSparseConfig>();
  CHECK(out.fan_in == 32);
  CHECK(out.rewire.interval == 2500);
  CHECK(out.rewire.fraction == 0.2);
  REQUIRE(out.extra.size() == 2);
  CHECK(out.extra[0].interval == 5);
  CHECK(out.extra[0].fraction == 0.1);
  CHECK(out.extra[1].interval == 1000);
  CHECK(out.extra[1].fraction == 0.5);
  CHECK_THROWS_AS(c.model.output.as<FakeDenseConfig>(), Error);
  CHECK(c.optim.encoder.type == OptimizerType::adam);
  CHECK(c.optim.encoder.lr == 1e-3);
  CHECK(c.optim.output.type == OptimizerType::sgd);
  CHECK(c.optim.output.lr == 0.05);
  CHECK(c.optim.output.momentum == 0.9);
  CHECK(c.optim.output.weight_decay == 1e-4);
  CHECK(c.optim.schedule.type == ScheduleType::cosine);
  CHECK(c.optim.schedule.warmup_steps == 500);
  CHECK(c.optim.schedule.min_factor == 0.01);
  CHECK(c.train.epochs == 10);
  CHECK(c.train.batch_size == 128);
  CHECK(c.train.eval_every == 2);
  CHECK(c.train.checkpoint_every == 0);
  CHECK(c.train.log_every_s == 2.5);
  CHECK_FALSE(c.train.shuffle);
  CHECK(c.eval.k == 10);
  CHECK(c.eval.batch_size == 64);
  CHECK(c.eval.search == "hnsw");
  CHECK(c.eval.ef == 200);
}

TEST_CASE("unknown keys name the full path and the closest known key") {
  CHECK(error_of("train:\n  epochs: 3\n  batch_sise: 64\n") ==
        "config.yaml:3: train.batch_sise: unknown key (did you mean 'batch_size'?)");
  CHECK(error_of("trian:\n  epochs: 3\n") ==
        "config.yaml:1: trian: unknown key (did you mean 'train'?)");
  CHECK(error_of("data:\n  propensity: {a: 1, familly: amazon}\n") ==
        "config.yaml:2: data.propensity.familly: unknown key (did you mean 'family'?)");
  CHECK(error_of("data:\n  propensity: {a: 1, bb: 2}\n") ==
        "config.yaml:2: data.propensity.bb: unknown key (known keys: a, b, family)");
  CHECK(error_of("model:\n  encoder:\n    - {out: 8}\n    - {out: 8, actvation: relu}\n") ==
        "config.yaml:4: model.encoder[1].actvation: unknown key (did you mean 'activation'?)");
  // Nothing close: the known keys are listed.
  CHECK(error_of("eval: {zzzzzzzz: 1}\n") ==
        "config.yaml:1: eval.zzzzzzzz: unknown key (known keys: k, batch_size, search, ef)");
}

TEST_CASE("wrong types name the path, the value and what was expected") {
  CHECK(error_of("train:\n  epochs: abc\n") ==
        "config.yaml:2: train.epochs: expected an integer in [1, 100000], got 'abc'");
  CHECK(error_of("train: {epochs: 2.5}\n") ==
        "config.yaml:1: train.epochs: expected an integer in [1, 100000], got '2.5'");
  CHECK(error_of("train: {shuffle: maybe}\n") ==
        "config.yaml:1: train.shuffle: expected true or false, got 'maybe'");
  CHECK(error_of("optim:\n  output:\n    lr: fast\n") ==
        "config.yaml:3: optim.output.lr: expected a number > 0, got 'fast'");
  CHECK(error_of("seed: -1\n") == "config.yaml:1: seed: expected a non-negative integer, got '-1'");
  CHECK(error_of("train: [1, 2]\n") == "config.yaml:1: train: expected a mapping, got a list");
  CHECK(error_of("model: {encoder: 3}\n") ==
        "config.yaml:1: model.encoder: expected a list, got '3'");
  CHECK(error_of("name: [a]\n") == "config.yaml:1: name: expected a string, got a list");
  CHECK(error_of("- 1\n- 2\n") ==
        "config.yaml:1: expected a mapping of config keys at the top level, got a list");
}

TEST_CASE("out-of-range values name the path, the value and the allowed range") {
  CHECK(error_of("train:\n  batch_size: 64\n  epochs: -3\n") ==
        "config.yaml:3: train.epochs: expected an integer in [1, 100000], got -3");
  CHECK(error_of("model:\n  encoder: [{dropout: 1.0}]\n") ==
        "config.yaml:2: model.encoder[0].dropout: expected a number in [0, 1), got 1.0");
  CHECK(error_of("optim: {encoder: {lr: 0}}\n") ==
        "config.yaml:1: optim.encoder.lr: expected a number > 0, got 0");
  CHECK(error_of("eval: {k: 101}\n") ==
        "config.yaml:1: eval.k: expected an integer in [1, 100], got 101");
  CHECK(error_of("threads: -1\n") ==
        "config.yaml:1: threads: expected an integer in [0, 4096], got -1");
  CHECK(error_of("data: {train: {index_base: 2}}\n") ==
        "config.yaml:1: data.train.index_base: expected an integer in [0, 1], got 2");
  // Boundary values inside the range are accepted.
  ExperimentConfig c =
      parse("eval: {k: 100}\ntrain: {epochs: 1}\noptim: {encoder: {momentum: 0}}\n");
  CHECK(c.eval.k == 100);
  CHECK(c.train.epochs == 1);
}

TEST_CASE("bad choices list the allowed values") {
  CHECK(error_of("device: gpu\n") ==
        "config.yaml:1: device: expected one of cpu, cuda, auto, got 'gpu'");
  CHECK(error_of("optim:\n  schedule: {type: cosin}\n") ==
        "config.yaml:2: optim.schedule.type: expected one of constant, cosine, plateau, got "
        "'cosin' (did you mean 'cosine'?)");
  CHECK(error_of("data: {synth: {format: [dense]}}\n") ==
        "config.yaml:1: data.synth.format: expected one of dense, sparse, got a list");
}

TEST_CASE("overrides (--set) set scalars, nested keys and lists before validation") {
  const char* text = "train: {epochs: 7}\nmodel:\n  encoder: [{out: 64}, {out: 32}]\n";
  ExperimentConfig c = parse(text, {"train.epochs=3", "name=my-run", "data.propensity.a=0.55",
                                    "model.encoder[1].activation=none", "optim.output.type=sgd"});
  CHECK(c.train.epochs == 3);
  CHECK(c.name == "my-run");
  CHECK(c.data.propensity.a == 0.55);
  REQUIRE(c.model.encoder.size() == 2);
  CHECK(c.model.encoder[1].activation == "none");
  CHECK(c.model.encoder[1].out == 32);
  CHECK(c.optim.output.type == OptimizerType::sgd);

  // Whole lists and maps as YAML flow values.
  c = parse(text, {"model.encoder=[]"});
  CHECK(c.model.encoder.empty());
  c = parse(text, {"model.encoder=[{type: sparse_linear, out: 16}]"});
  REQUIRE(c.model.encoder.size() == 1);
  CHECK(c.model.encoder[0] == EncoderLayerConfig{"sparse_linear", 16, "relu", 0.0});
  c = parse(text, {"model.encoder[0]={out: 5, dropout: 0.5}"});
  CHECK(c.model.encoder[0] == EncoderLayerConfig{"linear", 5, "relu", 0.5});
  // Later overrides win; an empty value unsets a path.
  c = parse("out: runs/x\n", {"train.epochs=3", "train.epochs=4", "out="});
  CHECK(c.train.epochs == 4);
  CHECK(c.out.empty());
  // Into the polymorphic output section, including switching its type.
  c = parse("", {"model.output.chunk_size=128"});
  CHECK(c.model.output.as<FakeDenseConfig>().chunk_size == 128);
  c = parse("", {"model.output={type: fake_sparse, fan_in: 8}"});
  CHECK(c.model.output.as<FakeSparseConfig>().fan_in == 8);
  // Into a section written as "train:" with no value.
  c = parse("train:\n", {"train.batch_size=32"});
  CHECK(c.train.batch_size == 32);
}

TEST_CASE("bad overrides (--set) are errors naming the override") {
  CHECK(error_of("", {"train.epochs=abc"}) ==
        "--set train.epochs=abc: train.epochs: expected an integer in [1, 100000], got 'abc'");
  CHECK(error_of("", {"train.epoch=3"}) ==
        "--set train.epoch=3: train.epoch: unknown key (did you mean 'epochs'?)");
  CHECK(error_of("", {"trian.epochs=3"}) ==
        "--set trian.epochs=3: trian: unknown key (did you mean 'train'?)");
  CHECK(error_of("", {"train.epochs"}) ==
        "--set train.epochs: expected KEY=VALUE (e.g. --set train.epochs=3)");
  CHECK(error_of("", {"train..epochs=3"}) ==
        "--set train..epochs=3: empty key in path 'train..epochs'");
  CHECK(error_of("train: {epochs: 3}\n", {"train.epochs.x=1"}) ==
        "--set train.epochs.x=1: train.epochs: cannot set 'x' inside '3'");
  CHECK(error_of("", {"model.encoder[0].out=3"}) ==
        "--set model.encoder[0].out=3: model.encoder: cannot index null");
  CHECK(error_of("model: {encoder: [{out: 3}]}\n", {"model.encoder[2].out=3"}) ==
        "--set model.encoder[2].out=3: model.encoder: index 2 out of range (the list has 1 "
        "elements)");
  CHECK(error_of("", {"model.encoder[x]=3"}) ==
        "--set model.encoder[x]=3: bad list index in path 'model.encoder[x]' (expected name[0], "
        "name[1], ...)");
  CHECK(
      error_of("", {"model.encoder=[1, 2"}).rfind("--set model.encoder=[1, 2: invalid YAML: ", 0) ==
      0);
  CHECK(error_of("", {"model.output.chunk_sise=3"}) ==
        "--set model.output.chunk_sise=3: model.output.chunk_sise: unknown key (did you mean "
        "'chunk_size'?)");
}

TEST_CASE("model.output is resolved through the registered output types") {
  ExperimentConfig c = parse("model:\n  output: {type: dense, loss: softmax, precision: bf16}\n");
  CHECK(c.model.output.type == "dense");
  CHECK(c.model.output.as<FakeDenseConfig>().loss == LossType::softmax);
  CHECK(c.model.output.as<FakeDenseConfig>().precision == test::FakePrecision::bf16);
  CHECK(c.model.output.as<FakeDenseConfig>().chunk_size == 8192);
  // No type: the default type.
  c = parse("model:\n  output: {chunk_size: 5}\n");
  CHECK(c.model.output.type == "dense");
  CHECK(c.model.output.as<FakeDenseConfig>().chunk_size == 5);

  CHECK(error_of("model:\n  output:\n    type: group_shared\n") ==
        "config.yaml:3: model.output.type: unknown output type 'group_shared' (known: dense, "
        "fake_sparse)");
  CHECK(error_of("model:\n  output: {type: fake_spars}\n") ==
        "config.yaml:2: model.output.type: unknown output type 'fake_spars', did you mean "
        "'fake_sparse'? (known: dense, fake_sparse)");
  // Enum fields: the names their Choices allow (all of the enum's by default), in order.
  CHECK(error_of("model:\n  output: {type: dense, loss: hinge}\n") ==
        "config.yaml:2: model.output.loss: expected one of bce, squared_hinge, softmax, got "
        "'hinge'");
  CHECK(error_of("model:\n  output: {type: dense, precision: fp8}\n") ==
        "config.yaml:2: model.output.precision: expected one of fp32, bf16, got 'fp8'");
  CHECK(error_of("model:\n  output:\n    type: dense\n    chunk: 3\n") ==
        "config.yaml:4: model.output.chunk: unknown key (did you mean 'chunk_size'?)");
  // Keys of another type are unknown here.
  CHECK(error_of("model:\n  output:\n    type: dense\n    fan_in: 3\n") ==
        "config.yaml:4: model.output.fan_in: unknown key (known keys: type, loss, chunk_size, "
        "precision)");
  CHECK(error_of("model:\n  output: {type: fake_sparse, rewire: {fraction: 1.5}}\n") ==
        "config.yaml:2: model.output.rewire.fraction: expected a number in [0, 1), got 1.5");
  CHECK(error_of("model:\n  output: {type: fake_sparse, extra: [{}, {intervl: 2}]}\n") ==
        "config.yaml:2: model.output.extra[1].intervl: unknown key (did you mean 'interval'?)");
  CHECK(error_of("model:\n  output: dense\n") ==
        "config.yaml:2: model.output: expected a mapping with a 'type' key, got 'dense'");
  CHECK(error_of("model:\n  output: {type: [dense]}\n") ==
        "config.yaml:2: model.output.type: expected an output type name, got a list");
  // With no registered types at all, the message says so.
  try {
    parse_config("", "config.yaml", {}, {});
    FAIL("no error without registered output types");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) ==
          "model.output.type: unknown output type 'dense' (known: none registered)");
  }
  CHECK_THROWS_WITH(
      find_output_type(fake_output_types(), "dnse"),
      "unknown output type 'dnse', did you mean 'dense'? (known: dense, fake_sparse)");
}

TEST_CASE("YAML syntax errors name the file and line") {
  std::string e = error_of("train:\n  epochs: 3\n  batch_size: [1, 2\n");
  INFO(e);
  CHECK(e.rfind("config.yaml:", 0) == 0);
  CHECK(e.find("invalid YAML") != std::string::npos);
  // The line reported is where the parser stopped (the unclosed flow list, lines 3-4).
  CHECK((e.rfind("config.yaml:3:", 0) == 0 || e.rfind("config.yaml:4:", 0) == 0));

  CHECK(error_of("train:\n  epochs: 3\n  epochs: 4\n") == "config.yaml:3: duplicate key 'epochs'");
  std::string tab = error_of("train:\n  epochs: 3\n bad: [\n");
  CHECK(tab.rfind("config.yaml:", 0) == 0);
}

TEST_CASE("load_config reads a file and names missing or invalid files") {
  xmc::test::TempDir dir;
  auto path = (dir / "exp.yaml").string();
  xmc::test::write_file(path, "name: from-file\ntrain:\n  epochs: 2\n");
  ExperimentConfig c = load_config(path, {"train.batch_size=8"}, fake_output_types());
  CHECK(c.name == "from-file");
  CHECK(c.train.epochs == 2);
  CHECK(c.train.batch_size == 8);

  auto missing = (dir / "nope.yaml").string();
  CHECK_THROWS_WITH(load_config(missing, {}, fake_output_types()),
                    "config file '" + missing + "' not found");
  CHECK_THROWS_WITH(
      load_config(dir.path().string(), {}, fake_output_types()),
      "config file '" + dir.path().string() + "' is a directory, expected a YAML file");
  xmc::test::write_file(path, "train:\n  epochs: 0\n");
  CHECK_THROWS_WITH(load_config(path, {}, fake_output_types()),
                    path + ":2: train.epochs: expected an integer in [1, 100000], got 0");
  CHECK_THROWS_AS(load_config(path, {}, fake_output_types()), InputError);
}

TEST_CASE("train.batch_size and eval.batch_size stop at the largest batch the GPU kernels take") {
  // core/launch_shape.h: the shared-memory kernels' batch tiles fit grid.y up to this size.
  const auto max = std::to_string(launch::kMaxBatchRows);
  const auto over = std::to_string(launch::kMaxBatchRows + 1);
  CHECK(parse("train: {batch_size: " + max + "}\n").train.batch_size == launch::kMaxBatchRows);
  CHECK(parse("eval: {batch_size: " + max + "}\n").eval.batch_size == launch::kMaxBatchRows);
  CHECK_THROWS_AS(parse("train: {batch_size: " + over + "}\n"), InputError);
  CHECK_THROWS_AS(parse("eval: {batch_size: " + over + "}\n"), InputError);
}
