#pragma once
// What every backend's factory receives besides its own config.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/context.h"
#include "core/error.h"
#include "ops/optimizer.h"

namespace xmc {

class Comm;

// The part of a per-point budget of k labels (drawn over all L labels) that a process
// holding n of them draws: k itself when n = L, else ⌈k·n/L⌉.
inline int64_t label_share(int64_t k, int64_t n, int64_t num_labels) {
  return n == num_labels ? k : (k * n + num_labels - 1) / num_labels;
}

struct LayerInit {
  Context* ctx = nullptr;
  int64_t input_dim = 0;            // d
  int64_t num_labels = 0;           // L
  int64_t batch_size = 0;           // largest batch train_step will see (workspace size)
  OptimizerConfig optim;            // the output layer's optimizer
  uint64_t seed = 0;
  std::vector<int64_t> label_freq;  // training count per label [L]
  int64_t total_steps = 0;          // planned steps of the run (rewiring schedules)
  int64_t num_train = 0;            // training points N (per-point state, e.g. ANNS negatives)
  // The labels [label_lo, label_end()) this process trains in a label-sharded run (mpirun,
  // lib/dist); all of them otherwise. A backend that can train a shard builds its
  // OutputLayer over this range; create_output_layer refuses the others.
  int64_t label_lo = 0;
  int64_t label_hi = -1;  // -1: num_labels
  int64_t label_end() const { return label_hi < 0 ? num_labels : label_hi; }
  // The processes of a label-sharded run (each holding one range), nullptr for one process:
  // what a backend needs to combine label-wide quantities (softmax's normaliser, the
  // gradients of parameters every label shares).
  Comm* comm = nullptr;
  // Which of the label shards this is, of how many (label-sharded run, or a part of a
  // checkpoint set): a backend whose shard is not the contiguous [label_lo, label_hi)
  // (group_shared) splits its own arrangement by them.
  int shard = 0;
  int shards = 1;
  // A part of a checkpoint set loaded for evaluation only (layers/shard_set.h): no
  // processes to train with.
  bool inference_only = false;
  // comm when this process trains only part of the labels, nullptr when it holds them all
  // or only evaluates (a training part without its processes is a bug: checked).
  Comm* shard_comm() const {
    if (inference_only || (label_lo == 0 && label_end() == num_labels)) return nullptr;
    XMC_CHECK(comm != nullptr, "labels [{}, {}) of {} without the other processes", label_lo,
              label_end(), num_labels);
    return comm;
  }
  // A per-point budget of k labels drawn over all labels (sampled negatives), this
  // process's part of it: k itself in one process, ⌈k·(its labels)/L⌉ in a label-sharded
  // run, so that the processes together draw about k.
  int64_t shard_share(int64_t k) const {
    return label_share(k, label_end() - label_lo, num_labels);
  }
  // Rows per evaluation block (scores and top-k): all of them on the CPU, the batch size on
  // the GPU, whose workspaces are sized for it.
  int64_t eval_rows() const {
    return ctx != nullptr && ctx->on_gpu() ? std::max<int64_t>(batch_size, 1)
                                           : std::numeric_limits<int64_t>::max();
  }
};

}  // namespace xmc
