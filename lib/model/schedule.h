#pragma once
// Learning-rate schedules: a multiplier on each group's base lr.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/field_constraints.h"

namespace xmc {

XMC_NAMED_ENUM(ScheduleType, constant, cosine, plateau);

struct ScheduleConfig {
  ScheduleType type = ScheduleType::constant;
  int64_t warmup_steps = 0;  // cosine: linear warmup from 0
  double min_factor = 0.0;   // cosine: floor of the multiplier; plateau: floor
  int64_t patience = 1;      // plateau: evaluations without improvement before halving
  double factor = 0.5;       // plateau: multiplier applied on a plateau

  template <class V>
  void visit(V& v) {
    v.field("type", type, "Schedule of the lr multiplier");
    v.field("warmup_steps", warmup_steps, "cosine: steps of linear warmup from 0",
            Range::at_least(0));
    v.field("min_factor", min_factor, "cosine, plateau: floor of the multiplier", Range{0, 1});
    v.field("patience", patience,
            "plateau: evaluations without improvement before the lr is reduced", Range{1, 1e6});
    v.field("factor", factor, "plateau: multiplier applied on a plateau", Range{0, 1, true, false});
  }
  bool operator==(const ScheduleConfig&) const = default;
};

class LrSchedule {
 public:
  LrSchedule(const ScheduleConfig& cfg, int64_t total_steps);
  // Multiplier at a 0-based global step.
  double factor(int64_t step) const;
  // plateau: report a validation metric (higher is better) after an evaluation.
  void report_metric(double value);
  // State for checkpoints.
  double plateau_factor() const { return plateau_factor_; }
  double best_metric() const { return best_; }
  int bad_evals() const { return bad_evals_; }
  void restore(double plateau_factor, double best, int bad_evals);

 private:
  ScheduleConfig cfg_;
  int64_t total_steps_;
  double plateau_factor_ = 1.0;
  double best_ = -1e300;
  int bad_evals_ = 0;
};

}  // namespace xmc
