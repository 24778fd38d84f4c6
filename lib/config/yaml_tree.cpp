#include "config/yaml_tree.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/error.h"

namespace xmc {

namespace {

struct Converter {
  const std::string& source;
  bool fixed_origin;

  std::string origin(const YAML::Mark& m) const {
    if (fixed_origin || m.is_null()) return source;
    return fmt::format("{}:{}", source, m.line + 1);
  }

  ConfigNode convert(const YAML::Node& n) const {
    std::string where = origin(n.Mark());
    switch (n.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        return ConfigNode{.origin = where};
      case YAML::NodeType::Scalar:
        return ConfigNode::make_scalar(n.Scalar(), where);
      case YAML::NodeType::Sequence: {
        ConfigNode c{.kind = ConfigNode::Kind::list, .origin = where};
        for (const auto& item : n) c.items.push_back(convert(item));
        return c;
      }
      case YAML::NodeType::Map: {
        ConfigNode c{.kind = ConfigNode::Kind::map, .origin = where};
        for (auto it = n.begin(); it != n.end(); ++it) {
          std::string key_where = origin(it->first.Mark());
          if (!it->first.IsScalar())
            throw_input("{}: mapping keys must be plain names, got a {}", key_where,
                        it->first.IsMap() ? "mapping" : "list");
          std::string key = it->first.Scalar();
          if (c.find(key)) throw_input("{}: duplicate key '{}'", key_where, key);
          ConfigNode& entry = c.add(key, convert(it->second));
          entry.key_origin = key_where;
        }
        return c;
      }
    }
    return {};
  }
};

void emit(YAML::Emitter& out, const ConfigNode& n) {
  switch (n.kind) {
    case ConfigNode::Kind::null:
      out << YAML::Null;
      break;
    case ConfigNode::Kind::scalar:
      out << n.scalar;
      break;
    case ConfigNode::Kind::list:
    case ConfigNode::Kind::map: {
      const bool map = n.kind == ConfigNode::Kind::map;
      if (n.items.empty()) out << YAML::Flow;  // [] or {}
      out << (map ? YAML::BeginMap : YAML::BeginSeq);
      for (const auto& item : n.items) {
        if (map) out << YAML::Key << item.key << YAML::Value;
        emit(out, item);
        if (map && item.is_scalar() && !item.doc.empty()) out << YAML::Comment(item.doc);
      }
      out << (map ? YAML::EndMap : YAML::EndSeq);
      break;
    }
  }
}

}  // namespace

ConfigNode parse_yaml(std::string_view text, const std::string& source, bool fixed_origin) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    if (fixed_origin || e.mark.is_null()) throw_input("{}: invalid YAML: {}", source, e.msg);
    throw_input("{}:{}:{}: invalid YAML: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  return Converter{source, fixed_origin}.convert(root);
}

std::string emit_yaml(const ConfigNode& node) {
  YAML::Emitter out;
  out.SetIndent(2);
  emit(out, node);
  if (!out.good()) throw_error("cannot emit the config as YAML: {}", out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

}  // namespace xmc
