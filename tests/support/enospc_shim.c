/* Fault injection for the disk-full tests, loaded with LD_PRELOAD into the real binary:
 * writes to files whose path contains $XMC_ENOSPC_PATH fail with ENOSPC once
 * $XMC_ENOSPC_AFTER bytes (default 0) have been written to such files, as on a full disk.
 * Covers write, pwrite, pwrite64 and writev, the calls that libstdc++ streams and HDF5's
 * sec2 driver make; other files are untouched. Without XMC_ENOSPC_PATH it does nothing. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static long long written_so_far = 0;

/* 1 when this write must fail: the fd names a matching file and the budget is spent. */
static int must_fail(int fd, size_t count) {
  const char* pattern = getenv("XMC_ENOSPC_PATH");
  if (pattern == NULL || pattern[0] == '\0') return 0;
  char link[64], target[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n < 0) return 0;
  target[n] = '\0';
  if (strstr(target, pattern) == NULL) return 0;
  const char* after = getenv("XMC_ENOSPC_AFTER");
  const long long budget = after ? atoll(after) : 0;
  if (written_so_far + (long long)count > budget) {
    errno = ENOSPC;
    return 1;
  }
  written_so_far += (long long)count;
  return 0;
}

#define NEXT(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

ssize_t write(int fd, const void* buf, size_t count) {
  if (must_fail(fd, count)) return -1;
  return NEXT(write)(fd, buf, count);
}

ssize_t pwrite(int fd, const void* buf, size_t count, off_t offset) {
  if (must_fail(fd, count)) return -1;
  return NEXT(pwrite)(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void* buf, size_t count, off_t offset) {
  if (must_fail(fd, count)) return -1;
  return NEXT(pwrite64)(fd, buf, count, offset);
}

ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  size_t count = 0;
  for (int i = 0; i < iovcnt; ++i) count += iov[i].iov_len;
  if (must_fail(fd, count)) return -1;
  return NEXT(writev)(fd, iov, iovcnt);
}
