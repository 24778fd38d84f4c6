#include "ops/topk.h"

#include <algorithm>
#include <cmath>

#include "core/buffer.h"
#include "core/error.h"

namespace xmc {

TopK TopK::padded(int64_t rows, int k) {
  const auto n = static_cast<size_t>(rows * k);
  return {rows, k, std::vector<uint32_t>(n, kNoLabel),
          std::vector<float>(n, -std::numeric_limits<float>::infinity())};
}

TopKAccumulator::TopKAccumulator(int64_t rows, int k) : rows_(rows), k_(k) {
  if (k < 1) throw_input("top-k: k must be at least 1, got {}", k);
  if (rows < 0) throw_error("top-k: number of rows must be >= 0, got {}", rows);
  heap_.resize(static_cast<size_t>(rows * k));
  count_.assign(static_cast<size_t>(rows), 0);
}

bool TopKAccumulator::better(const Cand& a, const Cand& b) {
  return ranks_before(a.score, a.label, b.score, b.label);
}

// The row's heap is a max-heap under `better`: the worst kept candidate is its top.
void TopKAccumulator::push(int64_t row, uint32_t label, float score) {
  Cand* h = heap_.data() + row * k_;
  int& n = count_[static_cast<size_t>(row)];
  if (n == k_) {
    if (!ranks_before(score, label, h[0].score, h[0].label)) return;
    std::pop_heap(h, h + n--, better);  // the worst leaves
  }
  h[n++] = {label, score};
  std::push_heap(h, h + n, better);
}

void TopKAccumulator::add(int64_t row, uint32_t label, float score) {
  XMC_CHECK(row >= 0 && row < rows_, "row {} outside [0, {})", row, rows_);
  push(row, label, score);
}

void TopKAccumulator::add_chunk(ConstMatrix scores, int64_t lo) {
  XMC_CHECK(scores.rows == rows_, "score chunk has {} rows, the accumulator {}", scores.rows,
            rows_);
  XMC_CHECK(lo >= 0 && lo + scores.cols <= static_cast<int64_t>(TopK::kNoLabel),
            "label range [{}, {}) does not fit uint32 label ids", lo, lo + scores.cols);
  const int64_t c = scores.cols;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows_; ++r) {
    const float* s = scores.row(r);
    for (int64_t j = 0; j < c; ++j) push(r, static_cast<uint32_t>(lo + j), s[j]);
  }
}

TopK TopKAccumulator::result() const {
  TopK out = TopK::padded(rows_, k_);
  std::vector<Cand> row;
  for (int64_t r = 0; r < rows_; ++r) {
    const Cand* h = heap_.data() + r * k_;
    row.assign(h, h + count_[static_cast<size_t>(r)]);
    std::sort_heap(row.begin(), row.end(), better);  // best first
    for (size_t i = 0; i < row.size(); ++i) {
      out.row_labels(r)[i] = row[i].label;
      out.row_scores(r)[i] = row[i].score;
    }
  }
  return out;
}

TopK topk_from_csr(const CsrMatrix& pred, int k) {
  TopKAccumulator acc(pred.rows, k);
#pragma omp parallel for schedule(dynamic, 256)
  for (int64_t r = 0; r < pred.rows; ++r) {
    const uint32_t* idx = pred.row_indices(r);
    const float* val = pred.row_values(r);
    for (int64_t j = 0; j < pred.row_nnz(r); ++j) acc.add(r, idx[j], val ? val[j] : 1.0f);
  }
  return acc.result();
}

TopK merge_topk(const TopK& a, const TopK& b) {
  if (a.rows != b.rows)
    throw_error("merge_topk: the lists cover {} and {} rows; they must be the same", a.rows,
                b.rows);
  TopK out = TopK::padded(a.rows, std::max(a.k, b.k));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < out.rows; ++r) {
    const uint32_t* la = a.row_labels(r);
    const float* sa = a.row_scores(r);
    const uint32_t* lb = b.row_labels(r);
    const float* sb = b.row_scores(r);
    uint32_t* lo = out.row_labels(r);
    float* so = out.row_scores(r);
    int i = 0, j = 0, n = 0;
    // Both inputs are sorted best first with padding last: a two-way merge.
    while (n < out.k) {
      const bool a_ok = i < a.k && la[i] != TopK::kNoLabel;
      const bool b_ok = j < b.k && lb[j] != TopK::kNoLabel;
      if (!a_ok && !b_ok) break;
      const bool from_a = a_ok && (!b_ok || ranks_before(sa[i], la[i], sb[j], lb[j]));
      const uint32_t l = from_a ? la[i] : lb[j];
      const float s = from_a ? sa[i++] : sb[j++];
      // The same label in both lists: its first (better) occurrence is already kept.
      if (std::find(lo, lo + n, l) != lo + n) continue;
      lo[n] = l;
      so[n] = s;
      ++n;
    }
  }
  return out;
}

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
  // The device form: the GPU's k limit, then the chunks merged on the device.
  gpu::check_topk_k(k);
  const auto s = ctx.cuda().stream();
  const auto rk = static_cast<size_t>(rows * k);
  TopK out = TopK::padded(rows, k);
  if (rk == 0) return out;
  auto& ledger = ctx.ledger();
  gpu::DeviceBuffer<float> run_s(ledger, MemTag::workspace, rk),
      tmp_s(ledger, MemTag::workspace, rk);
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

// Checked on the host in every build (with or without CUDA), so the error a user sees does
// not depend on how the binary was built.
void gpu::check_topk_k(int k) {
  if (k < 1 || k > kMaxTopK)
    throw_input(
        "the GPU top-k takes 1 <= k <= {} (eval.k plus the filter's most labels per point), "
        "got {}",
        kMaxTopK, k);
}

}  // namespace xmc
