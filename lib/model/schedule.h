#pragma once
// Learning-rate schedules: a multiplier on each group's base lr.
#include <cstdint>
#include <string_view>

namespace xmc {

enum class ScheduleType { constant, cosine, plateau };
ScheduleType parse_schedule(std::string_view name);  // throws InputError naming the known ones
std::string_view to_string(ScheduleType t);

struct ScheduleConfig {
  ScheduleType type = ScheduleType::constant;
  int64_t warmup_steps = 0;  // cosine: linear warmup from 0
  double min_factor = 0.0;   // cosine: floor of the multiplier; plateau: floor
  int patience = 1;          // plateau: evaluations without improvement before halving
  double factor = 0.5;       // plateau: multiplier applied on a plateau
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
