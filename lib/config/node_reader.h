#pragma once
// NodeReader: the visitor that fills a config struct from a ConfigNode map, checking types,
// ranges and choices, and rejecting unknown keys (naming the full path and the closest
// known key). Fields absent from the node keep the struct's defaults.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/config_node.h"
#include "core/field_constraints.h"

namespace xmc {

struct OutputSpec;
struct OutputTypeInfo;

class NodeReader {
 public:
  // node: a map, or null (all defaults); anything else is an error naming `path`.
  // path: the dotted path of the node ("" for the root). types: registered output types,
  // needed when the struct contains an OutputSpec.
  NodeReader(const ConfigNode& node, std::string path,
             const std::vector<OutputTypeInfo>* types = nullptr);

  void field(std::string_view key, bool& v, std::string_view doc);
  void field(std::string_view key, int64_t& v, std::string_view doc, Range r = {});
  void field(std::string_view key, uint64_t& v, std::string_view doc, Range r = {});
  void field(std::string_view key, double& v, std::string_view doc, Range r = {});
  // A string, or a path: null or "" = unset.
  void field(std::string_view key, std::string& v, std::string_view doc, PathField = {});
  void field(std::string_view key, std::string& v, std::string_view doc, const Choices& c);
  void field(std::string_view key, OutputSpec& v, std::string_view doc);
  // An enum: one of the names c allows (every value of E by default), parsed here once.
  template <NamedEnum E>
  void field(std::string_view key, E& v, std::string_view doc, const Choices& c = Choices::of<E>()) {
    std::string name(to_string(v));
    field(key, name, doc, c);
    v = parse_enum<E>(name, key);
  }

  template <VisitableBy<NodeReader> S>
  void field(std::string_view key, S& s, std::string_view /*doc*/) {
    const ConfigNode* child = lookup(key);
    read(child ? *child : null_node(), child_path(key), s, types_);
  }

  template <VisitableBy<NodeReader> S>
  void field(std::string_view key, std::vector<S>& v, std::string_view /*doc*/) {
    const ConfigNode* child = lookup(key);
    if (!child) return;
    std::string path = child_path(key);
    expect_list(*child, path);
    v.clear();
    for (size_t i = 0; i < child->items.size(); ++i) {
      S elem{};
      read(child->items[i], path + "[" + std::to_string(i) + "]", elem, types_);
      v.push_back(std::move(elem));
    }
  }

  // A key the caller handles itself (e.g. "type" of a polymorphic section).
  void allow_key(std::string_view key) { known_.emplace_back(key); }

  // Throws on keys of the node that no field() asked for.
  void finish() const;

  // Reads a whole struct from node (visit + finish).
  template <VisitableBy<NodeReader> S>
  static void read(const ConfigNode& node, std::string path, S& s,
                   const std::vector<OutputTypeInfo>* types) {
    NodeReader r(node, std::move(path), types);
    s.visit(r);
    r.finish();
  }

  static const ConfigNode& null_node();

  // Throws InputError "origin: path: msg".
  [[noreturn]] static void fail(const ConfigNode& at, const std::string& path,
                                const std::string& msg);

 private:
  const ConfigNode* lookup(std::string_view key);  // records key as known
  std::string child_path(std::string_view key) const;
  static void expect_list(const ConfigNode& n, const std::string& path);
  const ConfigNode* scalar_child(std::string_view key, const char* expected);
  // An int64, uint64 or double field: a finite number of type T within r; `what` is the
  // expectation the messages name.
  template <class T>
  void read_number(std::string_view key, T& v, const std::string& what, Range r);

  const ConfigNode& node_;
  std::string path_;
  const std::vector<OutputTypeInfo>* types_;
  std::vector<std::string> known_;
};

}  // namespace xmc
