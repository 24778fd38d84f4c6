// XC text formats (combined and sparse/split): multi-threaded parser, binary cache, writers.
//
// Parsing: the header line is read first; the body is cut into one range per thread on
// newline boundaries; each thread parses its range into a CSR piece; the pieces are
// concatenated. Errors carry the byte offset and are turned into file:line:column only
// when raised (counting newlines is cheap once).
#include <fmt/format.h>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <utility>

#include "core/error.h"
#include "core/resources.h"
#include "io/cache.h"
#include "io/file_util.h"
#include "io/io.h"

namespace xmc::io {
namespace {

// A parse error at byte offset `pos` of the text, converted to a located InputError later.
struct ParseFailure {
  size_t pos;
  std::string what;
};

[[noreturn]] void fail(size_t pos, std::string what) { throw ParseFailure{pos, std::move(what)}; }

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// A byte that no XC text file holds: NUL or another control character (tab, CR and
// newline are text).
bool is_binary_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u == 0x7f || (u < 0x20 && c != '\t' && c != '\r' && c != '\n');
}

// The token starting at p (up to whitespace), shortened for messages. A blank or the end
// of the line is named; non-printable bytes are shown escaped (printable()), and a token
// holding binary bytes is called binary.
std::string token_at(const char* p, const char* e) {
  if (p >= e || *p == '\n') return "end of line";
  if (*p == '\r') return "a carriage return";
  if (is_blank(*p)) return *p == '\t' ? "a tab" : "a blank";
  const char* q = p;
  bool binary = false;
  while (q < e && !is_blank(*q) && *q != '\n' && q - p < 24)
    binary = binary || is_binary_byte(*q++);
  const std::string shown = printable(std::string_view(p, static_cast<size_t>(q - p)));
  if (binary) return fmt::format("binary data '{}' (a binary or compressed file?)", shown);
  return fmt::format("'{}'", shown);
}

// A compressed or binary file is named as such before any parsing: its bytes would only
// make a confusing "expected ..." message. Looks at the magic numbers of the common
// compressors and for NUL bytes in the first 64 KiB.
void check_text(std::string_view text) {
  struct Magic {
    std::string_view bytes;
    const char* what;
  };
  static constexpr Magic magics[] = {
      {"\x1f\x8b", "gzip-compressed"},
      {"BZh", "bzip2-compressed"},
      {"\xfd"
       "7zXZ",
       "xz-compressed"},
      {"\x28\xb5\x2f\xfd", "zstd-compressed"},
      {"PK\x03\x04", "a zip archive"},
      {"\x93NUMPY", "a NumPy .npy file"},
      {"\x89HDF", "an HDF5 file"},
  };
  for (const auto& m : magics)
    if (text.substr(0, m.bytes.size()) == m.bytes)
      fail(0, fmt::format("binary or compressed file ({}): expected XC text (header line "
                          "first); decompress or convert it first",
                          m.what));
  const std::string_view head = text.substr(0, 1 << 16);
  const auto bad = std::find_if(head.begin(), head.end(), is_binary_byte);
  if (bad != head.end())
    fail(static_cast<size_t>(bad - head.begin()),
         fmt::format("binary or compressed file (byte 0x{:02x}): expected XC text",
                     static_cast<unsigned char>(*bad)));
}

InputError located(std::string_view text, const std::string& name, const ParseFailure& f) {
  size_t pos = std::min(f.pos, text.size());
  SourceLocation loc{name, 1, 1};
  loc.line += std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(pos), '\n');
  const size_t nl = pos == 0 ? std::string_view::npos : text.rfind('\n', pos - 1);
  loc.column = static_cast<long long>(nl == std::string_view::npos ? pos + 1 : pos - nl);
  return InputError(fmt::format("{}: {}", loc.str(), f.what));
}

struct Header {
  int64_t rows = 0;
  int64_t d = 0;    // features (combined) or columns (sparse)
  int64_t l = 0;    // labels (combined only)
  size_t body = 0;  // offset of the first body line
};

