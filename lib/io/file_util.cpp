#include "io/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace xmc::io {

std::string printable(std::string_view bytes, size_t max) {
  std::string out;
  for (char c : bytes.substr(0, max)) {
    if (c >= 0x20 && c < 0x7f)
      out.push_back(c);
    else
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
  }
  if (bytes.size() > max) out += "...";
  return out;
}

FileStamp file_stamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw_input("cannot open '{}': {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw_input("'{}' is not a regular file", path);
  return {static_cast<int64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec,
          static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000LL + st.st_ctim.tv_nsec,
          static_cast<int64_t>(st.st_ino), static_cast<int64_t>(st.st_dev)};
}

void check_output_file(const std::string& path, const std::string& option) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) throw_input("{}: no file name given", option);
  if (path.back() == '/' || fs::is_directory(path, ec))
    throw_input("{} '{}' is a directory: give a file name, e.g. '{}'", option, path,
                (fs::path(path) / "predictions.txt").string());
  const fs::path parent = fs::absolute(path, ec).parent_path();
  // The nearest existing ancestor says why the parent cannot hold the file.
  fs::path p = parent;
  while (!p.empty() && !fs::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  if (p != parent) {
    if (fs::exists(p, ec) && !fs::is_directory(p, ec))
      throw_input("{} '{}': '{}' is not a directory", option, path, p.string());
    throw_input("{} '{}': directory '{}' does not exist", option, path, parent.string());
  }
  if (!fs::is_directory(parent, ec))
    throw_input("{} '{}': '{}' is not a directory", option, path, parent.string());
  if (::access(parent.c_str(), W_OK) != 0)
    throw_input("{} '{}': directory '{}' is not writable", option, path, parent.string());
}

std::string read_whole_file(const std::string& path) {
  return std::string(MappedFile(path).text());
}

MappedFile::MappedFile(const std::string& path) {
  const int64_t size = file_stamp(path).size;
  if (size == 0) return;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw_input("cannot open '{}': {}", path, std::strerror(errno));
  void* p = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED)
    throw_error("cannot map '{}' ({} bytes): {}", path, size, std::strerror(err));
  // One sequential pass per thread range: ask for read-ahead.
  ::madvise(p, static_cast<size_t>(size), MADV_SEQUENTIAL | MADV_WILLNEED);
  data_ = static_cast<const char*>(p);
  size_ = static_cast<size_t>(size);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<char*>(data_), size_);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  tmp_ = path_ + ".tmp." + std::to_string(::getpid());
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) throw_input("cannot write '{}': {}", path_, std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (f_) std::fclose(f_);
  if (!committed_) std::remove(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  XMC_CHECK(f_ != nullptr, "write to '{}' after commit", path_);
  if (bytes > 0 && std::fwrite(data, 1, bytes, f_) != bytes)
    throw_error("write to '{}' failed: {}", tmp_, std::strerror(errno));
}

void AtomicFile::commit() {
  XMC_CHECK(f_ != nullptr, "'{}' committed twice", path_);
  int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0) throw_error("closing '{}' failed: {}", tmp_, std::strerror(errno));
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw_error("renaming '{}' to '{}' failed: {}", tmp_, path_, std::strerror(errno));
  committed_ = true;
}

}  // namespace xmc::io
