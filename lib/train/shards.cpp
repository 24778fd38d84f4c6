#include "train/shards.h"

#include <fmt/format.h>

#include "core/error.h"

namespace xmc {

ShardIndex read_shard_index(const CheckpointReader& r, int64_t num_labels) {
  ShardIndex idx;
  if (!r.has("meta/shards")) {
    idx.ranges = {{0, num_labels}};
    return idx;
  }
  const auto n = r.read_i64("meta/shards");
  const auto ranges = r.read_i64("meta/shard_ranges");
  const auto step = r.read_i64("meta/shard_step");
  if (n.size() != 1 || n[0] < 1 || step.size() != 1 ||
      ranges.size() != static_cast<size_t>(2 * n[0]))
    throw_input("{}: malformed shard index (meta/shards, meta/shard_ranges, meta/shard_step)",
                r.path());
  idx.processes = static_cast<int>(n[0]);
  idx.step = step[0];
  for (int s = 0; s < idx.processes; ++s) {
    const LabelRange g{ranges[static_cast<size_t>(2 * s)], ranges[static_cast<size_t>(2 * s + 1)]};
    const int64_t lo = s == 0 ? 0 : idx.ranges.back().hi;
    if (g.lo != lo || g.hi <= g.lo || (s + 1 == idx.processes && g.hi != num_labels))
      throw_input("{}: malformed shard index: shard {} holds labels [{}, {}) of {}", r.path(), s,
                  g.lo, g.hi, num_labels);
    idx.ranges.push_back(g);
  }
  return idx;
}

void write_shard_index(CheckpointWriter& w, const ShardIndex& index) {
  std::vector<int64_t> flat;
  for (const auto& r : index.ranges) flat.insert(flat.end(), {r.lo, r.hi});
  w.write_i64("meta/shards", {index.processes});
  w.write_i64("meta/shard_ranges", flat);
  w.write_i64("meta/shard_step", {index.step});
}

std::filesystem::path shard_file(const std::filesystem::path& index, int64_t step, int rank) {
  if (rank == 0) return index;
  return index.parent_path() / fmt::format("checkpoint.s{}.r{}.h5", step, rank);
}

}  // namespace xmc
