#include "io/cache.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstring>
#include <exception>

#include "core/error.h"

namespace xmc::io {
namespace {

constexpr char kMagic[8] = {'X', 'M', 'C', 'C', 'A', 'C', 'H', 'E'};
constexpr char kEnd[8] = {'X', 'M', 'C', 'E', 'N', 'D', '\0', '\0'};
constexpr uint32_t kVersion = 2;

// Bounds-checked reader over the cache bytes; any overrun marks the cache invalid.
struct Cursor {
  std::string_view buf;
  size_t pos = 0;
  bool ok = true;

  template <class T>
  T get() {
    T v{};
    if (pos + sizeof(T) > buf.size()) {
      ok = false;
      return v;
    }
    std::memcpy(&v, buf.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  template <class T>
  void get_array(std::vector<T>& out, int64_t n) {
    if (n < 0 || pos > buf.size() || static_cast<uint64_t>(n) > (buf.size() - pos) / sizeof(T)) {
      ok = false;
      return;
    }
    out.resize(static_cast<size_t>(n));
    if (n > 0) std::memcpy(out.data(), buf.data() + pos, static_cast<size_t>(n) * sizeof(T));
    pos += static_cast<size_t>(n) * sizeof(T);
  }
};

// The bytes a cache for `key` starts with: magic, version, kind, source stamp, index_base.
std::string header_bytes(const CacheKey& key) {
  std::string h(kMagic, 8);
  auto put = [&h](const auto& v) { h.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(kVersion);
  put(static_cast<uint32_t>(key.kind));
  put(key.stamp.size);
  put(key.stamp.mtime_ns);
  put(key.stamp.ctime_ns);
  put(key.stamp.inode);
  put(key.stamp.device);
  put(key.index_base);
  return h;
}

// Why m is not what the parser produces, or "" when it is.
std::string invalid_contents(const CsrMatrix& m) {
  if (m.cols > int64_t{UINT32_MAX} + 1) return fmt::format("{} columns", m.cols);
  for (int64_t r = 0; r < m.rows; ++r) {
    const int64_t b = m.indptr[static_cast<size_t>(r)], e = m.indptr[static_cast<size_t>(r) + 1];
    if (e < b || b < 0 || e > static_cast<int64_t>(m.indices.size()))
      return fmt::format("row {} spans [{}, {})", r, b, e);
    for (int64_t k = b; k < e; ++k) {
      const uint32_t i = m.indices[static_cast<size_t>(k)];
      if (static_cast<int64_t>(i) >= m.cols)
        return fmt::format("row {} holds index {} >= {} columns", r, i, m.cols);
      if (k > b && i <= m.indices[static_cast<size_t>(k) - 1])
        return fmt::format("row {} is not sorted by index", r);
      if (!m.values.empty() && !std::isfinite(m.values[static_cast<size_t>(k)]))
        return fmt::format("row {} holds the value {}", r, m.values[static_cast<size_t>(k)]);
    }
  }
  return "";
}

}  // namespace

std::string cache_path(const std::string& source) { return source + ".xmccache"; }

std::optional<std::vector<CsrMatrix>> load_cache(const std::string& source, const CacheKey& key) {
  const std::string path = cache_path(source);
  std::optional<MappedFile> file;
  try {
    if (file_stamp(path).size < 64) return std::nullopt;
    file.emplace(path);
  } catch (const Error&) {
    return std::nullopt;  // no cache
  }
  const std::string header = header_bytes(key);
  if (!file->text().starts_with(header)) return std::nullopt;
  Cursor c{file->text(), header.size()};
  uint32_t count = c.get<uint32_t>();
  if (!c.ok || count > 16) return std::nullopt;
  std::vector<CsrMatrix> out(count);
  for (auto& m : out) {
    m.rows = c.get<int64_t>();
    m.cols = c.get<int64_t>();
    int64_t nnz = c.get<int64_t>();
    int64_t nvalues = c.get<int64_t>();
    if (!c.ok || m.rows < 0 || m.cols < 0 || (nvalues != 0 && nvalues != nnz)) return std::nullopt;
    c.get_array(m.indptr, m.rows + 1);
    c.get_array(m.indices, nnz);
    c.get_array(m.values, nvalues);
    if (!c.ok || m.indptr.front() != 0 || m.indptr.back() != nnz) return std::nullopt;
  }
  if (!c.ok || c.buf.substr(c.pos) != std::string_view(kEnd, 8)) return std::nullopt;
  for (size_t i = 0; i < out.size(); ++i)
    if (std::string bad = invalid_contents(out[i]); !bad.empty()) {
      spdlog::warn("cache '{}' is corrupted (matrix {}: {}); reparsing '{}'", path, i, bad, source);
      return std::nullopt;
    }
  return out;
}

void save_cache(const std::string& source, const CacheKey& key,
                const std::vector<const CsrMatrix*>& matrices) {
  const std::string path = cache_path(source);
  try {
    AtomicFile f(path);
    auto put = [&f](const auto& v) { f.write(&v, sizeof(v)); };
    f.write(header_bytes(key));
    put(static_cast<uint32_t>(matrices.size()));
    for (const CsrMatrix* m : matrices) {
      put(m->rows);
      put(m->cols);
      put(static_cast<int64_t>(m->indices.size()));
      put(static_cast<int64_t>(m->values.size()));
      f.write(m->indptr.data(), m->indptr.size() * sizeof(int64_t));
      f.write(m->indices.data(), m->indices.size() * sizeof(uint32_t));
      f.write(m->values.data(), m->values.size() * sizeof(float));
    }
    f.write(kEnd, 8);
    f.commit();
    spdlog::debug("wrote cache '{}'", path);
  } catch (const std::exception& e) {
    spdlog::warn("could not write the cache for '{}' ({}); continuing without it", source,
                 e.what());
  }
}

}  // namespace xmc::io
