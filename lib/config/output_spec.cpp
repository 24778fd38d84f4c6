#include "config/output_spec.h"

namespace xmc {

bool OutputSpec::operator==(const OutputSpec& o) const {
  if (type != o.type) return false;
  if (!config || !o.config) return !config && !o.config;
  return config->type() == o.config->type() && config->dump() == o.config->dump();
}

}  // namespace xmc
