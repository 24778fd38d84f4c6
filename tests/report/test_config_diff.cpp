// Flattening resolved configs to --set key paths, and finding the keys that differ.
#include <catch2/catch.hpp>

#include "config/config_node.h"
#include "config/yaml_tree.h"

using namespace xmc;

namespace {
FlatConfig flat(const char* yaml) { return flatten_config(parse_yaml(yaml, "test.yaml")); }
}  // namespace

TEST_CASE("flatten_config names keys as --set does, in document order") {
  FlatConfig c = flat(
      "name: a\n"
      "model:\n"
      "  encoder: [{type: linear, out: 64}, {type: linear, out: 32}]\n"
      "  output: {type: dense}\n"
      "data: {filter: null, extra: [], opts: {}}\n");
  FlatConfig expect = {{"name", "a"},
                       {"model.encoder[0].type", "linear"},
                       {"model.encoder[0].out", "64"},
                       {"model.encoder[1].type", "linear"},
                       {"model.encoder[1].out", "32"},
                       {"model.output.type", "dense"},
                       {"data.filter", "null"},
                       {"data.extra", "[]"},
                       {"data.opts", "{}"}};
  CHECK(c == expect);
  REQUIRE(find_value(c, "model.encoder[1].out") != nullptr);
  CHECK(*find_value(c, "model.encoder[1].out") == "32");
  CHECK(find_value(c, "model.encoder[2].out") == nullptr);
}

TEST_CASE("differing_keys lists exactly the keys whose values differ, missing ones included") {
  FlatConfig a = flat("name: s\nlr: 0.01\nbatch: 128\nseed: 1\n");
  FlatConfig b = flat("name: s\nlr: 0.02\nbatch: 128\nseed: 1\n");
  FlatConfig c = flat("name: s\nlr: 0.01\nbatch: 256\nseed: 1\n");
  CHECK(differing_keys({&a, &b, &c}) == std::vector<std::string>{"lr", "batch"});
  CHECK(differing_keys({&a, &a}).empty());
  CHECK(differing_keys({&a}).empty());
  CHECK(differing_keys({}).empty());
  // An older run without a key: that key differs, listed where it first appears.
  FlatConfig old = flat("name: s\nlr: 0.01\nbatch: 128\n");
  CHECK(differing_keys({&old, &a}) == std::vector<std::string>{"seed"});
  // A longer encoder list: its extra keys differ.
  FlatConfig one = flat("model: {encoder: [{out: 8}]}\n");
  FlatConfig two = flat("model: {encoder: [{out: 8}, {out: 4}]}\n");
  CHECK(differing_keys({&one, &two}) == std::vector<std::string>{"model.encoder[1].out"});
}
