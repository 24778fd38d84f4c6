#pragma once
// NCCL for the collectives of GPU ranks (dist/gpu_link.cpp). Built when CUDA is on and
// nccl.h is found (CMake XMC_WITH_NCCL); libnccl.so.2 is loaded at run time (dlopen), so
// the binary runs, and falls back to MPI, where it is missing (the GPU kit does not carry
// its ~200 MB). The communicator is bootstrapped through the job's Comm: ncclGetUniqueId
// on rank 0, broadcast, ncclCommInitRank on every rank.
#include <cstddef>
#include <string>

#include "core/cuda_context.h"

namespace xmc {
class Comm;
}

namespace xmc::nccl {

struct Communicator;  // ncclComm_t

// Whether this process can use NCCL: built with it and the library loads; else the
// reason in *why.
bool available(std::string* why);
// Collective over comm (every rank calls it, on the GPU its CudaContext selected).
Communicator* create(Comm& comm);
// In place, queued on `stream`.
void allreduce_sum(Communicator* c, float* x, size_t n, gpu::Stream stream);
void destroy(Communicator* c) noexcept;

}  // namespace xmc::nccl
