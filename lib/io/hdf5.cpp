// HDF5 dense features through the C API: a named 2-D floating-point dataset, read as float32.
#include <hdf5.h>

#include <mutex>

#include "core/error.h"
#include "core/resources.h"
#include "io/file_util.h"
#include "io/hdf5_library.h"
#include "io/io.h"

namespace xmc::io {

void hdf5_library() {
  static std::once_flag once;
  std::call_once(once, [] { H5dont_atexit(); });
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

DenseMatrix read_hdf5(const std::string& path, const std::string& dataset) {
  hdf5_library();
  file_stamp(path);
  Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) throw_input("{}: cannot open as an HDF5 file", path);
  if (H5Lexists(file, dataset.c_str(), H5P_DEFAULT) <= 0)
    throw_input("{}: no dataset '{}': expected a 2-D float dataset of that name", path, dataset);
  Hid ds(H5Dopen2(file, dataset.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) throw_input("{}: cannot open dataset '{}'", path, dataset);
  Hid type(H5Dget_type(ds), H5Tclose);
  if (H5Tget_class(type) != H5T_FLOAT)
    throw_input("{}: dataset '{}' is not floating point: expected float32 or float16", path,
                dataset);
  Hid space(H5Dget_space(ds), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank != 2)
    throw_input("{}: dataset '{}' has rank {}: expected a 2-D array [N×D]", path, dataset, rank);
  hsize_t dims[2] = {0, 0};
  H5Sget_simple_extent_dims(space, dims, nullptr);
  // Chunked, compressed datasets can be larger than the file: the check is against memory.
  check_memory_plan(
      4.0 * static_cast<double>(dims[0]) * static_cast<double>(dims[1]),
      fmt::format("{}: dataset '{}' [{}×{}] as float32", path, dataset, dims[0], dims[1]),
      "a wrong or corrupted file?");
  DenseMatrix m(static_cast<int64_t>(dims[0]), static_cast<int64_t>(dims[1]));
  if (!m.values.empty() &&
      H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, m.values.data()) < 0)
    throw_input("{}: reading dataset '{}' [{}×{}] as float32 failed", path, dataset, dims[0],
                dims[1]);
  check_finite(m, fmt::format("{} (dataset '{}')", path, dataset));
  return m;
}

void write_hdf5(const std::string& path, const std::string& dataset, const DenseMatrix& m) {
  hdf5_library();
  // HDF5 opens the file itself; reserve the temporary name through AtomicFile so a bad
  // directory fails here and the rename stays atomic.
  AtomicFile guard(path);
  const std::string& tmp = guard.tmp_path();
  {
    Hid file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (!file.ok()) throw_error("{}: cannot create HDF5 file", tmp);
    hsize_t dims[2] = {static_cast<hsize_t>(m.rows), static_cast<hsize_t>(m.cols)};
    Hid space(H5Screate_simple(2, dims, nullptr), H5Sclose);
    Hid ds(H5Dcreate2(file, dataset.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT,
                         H5P_DEFAULT, H5P_DEFAULT),
              H5Dclose);
    if (!ds.ok()) throw_error("{}: cannot create dataset '{}'", path, dataset);
    if (!m.values.empty() &&
        H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, m.values.data()) < 0)
      throw_error("{}: writing dataset '{}' failed", path, dataset);
  }
  guard.commit();
}

}  // namespace xmc::io
