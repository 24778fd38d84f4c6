#include "report/config_diff.h"

#include <fmt/format.h>

#include <unordered_set>

namespace xmc {
namespace {

void flatten(const ConfigNode& n, const std::string& path, FlatConfig& out) {
  switch (n.kind) {
    case ConfigNode::Kind::null:
      out.emplace_back(path, "null");
      return;
    case ConfigNode::Kind::scalar:
      out.emplace_back(path, n.scalar);
      return;
    case ConfigNode::Kind::map:
      if (n.items.empty() && !path.empty()) out.emplace_back(path, "{}");
      for (const auto& item : n.items)
        flatten(item, path.empty() ? item.key : path + "." + item.key, out);
      return;
    case ConfigNode::Kind::list:
      if (n.items.empty()) out.emplace_back(path, "[]");
      for (size_t i = 0; i < n.items.size(); ++i)
        flatten(n.items[i], fmt::format("{}[{}]", path, i), out);
      return;
  }
}

}  // namespace

FlatConfig flatten_config(const ConfigNode& root) {
  FlatConfig out;
  flatten(root, "", out);
  return out;
}

const std::string* find_value(const FlatConfig& config, std::string_view key) {
  for (const auto& [k, v] : config)
    if (k == key) return &v;
  return nullptr;
}

std::vector<std::string> differing_keys(const std::vector<const FlatConfig*>& configs) {
  std::vector<std::string> out;
  if (configs.size() < 2) return out;
  std::unordered_set<std::string> seen;
  for (const FlatConfig* c : configs) {
    for (const auto& [key, value] : *c) {
      if (!seen.insert(key).second) continue;
      for (const FlatConfig* other : configs) {
        const std::string* v = find_value(*other, key);
        if (v == nullptr || *v != value) {
          out.push_back(key);
          break;
        }
      }
    }
  }
  return out;
}

}  // namespace xmc