Header parse_header(std::string_view text, int fields, const char* expected) {
  if (text.empty()) fail(0, fmt::format("empty file: expected the header '{}'", expected));
  check_text(text);
  size_t eol = text.find('\n');
  if (eol == std::string_view::npos) eol = text.size();
  const char* b = text.data();
  const char* p = b;
  const char* e = b + eol;
  int64_t v[3] = {0, 0, 0};
  size_t at[3] = {0, 0, 0};
  for (int i = 0; i < fields; ++i) {
    while (p < e && is_blank(*p)) ++p;
    at[i] = static_cast<size_t>(p - b);
    auto [q, ec] = std::from_chars(p, e, v[i]);
    if (ec != std::errc() || v[i] < 0)
      fail(static_cast<size_t>(p - b),
           fmt::format("expected the header '{}' (non-negative integers), found {}", expected,
                       token_at(p, e)));
    p = q;
  }
  while (p < e && is_blank(*p)) ++p;
  if (p != e)
    fail(static_cast<size_t>(p - b),
         fmt::format("expected the header '{}', found extra {}", expected, token_at(p, e)));
  for (int i = 1; i < fields; ++i)
    if (v[i] > int64_t{UINT32_MAX})
      fail(0,
           fmt::format("header dimension {} exceeds the supported maximum {}", v[i], UINT32_MAX));
  const size_t body = eol < text.size() ? eol + 1 : text.size();
  // Sizes checked before anything is allocated from them. Every row takes at least one
  // byte (its newline, or a character on an unterminated last line).
  const size_t body_bytes = text.size() - body;
  if (static_cast<uint64_t>(v[0]) > body_bytes)
    fail(at[0], fmt::format("header N = {} rows, but only {} bytes follow the header line: "
                            "expected at most {} rows (each takes at least one byte); a wrong "
                            "header or a truncated file?",
                            v[0], body_bytes, body_bytes));
  // The last field counts the labels (or the columns of a labels or predictions file):
  // every command keeps per-label arrays (frequencies, propensities: 16 bytes a label). An
  // implausible size fails at that field rather than in an allocation.
  const int last = fields - 1;
  try {
    check_memory_plan(16.0 * static_cast<double>(v[last]),
                      fmt::format("header {} = {} (per-label arrays, 16 bytes a label)",
                                  fields == 3 ? "L" : "C", v[last]),
                      "a wrong header?");
  } catch (const InputError& err) {
    fail(at[last], err.what());
  }
  return {v[0], v[1], v[2], body};
}

// Rows parsed by one thread. x = features ("i:v" pairs, values kept), y = labels (pattern).
struct Piece {
  std::vector<int64_t> x_ptr{0};
  std::vector<uint32_t> x_idx;
  std::vector<float> x_val;
  std::vector<int64_t> y_ptr{0};
  std::vector<uint32_t> y_idx;
  std::optional<ParseFailure> error;
};

class LineParser {
 public:
  LineParser(const char* base, int index_base, int64_t d, int64_t l)
      : base_(base), index_base_(index_base), d_(d), l_(l) {}

  // Combined: "l1,l2,... f:v f:v ..."; a row without labels starts with a blank.
  void combined(const char* p, const char* e, Piece& out) {
    if (p < e && !is_blank(*p)) {
      size_t first = out.y_idx.size();
      for (;;) {
        out.y_idx.push_back(index(p, e, l_, "label", "L"));
        if (p < e && *p == ',') {
          ++p;
          continue;
        }
        if (p == e || is_blank(*p)) break;
        fail(pos(p),
             fmt::format("expected ',' or a blank after a label, found {}", token_at(p, e)));
      }
      // Labels are a set: sort and drop repeats.
      auto b = out.y_idx.begin() + static_cast<std::ptrdiff_t>(first);
      std::sort(b, out.y_idx.end());
      out.y_idx.erase(std::unique(b, out.y_idx.end()), out.y_idx.end());
    }
    out.y_ptr.push_back(static_cast<int64_t>(out.y_idx.size()));
    pairs(p, e, out, "feature", "D");
  }

  // Sparse: "i:v i:v ...".
  void sparse(const char* p, const char* e, Piece& out) { pairs(p, e, out, "column", "C"); }

 private:
  size_t pos(const char* p) const { return static_cast<size_t>(p - base_); }

