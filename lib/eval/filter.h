#pragma once
// Filter of (point, label) pairs removed from the predictions before scoring — the XC
// repository's filter_labels.txt (e.g. a test point's own title among its labels in the
// LF-* datasets). Removing a label moves the later predictions up, so the caller asks
// top-k for k + max_per_point() candidates per row.
#include <cstdint>
#include <istream>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/topk.h"

namespace xmc {

class FilterSet {
 public:
  // Adding a pair twice keeps it once.
  void add(int64_t point, uint32_t label);
  bool contains(int64_t point, uint32_t label) const;
  // Labels filtered for one point, sorted; empty when none.
  const std::vector<uint32_t>& labels_of(int64_t point) const;
  // Most labels filtered for any one point (0 for an empty filter).
  int max_per_point() const { return max_per_point_; }
  // Largest point id and label id present (-1 when empty), for range checks.
  int64_t max_point() const { return max_point_; }
  int64_t max_label() const { return max_label_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  std::unordered_map<int64_t, std::vector<uint32_t>> by_point_;  // point -> sorted labels
  int max_per_point_ = 0;
  int64_t max_point_ = -1;
  int64_t max_label_ = -1;
  size_t size_ = 0;
};

// Filter file: one pair "point label" per line, 0-based, whitespace separated; blank
// lines and lines starting with '#' are skipped. InputError "name:line: ..." naming the
// bad token and what was expected. `name` is the file name used in messages.
FilterSet read_filter(std::istream& in, const std::string& name);
FilterSet read_filter_file(const std::string& path);

// Removes every filtered (row, label) from the top-k lists: later entries move up and the
// rows are padded at the end (kNoLabel, -inf). k is unchanged.
void apply_filter(TopK& topk, const FilterSet& filter);

}  // namespace xmc
