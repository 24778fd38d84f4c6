#include "config/config_node.h"

#include <fmt/format.h>

#include <unordered_set>

namespace xmc {

const ConfigNode* ConfigNode::find(std::string_view k) const {
  if (kind != Kind::map) return nullptr;
  for (const auto& item : items)
    if (item.key == k) return &item;
  return nullptr;
}

ConfigNode* ConfigNode::find(std::string_view k) {
  return const_cast<ConfigNode*>(static_cast<const ConfigNode&>(*this).find(k));
}

ConfigNode& ConfigNode::add(std::string k, ConfigNode value) {
  value.key = std::move(k);
  items.push_back(std::move(value));
  return items.back();
}

std::string ConfigNode::describe() const {
  switch (kind) {
    case Kind::null:
      return "null";
    case Kind::scalar:
      return fmt::format("'{}'", scalar);
    case Kind::map:
      return "a mapping";
    case Kind::list:
      return "a list";
  }
  return "?";
}

bool ConfigNode::operator==(const ConfigNode& o) const {
  return kind == o.kind && scalar == o.scalar && key == o.key && items == o.items;
}

std::string with_origin(const std::string& origin, const std::string& msg) {
  return origin.empty() ? msg : fmt::format("{}: {}", origin, msg);
}

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
