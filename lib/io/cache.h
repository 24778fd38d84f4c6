#pragma once
// Binary cache of parsed XC text files: "<source>.xmccache" beside the source.
// Layout (little-endian, native sizes):
//   "XMCCACHE" | u32 version | u32 kind | i64 source size | i64 source mtime (ns) |
//   i64 source ctime (ns) | i64 source inode | i64 source device |
//   i32 index_base | u32 number of matrices | per matrix: i64 rows, cols, nnz, nvalues,
//   then indptr i64[rows+1], indices u32[nnz], values f32[nvalues] | "XMCEND\0\0"
// A cache is used only when every header field matches the source and the read options;
// anything else (a changed source, a truncated cache, another version) means reparse.
// Its contents are checked as the parser's output would be (indptr non-decreasing from 0
// to nnz, indices in range and strictly increasing in a row, values finite); a cache that
// fails is reported (warning) and the source reparsed.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/matrix.h"
#include "io/file_util.h"

namespace xmc::io {

enum class CacheKind : uint32_t { xc_combined = 1, xc_sparse = 2 };

struct CacheKey {
  CacheKind kind = CacheKind::xc_combined;
  FileStamp stamp;
  int32_t index_base = 0;
};

std::string cache_path(const std::string& source);

// The cached matrices when the cache exists and matches `key`, else nullopt.
std::optional<std::vector<CsrMatrix>> load_cache(const std::string& source, const CacheKey& key);

// Writes the cache atomically. Failure (read-only directory, full disk) is logged as a
// warning and otherwise ignored: the cache is an optimisation.
void save_cache(const std::string& source, const CacheKey& key,
                const std::vector<const CsrMatrix*>& matrices);

}  // namespace xmc::io
