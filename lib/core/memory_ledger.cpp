#include "core/memory_ledger.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

namespace xmc {

std::string_view to_string(MemTag tag) {
  switch (tag) {
    case MemTag::weights: return "weights";
    case MemTag::indices: return "indices";
    case MemTag::optimizer: return "optimizer";
    case MemTag::activations: return "activations";
    case MemTag::workspace: return "workspace";
    case MemTag::index: return "index";
    case MemTag::data: return "data";
  }
  return "unknown";
}

void MemoryLedger::add(MemTag tag, MemSpace space, int64_t bytes) {
  std::lock_guard lock(mu_);
  auto s = static_cast<int>(space);
  auto t = static_cast<int>(tag);
  cur_[s][t] += bytes;
  peak_[s][t] = std::max(peak_[s][t], cur_[s][t]);
  total_cur_[s] += bytes;
  total_peak_[s] = std::max(total_peak_[s], total_cur_[s]);
}

void MemoryLedger::sub(MemTag tag, MemSpace space, int64_t bytes) { add(tag, space, -bytes); }

int64_t MemoryLedger::current(MemTag tag, MemSpace space) const {
  std::lock_guard lock(mu_);
  return cur_[static_cast<int>(space)][static_cast<int>(tag)];
}
int64_t MemoryLedger::peak(MemTag tag, MemSpace space) const {
  std::lock_guard lock(mu_);
  return peak_[static_cast<int>(space)][static_cast<int>(tag)];
}
int64_t MemoryLedger::total_current(MemSpace space) const {
  std::lock_guard lock(mu_);
  return total_cur_[static_cast<int>(space)];
}
int64_t MemoryLedger::total_peak(MemSpace space) const {
  std::lock_guard lock(mu_);
  return total_peak_[static_cast<int>(space)];
}

void MemoryLedger::reset_peaks() {
  std::lock_guard lock(mu_);
  peak_ = cur_;
  total_peak_ = total_cur_;
}

nlohmann::json MemoryLedger::report() const {
  std::lock_guard lock(mu_);
  nlohmann::json out = nlohmann::json::object();
  for (int s = 0; s < kNumMemSpaces; ++s) {
    if (total_peak_[s] == 0) continue;
    nlohmann::json space = nlohmann::json::object();
    for (int t = 0; t < kNumMemTags; ++t) {
      if (peak_[s][t] == 0) continue;
      space[std::string(to_string(static_cast<MemTag>(t)))] = {{"current", cur_[s][t]},
                                                               {"peak", peak_[s][t]}};
    }
    space["total"] = {{"current", total_cur_[s]}, {"peak", total_peak_[s]}};
    out[s == 0 ? "host" : "device"] = std::move(space);
  }
  return out;
}

LedgerEntry::LedgerEntry(MemoryLedger& ledger, MemTag tag, int64_t bytes, MemSpace space) {
  ledger.add(tag, space, bytes);  // owned (to be taken out again) only once it is in
  ledger_ = decltype(ledger_)(&ledger, Release{tag, space, bytes});
}

}  // namespace xmc
