#pragma once
// The activations of the encoder layers (applied by the ops of kernels/encoder_ops.h and
// kernels/dense_ops.h).
#include <string_view>

namespace xmc {

enum class Activation { none, relu };
Activation parse_activation(std::string_view name);  // throws InputError naming the known ones

}  // namespace xmc
