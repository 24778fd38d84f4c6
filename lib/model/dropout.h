#pragma once
// Inverted input dropout: each input entry is kept with probability 1-p and scaled by
// 1/(1-p), so the expected input is unchanged and evaluation needs no rescaling.
#include <cstdint>

#include "core/matrix.h"
#include "core/rng.h"

namespace xmc {

// x [B×n] in place; mask [B×n] (ld = n) receives the multiplier per entry (0 or
// 1/(1-p)), which backward applies to dL/dx. p in [0, 1).
void dropout_dense(Matrix x, float* mask, double p, Rng& rng);

// Sparse input: removes dropped entries from the CSR rows (so they do not count as touched
// feature rows) and scales the kept values by 1/(1-p). values must be present.
void dropout_sparse(CsrMatrix& x, double p, Rng& rng);

}  // namespace xmc
