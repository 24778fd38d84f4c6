#include "core/error.h"

namespace xmc {

std::string SourceLocation::str() const {
  if (line <= 0) return file;
  if (column <= 0) return fmt::format("{}:{}", file, line);
  return fmt::format("{}:{}:{}", file, line, column);
}

}  // namespace xmc
