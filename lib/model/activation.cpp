#include "model/activation.h"

#include <algorithm>

#include "core/enum_names.h"
#include "core/error.h"

namespace xmc {

namespace {
constexpr std::array<EnumName<Activation>, 2> kActivationNames{
    {{Activation::none, "none"}, {Activation::relu, "relu"}}};
}  // namespace

Activation parse_activation(std::string_view name) {
  return parse_enum(kActivationNames, name, "activation");
}
std::string_view to_string(Activation a) { return enum_name(kActivationNames, a); }

void activation_forward(Activation a, Matrix h) {
  if (a == Activation::none) return;
#pragma omp parallel for schedule(static) if (h.rows * h.cols > 65536)
  for (int64_t r = 0; r < h.rows; ++r) {
    float* x = h.row(r);
    for (int64_t j = 0; j < h.cols; ++j) x[j] = std::max(x[j], 0.0f);
  }
}

void activation_backward(Activation a, ConstMatrix h, ConstMatrix dh, Matrix dz) {
  XMC_CHECK(h.rows == dh.rows && h.cols == dh.cols && dz.rows == dh.rows && dz.cols == dh.cols,
            "activation backward shapes h [{}×{}], dh [{}×{}], dz [{}×{}]", h.rows, h.cols, dh.rows,
            dh.cols, dz.rows, dz.cols);
#pragma omp parallel for schedule(static) if (h.rows * h.cols > 65536)
  for (int64_t r = 0; r < h.rows; ++r) {
    const float* hr = h.row(r);
    const float* g = dh.row(r);
    float* out = dz.row(r);
    if (a == Activation::relu) {
      for (int64_t j = 0; j < h.cols; ++j) out[j] = hr[j] > 0.0f ? g[j] : 0.0f;
    } else {
      std::copy(g, g + h.cols, out);
    }
  }
}

}  // namespace xmc