  // Parses an index at p (advancing p) and checks index_base <= i < index_base + bound.
  uint32_t index(const char*& p, const char* e, int64_t bound, const char* what,
                 const char* bound_name) {
    if (p < e && *p == '-') {
      int64_t neg = 0;
      std::from_chars(p, e, neg);
      fail(pos(p), fmt::format("negative {} index {}: expected an integer in [{}, {})", what, neg,
                               index_base_, bound + index_base_));
    }
    uint64_t v = 0;
    auto [q, ec] = std::from_chars(p, e, v);
    if (ec != std::errc())
      fail(pos(p), fmt::format("expected a {} index (integer), found {}", what, token_at(p, e)));
    if (v < static_cast<uint64_t>(index_base_) ||
        v - static_cast<uint64_t>(index_base_) >= static_cast<uint64_t>(bound))
      fail(pos(p),
           fmt::format("{} index {} out of range: expected {} <= index < {} (header {} = {}, "
                       "index base {})",
                       what, v, index_base_, bound + index_base_, bound_name, bound, index_base_));
    p = q;
    return static_cast<uint32_t>(v - static_cast<uint64_t>(index_base_));
  }

  void pairs(const char* p, const char* e, Piece& out, const char* what, const char* bound_name) {
    const size_t first = out.x_idx.size();
    const char* line = p;
    for (;;) {
      while (p < e && is_blank(*p)) ++p;
      if (p == e) break;
      uint32_t i = index(p, e, d_, what, bound_name);
      if (p == e || *p != ':')
        fail(pos(p), fmt::format("expected ':' after {} index {}, found {}", what,
                                 i + static_cast<uint32_t>(index_base_), token_at(p, e)));
      ++p;
      float v = 0;
      auto [q, ec] = std::from_chars(p, e, v);
      // from_chars reports underflow (1e-50) as it does overflow; a value too small for a
      // float is no error, it rounds to zero (or a subnormal), as 1e-40 does.
      if (ec == std::errc::result_out_of_range) {
        const double wide = std::strtod(std::string(p, q).c_str(), nullptr);
        if (!(std::abs(wide) <= std::numeric_limits<float>::max()))
          fail(pos(p), fmt::format("value {} out of float range (magnitude above {:g}): expected "
                                   "a finite number",
                                   token_at(p, e), std::numeric_limits<float>::max()));
        v = static_cast<float>(wide);
      } else if (ec != std::errc()) {
        fail(pos(p), fmt::format("expected a number after '{}:', found {}",
                                 i + static_cast<uint32_t>(index_base_), token_at(p, e)));
      }
      if (!std::isfinite(v))
        fail(pos(p),
             fmt::format("value {} is not finite: expected a finite number", token_at(p, e)));
      if (q < e && !is_blank(*q))
        fail(pos(q), fmt::format("expected a blank after the value, found {}", token_at(q, e)));
      p = q;
      out.x_idx.push_back(i);
      out.x_val.push_back(v);
    }
    sort_row(out, first, line, what);
    out.x_ptr.push_back(static_cast<int64_t>(out.x_idx.size()));
  }

  // Rows come out sorted by index; a repeated index is an error (which value is meant?).
  void sort_row(Piece& out, size_t first, const char* line, const char* what) {
    const size_t n = out.x_idx.size() - first;
    uint32_t* idx = out.x_idx.data() + first;
    float* val = out.x_val.data() + first;
    if (!std::is_sorted(idx, idx + n)) {
      std::vector<std::pair<uint32_t, float>> tmp(n);
      for (size_t k = 0; k < n; ++k) tmp[k] = {idx[k], val[k]};
      std::sort(tmp.begin(), tmp.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t k = 0; k < n; ++k) std::tie(idx[k], val[k]) = tmp[k];
    }
    for (size_t k = 1; k < n; ++k)
      if (idx[k] == idx[k - 1])
        fail(pos(line), fmt::format("duplicate {} index {} in the row: expected each index once",
                                    what, idx[k] + static_cast<uint32_t>(index_base_)));
  }

  const char* base_;
  int index_base_;
  int64_t d_;
  int64_t l_;
};

void check_base(int index_base) {
  if (index_base != 0 && index_base != 1)
    throw_input("index_base must be 0 or 1, got {}", index_base);
}

