#include "dist/nccl.h"

#include "core/error.h"
#include "dist/comm.h"

#if defined(XMC_WITH_NCCL)
#include <dlfcn.h>
#include <nccl.h>

#include <mutex>
#endif

namespace xmc::nccl {

#if defined(XMC_WITH_NCCL)

struct Communicator {
  ncclComm_t comm = nullptr;
};

namespace {

// The NCCL entry points this file calls, from libnccl.so.2 (dlopen once).
struct Api {
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRank) init_rank = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclCommDestroy) destroy = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
  std::string missing;  // why the library is unusable; empty when it loaded
};

template <class F>
void bind(void* lib, const char* name, F& f, std::string& missing) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (f == nullptr && missing.empty()) missing = std::string("libnccl.so.2 lacks ") + name;
}

const Api& api() {
  static Api a;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      a.missing = e != nullptr ? e : "libnccl.so.2 not found";
      return;
    }
    bind(lib, "ncclGetUniqueId", a.get_unique_id, a.missing);
    bind(lib, "ncclCommInitRank", a.init_rank, a.missing);
    bind(lib, "ncclAllReduce", a.all_reduce, a.missing);
    bind(lib, "ncclCommDestroy", a.destroy, a.missing);
    bind(lib, "ncclGetErrorString", a.error_string, a.missing);
  });
  return a;
}

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw_error("NCCL {} failed: {}", what, api().error_string(r));
}

}  // namespace

bool available(std::string* why) {
  const Api& a = api();
  if (why != nullptr) *why = a.missing;
  return a.missing.empty();
}

Communicator* create(Comm& comm) {
  const Api& a = api();
  XMC_CHECK(a.missing.empty(), "NCCL requested but unusable: {}", a.missing);
  ncclUniqueId id{};
  if (comm.is_root()) check(a.get_unique_id(&id), "ncclGetUniqueId");
  comm.broadcast(std::as_writable_bytes(std::span<ncclUniqueId>(&id, 1)), 0);
  auto* c = new Communicator;
  const ncclResult_t r = a.init_rank(&c->comm, comm.size(), id, comm.rank());
  if (r != ncclSuccess) {
    delete c;
    check(r, "ncclCommInitRank");
  }
  return c;
}

void allreduce_sum(Communicator* c, float* x, size_t n, gpu::Stream stream) {
  if (n == 0) return;
  check(api().all_reduce(x, x, n, ncclFloat32, ncclSum, c->comm, stream), "ncclAllReduce");
}

void destroy(Communicator* c) noexcept {
  if (c == nullptr) return;
  if (c->comm != nullptr) (void)api().destroy(c->comm);
  delete c;
}

#else  // built without NCCL

struct Communicator {};

bool available(std::string* why) {
  if (why != nullptr) *why = "built without NCCL (CUDA and nccl.h are needed at build time)";
  return false;
}

Communicator* create(Comm&) { throw_error("NCCL requested, but xmctrain was built without it"); }

void allreduce_sum(Communicator*, float*, size_t, gpu::Stream) {
  throw_error("NCCL requested, but xmctrain was built without it");
}

void destroy(Communicator* c) noexcept { delete c; }

#endif

}  // namespace xmc::nccl
