#pragma once
// Elementwise activations of the encoder layers.
#include <cstdint>
#include <string_view>

#include "core/matrix.h"

namespace xmc {

enum class Activation { none, relu };
Activation parse_activation(std::string_view name);  // throws InputError naming the known ones
std::string_view to_string(Activation a);

// In place on h [B×n].
void activation_forward(Activation a, Matrix h);
// dz = dh ⊙ act'(z), written into dz [B×n]; uses the activation's output h (relu: h > 0
// exactly where z > 0), so the pre-activation need not be kept.
void activation_backward(Activation a, ConstMatrix h, ConstMatrix dh, Matrix dz);

}  // namespace xmc
