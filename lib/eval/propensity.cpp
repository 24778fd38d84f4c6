#include "eval/propensity.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "core/error.h"

namespace xmc {

std::vector<double> inverse_propensity(const std::vector<int64_t>& label_freq, int64_t n_train,
                                       double a, double b) {
  if (n_train < 1)
    throw_input("propensity: the number of training points must be >= 1, got {}", n_train);
  if (!std::isfinite(a) || a < 0) throw_input("propensity: A must be finite and >= 0, got {}", a);
  if (!std::isfinite(b) || b <= 0) throw_input("propensity: B must be finite and > 0, got {}", b);
  const double c = (std::log(static_cast<double>(n_train)) - 1.0) * std::pow(b + 1.0, a);
  std::vector<double> q(label_freq.size());
  for (size_t l = 0; l < label_freq.size(); ++l) {
    if (label_freq[l] < 0)
      throw_input("propensity: label {} has a negative training count {}", l, label_freq[l]);
    q[l] = 1.0 + c * std::pow(static_cast<double>(label_freq[l]) + b, -a);
  }
  return q;
}

std::string_view guess_dataset_family(std::string_view name_or_path) {
  std::string s(name_or_path);
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (s.find("amazon") != std::string::npos) return "amazon";
  if (s.find("wiki") != std::string::npos) return "wikipedia";
  return "other";
}

std::pair<double, double> propensity_defaults(std::string_view family) {
  if (family == "amazon") return {0.6, 2.6};
  if (family == "wikipedia" || family == "wiki") return {0.5, 0.4};
  return {0.55, 1.5};
}

}  // namespace xmc
