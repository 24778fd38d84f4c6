#include "ops/sampled.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace xmc::ops {

EntryGroupsBuffers group_entries_by_label(const CandidateCsr& cand, int64_t num_labels) {
  XMC_CHECK(cand.indptr[cand.rows] == cand.nnz, "candidates: indptr ends at {}, nnz {}",
            cand.indptr[cand.rows], cand.nnz);
  std::vector<uint32_t> row_of(static_cast<size_t>(cand.nnz));
  for (int64_t b = 0; b < cand.rows; ++b)
    for (int64_t e = cand.indptr[b]; e < cand.indptr[b + 1]; ++e) {
      XMC_CHECK(cand.labels[e] < num_labels, "candidate label {} of row {} >= {} labels",
                cand.labels[e], b, num_labels);
      row_of[static_cast<size_t>(e)] = static_cast<uint32_t>(b);
    }
  EntryGroupsBuffers out;
  out.entry.resize(static_cast<size_t>(cand.nnz));
  std::iota(out.entry.begin(), out.entry.end(), int64_t{0});
  // Entries of a row are ascending, so a stable sort by label keeps rows ascending.
  std::stable_sort(out.entry.begin(), out.entry.end(),
                   [&](int64_t a, int64_t b) { return cand.labels[a] < cand.labels[b]; });
  out.row.resize(out.entry.size());
  for (size_t i = 0; i < out.entry.size(); ++i) {
    const int64_t e = out.entry[i];
    out.row[i] = row_of[static_cast<size_t>(e)];
    if (i == 0 || cand.labels[e] != cand.labels[out.entry[i - 1]]) {
      if (i > 0) out.ptr.push_back(static_cast<int64_t>(i));
      out.labels.push_back(cand.labels[e]);
    }
  }
  if (!out.entry.empty()) out.ptr.push_back(static_cast<int64_t>(out.entry.size()));
  return out;
}

void sampled_scores(const Context& ctx, const float* w, const float* bias, int64_t d,
                    const CandidateCsr& cand, ConstMatrix h, float* scores) {
  XMC_CHECK(h.rows == cand.rows && h.cols == d && cand.nnz >= 0,
            "sampled scores: h [{}×{}], {} rows, d={}, nnz {}", h.rows, h.cols, cand.rows, d,
            cand.nnz);
  if (ctx.on_gpu()) {
    gpu::sampled_scores(ctx.cuda(), w, bias, d, cand, h, scores);
    return;
  }
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t b = 0; b < cand.rows; ++b) {
    const float* hb = h.row(b);
    for (int64_t e = cand.indptr[b]; e < cand.indptr[b + 1]; ++e) {
      const uint32_t l = cand.labels[e];
      const float* wl = w + int64_t{l} * d;
      float s = 0.0f;
      for (int64_t j = 0; j < d; ++j) s += wl[j] * hb[j];
      scores[e] = s + (bias ? bias[l] : 0.0f);
    }
  }
}

void sampled_input_grad(const Context& ctx, const float* w, int64_t d, const CandidateCsr& cand,
                        const float* g, Matrix dh) {
  XMC_CHECK(dh.rows == cand.rows && dh.cols == d,
            "sampled input gradient: dh [{}×{}], {} rows, d={}", dh.rows, dh.cols, cand.rows, d);
  if (ctx.on_gpu()) {
    gpu::sampled_input_grad(ctx.cuda(), w, d, cand, g, dh);
    return;
  }
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t b = 0; b < cand.rows; ++b) {
    float* db = dh.row(b);
    for (int64_t e = cand.indptr[b]; e < cand.indptr[b + 1]; ++e) {
      const float ge = g[e];
      if (ge == 0.0f) continue;
      const float* wl = w + int64_t{cand.labels[e]} * d;
      for (int64_t j = 0; j < d; ++j) db[j] += ge * wl[j];
    }
  }
}

void sampled_weight_grad(const Context& ctx, const EntryGroups& groups, const float* g,
                         ConstMatrix h, Matrix dw, float* db) {
  XMC_CHECK(dw.rows == groups.groups && dw.cols == h.cols,
            "sampled weight gradient: dw [{}×{}], {} touched labels, h [{}×{}]", dw.rows, dw.cols,
            groups.groups, h.rows, h.cols);
  if (ctx.on_gpu()) {
    gpu::sampled_weight_grad(ctx.cuda(), groups, g, h, dw, db);
    return;
  }
  const int64_t d = h.cols;
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t u = 0; u < groups.groups; ++u) {
    float* out = dw.row(u);
    std::fill(out, out + d, 0.0f);
    float sb = 0.0f;
    for (int64_t i = groups.ptr[u]; i < groups.ptr[u + 1]; ++i) {
      const float ge = g[groups.entry[i]];
      sb += ge;
      if (ge == 0.0f) continue;
      const float* hr = h.row(groups.row[i]);
      for (int64_t j = 0; j < d; ++j) out[j] += ge * hr[j];
    }
    if (db) db[u] = sb;
  }
}