// Parses the body into per-thread pieces and checks the row count against the header.
// combined: features + labels per line, else one sparse matrix.
std::vector<Piece> parse_body(std::string_view text, const std::string& name,
                              const ReadOptions& opt, const Header& h, bool combined) {
  const char* base = text.data();
  const size_t begin = h.body;
  const size_t end = text.size();
  int threads = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  // Small inputs are not worth the threads.
  threads = static_cast<int>(std::clamp<size_t>((end - begin) / (1 << 20), 1, threads));

  std::vector<size_t> cut(static_cast<size_t>(threads) + 1, end);
  cut[0] = begin;
  for (int t = 1; t < threads; ++t) {
    size_t c = std::max(cut[t - 1], begin + (end - begin) * static_cast<size_t>(t) / threads);
    const void* nl = c < end ? std::memchr(base + c, '\n', end - c) : nullptr;
    cut[t] = nl ? static_cast<size_t>(static_cast<const char*>(nl) - base) + 1 : end;
  }

  std::vector<Piece> pieces(static_cast<size_t>(threads));
#pragma omp parallel for num_threads(threads) schedule(static, 1)
  for (int t = 0; t < threads; ++t) {
    Piece& piece = pieces[t];
    // Reserve from the range's size (a "f:v" pair takes at least 4 bytes, usually ~10):
    // avoids repeated regrowth; untouched reserve costs no physical memory.
    const size_t bytes = cut[t + 1] - cut[t];
    piece.x_idx.reserve(bytes / 8);
    piece.x_val.reserve(bytes / 8);
    LineParser parser(base, opt.index_base, h.d, h.l);
    try {
      const char* p = base + cut[t];
      const char* e = base + cut[t + 1];
      while (p < e) {
        const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(e - p)));
        const char* le = nl ? nl : e;
        if (combined)
          parser.combined(p, le, piece);
        else
          parser.sparse(p, le, piece);
        p = nl ? nl + 1 : e;
      }
    } catch (const ParseFailure& f) {
      piece.error = f;
    } catch (...) {
      piece.error = ParseFailure{cut[t], "out of memory or internal error while parsing"};
    }
  }
  for (auto& piece : pieces)
    if (piece.error) throw located(text, name, *piece.error);
  return pieces;
}

CsrMatrix concat(std::vector<Piece>& pieces, bool labels, int64_t cols) {
  CsrMatrix m;
  m.cols = cols;
  const size_t np = pieces.size();
  std::vector<int64_t> row_off(np + 1, 0), nnz_off(np + 1, 0);
  for (size_t t = 0; t < np; ++t) {
    const auto& ptr = labels ? pieces[t].y_ptr : pieces[t].x_ptr;
    row_off[t + 1] = row_off[t] + static_cast<int64_t>(ptr.size()) - 1;
    nnz_off[t + 1] = nnz_off[t] + ptr.back();
  }
  m.rows = row_off[np];
  m.indptr.assign(static_cast<size_t>(m.rows) + 1, 0);
  m.indices.resize(static_cast<size_t>(nnz_off[np]));
  if (!labels) m.values.resize(static_cast<size_t>(nnz_off[np]));
#pragma omp parallel for schedule(static, 1)
  for (size_t t = 0; t < np; ++t) {
    auto& ptr = labels ? pieces[t].y_ptr : pieces[t].x_ptr;
    auto& idx = labels ? pieces[t].y_idx : pieces[t].x_idx;
    for (size_t r = 1; r < ptr.size(); ++r)
      m.indptr[static_cast<size_t>(row_off[t]) + r] = nnz_off[t] + ptr[r];
    std::copy(idx.begin(), idx.end(), m.indices.begin() + nnz_off[t]);
    std::vector<uint32_t>().swap(idx);
    if (!labels) {
      std::copy(pieces[t].x_val.begin(), pieces[t].x_val.end(), m.values.begin() + nnz_off[t]);
      std::vector<float>().swap(pieces[t].x_val);
    }
  }
  return m;
}

