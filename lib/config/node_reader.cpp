#include "config/node_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <type_traits>

#include "config/output_spec.h"
#include "config/output_types.h"
#include "core/error.h"

namespace xmc {

namespace {
template <class T>
bool parse_number(const std::string& s, T& out) {
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') ++b;  // YAML allows an explicit plus sign
  auto [p, ec] = std::from_chars(b, e, out);
  return ec == std::errc{} && p == e && b != e;
}

// "an integer in [1, 10]", "a number >= 0" (noun alone without a range).
std::string expected(const char* noun, const Range& r, bool integer) {
  const std::string range = r.str(integer);
  if (range.empty()) return noun;
  const bool interval = range[0] == '[' || range[0] == '(';
  return fmt::format("{} {}{}", noun, interval ? "in " : "", range);
}

// " (did you mean 'x'?)" or " (known keys: a, b, c)".
std::string suggestion_suffix(std::string_view key, const std::vector<std::string>& candidates) {
  std::string best = closest_key(key, candidates);
  if (!best.empty()) return fmt::format(" (did you mean '{}'?)", best);
  return fmt::format(" (known keys: {})", fmt::join(candidates, ", "));
}
}  // namespace

NodeReader::NodeReader(const ConfigNode& node, std::string path,
                       const std::vector<OutputTypeInfo>* types)
    : node_(node), path_(std::move(path)), types_(types) {
  if (!node_.is_map() && !node_.is_null())
    fail(node_, path_.empty() ? std::string("(top level)") : path_,
         fmt::format("expected a mapping, got {}", node_.describe()));
}

const ConfigNode& NodeReader::null_node() {
  static const ConfigNode n;
  return n;
}

void NodeReader::fail(const ConfigNode& at, const std::string& path, const std::string& msg) {
  throw InputError(with_origin(at.origin, fmt::format("{}: {}", path, msg)));
}

const ConfigNode* NodeReader::lookup(std::string_view key) {
  known_.emplace_back(key);
  return node_.find(key);
}

std::string NodeReader::child_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

void NodeReader::expect_list(const ConfigNode& n, const std::string& path) {
  if (!n.is_list() && !n.is_null())
    fail(n, path, fmt::format("expected a list, got {}", n.describe()));
}

const ConfigNode* NodeReader::scalar_child(std::string_view key, const char* expected) {
  const ConfigNode* child = lookup(key);
  if (child && !child->is_scalar())
    fail(*child, child_path(key), fmt::format("expected {}, got {}", expected, child->describe()));
  return child;
}

void NodeReader::finish() const {
  for (const auto& item : node_.items) {
    if (std::find(known_.begin(), known_.end(), item.key) != known_.end()) continue;
    throw InputError(with_origin(item.key_origin.empty() ? item.origin : item.key_origin,
                                 fmt::format("{}: unknown key{}", child_path(item.key),
                                             suggestion_suffix(item.key, known_))));
  }
}

void NodeReader::field(std::string_view key, bool& v, std::string_view) {
  const ConfigNode* c = scalar_child(key, "true or false");
  if (!c) return;
  std::string s = c->scalar;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (s == "true")
    v = true;
  else if (s == "false")
    v = false;
  else
    fail(*c, child_path(key), fmt::format("expected true or false, got '{}'", c->scalar));
}

template <class T>
void NodeReader::read_number(std::string_view key, T& v, const std::string& what, Range r) {
  const ConfigNode* c = scalar_child(key, what.c_str());
  if (!c) return;
  T x = 0;
  bool ok = parse_number(c->scalar, x);
  if constexpr (std::is_floating_point_v<T>) ok = ok && std::isfinite(x);
  if (!ok) fail(*c, child_path(key), fmt::format("expected {}, got '{}'", what, c->scalar));
  if (!r.contains(static_cast<double>(x)))
    fail(*c, child_path(key), fmt::format("expected {}, got {}", what, c->scalar));
  v = x;
}

void NodeReader::field(std::string_view key, int64_t& v, std::string_view, Range r) {
  read_number(key, v, expected("an integer", r, true), r);
}

void NodeReader::field(std::string_view key, uint64_t& v, std::string_view, Range r) {
  read_number(key, v,
              r.str(true).empty() ? std::string("a non-negative integer")
                                  : expected("an integer", r, true),
              r);
}

void NodeReader::field(std::string_view key, double& v, std::string_view, Range r) {
  read_number(key, v, expected("a number", r, false), r);
}

void NodeReader::field(std::string_view key, std::string& v, std::string_view, PathField) {
  const ConfigNode* c = lookup(key);
  if (!c) return;
  if (c->is_null()) {
    v.clear();
    return;
  }
  if (!c->is_scalar())
    fail(*c, child_path(key), fmt::format("expected a string, got {}", c->describe()));
  v = c->scalar;
}

void NodeReader::field(std::string_view key, std::string& v, std::string_view, const Choices& ch) {
  std::string what = fmt::format("one of {}", fmt::join(ch.values, ", "));
  const ConfigNode* c = scalar_child(key, what.c_str());
  if (!c) return;
  if (!ch.contains(c->scalar)) {
    const std::string best = closest_key(c->scalar, ch.values);
    fail(*c, child_path(key),
         fmt::format("expected {}, got '{}'{}", what, c->scalar,
                     best.empty() ? std::string{} : fmt::format(" (did you mean '{}'?)", best)));
  }
  v = c->scalar;
}

void NodeReader::field(std::string_view key, OutputSpec& v, std::string_view) {
  const ConfigNode* found = lookup(key);
  const ConfigNode& node = found ? *found : null_node();
  std::string path = child_path(key);
  if (!node.is_map() && !node.is_null())
    fail(node, path, fmt::format("expected a mapping with a 'type' key, got {}", node.describe()));
  XMC_CHECK(types_ != nullptr, "reading {} needs the registered output types", path);

  std::string type = v.type;  // default when the section or its type key is absent
  const ConfigNode* type_node = node.find("type");
  const ConfigNode& where = type_node ? *type_node : node;
  if (type_node) {
    if (!type_node->is_scalar())
      fail(*type_node, path + ".type",
           fmt::format("expected an output type name, got {}", type_node->describe()));
    type = type_node->scalar;
  }
  const OutputTypeInfo* info = nullptr;
  try {
    info = &find_output_type(*types_, type);
  } catch (const InputError& e) {  // unknown: the same message, at the key's origin
    fail(where, path + ".type", e.what());
  }
  v.type = type;
  info->parse(node, path, v);
}

}  // namespace xmc
