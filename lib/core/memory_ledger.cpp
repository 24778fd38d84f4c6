#include "core/memory_ledger.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

namespace xmc {

std::string_view to_string(MemTag tag) {
  constexpr std::array<std::string_view, kNumMemTags> kNames{
      "weights", "indices", "optimizer", "activations", "workspace", "index", "data"};
  return kNames[static_cast<size_t>(tag)];
}

void MemoryLedger::add(MemTag tag, MemSpace space, int64_t bytes) {
  std::lock_guard lock(mu_);
  const auto s = static_cast<int>(space);
  for (const int t : {static_cast<int>(tag), kNumMemTags}) {
    cur_[s][t] += bytes;
    peak_[s][t] = std::max(peak_[s][t], cur_[s][t]);
  }
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
  return cur_[static_cast<int>(space)][kNumMemTags];
}
int64_t MemoryLedger::total_peak(MemSpace space) const {
  std::lock_guard lock(mu_);
  return peak_[static_cast<int>(space)][kNumMemTags];
}

void MemoryLedger::reset_peaks() {
  std::lock_guard lock(mu_);
  peak_ = cur_;
}

nlohmann::json MemoryLedger::report() const {
  std::lock_guard lock(mu_);
  nlohmann::json out = nlohmann::json::object();
  for (int s = 0; s < kNumMemSpaces; ++s) {
    if (peak_[s][kNumMemTags] == 0) continue;
    nlohmann::json space = nlohmann::json::object();
    for (int t = 0; t < kNumMemTags; ++t) {
      if (peak_[s][t] == 0) continue;
      space[std::string(to_string(static_cast<MemTag>(t)))] = {{"current", cur_[s][t]},
                                                               {"peak", peak_[s][t]}};
    }
    space["total"] = {{"current", cur_[s][kNumMemTags]}, {"peak", peak_[s][kNumMemTags]}};
    out[s == 0 ? "host" : "device"] = std::move(space);
  }
  return out;
}

LedgerEntry::LedgerEntry(MemoryLedger& ledger, MemTag tag, int64_t bytes, MemSpace space) {
  ledger.add(tag, space, bytes);  // owned (to be taken out again) only once it is in
  ledger_ = decltype(ledger_)(&ledger, Release{tag, space, bytes});
}

}  // namespace xmc
