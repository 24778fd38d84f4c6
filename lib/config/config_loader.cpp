#include "config/config_loader.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/node_reader.h"
#include "config/node_writer.h"
#include "config/yaml_tree.h"
#include "core/error.h"

namespace xmc {

namespace {

// One step of an override path: "encoder[1][0]" -> name "encoder", indices {1, 0}.
struct PathStep {
  std::string name;
  std::vector<size_t> indices;
};

std::vector<PathStep> parse_override_path(const std::string& key, const std::string& origin) {
  std::vector<PathStep> steps;
  size_t pos = 0;
  while (true) {
    size_t dot = key.find('.', pos);
    std::string part = key.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    PathStep step;
    size_t bracket = part.find('[');
    step.name = part.substr(0, bracket);
    if (step.name.empty()) throw_input("{}: empty key in path '{}'", origin, key);
    while (bracket != std::string::npos) {
      size_t close = part.find(']', bracket);
      std::string idx =
          close == std::string::npos ? "" : part.substr(bracket + 1, close - bracket - 1);
      // An index, then nothing or the next '[': "a[1]x" fails at 'x'.
      if (part[bracket] != '[' || idx.empty() ||
          idx.find_first_not_of("0123456789") != std::string::npos)
        throw_input("{}: bad list index in path '{}' (expected name[0], name[1], ...)", origin,
                    key);
      step.indices.push_back(std::stoull(idx));
      bracket = close + 1 < part.size() ? close + 1 : std::string::npos;
    }
    steps.push_back(std::move(step));
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return steps;
}

// Applies one "--set" assignment to a parsed tree (creating missing map entries; the
// reader then rejects unknown keys).
void apply_override(ConfigNode& root, const std::string& assignment) {
  std::string origin = fmt::format("--set {}", assignment);
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw_input("{}: expected KEY=VALUE (e.g. --set train.epochs=3)", origin);
  std::string key = assignment.substr(0, eq);
  std::vector<PathStep> steps = parse_override_path(key, origin);
  // Values from --set have no line: every node and key of the value names the override.
  ConfigNode value = parse_yaml(assignment.substr(eq + 1), origin, true);

  ConfigNode* cur = &root;
  std::string path;
  for (size_t s = 0; s < steps.size(); ++s) {
    const PathStep& step = steps[s];
    if (cur->is_null()) {
      cur->kind = ConfigNode::Kind::map;  // "train:" with no value: fill it in
      cur->origin = origin;
    }
    if (!cur->is_map())
      throw_input("{}: {}: cannot set '{}' inside {}", origin, path.empty() ? "(top level)" : path,
                  step.name, cur->describe());
    path = path.empty() ? step.name : path + "." + step.name;
    ConfigNode* child = cur->find(step.name);
    if (!child) {
      // A new key; if it is not a config key, the reader reports it with a suggestion.
      child = &cur->add(step.name, ConfigNode{});
      child->origin = origin;
      child->key_origin = origin;
    }
    for (size_t idx : step.indices) {
      if (!child->is_list())
        throw_input("{}: {}: cannot index {}", origin, path, child->describe());
      if (idx >= child->items.size())
        throw_input("{}: {}: index {} out of range (the list has {} elements)", origin, path, idx,
                    child->items.size());
      path += fmt::format("[{}]", idx);
      child = &child->items[idx];
    }
    cur = child;
  }
  value.key = cur->key;
  value.key_origin = cur->key_origin.empty() ? std::string{} : origin;
  *cur = std::move(value);
}

}  // namespace

ExperimentConfig parse_config(std::string_view yaml_text, const std::string& source,
                              const std::vector<std::string>& overrides,
                              const std::vector<OutputTypeInfo>& output_types) {
  ConfigNode root = parse_yaml(yaml_text, source);
  if (root.is_null()) root = ConfigNode{.kind = ConfigNode::Kind::map, .origin = source};
  if (!root.is_map())
    throw_input("{}: expected a mapping of config keys at the top level, got {}",
                root.origin.empty() ? source : root.origin, root.describe());
  for (const auto& o : overrides) apply_override(root, o);
  ExperimentConfig config;
  NodeReader::read(root, "", config, &output_types);
  return config;
}

ExperimentConfig load_config(const std::string& path, const std::vector<std::string>& overrides,
                             const std::vector<OutputTypeInfo>& output_types) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw_input("config file '{}' not found", path);
  if (std::filesystem::is_directory(path, ec))
    throw_input("config file '{}' is a directory, expected a YAML file", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input("cannot open config file '{}'", path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw_input("cannot read config file '{}'", path);
  return parse_config(text.str(), path, overrides, output_types);
}

std::vector<ConfigChange> config_changes(std::string_view before_yaml,
                                         std::string_view after_yaml) {
  const FlatConfig before = flatten_config(parse_yaml(before_yaml, "config (before)"));
  const FlatConfig after = flatten_config(parse_yaml(after_yaml, "config (after)"));
  std::vector<ConfigChange> out;
  for (const auto& [k, v] : after) {
    const std::string* old = find_value(before, k);
    if (old == nullptr || *old != v) out.push_back({k, old ? *old : "(absent)", v});
  }
  for (const auto& [k, v] : before)
    if (find_value(after, k) == nullptr) out.push_back({k, v, "(absent)"});
  return out;
}

std::string dump_config(const ExperimentConfig& config) {
  return "# xmctrain resolved config: every key, defaults filled in.\n" +
         emit_yaml(NodeWriter::write(config));
}

}  // namespace xmc
