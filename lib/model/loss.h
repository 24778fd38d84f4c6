#pragma once
// Losses over label chunks. Reduction: sum over labels, mean over the batch. Targets are
// the batch's positive labels (CSR, global ids, sorted within a row). Backends call these
// per label chunk [lo, lo+c) so a B×L logit matrix never exists.
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/matrix.h"
#include "kernels/op_settings.h"  // LossType

namespace xmc {

LossType parse_loss(std::string_view name);  // throws InputError naming the known ones
std::string_view to_string(LossType t);

// Elementwise losses (bce, squared_hinge) on one chunk.
// logits [B×c] for labels [lo, lo+c); on return holds dLoss/dlogit already divided by B
// (batch_size). Returns the chunk's loss summed over its entries (not yet divided by B).
// squared_hinge: y in {-1,+1}, loss = max(0, 1 - y·z)^2; gradient exactly 0 when the
// margin is met. bce: log(1+exp(-y·z)), computed stably.
// zero_grads (optional): incremented by the number of exactly-zero gradient entries.
double elementwise_loss_grad(LossType type, Matrix logits, const CsrMatrix& targets,
                             int64_t lo, int64_t batch_size, int64_t* zero_grads = nullptr);

// Softmax with multi-label targets t = 1/|y| on the positives (rows with no positives
// contribute nothing). Two passes over the chunks:
//   1. softmax_accumulate(logits chunk, stats) for every chunk -> per-row running max and
//      sum of exp (online logsumexp);
//   2. softmax_loss_grad(logits chunk, stats, ...) for every chunk: writes the gradient
//      (softmax - t) / B into logits and returns this chunk's part of the loss
//      sum_l -t_l·log p_l (not yet divided by B).
struct SoftmaxStats {
  std::vector<double> max;     // [B], init -inf
  std::vector<double> sumexp;  // [B], relative to max
  explicit SoftmaxStats(int64_t batch = 0);
  double logsumexp(int64_t row) const;
};
void softmax_accumulate(ConstMatrix logits, SoftmaxStats& stats);
double softmax_loss_grad(Matrix logits, const SoftmaxStats& stats, const CsrMatrix& targets,
                         int64_t lo, int64_t batch_size);

}  // namespace xmc