void gather_rows(const Context& ctx, const float* src, const uint32_t* rows, int64_t count,
                 int64_t width, float* dst) {
  if (ctx.on_gpu()) {
    gpu::gather_rows(ctx.cuda(), src, rows, count, width, dst);
    return;
  }
  for (int64_t u = 0; u < count; ++u)
    std::copy(src + int64_t{rows[u]} * width, src + (int64_t{rows[u]} + 1) * width,
              dst + u * width);
}

namespace {
void check_draw(const CandidateDraw& c, int64_t rows, int64_t cap) {
  XMC_CHECK(rows >= 0 && cap >= 0 && c.labels > 0 && c.k_h >= 0 && c.k_r >= 0 &&
                c.labels <= int64_t{kNoCandidate},
            "candidate draw: {} rows × {} slots, {} labels, k_h={} k_r={}", rows, cap, c.labels,
            c.k_h, c.k_r);
  XMC_CHECK(c.hard == nullptr || c.points >= 0, "candidate draw: a hard table of {} points",
            c.points);
}
}  // namespace

void draw_candidates(const Context& ctx, const CandidateDraw& c, const int64_t* ids,
                     const int64_t* pos_ptr, const uint32_t* pos, int64_t rows, int64_t cap,
                     uint32_t* label, uint8_t* positive, float* weight, int64_t* count) {
  check_draw(c, rows, cap);
  if (ctx.on_gpu()) {
    if (rows > 0)
      gpu::draw_candidates(ctx.cuda(), c, ids, pos_ptr, pos, rows, cap, label, positive, weight,
                           count);
    return;
  }
  // The CPU: every row must fit its slots (refused, not marked), rows in parallel.
  for (int64_t b = 0; b < rows; ++b)
    XMC_CHECK(candidate_slots(c, pos_ptr[b + 1] - pos_ptr[b]) <= cap,
              "candidate draw: row {} needs {} slots, {} reserved", b,
              candidate_slots(c, pos_ptr[b + 1] - pos_ptr[b]), cap);
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t at = b * cap;
    count[b] = draw_point_candidates(c, ids[b], pos + pos_ptr[b], pos_ptr[b + 1] - pos_ptr[b],
                                     label + at, positive + at, weight + at);
  }
}

int64_t group_entries_by_label(Context& ctx, const CandidateCsr& cand, int64_t num_labels,
                               Buffer<uint8_t>& scratch, const EntryGroupsOut& out) {
  XMC_CHECK(cand.rows >= 0 && cand.nnz >= 0 && num_labels > 0 &&
                num_labels <= int64_t{std::numeric_limits<uint32_t>::max()},
            "grouping {} entries of {} rows by {} labels", cand.nnz, cand.rows, num_labels);
  if (!ctx.on_gpu()) {
    const EntryGroupsBuffers g = group_entries_by_label(cand, num_labels);
    std::copy(g.labels.begin(), g.labels.end(), out.labels);
    std::copy(g.ptr.begin(), g.ptr.end(), out.ptr);
    std::copy(g.entry.begin(), g.entry.end(), out.entry);
    std::copy(g.row.begin(), g.row.end(), out.row);
    return static_cast<int64_t>(g.labels.size());
  }
  if (cand.nnz == 0) {
    const int64_t zero = 0;
    gpu::copy_to_device(out.ptr, &zero, sizeof(zero), ctx.cuda().stream());
    return 0;
  }
  size_t bytes = 0;
  gpu::group_scratch_bytes(cand.nnz, num_labels, &bytes);
  ensure_size(scratch, ctx, MemTag::workspace, static_cast<int64_t>(bytes));
  int64_t groups = 0;
  gpu::group_entries_by_label(ctx.cuda(), cand, num_labels, scratch.data(), scratch.size(), out,
                              &groups);
  return groups;
}

