#pragma once
// Inverse label propensities (Jain, Prabhu & Varma 2016), as pyxclib's
// compute_inv_propesity: q_l = 1 + C·(N_l + B)^(−A), C = (ln N − 1)·(B + 1)^A, with N_l
// the training count of label l and N the number of training points.
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace xmc {

// label_freq [L] (training counts N_l), n_train = N >= 1, a >= 0, b > 0 (finite; b > 0
// keeps (N_l + B)^(−A) finite for unseen labels). Returns q [L]. InputError on bad values.
std::vector<double> inverse_propensity(const std::vector<int64_t>& label_freq, int64_t n_train,
                                       double a, double b);

// Dataset family of a dataset name or path: "amazon" when it contains "amazon",
// "wikipedia" when it contains "wiki" (case-insensitive), otherwise "other".
std::string_view guess_dataset_family(std::string_view name_or_path);

// (A, B) for a family: amazon 0.6/2.6, wikipedia (or wiki) 0.5/0.4, anything else
// 0.55/1.5 (the values of the XC repository).
std::pair<double, double> propensity_defaults(std::string_view family);

}  // namespace xmc
