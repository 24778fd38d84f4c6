#include "train/checkpoint.h"

#include <hdf5.h>
#include <unistd.h>

#include <fmt/ranges.h>

#include <filesystem>
#include <type_traits>

#include "core/error.h"

namespace xmc {
namespace {

// RAII for HDF5 ids.
struct Hid {
  hid_t id;
  herr_t (*close)(hid_t);
  Hid(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  ~Hid() {
    if (id >= 0) close(id);
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  operator hid_t() const { return id; }
};

void silence_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

template <class T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
  else if constexpr (std::is_same_v<T, uint32_t>) return H5T_NATIVE_UINT32;
  else if constexpr (std::is_same_v<T, int64_t>) return H5T_NATIVE_INT64;
  else return H5T_NATIVE_UINT64;
}

void write_array(hid_t file, const std::string& path, const std::string& name, hid_t type,
                 const std::vector<int64_t>& shape, const void* data) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Hid space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl, 1);
  Hid ds(H5Dcreate2(file, name.c_str(), type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (ds < 0) throw_error("{}: cannot create dataset '{}'", path, name);
  if (H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw_error("{}: cannot write dataset '{}' (disk full?)", path, name);
}

struct Stored {
  std::vector<int64_t> shape;
};

Stored open_shape(hid_t ds) {
  Hid space(H5Dget_space(ds), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return {std::vector<int64_t>(dims.begin(), dims.end())};
}

template <class T>
std::vector<T> read_vector(hid_t file, const std::string& path, const std::string& name) {
  Hid ds(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (ds < 0) throw_input("{}: checkpoint has no dataset '{}'", path, name);
  auto st = open_shape(ds);
  int64_t n = 1;
  for (auto s : st.shape) n *= s;
  std::vector<T> out(static_cast<size_t>(n));
  if (n > 0 && H5Dread(ds, native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw_input("{}: cannot read dataset '{}'", path, name);
  return out;
}

}  // namespace

CheckpointWriter::CheckpointWriter(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {
  silence_hdf5();
  file_ = H5Fcreate(tmp_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file_ < 0) throw_input("cannot create checkpoint file '{}'", tmp_);
}

CheckpointWriter::~CheckpointWriter() {
  if (file_ >= 0) {
    H5Fclose(static_cast<hid_t>(file_));
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
  }
}

void CheckpointWriter::write(const TensorRef& t) {
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        write_array(file_, path_, t.name, native_type<T>(), t.shape, p);
      },
      t.data);
}

void CheckpointWriter::write_string(const std::string& name, const std::string& value) {
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type, std::max<size_t>(1, value.size()));
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl, 1);
  Hid ds(H5Dcreate2(file_, name.c_str(), type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (ds < 0) throw_error("{}: cannot create dataset '{}'", path_, name);
  std::string padded = value.empty() ? std::string(1, '\0') : value;
  if (H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, padded.data()) < 0)
    throw_error("{}: cannot write dataset '{}'", path_, name);
}

void CheckpointWriter::write_i64(const std::string& name, const std::vector<int64_t>& v) {
  write_array(file_, path_, name, H5T_NATIVE_INT64, {static_cast<int64_t>(v.size())}, v.data());
}
void CheckpointWriter::write_u64(const std::string& name, const std::vector<uint64_t>& v) {
  write_array(file_, path_, name, H5T_NATIVE_UINT64, {static_cast<int64_t>(v.size())}, v.data());
}
void CheckpointWriter::write_f64(const std::string& name, const std::vector<double>& v) {
  write_array(file_, path_, name, H5T_NATIVE_DOUBLE, {static_cast<int64_t>(v.size())}, v.data());
}

void CheckpointWriter::commit() {
  XMC_CHECK(file_ >= 0, "checkpoint {} already committed", path_);
  herr_t rc = H5Fclose(static_cast<hid_t>(file_));
  file_ = -1;
  if (rc < 0) {
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
    throw_error("cannot close checkpoint file '{}'", tmp_);
  }
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) {
    std::filesystem::remove(tmp_, ec);
    throw_error("cannot rename '{}' to '{}'", tmp_, path_);
  }
}

CheckpointReader::CheckpointReader(std::string path) : path_(std::move(path)) {
  silence_hdf5();
  if (!std::filesystem::exists(path_)) throw_input("checkpoint '{}' does not exist", path_);
  file_ = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file_ < 0) throw_input("'{}' is not an HDF5 checkpoint", path_);
}

CheckpointReader::~CheckpointReader() {
  if (file_ >= 0) H5Fclose(static_cast<hid_t>(file_));
}

bool CheckpointReader::has(const std::string& name) const {
  // Check each prefix: H5Lexists fails on a missing intermediate group.
  size_t pos = 0;
  while (true) {
    pos = name.find('/', pos + 1);
    std::string prefix = name.substr(0, pos);
    if (H5Lexists(file_, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (pos == std::string::npos) return true;
  }
}

void CheckpointReader::read(const TensorRef& t) const {
  Hid ds(H5Dopen2(file_, t.name.c_str(), H5P_DEFAULT), H5Dclose);
  if (ds < 0) throw_input("{}: checkpoint has no dataset '{}'", path_, t.name);
  auto st = open_shape(ds);
  if (st.shape != t.shape)
    throw_input("{}: dataset '{}' has shape [{}], the model expects [{}]", path_, t.name,
                fmt::join(st.shape, "×"), fmt::join(t.shape, "×"));
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if (t.numel() > 0 &&
            H5Dread(ds, native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, p) < 0)
          throw_input("{}: cannot read dataset '{}'", path_, t.name);
      },
      t.data);
}

std::string CheckpointReader::read_string(const std::string& name) const {
  Hid ds(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (ds < 0) throw_input("{}: checkpoint has no dataset '{}'", path_, name);
  Hid type(H5Dget_type(ds), H5Tclose);
  size_t size = H5Tget_size(type);
  std::string out(size, '\0');
  Hid mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mem, size);
  if (H5Dread(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw_input("{}: cannot read dataset '{}'", path_, name);
  while (!out.empty() && out.back() == '\0') out.pop_back();
  return out;
}

std::vector<int64_t> CheckpointReader::read_i64(const std::string& name) const {
  return read_vector<int64_t>(file_, path_, name);
}
std::vector<uint64_t> CheckpointReader::read_u64(const std::string& name) const {
  return read_vector<uint64_t>(file_, path_, name);
}
std::vector<double> CheckpointReader::read_f64(const std::string& name) const {
  return read_vector<double>(file_, path_, name);
}

}  // namespace xmc
