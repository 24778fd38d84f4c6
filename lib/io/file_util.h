#pragma once
// File helpers shared by the readers and writers: whole-file reads, the source stamp the
// binary cache keys on, and atomic writes (temporary name, then rename).
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace xmc::io {

// Identity and version of a file; the cache is valid only for an equal stamp. Size and
// mtime alone miss a rewrite whose mtime was set back (touch -d, cp -p, rsync -t); the
// change time (set by the kernel to the clock on every write or utime, never by a
// user) and the inode number catch it, up to the kernel's timestamp granularity.
struct FileStamp {
  int64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  int64_t inode = 0;
  int64_t device = 0;
};

// Bytes from a file made safe for a message: printable ASCII as is, every other byte as
// \xNN (a message never echoes raw binary to the terminal); cut to `max` bytes with "...".
std::string printable(std::string_view bytes, size_t max = 200);

// Throws InputError naming the path when it does not exist or is not a regular file.
FileStamp file_stamp(const std::string& path);

// Checks, before the work, that an output file can be created at `path` (InputError naming
// `option` otherwise): not a directory (nor ending in '/'), its parent a directory that
// exists and is writable.
void check_output_file(const std::string& path, const std::string& option);

// The whole file, copied from its MappedFile. Throws InputError when it cannot be opened.
std::string read_whole_file(const std::string& path);

// A read-only memory map of a whole file (no copy, no zero-fill: the parser reads the page
// cache directly). Throws InputError when the file cannot be opened.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
  std::string_view text() const { return {data_, size_}; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

// Writes to "<path>.tmp.<pid>" and renames onto `path` on commit(). Destroyed without
// commit() (an exception on the way), it removes the temporary file, so no half-written
// output remains. The constructor opens the file, so a bad path fails before the work.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  void write(const void* data, size_t bytes);
  void write(std::string_view s) { write(s.data(), s.size()); }
  void commit();
  const std::string& tmp_path() const { return tmp_; }

 private:
  std::string path_;
  std::string tmp_;
  std::FILE* f_ = nullptr;
  bool committed_ = false;
};

}  // namespace xmc::io
