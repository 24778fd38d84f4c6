#pragma once
// Progress of an epoch: a redrawn bar on a terminal (stderr), periodic log lines
// otherwise (samples/s, ETA, loss).
#include <cstdint>
#include <string>

#include "core/resources.h"

namespace xmc {

class Progress {
 public:
  Progress(std::string label, int64_t total_steps, int64_t batch_size, double log_every_s);
  // After each step: steps done in this epoch and the running mean loss.
  void update(int64_t steps_done, double mean_loss);
  void finish();

 private:
  std::string label_;
  int64_t total_, batch_;
  double log_every_s_;
  bool tty_;
  Stopwatch sw_;
  double last_print_ = 0.0;
};

}  // namespace xmc