// Blank lines after the declared rows are tolerated; anything else must match the header.
void check_rows(const std::string& name, const Header& h, std::vector<CsrMatrix*> ms) {
  CsrMatrix& first = *ms.front();
  if (first.rows < h.rows)  // at the last line: header + rows
    throw_input(
        "{}:{}: expected {} rows (header), found only {}: the file ends early "
        "(truncated?)",
        name, 1 + first.rows, h.rows, first.rows);
  if (first.rows > h.rows) {
    for (CsrMatrix* m : ms)
      if (m->indptr.back() != m->indptr[static_cast<size_t>(h.rows)])
        throw_input(
            "{}:{}: more rows than the {} the header declares: expected the file to end "
            "after line {}",
            name, h.rows + 2, h.rows, h.rows + 1);
    for (CsrMatrix* m : ms) {
      m->indptr.resize(static_cast<size_t>(h.rows) + 1);
      m->rows = h.rows;
    }
  }
}

// Header and body of an XC text file, a parse failure reported at its file and line.
std::pair<Header, std::vector<Piece>> parse_file(std::string_view text, const std::string& name,
                                                 const ReadOptions& opt, int fields,
                                                 const char* expected, bool combined) {
  check_base(opt.index_base);
  try {
    Header h = parse_header(text, fields, expected);
    std::vector<Piece> pieces = parse_body(text, name, opt, h, combined);
    return {h, std::move(pieces)};
  } catch (const ParseFailure& f) {
    throw located(text, name, f);
  }
}

}  // namespace

Dataset parse_xc_combined(std::string_view text, const std::string& name, const ReadOptions& opt) {
  auto [h, pieces] = parse_file(text, name, opt, 3, "N D L", true);
  CsrMatrix x = concat(pieces, false, h.d);
  CsrMatrix y = concat(pieces, true, h.l);
  check_rows(name, h, {&x, &y});
  return Dataset{name, std::move(x), std::move(y)};
}

CsrMatrix parse_xc_sparse(std::string_view text, const std::string& name, const ReadOptions& opt) {
  auto [h, pieces] = parse_file(text, name, opt, 2, "N C", false);
  CsrMatrix m = concat(pieces, false, h.d);
  check_rows(name, h, {&m});
  return m;
}

Dataset read_xc_combined(const std::string& path, const ReadOptions& opt) {
  check_base(opt.index_base);
  CacheKey key{CacheKind::xc_combined, file_stamp(path), opt.index_base};
  if (opt.use_cache) {
    Stopwatch sw;
    if (auto cached = load_cache(path, key); cached && cached->size() == 2) {
      spdlog::debug("loaded '{}' from its cache in {:.2f} s", path, sw.seconds());
      return Dataset{path, std::move((*cached)[0]), std::move((*cached)[1])};
    }
  }
  Stopwatch sw;
  const MappedFile file(path);
  Dataset ds = parse_xc_combined(file.text(), path, opt);
  spdlog::debug("parsed '{}' in {:.2f} s", path, sw.seconds());
  if (opt.use_cache) save_cache(path, key, {&ds.sparse_features(), &ds.labels});
  return ds;
}

CsrMatrix read_xc_sparse(const std::string& path, const ReadOptions& opt) {
  check_base(opt.index_base);
  CacheKey key{CacheKind::xc_sparse, file_stamp(path), opt.index_base};
  if (opt.use_cache) {
    if (auto cached = load_cache(path, key); cached && cached->size() == 1)
      return std::move((*cached)[0]);
  }
  const MappedFile file(path);
  CsrMatrix m = parse_xc_sparse(file.text(), path, opt);
  if (opt.use_cache) save_cache(path, key, {&m});
  return m;
}

