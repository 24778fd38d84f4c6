#pragma once
// Checkpoints in HDF5. Every array is a dataset named by its path ("encoder/0/weight",
// "output/weight", ...), readable with h5py; scalars and strings are datasets too
// ("meta/epoch", "meta/config_yaml"). Every dataset carries the CRC-32 of its contents in
// the attribute "crc32", checked on load (InputError naming the file and the tensor);
// checkpoints of older versions have none and load with a warning. Model tensors must be
// finite. Written atomically: the writer works on "<path>.tmp.<pid>" and renames on
// commit(); a writer destroyed without commit() removes its temporary file, so a failed
// run (a full disk included) leaves no half-written checkpoint and keeps the previous one.
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/tensor_ref.h"
#include "dist/comm.h"

namespace xmc {

// The layout version every checkpoint records in "meta/format" (none: format 1). Format 2
// (issue 38): bottleneck's projection is a Projection, output/projection/{weight, opt1,
// opt2}; a format-1 file holds them as output/projection, output/projection_opt1, _opt2,
// which read() reads instead.
inline constexpr int64_t kCheckpointFormat = 2;

class CheckpointWriter {
 public:
  explicit CheckpointWriter(std::string path);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  void write(const TensorRef& t);
  void write_string(const std::string& name, const std::string& value);
  void write_i64(const std::string& name, const std::vector<int64_t>& values);
  void write_u64(const std::string& name, const std::vector<uint64_t>& values);
  void write_f64(const std::string& name, const std::vector<double>& values);
  // Closes the file and renames it to the final path.
  void commit();

 private:
  std::string path_, tmp_;
  int64_t file_ = -1;  // hid_t
};

class CheckpointReader {
 public:
  explicit CheckpointReader(std::string path);  // InputError if missing or not a checkpoint
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  bool has(const std::string& name) const;
  int64_t format() const { return format_; }
  // Reads into t's memory; the stored shape and type must match, the checksum too, and
  // floating-point values must be finite (InputError naming the tensor otherwise).
  void read(const TensorRef& t) const;
  std::string read_string(const std::string& name) const;
  std::vector<int64_t> read_i64(const std::string& name) const;
  std::vector<uint64_t> read_u64(const std::string& name) const;
  std::vector<double> read_f64(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  // Reads dataset `name` into `into` (of shape *expect), or into the vector returned when
  // `into` is null.
  template <class T>
  std::vector<T> read_checked(const std::string& name, const std::vector<int64_t>* expect, T* into,
                              bool finite) const;
  // Warns once per file when a dataset has no checksum.
  void note_checksum(bool verified) const;

  std::string path_;
  int64_t file_ = -1;
  int64_t format_ = 1;
  mutable bool warned_unverified_ = false;
};

// Checkpoints of label-sharded runs (mpirun, docs/distributed.md). Rank 0's file is the
// run's checkpoint.h5: its own shard (meta, encoder, its labels' output state) plus the
// index — meta/shards = N, meta/shard_ranges = [lo0, hi0, lo1, hi1, ...], meta/shard_step.
// Rank r > 0 writes checkpoint.s<step>.r<r>.h5 beside it. The set is committed by rank 0's
// atomic rename of checkpoint.h5, after every other shard of that step is on disk, so a
// crash at any point leaves the previous complete set; older shard files go after it.
struct ShardIndex {
  int processes = 1;  // 1: a one-process checkpoint (no index)
  int64_t step = 0;
  std::vector<LabelRange> ranges;  // [processes]
};

// The index of a checkpoint over num_labels labels (processes 1 for a one-process
// checkpoint); InputError for a malformed one — its ranges must be non-empty, consecutive
// and cover [0, num_labels).
ShardIndex read_shard_index(const CheckpointReader& r, int64_t num_labels);
void write_shard_index(CheckpointWriter& w, const ShardIndex& index);
// The file of rank `rank`'s shard at `step` beside the index file `index` (rank 0: index).
std::filesystem::path shard_file(const std::filesystem::path& index, int64_t step, int rank);

class LrSchedule;
class Model;

// Where a checkpoint stands: after `epoch` whole epochs and `epoch_step` steps of the next
// one (> 0 only for a checkpoint taken on SIGINT / SIGTERM), with the running sums of that
// epoch and the dropout stream positioned before its next batch.
struct ResumePoint {
  int64_t epoch = 0;
  int64_t step = 0;
  int64_t epoch_step = 0;
  std::array<uint64_t, 4> rng{};
  double loss_sum = 0.0;
  int64_t zero_grads = 0, grads = 0;
  double seconds = 0.0;  // training time of the partial epoch
  std::string config_yaml{};
};

// The checkpoint at `file`: meta/config_yaml, the model, the position `p` and the schedule
// (meta/*). Label-sharded (comm): every rank writes its shard, rank 0's file with the index
// last (above); *shard_step is the step of the shards on disk (-1: none yet), whose files
// are removed once the new set is committed.
void save_checkpoint(const std::filesystem::path& file, Model& model,
                     const std::string& config_yaml, const ResumePoint& p,
                     const LrSchedule& schedule, Comm* comm = nullptr,
                     int64_t* shard_step = nullptr);
// The position and config of a checkpoint (checkpoints of older versions have no
// epoch_step: they were all taken at the end of an epoch).
ResumePoint read_resume_point(const CheckpointReader& r);

}  // namespace xmc
