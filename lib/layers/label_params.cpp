#include "layers/label_params.h"

#include "core/error.h"
#include "ops/optimizer.h"

namespace xmc {

namespace {
OptimizerConfig without_decay(OptimizerConfig c) {
  c.weight_decay = 0.0;
  return c;
}
}  // namespace

void refuse_dense_only_state(const OptimizerConfig& optim) {
  if (optim.rowwise || optim.kahan)
    throw_input(
        "optim.output.{}: {} is for the dense label weights (backends dense and bottleneck); "
        "this layer updates rows lazily or rewires them",
        optim.rowwise ? "rowwise" : "kahan",
        optim.rowwise ? "the row-wise second moment" : "Kahan compensation");
}

LabelParams::LabelParams(Context& ctx, const OptimizerConfig& optim, int64_t rows_, int64_t cols_,
                         Precision precision)
    : rows(rows_), cols(cols_) {
  const auto wn = static_cast<size_t>(rows * cols);
  const auto n = static_cast<size_t>(rows);
  const bool bf16_state = optim.state_precision == StatePrecision::bf16;
  if (bf16_state && precision != Precision::bf16)
    throw_input(
        "optim.output.state_precision: bf16 optimizer state needs bf16 weights "
        "(model.output.precision: bf16, {} given; backends dense, bottleneck and group_shared)",
        to_string(precision));
  if (optim.rowwise && (optim.type == OptimizerType::sgd || optim.beta1 != 0.0))
    throw_input(
        "optim.output.rowwise: the row-wise second moment is Adam's without a first moment "
        "(type adam or adamw with beta1: 0; type {} beta1 {} given)",
        to_string(optim.type), optim.beta1);
  if (optim.kahan && precision == Precision::fp32)
    throw_input(
        "optim.output.kahan: Kahan compensation keeps what the rounding of bf16 or fp8 label "
        "weights drops (model.output.precision: bf16 or fp8, backends dense and bottleneck; "
        "fp32 given)");
  w = WeightArray(ctx, precision, wn, MemTag::weights, cols);
  if (optim.kahan) w_comp = WeightArray(ctx, Precision::bf16, wn, MemTag::optimizer);
  b = Buffer<float>(ctx, MemTag::weights, n);
  if (optim.rowwise) {  // one fp32 second moment per row
    w_s2 = WeightArray(ctx, Precision::fp32, n, MemTag::optimizer);
  } else {
    const Precision state = bf16_state ? Precision::bf16 : Precision::fp32;
    if (optimizer_keeps(optim, 1)) w_s1 = WeightArray(ctx, state, wn, MemTag::optimizer);
    if (optimizer_keeps(optim, 2)) w_s2 = WeightArray(ctx, state, wn, MemTag::optimizer);
  }
  b_s1 = optimizer_state_buffer(ctx, optim, 1, n);
  b_s2 = optimizer_state_buffer(ctx, optim, 2, n);
}

void LabelParams::update(const Context& ctx, const OptimizerConfig& optim, double lr,
                         int64_t step, int64_t r0, int64_t n, const float* dw, const float* db,
                         uint64_t rounding_key) {
  const int64_t off = r0 * cols;
  w.update(ctx, optim, lr, step, static_cast<size_t>(off), dw, w_s1, w_s2, n * cols, cols,
           rounding_key, w_comp);
  optimizer_update(ctx, without_decay(optim), lr, step, b.data() + r0, db,
                   data_or_null(b_s1, r0), data_or_null(b_s2, r0), n);
}

void LabelParams::update_rows(const Context& ctx, const OptimizerConfig& optim, double lr,
                              int64_t step, const uint32_t* ids, int64_t count, const float* dw,
                              const float* db) {
  XMC_CHECK(w.precision() == Precision::fp32 && !w_s1.bf16() && !w_s2.bf16(),
            "row updates of {} label weights", to_string(w.precision()));
  optimizer_update_rows(ctx, optim, lr, step, w.f32(), dw, w_s1.empty() ? nullptr : w_s1.f32(),
                        w_s2.empty() ? nullptr : w_s2.f32(), ids, count, cols);
  optimizer_update_rows(ctx, without_decay(optim), lr, step, b.data(), db, data_or_null(b_s1),
                        data_or_null(b_s2), ids, count, 1);
}

std::vector<TensorRef> LabelParams::refs(const std::string& prefix) {
  std::vector<TensorRef> out = {{prefix + "weight", {rows, cols}, w.host_data()},
                                {prefix + "bias", {rows}, b.host_data()}};
  if (!w_s1.empty()) {
    out.push_back({prefix + "weight_opt1", {rows, cols}, w_s1.host_data()});
    out.push_back({prefix + "bias_opt1", {rows}, b_s1.host_data()});
  }
  if (!w_s2.empty()) {
    const bool per_row = static_cast<int64_t>(w_s2.size()) != rows * cols;  // rowwise: [rows]
    out.push_back({prefix + "weight_opt2",
                   per_row ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, cols},
                   w_s2.host_data()});
    out.push_back({prefix + "bias_opt2", {rows}, b_s2.host_data()});
  }
  if (!w_comp.empty()) out.push_back({prefix + "weight_kahan", {rows, cols}, w_comp.host_data()});
  return out;
}

void LabelParams::sync(StateSync s) {
  for (WeightArray* x : {&w, &w_s1, &w_s2, &w_comp}) x->sync(s);
  for (Buffer<float>* x : {&b, &b_s1, &b_s2}) x->sync(s);
}

LayerBytes LabelParams::planned_bytes(const OptimizerConfig& optim, int64_t rows, int64_t cols,
                                      Precision precision) {
  const double n = static_cast<double>(rows), wn = n * static_cast<double>(cols);
  const double bias_state = 4.0 * optimizer_state_arrays(optim) * n;
  const double weight_state =
      optim.rowwise ? 4.0 * n : optimizer_state_arrays(optim) * state_slot_bytes(optim) * wn;
  // fp8: one fp32 scale per row beside the codes
  const double scales = precision == Precision::fp8 ? 4.0 * n : 0.0;
  const double kahan = optim.kahan ? 2.0 * wn : 0.0;  // bf16 compensation
  return {.params = weight_bytes(precision) * wn + scales + 4.0 * n,
          .optimizer = weight_state + kahan + bias_state};
}

}  // namespace xmc
