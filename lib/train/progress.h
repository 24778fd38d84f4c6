#pragma once
// Progress of an epoch: a redrawn bar on a terminal (stderr), periodic log lines
// otherwise (samples/s, ETA, loss).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "core/resources.h"

namespace xmc {

class Progress {
 public:
  Progress(std::string label, int64_t total_steps, int64_t batch_size, double log_every_s)
      : label_(std::move(label)),
        total_(total_steps),
        batch_(batch_size),
        log_every_s_(log_every_s),
        tty_(::isatty(STDERR_FILENO) != 0) {}

  // After each step: steps done in this epoch and the running mean loss.
  void update(int64_t done, double mean_loss) {
    const double t = sw_.seconds();
    const double interval = tty_ ? 0.2 : log_every_s_;
    if (t - last_print_ < interval && done < total_) return;
    last_print_ = t;
    const double rate = t > 0 ? static_cast<double>(done * batch_) / t : 0.0;
    const double eta =
        done > 0 ? t * static_cast<double>(total_ - done) / static_cast<double>(done) : 0.0;
    if (tty_) {
      constexpr int width = 30;
      const int filled = total_ > 0 ? static_cast<int>(width * done / total_) : width;
      std::string bar(static_cast<size_t>(filled), '#');
      bar.resize(width, '.');
      std::fprintf(stderr, "\r%s [%s] %lld/%lld  %.0f samples/s  ETA %.0fs  loss %.5f ",
                   label_.c_str(), bar.c_str(), static_cast<long long>(done),
                   static_cast<long long>(total_), rate, eta, mean_loss);
      std::fflush(stderr);
    } else if (done < total_) {
      spdlog::info("{} step {}/{}  {:.0f} samples/s  ETA {:.0f}s  loss {:.5f}", label_, done,
                   total_, rate, eta, mean_loss);
    }
  }

  void finish() {
    if (tty_) {
      std::fprintf(stderr, "\n");
      std::fflush(stderr);
    }
  }

 private:
  std::string label_;
  int64_t total_, batch_;
  double log_every_s_;
  bool tty_;
  Stopwatch sw_;
  double last_print_ = 0.0;
};

}  // namespace xmc
