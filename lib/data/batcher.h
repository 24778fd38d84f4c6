#pragma once
// Batcher: cuts a Dataset into mini-batches for one epoch at a time, optionally in a
// shuffled order that depends only on (seed, epoch), so a resumed run sees the same batches.
#include <cstdint>
#include <span>
#include <vector>

#include "data/batch.h"
#include "data/dataset.h"

namespace xmc {

// Copies rows `ids` of ds into out (reusing its buffers): sparse_x [B×D] with values or
// dense_x [B×D], labels [B×L] pattern only. Throws xmc::Error for an id outside [0, N).
void gather_batch(const Dataset& ds, std::span<const int64_t> ids, Batch& out);

class Batcher {
 public:
  // batch_size >= 1 (InputError otherwise). The dataset must outlive the Batcher.
  Batcher(const Dataset& ds, int64_t batch_size, uint64_t seed, bool shuffle);

  // Order for this epoch: a permutation from Rng::stream(seed, epoch) when shuffling,
  // else 0..N-1. Must be called before next().
  void start_epoch(int64_t epoch);
  // The next batch of the epoch (the last one may be smaller); false when the epoch is done.
  bool next(Batch& out);
  // Skips the next `batches` batches of the epoch (resuming a checkpoint taken mid-epoch).
  void skip(int64_t batches);

  int64_t batches_per_epoch() const;
  // Row order of the current epoch, [N].
  const std::vector<int64_t>& order() const { return order_; }

 private:
  const Dataset& ds_;
  int64_t batch_size_;
  uint64_t seed_;
  bool shuffle_;
  std::vector<int64_t> order_;
  int64_t pos_ = 0;
  bool started_ = false;
};

}  // namespace xmc
