#pragma once
// OutputSpec: the polymorphic model.output section. `type` names a registered output type
// (lib/layers/registry.cpp); `config` holds that type's own typed config struct. The config
// module knows no backend: the types are passed in as a table of OutputTypeInfo
// (output_types.h).
#include <memory>
#include <string>
#include <typeinfo>

#include "config/config_node.h"
#include "config/node_writer.h"
#include "core/error.h"

namespace xmc {

// Type-erased holder of one backend's config struct.
class OutputValue {
 public:
  virtual ~OutputValue() = default;
  // The struct's fields as a map node (without "type").
  virtual ConfigNode dump() const = 0;
  virtual const std::type_info& type() const = 0;
};

template <class T>
class OutputValueOf final : public OutputValue {
 public:
  explicit OutputValueOf(T v) : value(std::move(v)) {}
  ConfigNode dump() const override { return NodeWriter::write(value); }
  const std::type_info& type() const override { return typeid(T); }
  T value;
};

struct OutputSpec {
  std::string type = "dense";
  // Null until the config is resolved against the registered output types.
  std::shared_ptr<const OutputValue> config;

  // The backend's config struct; throws xmc::Error when it holds another type.
  template <class T>
  const T& as() const {
    auto* p = dynamic_cast<const OutputValueOf<T>*>(config.get());
    if (!p)
      throw_error("model.output (type '{}') does not hold the requested config struct {}", type,
                  typeid(T).name());
    return p->value;
  }

  // Same type and the same field values (compared through their dumps, so backend
  // structs need no operator==).
  bool operator==(const OutputSpec& o) const {
    if (type != o.type) return false;
    if (!config || !o.config) return !config && !o.config;
    return config->type() == o.config->type() && config->dump() == o.config->dump();
  }
};

}  // namespace xmc