int64_t compact_candidates(Context& ctx, int64_t rows, int64_t cap, const uint32_t* label,
                           const uint8_t* positive, const float* weight, const int64_t* count,
                           Buffer<uint8_t>& scratch, int64_t* indptr, uint32_t* out_label,
                           uint8_t* out_positive, float* out_weight) {
  XMC_CHECK(rows >= 0 && cap >= 0, "compacting {} rows of {} slots", rows, cap);
  if (ctx.on_gpu()) {
    if (rows == 0) {
      const int64_t zero = 0;
      gpu::copy_to_device(indptr, &zero, sizeof(zero), ctx.cuda().stream());
      return 0;
    }
    size_t bytes = 0;
    gpu::compact_scratch_bytes(rows, &bytes);
    ensure_size(scratch, ctx, MemTag::workspace, static_cast<int64_t>(bytes));
    int64_t nnz = 0;
    gpu::compact_candidates(ctx.cuda(), rows, cap, label, positive, weight, count, scratch.data(),
                            scratch.size(), indptr, out_label, out_positive, out_weight, &nnz);
    return nnz;
  }
  indptr[0] = 0;
  for (int64_t b = 0; b < rows; ++b) {
    XMC_CHECK(count[b] >= 0 && count[b] <= cap, "row {} holds {} of {} slots", b, count[b], cap);
    const int64_t at = b * cap, n = count[b], to = indptr[b];
    std::copy(label + at, label + at + n, out_label + to);
    std::copy(positive + at, positive + at + n, out_positive + to);
    if (weight != nullptr) std::copy(weight + at, weight + at + n, out_weight + to);
    indptr[b + 1] = to + n;
  }
  return indptr[rows];
}

namespace {
// The packed upload, in 8-byte words: indptr [rows+1], group ptr [groups+1], group entry
// [nnz] (int64), then labels [nnz], group labels [groups], group rows [nnz] (uint32).
int64_t pack_words(int64_t rows, int64_t nnz, int64_t groups) {
  return (rows + 1) + (groups + 1) + nnz + (2 * nnz + groups + 1) / 2;
}
}  // namespace

double CandidateStaging::planned_bytes(bool gpu, int64_t rows, int64_t nnz, int64_t groups) {
  return gpu ? 8.0 * static_cast<double>(std::max<int64_t>(pack_words(rows, nnz, groups), 1)) : 0.0;
}

CandidateStaging::CandidateStaging(Context& ctx, int64_t rows, int64_t nnz, int64_t groups)
    : ctx_(&ctx) {
  if (ctx.on_gpu()) ensure_size(pack_, ctx, MemTag::workspace, pack_words(rows, nnz, groups));
}

CandidateCsr CandidateStaging::stage(const CandidateCsr& cand, const EntryGroupsBuffers* groups,
                                     EntryGroups* out_groups) {
  XMC_CHECK(cand.rows >= 0 && cand.nnz >= 0 && cand.indptr[cand.rows] == cand.nnz,
            "candidate CSR with {} rows ends at {}, nnz {}", cand.rows,
            cand.rows >= 0 ? cand.indptr[cand.rows] : -1, cand.nnz);
  XMC_CHECK(ctx_ != nullptr, "candidate staging without a Context");
  const int64_t ng = groups ? static_cast<int64_t>(groups->labels.size()) : 0;
  if (groups)
    XMC_CHECK(static_cast<int64_t>(groups->entry.size()) == cand.nnz &&
                  static_cast<int64_t>(groups->ptr.size()) == ng + 1,
              "grouping of {} entries / {} pointers for nnz {}, {} labels", groups->entry.size(),
              groups->ptr.size(), cand.nnz, ng);
  if (!ctx_->on_gpu()) {
    if (out_groups) *out_groups = groups->view();
    return cand;
  }
  const int64_t words = pack_words(cand.rows, cand.nnz, ng);
  ensure_size(pack_, *ctx_, MemTag::workspace, words);
  host_.resize(static_cast<size_t>(words));
  // Filled in pack_words' layout (memcpy: the uint32 part is written through bytes); put()
  // appends count elements of src (their slot left as it was when src is null) and returns
  // where they will be on the device.
  auto* base = reinterpret_cast<char*>(host_.data());
  const auto* dev = reinterpret_cast<const char*>(pack_.data());
  size_t off = 0;
  auto put = [&]<class T>(const T* src, int64_t count) {
    const size_t at = off;
    off += sizeof(T) * static_cast<size_t>(count);
    if (src) std::memcpy(base + at, src, off - at);
    return reinterpret_cast<const T*>(dev + at);
  };
  const int64_t* indptr = put(cand.indptr, cand.rows + 1);
  const int64_t* gptr = put(groups ? groups->ptr.data() : nullptr, ng + 1);
  const int64_t* gentry = put(groups ? groups->entry.data() : nullptr, cand.nnz);
  const uint32_t* labels = put(cand.labels, cand.nnz);
  const uint32_t* glabels = put(groups ? groups->labels.data() : nullptr, ng);
  const uint32_t* grow = put(groups ? groups->row.data() : nullptr, cand.nnz);
  pack_.copy_from_host(host_.data(), static_cast<size_t>(words));
  if (out_groups) *out_groups = {glabels, gptr, gentry, grow, ng, cand.nnz};
  return {indptr, labels, cand.rows, cand.nnz};
}

}  // namespace xmc::ops
