#include "train/checkpoint.h"

#include <fmt/ranges.h>
#include <hdf5.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <numeric>
#include <type_traits>

#include "core/error.h"
#include "io/hdf5_library.h"
#include "model/schedule.h"
#include "train/model.h"

namespace xmc {
namespace fs = std::filesystem;
namespace {

using io::Hid;

// The system error behind a failed HDF5 write (HDF5 leaves errno as the failing call set it).
std::string write_failure() {
  return errno != 0 ? std::string(std::strerror(errno)) : std::string("disk full?");
}

// Every dataset carries the CRC-32 of its bytes (as stored, native order) in this attribute.
constexpr const char* kChecksum = "crc32";

uint32_t checksum(const void* data, size_t bytes) {
  return static_cast<uint32_t>(crc32_z(0L, static_cast<const Bytef*>(data), bytes));
}

void write_checksum(hid_t ds, const std::string& path, const std::string& name, const void* data,
                    size_t bytes) {
  const uint32_t crc = checksum(data, bytes);
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  Hid attr(H5Acreate2(ds, kChecksum, H5T_STD_U32LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (attr < 0 || H5Awrite(attr, H5T_NATIVE_UINT32, &crc) < 0)
    throw_error("{}: cannot write the checksum of dataset '{}': {}", path, name, write_failure());
}

template <class T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, float>)
    return H5T_NATIVE_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return H5T_NATIVE_DOUBLE;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return H5T_NATIVE_UINT32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return H5T_NATIVE_INT64;
  else
    return H5T_NATIVE_UINT64;
}

int64_t elements(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

// Creates dataset `name` (and its groups) of `type` over `space`, writes `bytes` bytes
// of `data` to it and their checksum.
void write_dataset(hid_t file, const std::string& path, const std::string& name, hid_t type,
                   hid_t space, const void* data, size_t bytes) {
  Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl, 1);
  Hid ds(H5Dcreate2(file, name.c_str(), type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (ds < 0) throw_error("{}: cannot create dataset '{}': {}", path, name, write_failure());
  errno = 0;
  if (H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw_error("{}: cannot write dataset '{}': {}", path, name, write_failure());
  write_checksum(ds, path, name, data, bytes);
}

void write_array(hid_t file, const std::string& path, const std::string& name, hid_t type,
                 const std::vector<int64_t>& shape, const void* data) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Hid space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  write_dataset(file, path, name, type, space, data,
                static_cast<size_t>(elements(shape)) * H5Tget_size(type));
}

std::vector<int64_t> stored_shape(hid_t ds) {
  Hid space(H5Dget_space(ds), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return {dims.begin(), dims.end()};
}

// Compares the stored checksum of a dataset with the bytes read. Returns false when the
// dataset has none (a checkpoint of an older version).
bool verify_checksum(hid_t ds, const std::string& path, const std::string& name, const void* data,
                     size_t bytes) {
  if (H5Aexists(ds, kChecksum) <= 0) return false;
  Hid attr(H5Aopen(ds, kChecksum, H5P_DEFAULT), H5Aclose);
  uint32_t stored = 0;
  if (attr < 0 || H5Aread(attr, H5T_NATIVE_UINT32, &stored) < 0)
    throw_input("{}: cannot read the checksum of dataset '{}'", path, name);
  const uint32_t actual = checksum(data, bytes);
  if (actual != stored)
    throw_input(
        "{}: tensor '{}' fails its checksum (stored crc32 {:08x}, contents {:08x}): the "
        "checkpoint is corrupted; use an intact copy or train again",
        path, name, stored, actual);
  return true;
}

}  // namespace

// Reads a whole dataset of T; checks its checksum (when stored) and, for model tensors,
// that every value is finite.
template <class T>
std::vector<T> CheckpointReader::read_checked(const std::string& name,
                                              const std::vector<int64_t>* expect, T* into,
                                              bool finite) const {
  Hid ds(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (ds < 0) throw_input("{}: checkpoint has no dataset '{}'", path_, name);
  const std::vector<int64_t> shape = stored_shape(ds);
  if (expect != nullptr && shape != *expect)
    throw_input("{}: dataset '{}' has shape [{}], the model expects [{}]", path_, name,
                fmt::join(shape, "×"), fmt::join(*expect, "×"));
  const int64_t n = elements(shape);
  std::vector<T> vec;
  if (into == nullptr) {
    vec.assign(static_cast<size_t>(n), T{});
    into = vec.data();
  }
  if (n > 0 && H5Dread(ds, native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, into) < 0)
    throw_input("{}: cannot read dataset '{}'", path_, name);
  note_checksum(verify_checksum(ds, path_, name, into, static_cast<size_t>(n) * sizeof(T)));
  if constexpr (std::is_floating_point_v<T>) {
    if (finite)
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(into[i]))
          throw_input("{}: tensor '{}' holds {} at index {}: the checkpoint is corrupted", path_,
                      name, into[i], i);
  }
  return vec;
}

namespace {

// A write of the temporary file failed (errno says why): removes it and throws.
[[noreturn]] void abandon(const std::string& path, const std::string& tmp) {
  const std::string why = write_failure();
  std::error_code ec;
  std::filesystem::remove(tmp, ec);
  throw_error("cannot write checkpoint '{}': {}; the previous checkpoint (if any) is kept", path,
              why);
}

}  // namespace

CheckpointWriter::CheckpointWriter(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {
  io::hdf5_library();
  errno = 0;
  file_ = H5Fcreate(tmp_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file_ < 0) abandon(path_, tmp_);
  write_i64("meta/format", {kCheckpointFormat});
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
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  write_dataset(file_, path_, name, type, space, padded.data(), padded.size());
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
  errno = 0;
  herr_t rc = H5Fclose(static_cast<hid_t>(file_));
  file_ = -1;
  if (rc < 0) abandon(path_, tmp_);
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) {
    std::filesystem::remove(tmp_, ec);
    throw_error("cannot rename '{}' to '{}'", tmp_, path_);
  }
}

CheckpointReader::CheckpointReader(std::string path) : path_(std::move(path)) {
  io::hdf5_library();
  if (!std::filesystem::exists(path_)) throw_input("checkpoint '{}' does not exist", path_);
  file_ = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file_ < 0) throw_input("'{}' is not an HDF5 checkpoint", path_);
  if (has("meta/format")) format_ = read_i64("meta/format").at(0);
  if (format_ > kCheckpointFormat)
    throw_input("{}: checkpoint format {} is newer than this build reads ({})", path_, format_,
                kCheckpointFormat);
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
  static const std::map<std::string, std::string> kFormat1Names = {
      {"output/projection/weight", "output/projection"},
      {"output/projection/opt1", "output/projection_opt1"},
      {"output/projection/opt2", "output/projection_opt2"}};
  const auto old = format_ < 2 ? kFormat1Names.find(t.name) : kFormat1Names.end();
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        read_checked<T>(old != kFormat1Names.end() ? old->second : t.name, &t.shape, p,
                        /*finite=*/true);
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
  note_checksum(verify_checksum(ds, path_, name, out.data(), out.size()));
  while (!out.empty() && out.back() == '\0') out.pop_back();
  return out;
}

void CheckpointReader::note_checksum(bool verified) const {
  if (verified || warned_unverified_) return;
  warned_unverified_ = true;
  spdlog::warn(
      "{}: checkpoint has no checksums (written by an older version): its contents "
      "are not verified",
      path_);
}

std::vector<int64_t> CheckpointReader::read_i64(const std::string& name) const {
  return read_checked<int64_t>(name, nullptr, nullptr, false);
}
std::vector<uint64_t> CheckpointReader::read_u64(const std::string& name) const {
  return read_checked<uint64_t>(name, nullptr, nullptr, false);
}
std::vector<double> CheckpointReader::read_f64(const std::string& name) const {
  return read_checked<double>(name, nullptr, nullptr, false);
}

// ---- label-sharded checkpoints ----

ShardIndex read_shard_index(const CheckpointReader& r, int64_t num_labels) {
  ShardIndex idx;
  if (!r.has("meta/shards")) {
    idx.ranges = {{0, num_labels}};
    return idx;
  }
  const auto n = r.read_i64("meta/shards");
  const auto ranges = r.read_i64("meta/shard_ranges");
  const auto step = r.read_i64("meta/shard_step");
  if (n.size() != 1 || n[0] < 1 || step.size() != 1 ||
      ranges.size() != static_cast<size_t>(2 * n[0]))
    throw_input("{}: malformed shard index (meta/shards, meta/shard_ranges, meta/shard_step)",
                r.path());
  idx.processes = static_cast<int>(n[0]);
  idx.step = step[0];
  for (int s = 0; s < idx.processes; ++s) {
    const LabelRange g{ranges[static_cast<size_t>(2 * s)], ranges[static_cast<size_t>(2 * s + 1)]};
    const int64_t lo = s == 0 ? 0 : idx.ranges.back().hi;
    if (g.lo != lo || g.hi <= g.lo || (s + 1 == idx.processes && g.hi != num_labels))
      throw_input("{}: malformed shard index: shard {} holds labels [{}, {}) of {}", r.path(), s,
                  g.lo, g.hi, num_labels);
    idx.ranges.push_back(g);
  }
  return idx;
}

void write_shard_index(CheckpointWriter& w, const ShardIndex& index) {
  std::vector<int64_t> flat;
  for (const auto& r : index.ranges) flat.insert(flat.end(), {r.lo, r.hi});
  w.write_i64("meta/shards", {index.processes});
  w.write_i64("meta/shard_ranges", flat);
  w.write_i64("meta/shard_step", {index.step});
}

std::filesystem::path shard_file(const std::filesystem::path& index, int64_t step, int rank) {
  if (rank == 0) return index;
  return index.parent_path() / fmt::format("checkpoint.s{}.r{}.h5", step, rank);
}

// ---- the run's checkpoint: its position and schedule in meta/* (train/trainer.cpp) ----

void save_checkpoint(const fs::path& file, Model& model, const std::string& config_yaml,
                     const ResumePoint& p, const LrSchedule& schedule, Comm* comm,
                     int64_t* shard_step) {
  auto write = [&](const fs::path& f, bool with_index) {
    CheckpointWriter w(f.string());
    w.write_string("meta/config_yaml", config_yaml);
    model.save_state(w, comm == nullptr || comm->is_root());  // the encoder in rank 0's only
    w.write_i64("meta/epoch", {p.epoch});
    w.write_i64("meta/step", {p.step});
    w.write_i64("meta/epoch_step", {p.epoch_step, p.zero_grads, p.grads});
    w.write_f64("meta/epoch_partial", {p.loss_sum, p.seconds});
    w.write_u64("meta/rng_state", {p.rng.begin(), p.rng.end()});
    w.write_f64("meta/schedule", {schedule.plateau_factor(), schedule.best_metric(),
                                  static_cast<double>(schedule.bad_evals())});
    if (with_index) {  // the ranges shard_labels gives every rank
      ShardIndex idx{comm->size(), p.step, {}};
      for (int r = 0; r < comm->size(); ++r)
        idx.ranges.push_back(shard_labels(model.meta().num_labels, r, comm->size()));
      write_shard_index(w, idx);
    }
    w.commit();
  };
  if (comm == nullptr) {
    write(file, false);
    return;
  }
  const int rank = comm->rank();
  if (rank > 0) write(shard_file(file, p.step, rank), false);
  comm->barrier();                   // every other shard of this step is on disk
  if (rank == 0) write(file, true);  // the set's commit point
  comm->barrier();
  if (rank > 0 && *shard_step >= 0 && *shard_step != p.step) {
    std::error_code ec;
    fs::remove(shard_file(file, *shard_step, rank), ec);
  }
  *shard_step = p.step;
}

ResumePoint read_resume_point(const CheckpointReader& r) {
  ResumePoint p;
  p.config_yaml = r.read_string("meta/config_yaml");
  p.epoch = r.read_i64("meta/epoch").at(0);
  p.step = r.read_i64("meta/step").at(0);
  if (r.has("meta/epoch_step")) {
    auto es = r.read_i64("meta/epoch_step");
    auto ep = r.read_f64("meta/epoch_partial");
    if (es.size() != 3 || ep.size() != 2)
      throw_input("{}: meta/epoch_step must have 3 entries and meta/epoch_partial 2", r.path());
    p.epoch_step = es[0];
    p.zero_grads = es[1];
    p.grads = es[2];
    p.loss_sum = ep[0];
    p.seconds = ep[1];
  }
  auto st = r.read_u64("meta/rng_state");
  if (st.size() != 4) throw_input("{}: meta/rng_state must have 4 entries", r.path());
  p.rng = {st[0], st[1], st[2], st[3]};
  return p;
}

}  // namespace xmc
