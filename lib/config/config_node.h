#pragma once
// ConfigNode: a small YAML-free tree (null | scalar | map | list) that carries, for every
// value, where it came from ("config.yaml:12" or "--set train.epochs=3"). The YAML parser
// and emitter live in yaml_tree.cpp only, so public headers stay free of yaml-cpp.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace xmc {

struct ConfigNode {
  enum class Kind { null, scalar, map, list };

  // Every member has an initializer: a designated initializer may name only some.
  Kind kind = Kind::null;
  std::string scalar{};             // Kind::scalar: the text as written (quotes removed)
  std::vector<ConfigNode> items{};  // Kind::map: entries (each has key); Kind::list: elements
  std::string key{};                // set on map entries
  std::string origin{};             // where the value was written: "file:line" or "--set k=v"
  std::string key_origin{};         // map entries: where the key was written
  std::string doc{};                // dump only: one-line description emitted as a comment

  static ConfigNode make_scalar(std::string text, std::string origin = {}) {
    return {.kind = Kind::scalar, .scalar = std::move(text), .origin = std::move(origin)};
  }

  bool is_null() const { return kind == Kind::null; }
  bool is_scalar() const { return kind == Kind::scalar; }
  bool is_map() const { return kind == Kind::map; }
  bool is_list() const { return kind == Kind::list; }

  // Map entry by key, or nullptr.
  const ConfigNode* find(std::string_view k) const;
  ConfigNode* find(std::string_view k);
  // Appends a map entry (no duplicate check) and returns it.
  ConfigNode& add(std::string k, ConfigNode value);

  // For messages: "'abc'", "a mapping", "a list", "null".
  std::string describe() const;

  // Structural equality: kind, scalar text, keys and items; origins and docs are ignored.
  bool operator==(const ConfigNode& o) const;
};

// Prefixes a message with the origin when known: "config.yaml:12: msg".
std::string with_origin(const std::string& origin, const std::string& msg);

// A tree's leaves as (key path, value text) in document order, the key paths spelled as
// --set spells them ("optim.output.lr", "model.encoder[0].out"). A null value is "null";
// an empty map "{}" and an empty list "[]" (so a key whose value became empty still shows).
using FlatConfig = std::vector<std::pair<std::string, std::string>>;

FlatConfig flatten_config(const ConfigNode& root);

// The value of a key, or nullptr.
const std::string* find_value(const FlatConfig& config, std::string_view key);

// Keys whose value is not the same in every config — a key that some configs lack differs —
// in order of first appearance (`xmctrain report`'s config columns, named as --set names
// them, so a column names the override that reproduces it). Fewer than two configs: none.
std::vector<std::string> differing_keys(const std::vector<const FlatConfig*>& configs);

}  // namespace xmc