int64_t read_xc_header_rows(const std::string& path) {
  file_stamp(path);  // a directory or a missing path: the same error as the full read's
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input("cannot open '{}': {}", path, std::strerror(errno));
  std::string head(1 << 16, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  const std::string_view text(head);
  try {
    check_text(text);
    const char* b = text.data();
    const char* e = b + std::min(text.find('\n'), text.size());
    const char* p = b;
    while (p < e && is_blank(*p)) ++p;
    int64_t n = -1;
    auto [q, ec] = std::from_chars(p, e, n);
    if (ec != std::errc() || n < 0 || (q < e && !is_blank(*q)))
      fail(static_cast<size_t>(p - b),
           fmt::format("expected a header 'N ...' with a non-negative row count, found {}",
                       token_at(p, e)));
    return n;
  } catch (const ParseFailure& f) {
    throw located(text, path, f);
  }
}

Dataset join_features_and_labels(std::variant<CsrMatrix, DenseMatrix> features,
                                 const std::string& features_path,
                                 const std::string& labels_path, const ReadOptions& opt) {
  const int64_t rows = std::visit([](const auto& m) { return m.rows; }, features);
  const int64_t label_rows = read_xc_header_rows(labels_path);
  if (rows != label_rows)
    throw_input("row count mismatch: features '{}' has {} rows but labels '{}' has {} rows",
                features_path, rows, labels_path, label_rows);
  CsrMatrix y = read_xc_sparse(labels_path, opt);
  y.values.clear();
  y.values.shrink_to_fit();
  return Dataset{features_path + " + " + labels_path, std::move(features), std::move(y)};
}

Dataset read_xc_split(const std::string& features_path, const std::string& labels_path,
                      const ReadOptions& opt) {
  // Compare the headers first, so a mismatch leaves no cache file behind.
  const int64_t rows = read_xc_header_rows(features_path);
  const int64_t label_rows = read_xc_header_rows(labels_path);
  if (rows != label_rows)
    throw_input("row count mismatch: features '{}' has {} rows but labels '{}' has {} rows",
                features_path, rows, labels_path, label_rows);
  return join_features_and_labels(read_xc_sparse(features_path, opt), features_path,
                                  labels_path, opt);
}

namespace {

// Appends row r of m as " i:v" pairs (or " i:1" when pattern-only), no leading blank for
// the first pair when `lead` is false.
void append_pairs(fmt::memory_buffer& buf, const CsrMatrix& m, int64_t r, int index_base,
                  bool lead) {
  const uint32_t* idx = m.row_indices(r);
  const float* val = m.row_values(r);
  for (int64_t k = 0; k < m.row_nnz(r); ++k) {
    if (lead || k > 0) buf.push_back(' ');
    if (val)
      fmt::format_to(std::back_inserter(buf), "{}:{}", idx[k] + index_base, val[k]);
    else
      fmt::format_to(std::back_inserter(buf), "{}:1", idx[k] + index_base);
  }
}

// Writes `header`, then rows 0..rows-1, each by row(buf, r) and a newline. The text goes to
// the file whenever it passes 4 MiB, so a large file never sits in memory.
template <class Row>
void write_rows(const std::string& path, const std::string& header, int64_t rows, Row row) {
  AtomicFile f(path);
  fmt::memory_buffer buf;
  buf.append(header);
  for (int64_t r = 0; r < rows; ++r) {
    row(buf, r);
    buf.push_back('\n');
    if (buf.size() > (1 << 22)) {
      f.write(std::string_view(buf.data(), buf.size()));
      buf.clear();
    }
  }
  f.write(std::string_view(buf.data(), buf.size()));
  f.commit();
}

}  // namespace

void write_xc_combined(const std::string& path, const CsrMatrix& features, const CsrMatrix& labels,
                       int index_base) {
  check_base(index_base);
  XMC_CHECK(features.rows == labels.rows, "features have {} rows, labels {}", features.rows,
            labels.rows);
  const std::string header = fmt::format("{} {} {}\n", features.rows, features.cols, labels.cols);
  write_rows(path, header, features.rows, [&](fmt::memory_buffer& buf, int64_t r) {
    const uint32_t* y = labels.row_indices(r);
    for (int64_t k = 0; k < labels.row_nnz(r); ++k) {
      if (k > 0) buf.push_back(',');
      fmt::format_to(std::back_inserter(buf), "{}", y[k] + index_base);
    }
    // A row without labels starts with a blank, so the features are not read as labels.
    append_pairs(buf, features, r, index_base, true);
  });
}

void write_xc_sparse(const std::string& path, const CsrMatrix& m, int index_base) {
  check_base(index_base);
  write_rows(
      path, fmt::format("{} {}\n", m.rows, m.cols), m.rows,
      [&](fmt::memory_buffer& buf, int64_t r) { append_pairs(buf, m, r, index_base, false); });
}

}  // namespace xmc::io
