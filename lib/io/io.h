#pragma once
// Readers and writers of the extreme-classification data formats. Every reader throws
// xmc::InputError naming the file, the line (and column or token) and what was expected.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <variant>

#include "core/matrix.h"
#include "data/dataset.h"

namespace xmc::io {

struct ReadOptions {
  int index_base = 0;     // 0 or 1: indices in the text files start at this value
  int threads = 0;        // parsing threads, 0 = all
  bool use_cache = true;  // binary cache "<file>.xmccache" beside the source (io/cache.h)
};
// Text rows come out sorted by index; a repeated feature index in a row is an error,
// repeated labels in a combined row are merged. Values must be finite. Blank lines after
// the header's N rows are ignored; any other difference from N is an error.

// XC combined format: header "N D L", then N lines "l1,l2,... f:v f:v ..."; a row with
// no labels starts with a space.
Dataset read_xc_combined(const std::string& path, const ReadOptions& opt = {});
// Same, parsing text already in memory; `name` is used in messages.
Dataset parse_xc_combined(std::string_view text, const std::string& name,
                          const ReadOptions& opt = {});

// XC split/sparse format: header "N C", then N lines of "i:v" pairs (features, or
// labels "l:1", or predictions "l:score"). values are kept.
CsrMatrix read_xc_sparse(const std::string& path, const ReadOptions& opt = {});
CsrMatrix parse_xc_sparse(std::string_view text, const std::string& name,
                          const ReadOptions& opt = {});

// N from the header line ("N D L" or "N C") of an XC text file, without reading the rest:
// row counts of paired files are compared before either is parsed (or cached).
int64_t read_xc_header_rows(const std::string& path);

// features [N×D] + labels file -> Dataset; throws InputError naming both files when the
// labels file's row count differs (checked from its header before it is parsed).
Dataset join_features_and_labels(std::variant<CsrMatrix, DenseMatrix> features,
                                 const std::string& features_path,
                                 const std::string& labels_path, const ReadOptions& opt);

// Split format: features file ("N D", "f:v" lines) + labels file ("N L", "l:1" lines).
// Throws InputError naming both files and both row counts when they differ. Label values
// are dropped (pattern only).
Dataset read_xc_split(const std::string& features_path, const std::string& labels_path,
                      const ReadOptions& opt = {});

// Dense features: .npy (float32 or float16, C order, 2-D) and HDF5 (named 2-D dataset).
DenseMatrix read_npy(const std::string& path);
// The same from a stream, so tests can feed bytes directly; `name` is used in messages.
DenseMatrix read_npy(std::istream& in, const std::string& name);
DenseMatrix read_hdf5(const std::string& path, const std::string& dataset);
// Both readers reject NaN and infinite values (as the text parser does) through check_finite.

// Throws InputError naming `name`, the first non-finite value's row and column (0-based)
// and how many there are.
void check_finite(const DenseMatrix& m, const std::string& name);

// Writers (atomic: temporary name, then rename). index_base as in ReadOptions.
void write_xc_combined(const std::string& path, const CsrMatrix& features, const CsrMatrix& labels,
                       int index_base = 0);
// Rows of "i:v" pairs in the stored order; pattern-only matrices write ":1".
void write_xc_sparse(const std::string& path, const CsrMatrix& m, int index_base = 0);
void write_npy(const std::string& path, const DenseMatrix& m);
void write_hdf5(const std::string& path, const std::string& dataset, const DenseMatrix& m);

}  // namespace xmc::io
