#pragma once
// OutputSpec: the polymorphic model.output section. `type` names a registered output type
// (lib/layers/registry.cpp); `config` holds that type's own typed config struct. The config
// module knows no backend: the types are passed in as a table of OutputTypeInfo
// (output_types.h).
#include <any>
#include <string>
#include <typeinfo>

#include "config/config_node.h"
#include "core/error.h"

namespace xmc {

struct OutputSpec {
  std::string type = "dense";
  // The backend's config struct, and its fields as a map node (without "type"); both empty
  // until the config is resolved against the registered output types.
  std::any config;
  ConfigNode fields;

  // The backend's config struct; throws xmc::Error when it holds another type.
  template <class T>
  const T& as() const {
    const T* p = std::any_cast<T>(&config);
    if (!p)
      throw_error("model.output (type '{}') does not hold the requested config struct {}", type,
                  typeid(T).name());
    return *p;
  }

  // Same type and the same field values (compared through their dumps, so backend
  // structs need no operator==).
  bool operator==(const OutputSpec& o) const {
    return type == o.type && config.type() == o.config.type() && fields == o.fields;
  }
};

}  // namespace xmc
