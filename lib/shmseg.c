#include "shmseg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "liveness.h"
#include "log.h"

/* The inode of this process's PID namespace: pids only mean something within one. */
static unsigned long pidNamespace(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long)st.st_ino : 0;
}

static weftResult_t randomName(char name[WEFT_SHM_NAME_BYTES]) {
  uint64_t r[2];
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) return weftSetSysError(errno, "getrandom");
  snprintf(name, WEFT_SHM_NAME_BYTES, "/weft-%lu-%d-%016llx%08x", pidNamespace(), (int)getpid(),
           (unsigned long long)r[0], (unsigned)r[1]);
  return weftSuccess;
}

void weftShmSweepDead(void) {
  DIR *dir = opendir("/dev/shm");
  if (dir == NULL) return;
  unsigned long mine = pidNamespace();
  for (struct dirent *e; (e = readdir(dir)) != NULL;) {
    unsigned long ns = 0;
    int pid = 0, end = 0;
    if (sscanf(e->d_name, "weft-%lu-%d-%n", &ns, &pid, &end) != 2 || end == 0) continue;
    if (ns != mine || mine == 0 || pid <= 0 || pid == (int)getpid() || !weftProcessGone(pid))
      continue;
    char name[sizeof e->d_name + 1];
    snprintf(name, sizeof name, "/%s", e->d_name);
    INFO(WEFT_INIT, "removing %s: its creator (pid %d) is gone", name, pid);
    weftShmUnlink(name);
  }
  closedir(dir);
}

static weftResult_t mapFd(int fd, const char *name, size_t bytes, void **ptr) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return weftSetSysError(errno, "mmap of %zu bytes of %s", bytes, name);
  *ptr = p;
  return weftSuccess;
}

weftResult_t weftShmCreatePlaced(size_t bytes, char name[WEFT_SHM_NAME_BYTES], void **ptr,
                                 weftShmPlaceFn place, void *arg) {
  weftResult_t rc = randomName(name);
  if (rc != weftSuccess) return rc;
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return weftSetSysError(errno, "shm_open(%s)", name);
  void *p = NULL;
  int err = ftruncate(fd, (off_t)bytes) == 0 ? 0 : errno;
  if (err == 0) rc = mapFd(fd, name, bytes, &p);
  /* the policy set on the mapping is the object's (tmpfs's shared policy): the pages
   * allocated next follow it, where mbind would move none that no process has touched yet */
  if (p != NULL && place != NULL) place(p, bytes, arg);
  /* fallocate: a full /dev/shm fails here instead of SIGBUS on first touch */
  if (p != NULL) err = posix_fallocate(fd, 0, (off_t)bytes);
  close(fd);
  if (p != NULL && err == 0) {
    *ptr = p;
    return weftSuccess;
  }
  if (p != NULL) munmap(p, bytes);
  shm_unlink(name);
  if (rc != weftSuccess) return rc;
  return weftSetSysError(err, "cannot allocate %zu bytes of shared memory for %s (is /dev/shm full?)",
                         bytes, name);
}

weftResult_t weftShmCreate(size_t bytes, char name[WEFT_SHM_NAME_BYTES], void **ptr) {
  return weftShmCreatePlaced(bytes, name, ptr, NULL, NULL);
}

weftResult_t weftShmOpen(const char *name, size_t bytes, void **ptr) {
  int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && errno == ENOENT)
    return weftSetError(weftRemoteError,
                        "shm_open(%s) of a peer's segment: gone (the peer closed its end "
                        "after a failure of its own, or died)", name);
  if (fd < 0) return weftSetSysError(errno, "shm_open(%s) of a peer's segment", name);
  struct stat st;
  if (fstat(fd, &st) != 0 || (size_t)st.st_size < bytes) {
    close(fd);
    return weftSetError(weftInternalError, "shared segment %s is smaller than the %zu bytes expected",
                        name, bytes);
  }
  weftResult_t rc = mapFd(fd, name, bytes, ptr);
  close(fd);
  return rc;
}

void weftShmUnlink(const char *name) {
  if (shm_unlink(name) != 0 && errno != ENOENT) WARN("shm_unlink(%s): errno %d", name, errno);
}

void weftShmUnmap(void *ptr, size_t bytes) {
  if (ptr != NULL) munmap(ptr, bytes);
}
