#pragma once
// Loading the experiment config: YAML text -> --set overrides -> typed, validated
// ExperimentConfig (model.output resolved through the registered output types), and the
// resolved dump that loads back to the same config.
#include <string>
#include <string_view>
#include <vector>

#include "config/experiment_config.h"
#include "config/output_types.h"

namespace xmc {

// Reads the YAML file at path. Errors (InputError) name the path, the line, the key path,
// the value and what was allowed; a missing file names the path.
ExperimentConfig load_config(const std::string& path, const std::vector<std::string>& overrides,
                             const std::vector<OutputTypeInfo>& output_types);

// Same from text; source names the text in messages (e.g. "config.yaml").
// overrides: "a.b.c=value" (value parsed as YAML: 3, abc, [], {type: linear, out: 64});
// list elements as "model.encoder[1].out=64". Applied before validation.
ExperimentConfig parse_config(std::string_view yaml_text, const std::string& source,
                              const std::vector<std::string>& overrides,
                              const std::vector<OutputTypeInfo>& output_types);

// Every field, defaults filled in, as YAML with one-line descriptions as comments
// (config.resolved.yaml). parse_config(dump_config(c), ...) == c.
std::string dump_config(const ExperimentConfig& config);

// One key whose value differs between two configs: dotted key ("optim.output.lr", list
// elements as "model.encoder[0].out"), the values as written ("(absent)" when missing).
struct ConfigChange {
  std::string key, before, after;
};

// The keys whose values differ between two config texts (dump_config output), in the
// order of `after`, then the keys only `before` has.
std::vector<ConfigChange> config_changes(std::string_view before_yaml, std::string_view after_yaml);

}  // namespace xmc
