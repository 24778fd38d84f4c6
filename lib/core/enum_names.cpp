#include "core/enum_names.h"

#include <string>

#include "core/error.h"

namespace xmc {

void throw_unknown_enum_name(std::string_view list, std::string_view what, std::string_view name) {
  std::string known;
  for (size_t i = 0; !nth_enum_name(list, i).empty(); ++i)
    known += (known.empty() ? "" : ", ") + std::string(nth_enum_name(list, i));
  throw_input("unknown {} '{}': expected one of {}", what, name, known);
}

}  // namespace xmc
