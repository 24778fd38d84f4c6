#include "model/dropout.h"

#include "core/error.h"

namespace xmc {

// Drawn sequentially from one Rng so the mask depends only on its state (reproducible
// whatever the thread count).
void dropout_mask(float* mask, int64_t n, double p, Rng& rng) {
  XMC_CHECK(p >= 0.0 && p < 1.0, "dropout probability {} outside [0, 1)", p);
  const float keep_scale = static_cast<float>(1.0 / (1.0 - p));
  const float pf = static_cast<float>(p);
  for (int64_t i = 0; i < n; ++i) mask[i] = rng.uniformf() < pf ? 0.0f : keep_scale;
}

void dropout_sparse(CsrMatrix& x, double p, Rng& rng) {
  XMC_CHECK(p >= 0.0 && p < 1.0, "dropout probability {} outside [0, 1)", p);
  XMC_CHECK(x.has_values() || x.nnz() == 0, "sparse dropout needs values");
  const float keep_scale = static_cast<float>(1.0 / (1.0 - p));
  const float pf = static_cast<float>(p);
  int64_t out = 0;
  int64_t begin = x.indptr[0];
  for (int64_t r = 0; r < x.rows; ++r) {
    const int64_t end = x.indptr[static_cast<size_t>(r) + 1];
    for (int64_t k = begin; k < end; ++k) {
      if (rng.uniformf() < pf) continue;
      x.indices[static_cast<size_t>(out)] = x.indices[static_cast<size_t>(k)];
      x.values[static_cast<size_t>(out)] = x.values[static_cast<size_t>(k)] * keep_scale;
      ++out;
    }
    begin = end;
    x.indptr[static_cast<size_t>(r) + 1] = out;
  }
  x.indptr[0] = 0;
  x.indices.resize(static_cast<size_t>(out));
  x.values.resize(static_cast<size_t>(out));
}

DropoutMask::DropoutMask(Context& ctx, int64_t max_rows, int64_t n)
    : max_rows_(max_rows), n_(n), mask_(ctx, MemTag::workspace, static_cast<size_t>(max_rows * n)) {
  if (ctx.on_gpu()) host_ = HostBuffer<float>(ctx.ledger(), MemTag::workspace, mask_.size());
}

const float* DropoutMask::draw(int64_t rows, double p, Rng& rng) {
  XMC_CHECK(rows <= max_rows_, "dropout mask of {} rows, at most {}", rows, max_rows_);
  const int64_t count = rows * n_;
  if (host_.size() == 0) {
    dropout_mask(mask_.data(), count, p, rng);
  } else {
    dropout_mask(host_.data(), count, p, rng);
    mask_.copy_from_host(host_.data(), static_cast<size_t>(count));
  }
  return mask_.data();
}

}  // namespace xmc
