#pragma once
// NodeWriter: the visitor that turns a config struct into a ConfigNode map (every field,
// in declaration order, with its description), for dumping the resolved config.
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "config/config_node.h"
#include "core/field_constraints.h"

namespace xmc {

struct OutputSpec;

// Canonical scalar text, read back exactly by NodeReader (doubles: shortest round-trip).
std::string scalar_text(bool v);
std::string scalar_text(int64_t v);
std::string scalar_text(uint64_t v);
std::string scalar_text(double v);

class NodeWriter {
 public:
  // A scalar field (bool, int64_t, uint64_t, double, string, enum): its text; the
  // constraint (Range, Choices, PathField) is the reader's.
  template <class T, class... Constraint>
  requires std::is_arithmetic_v<T> || std::is_same_v<T, std::string> || NamedEnum<T>
  void field(std::string_view key, const T& v, std::string_view doc, const Constraint&...) {
    if constexpr (std::is_same_v<T, std::string>)
      add(key, ConfigNode::make_scalar(v), doc);
    else if constexpr (NamedEnum<T>)
      add(key, ConfigNode::make_scalar(std::string(to_string(v))), doc);
    else
      add(key, ConfigNode::make_scalar(scalar_text(v)), doc);
  }
  void field(std::string_view key, const OutputSpec& v, std::string_view doc);

  template <VisitableBy<NodeWriter> S>
  void field(std::string_view key, const S& s, std::string_view doc) {
    add(key, write(s), doc);
  }

  template <VisitableBy<NodeWriter> S>
  void field(std::string_view key, const std::vector<S>& v, std::string_view doc) {
    ConfigNode list{.kind = ConfigNode::Kind::list};
    for (const auto& elem : v) list.items.push_back(write(elem));
    add(key, std::move(list), doc);
  }

  ConfigNode take() { return std::move(node_); }

  // The struct as a map node. visit() is non-const (the reader writes through it), so
  // the writer visits a copy.
  template <VisitableBy<NodeWriter> S>
  static ConfigNode write(const S& s) {
    S copy = s;
    NodeWriter w;
    copy.visit(w);
    return w.take();
  }

 private:
  void add(std::string_view key, ConfigNode value, std::string_view doc);
  ConfigNode node_{.kind = ConfigNode::Kind::map};
};

}  // namespace xmc
