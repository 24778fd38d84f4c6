#include "model/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace xmc {

LrSchedule::LrSchedule(const ScheduleConfig& cfg, int64_t total_steps)
    : cfg_(cfg), total_steps_(total_steps) {
  if (cfg.warmup_steps < 0)
    throw_input("schedule warmup_steps = {}: must be >= 0", cfg.warmup_steps);
  if (!(cfg.min_factor >= 0.0 && cfg.min_factor <= 1.0))
    throw_input("schedule min_factor = {}: must be in [0, 1]", cfg.min_factor);
  if (cfg.type == ScheduleType::plateau) {
    if (cfg.patience < 1) throw_input("schedule patience = {}: must be >= 1", cfg.patience);
    if (!(cfg.factor > 0.0 && cfg.factor < 1.0))
      throw_input("schedule factor = {}: must be in (0, 1)", cfg.factor);
  }
  if (total_steps < 0) throw_error("LrSchedule: total_steps = {} < 0", total_steps);
}

double LrSchedule::factor(int64_t step) const {
  switch (cfg_.type) {
    case ScheduleType::constant:
      return 1.0;
    case ScheduleType::plateau:
      return plateau_factor_;
    case ScheduleType::cosine: {
      // Warmup: (step+1)/warmup, so the first step already moves and step warmup-1 is at 1.
      if (step < cfg_.warmup_steps)
        return static_cast<double>(step + 1) / static_cast<double>(cfg_.warmup_steps);
      const double span =
          static_cast<double>(std::max<int64_t>(1, total_steps_ - cfg_.warmup_steps));
      const double progress =
          std::clamp(static_cast<double>(step - cfg_.warmup_steps) / span, 0.0, 1.0);
      return cfg_.min_factor +
             (1.0 - cfg_.min_factor) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
    }
  }
  return 1.0;
}

void LrSchedule::report_metric(double value) {
  if (cfg_.type != ScheduleType::plateau) return;
  if (value > best_) {
    best_ = value;
    bad_evals_ = 0;
    return;
  }
  if (++bad_evals_ >= cfg_.patience) {
    plateau_factor_ = std::max(cfg_.min_factor, plateau_factor_ * cfg_.factor);
    bad_evals_ = 0;
  }
}

void LrSchedule::restore(double plateau_factor, double best, int bad_evals) {
  plateau_factor_ = plateau_factor;
  best_ = best;
  bad_evals_ = bad_evals;
}

}  // namespace xmc
