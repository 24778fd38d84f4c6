#pragma once
// Checkpoints of label-sharded runs (mpirun, docs/distributed.md). Rank 0's file is the
// run's checkpoint.h5: its own shard (meta, encoder, its labels' output state) plus the
// index — meta/shards = N, meta/shard_ranges = [lo0, hi0, lo1, hi1, ...], meta/shard_step.
// Rank r > 0 writes checkpoint.s<step>.r<r>.h5 beside it. The set is committed by rank 0's
// atomic rename of checkpoint.h5, after every other shard of that step is on disk, so a
// crash at any point leaves the previous complete set; older shard files go after it.
#include <cstdint>
#include <filesystem>
#include <vector>

#include "dist/comm.h"
#include "train/checkpoint.h"

namespace xmc {

struct ShardIndex {
  int processes = 1;  // 1: a one-process checkpoint (no index)
  int64_t step = 0;
  std::vector<LabelRange> ranges;  // [processes]
};

// The index of a checkpoint over num_labels labels (processes 1 for a one-process
// checkpoint); InputError for a malformed one — its ranges must be non-empty, consecutive
// and cover [0, num_labels).
ShardIndex read_shard_index(const CheckpointReader& r, int64_t num_labels);
void write_shard_index(CheckpointWriter& w, const ShardIndex& index);
// The file of rank `rank`'s shard at `step` beside the index file `index` (rank 0: index).
std::filesystem::path shard_file(const std::filesystem::path& index, int64_t step, int rank);

}  // namespace xmc
