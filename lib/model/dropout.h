#pragma once
// Inverted input dropout: each input entry is kept with probability 1-p and scaled by
// 1/(1-p), so the expected input is unchanged and evaluation needs no rescaling.
#include <cstdint>

#include "core/buffer.h"
#include "core/matrix.h"
#include "core/rng.h"

namespace xmc {

// mask [n]: each entry 0 with probability p, else 1/(1-p), one rng.uniformf() per entry
// in order; p in [0, 1). The multipliers apply to the input and, in backward, to dL/dx
// (the encoder and the layers draw their masks on the host with this, so both devices
// drop the same entries).
void dropout_mask(float* mask, int64_t n, double p, Rng& rng);

// Sparse input: removes dropped entries from the CSR rows (so they do not count as touched
// feature rows) and scales the kept values by 1/(1-p). values must be present.
void dropout_sparse(CsrMatrix& x, double p, Rng& rng);

// An input-dropout mask [rows×n] (rows <= max_rows) on the Context's device, drawn on the
// host by dropout_mask — so both devices drop the same entries — and, on a CUDA Context,
// copied to the device (a host array of the same size in the ledger for the draw).
class DropoutMask {
 public:
  DropoutMask() = default;
  DropoutMask(Context& ctx, int64_t max_rows, int64_t n);
  // Draws rows×n multipliers (0 or 1/(1-p)) from rng; returns the mask (a DEVICE pointer
  // on a CUDA Context).
  const float* draw(int64_t rows, double p, Rng& rng);
  int64_t bytes() const { return static_cast<int64_t>(mask_.bytes() + host_.bytes()); }

 private:
  int64_t max_rows_ = 0, n_ = 0;
  Buffer<float> mask_;
  HostBuffer<float> host_;  // CUDA only: the draw before the copy
};

}  // namespace xmc
