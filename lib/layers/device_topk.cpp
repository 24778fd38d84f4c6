#include "layers/device_topk.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/buffer.h"
#include "core/gpu.h"

namespace xmc {

TopK stream_topk(Context& ctx, int64_t rows, int k, int64_t block_rows, int64_t n, int64_t chunk,
                 int64_t label_offset, const std::function<void(int64_t, int64_t)>& begin_block,
                 const std::function<void(int64_t, Matrix)>& score) {
  XMC_CHECK(rows >= 0 && block_rows > 0 && n > 0 && chunk > 0,
            "top-k: {} rows in blocks of {}, {} labels in chunks of {}", rows, block_rows, n,
            chunk);
  chunk = std::min(chunk, n);
  const int64_t zrows = std::min(block_rows, std::max<int64_t>(rows, 1));
  Buffer<float> workspace(ctx, MemTag::workspace, static_cast<size_t>(zrows * chunk));
  if (!ctx.on_gpu())
    return host_stream_topk(rows, k, block_rows, n, chunk, label_offset, workspace.data(),
                            begin_block, score);
  // The device form (the header's first comment).
  gpu::check_topk_k(k);
  const auto s = ctx.cuda().stream();
  const auto rk = static_cast<size_t>(rows * k);
  TopK out = TopK::padded(rows, k);
  if (rk == 0) return out;
  auto& ledger = ctx.ledger();
  gpu::DeviceBuffer<float> run_s(ledger, MemTag::workspace, rk), tmp_s(ledger, MemTag::workspace, rk);
  gpu::DeviceBuffer<uint32_t> run_l(ledger, MemTag::workspace, rk),
      tmp_l(ledger, MemTag::workspace, rk);
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    const int64_t br = std::min(block_rows, rows - r0);
    const auto off = static_cast<size_t>(r0 * k);
    gpu::topk_reset(run_s.data() + off, run_l.data() + off, br, k, s);
    if (begin_block) begin_block(r0, br);
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
      const int64_t c = std::min(chunk, n - c0);
      const Matrix z(workspace.data(), br, c);
      score(c0, z);
      gpu::topk_merge_chunk(z.data, br, c, c, k, label_offset + c0, tmp_s.data() + off,
                            tmp_l.data() + off, run_s.data() + off, run_l.data() + off, s);
    }
    ctx.synchronize();  // temporaries of begin_block may be freed after the block
  }
  run_s.download(out.scores.data(), rk, s);
  run_l.download(out.labels.data(), rk, s);
  ctx.synchronize();
  for (size_t i = 0; i < rk; ++i)
    if (out.labels[i] == TopK::kNoLabel) out.scores[i] = -std::numeric_limits<float>::infinity();
  return out;
}

TopK host_stream_topk(int64_t rows, int k, int64_t block_rows, int64_t n, int64_t chunk,
                      int64_t label_offset, float* workspace,
                      const std::function<void(int64_t, int64_t)>& begin_block,
                      const std::function<void(int64_t, Matrix)>& score) {
  TopK out = TopK::padded(rows, k);
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    const int64_t nr = std::min(block_rows, rows - r0);
    TopKAccumulator acc(nr, k);
    if (begin_block) begin_block(r0, nr);
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
      const int64_t c = std::min(chunk, n - c0);
      const Matrix zc(workspace, nr, c);
      score(c0, zc);
      acc.add_chunk(zc, label_offset + c0);
    }
    const TopK part = acc.result();
    std::copy(part.labels.begin(), part.labels.end(), out.labels.begin() + r0 * k);
    std::copy(part.scores.begin(), part.scores.end(), out.scores.begin() + r0 * k);
  }
  return out;
}

}  // namespace xmc
