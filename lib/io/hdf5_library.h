#pragma once
// Process-wide HDF5 settings (defined in hdf5.cpp), applied before the first HDF5 call of
// every reader and writer, and the owner of an HDF5 identifier.
#include <hdf5.h>

namespace xmc::io {

// No HDF5 error stack on stderr (our exceptions say what went wrong), and no HDF5 cleanup
// at exit: after a failed H5Fclose (a checkpoint write that hit a full disk) HDF5's atexit
// handler closes the half-closed file again and crashes (exit 139). Every file is closed
// by its owner before exit, so the cleanup has nothing left to do.
void hdf5_library();

// Owns one HDF5 identifier (closed with the matching H5?close); converts to it.
class Hid {
 public:
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() {
    if (id_ >= 0) close_(id_);
  }
  operator hid_t() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

}  // namespace xmc::io
