#include "eval/filter.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <limits>
#include <string_view>

#include "core/error.h"

namespace xmc {

namespace {

const std::vector<uint32_t> kNoLabels;

// Splits off the next whitespace-separated token of `s` (empty at the end).
std::string_view next_token(std::string_view& s) {
  size_t b = s.find_first_not_of(" \t\r\f\v");
  if (b == std::string_view::npos) {
    s = {};
    return {};
  }
  size_t e = s.find_first_of(" \t\r\f\v", b);
  if (e == std::string_view::npos) e = s.size();
  std::string_view tok = s.substr(b, e - b);
  s.remove_prefix(e);
  return tok;
}

// A non-negative integer token <= max; false otherwise.
bool parse_id(std::string_view tok, uint64_t max, uint64_t& out) {
  if (tok.empty()) return false;
  auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), out);
  return ec == std::errc() && p == tok.data() + tok.size() && out <= max;
}

}  // namespace

void FilterSet::add(int64_t point, uint32_t label) {
  XMC_CHECK(point >= 0, "filter point id {} is negative", point);
  auto& v = by_point_[point];
  auto it = std::lower_bound(v.begin(), v.end(), label);
  if (it != v.end() && *it == label) return;
  v.insert(it, label);
  ++size_;
  max_per_point_ = std::max(max_per_point_, static_cast<int>(v.size()));
  max_point_ = std::max(max_point_, point);
  max_label_ = std::max(max_label_, static_cast<int64_t>(label));
}

bool FilterSet::contains(int64_t point, uint32_t label) const {
  const auto& v = labels_of(point);
  return std::binary_search(v.begin(), v.end(), label);
}

const std::vector<uint32_t>& FilterSet::labels_of(int64_t point) const {
  auto it = by_point_.find(point);
  return it == by_point_.end() ? kNoLabels : it->second;
}

FilterSet read_filter(std::istream& in, const std::string& name) {
  FilterSet f;
  std::string line;
  long long line_no = 0;
  // Label ids must stay below the TopK padding id.
  const uint64_t max_label = TopK::kNoLabel - 1;
  const uint64_t max_point = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  while (std::getline(in, line)) {
    ++line_no;
    std::string_view rest(line);
    std::string_view t1 = next_token(rest);
    if (t1.empty() || t1.front() == '#') continue;
    std::string_view t2 = next_token(rest);
    std::string_view t3 = next_token(rest);
    uint64_t point = 0, label = 0;
    if (!parse_id(t1, max_point, point))
      throw_input("{}:{}: expected a point id (integer >= 0) as the first field, got '{}'", name,
                  line_no, t1);
    if (t2.empty()) throw_input("{}:{}: expected 'point label', got only '{}'", name, line_no, t1);
    if (!parse_id(t2, max_label, label))
      throw_input("{}:{}: expected a label id (integer in [0, {}]) as the second field, got '{}'",
                  name, line_no, max_label, t2);
    if (!t3.empty())
      throw_input("{}:{}: expected 'point label', got an extra field '{}'", name, line_no, t3);
    f.add(static_cast<int64_t>(point), static_cast<uint32_t>(label));
  }
  if (in.bad()) throw_input("{}: read error after line {}", name, line_no);
  return f;
}

FilterSet read_filter_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_input("{}: cannot open the filter file", path);
  return read_filter(in, path);
}

void apply_filter(TopK& topk, const FilterSet& filter) {
  if (filter.empty()) return;
  const int k = topk.k;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < topk.rows; ++r) {
    const auto& drop = filter.labels_of(r);
    if (drop.empty()) continue;
    uint32_t* lab = topk.row_labels(r);
    float* sc = topk.row_scores(r);
    int n = 0;
    for (int j = 0; j < k; ++j) {
      if (lab[j] != TopK::kNoLabel && std::binary_search(drop.begin(), drop.end(), lab[j]))
        continue;
      lab[n] = lab[j];
      sc[n] = sc[j];
      ++n;
    }
    std::fill(lab + n, lab + k, TopK::kNoLabel);
    std::fill(sc + n, sc + k, -std::numeric_limits<float>::infinity());
  }
}

}  // namespace xmc
