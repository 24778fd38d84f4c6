#pragma once
// The streamed exact top-k of every backend's GPU path: rows in blocks of at most
// `block_rows`; for each block, `begin_block(r0, rows)` prepares its input (project, transpose, round; may be empty),
// then the labels [0, n) go in chunks of at most `chunk`, `score(c0, z)` writing the
// scores of labels [c0, c0 + z.cols) of the block into the DEVICE workspace z [rows×c]
// (z.data: `workspace`, at least block_rows·chunk floats), merged on the device into a
// running top-k (gpu::topk_merge_chunk) under the label ids label_offset + c0 + column.
// One download at the end; pads are (TopK::kNoLabel, -inf) as on the CPU, ties to the
// lower id. k is checked against gpu::kMaxTopK.
#include <cstdint>
#include <functional>

#include "core/context.h"
#include "core/matrix.h"
#include "eval/topk.h"

namespace xmc {

// The same on the host, scores written into the HOST workspace (at least
// min(block_rows, rows)·chunk floats), merged by TopKAccumulator (eval/topk.h) chunk by
// chunk in label order (equal scores to the lower id). chunk <= n.
TopK host_stream_topk(int64_t rows, int k, int64_t block_rows, int64_t n, int64_t chunk,
                      int64_t label_offset, float* workspace,
                      const std::function<void(int64_t r0, int64_t rows)>& begin_block,
                      const std::function<void(int64_t c0, Matrix z)>& score);

// The same on the Context's device: CUDA — the device form above with a workspace of
// min(block_rows, rows)·chunk floats (in the ledger); CPU — host_stream_topk with such a
// host workspace. score() writes DEVICE views on a CUDA Context.
TopK stream_topk(Context& ctx, int64_t rows, int k, int64_t block_rows, int64_t n, int64_t chunk,
                 int64_t label_offset,
                 const std::function<void(int64_t r0, int64_t rows)>& begin_block,
                 const std::function<void(int64_t c0, Matrix z)>& score);

}  // namespace xmc
