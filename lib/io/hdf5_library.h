#pragma once
// Process-wide HDF5 settings (defined in hdf5.cpp), applied before the first HDF5 call of
// every reader and writer.
namespace xmc::io {

// No HDF5 error stack on stderr (our exceptions say what went wrong), and no HDF5 cleanup
// at exit: after a failed H5Fclose (a checkpoint write that hit a full disk) HDF5's atexit
// handler closes the half-closed file again and crashes (exit 139). Every file is closed
// by its owner before exit, so the cleanup has nothing left to do.
void hdf5_library();

}  // namespace xmc::io
