#include "layers/output_layer.h"

#include <algorithm>
#include <variant>
#include <vector>

#include "core/error.h"
#include "core/resources.h"

namespace xmc {

OutputLayer::OutputLayer(const LayerInit& init, int64_t lo, int64_t hi)
    : input_dim_(init.input_dim),
      num_labels_(init.num_labels),
      lo_(lo),
      hi_(hi),
      eval_rows_(init.eval_rows()),
      shape_(LayerShape::of(init)) {
  shape_.label_lo = lo;
  shape_.label_hi = hi;
  XMC_CHECK(input_dim_ > 0 && num_labels_ > 0 && 0 <= lo && lo < hi && hi <= num_labels_,
            "output layer d={} L={} range [{}, {})", input_dim_, num_labels_, lo, hi);
}

StepStats OutputLayer::train_step(const Batch& batch, ConstMatrix h, Matrix dh,
                                  const LrState& lr) {
  XMC_CHECK(h.rows == batch.size() && h.cols == input_dim_,
            "train_step: h is [{}×{}], expected [{}×{}]", h.rows, h.cols, batch.size(),
            input_dim_);
  XMC_CHECK(dh.rows == h.rows && dh.cols == h.cols, "train_step: dh is [{}×{}], expected [{}×{}]",
            dh.rows, dh.cols, h.rows, h.cols);
  XMC_CHECK(batch.labels.rows == h.rows && batch.labels.cols == num_labels_,
            "train_step: labels are [{}×{}], expected [{}×{}]", batch.labels.rows,
            batch.labels.cols, h.rows, num_labels_);
  XMC_CHECK(lr.step >= 1, "train_step: step {} must be >= 1", lr.step);
  Stopwatch sw;
  StepStats s = train_step_impl(batch, h, dh, lr);
  s.seconds = sw.seconds();
  return s;
}

void OutputLayer::init_bias(std::span<const float> bias) {
  XMC_CHECK(static_cast<int64_t>(bias.size()) == num_labels_,
            "init_bias: {} values for {} labels", bias.size(), num_labels_);
  sync_state(StateSync::to_host);
  std::vector<TensorRef> refs = state_impl();
  init_bias_impl(refs, bias);
  sync_state(StateSync::to_device);
}

void OutputLayer::init_bias_impl(std::vector<TensorRef>& refs, std::span<const float> bias) {
  const auto is_bias = [&](const TensorRef& r) {
    return r.name.ends_with("/bias") && r.shape == std::vector<int64_t>{hi_ - lo_} &&
           std::holds_alternative<float*>(r.data);
  };
  const auto n = std::count_if(refs.begin(), refs.end(), is_bias);
  XMC_CHECK(n == 1, "init_bias: the layer's state has {} label-bias tensors, expected 1", n);
  const TensorRef& r = *std::find_if(refs.begin(), refs.end(), is_bias);
  std::copy(bias.begin() + lo_, bias.begin() + hi_, std::get<float*>(r.data));
}

namespace {
// The "output/weight" tensor of label rows over the whole input, or nullptr.
const TensorRef* weight_rows(const std::vector<TensorRef>& refs, int64_t rows, int64_t d) {
  const TensorRef* found = nullptr;
  for (const TensorRef& r : refs) {
    if (r.name == "output/indices") return nullptr;  // fan-in weights: a subset of inputs each
    if (r.name == "output/weight" && r.shape == std::vector<int64_t>{rows, d} &&
        std::holds_alternative<float*>(r.data))
      found = &r;
  }
  return found;
}
}  // namespace

void OutputLayer::init_weight_rows(ConstMatrix w, std::span<const int64_t> labels) {
  XMC_CHECK(w.rows == num_labels_ && w.cols == input_dim_,
            "init_weight_rows: w [{}×{}] for {} labels × d = {}", w.rows, w.cols, num_labels_,
            input_dim_);
  sync_state(StateSync::to_host);
  const std::vector<TensorRef> refs = state_impl();
  const TensorRef* r = weight_rows(refs, hi_ - lo_, input_dim_);
  XMC_CHECK(r != nullptr, "init_weight_rows: no output/weight [{}×{}]", hi_ - lo_, input_dim_);
  float* dst = std::get<float*>(r->data);
  for (const int64_t l : labels)
    if (l >= lo_ && l < hi_)
      std::copy(w.row(l), w.row(l) + input_dim_, dst + (l - lo_) * input_dim_);
  sync_state(StateSync::to_device);
}

TopK OutputLayer::topk(ConstMatrix h, int k) const {
  XMC_CHECK(h.cols == input_dim_, "topk: h has {} columns, expected {}", h.cols, input_dim_);
  XMC_CHECK(k >= 1, "topk: k={} must be >= 1", k);
  return topk_impl(h, k);
}

void OutputLayer::scores(ConstMatrix h, Matrix out) const {
  XMC_CHECK(h.cols == input_dim_ && out.rows == h.rows && out.cols == hi_ - lo_,
            "scores: h [{}×{}], out [{}×{}], expected out [{}×{}]", h.rows, h.cols, out.rows,
            out.cols, h.rows, hi_ - lo_);
  for (int64_t r0 = 0; r0 < h.rows; r0 += eval_rows_) {
    const int64_t rows = std::min(eval_rows_, h.rows - r0);
    scores_impl(h.rows_range(r0, rows), lo_, out.rows_range(r0, rows));
  }
}

}  // namespace xmc
