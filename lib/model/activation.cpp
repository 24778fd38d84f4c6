#include "model/activation.h"

#include "core/enum_names.h"

namespace xmc {

namespace {
constexpr std::array<EnumName<Activation>, 2> kActivationNames{
    {{Activation::none, "none"}, {Activation::relu, "relu"}}};
}  // namespace

Activation parse_activation(std::string_view name) {
  return parse_enum(kActivationNames, name, "activation");
}

}  // namespace xmc
