/* Counting what a process holds (descriptors, threads, mappings, memory) and the /dev/shm
 * segments of the test's own rank processes. */
#include "harness.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int countOpenFds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1; /* the directory stream itself */
}

/* A thread that pthread_join has seen end can still be listed in /proc/self/task for a moment
 * (the kernel wakes the joiner before it releases the task), so a count right after destroy
 * may include it: wait up to waitMs for the count to come down to atMost. A thread that
 * stays is a leak. */
int countThreadsSettled(int atMost, int waitMs) {
  int n = countThreads();
  for (int waited = 0; n > atMost && waited < waitMs; waited += 5) {
    usleep(5000);
    n = countThreads();
  }
  return n;
}

int countThreads(void) {
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

int countMappings(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (f == NULL) return -1;
  int n = 0;
  for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
  fclose(f);
  return n;
}

long residentKb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  long kb = -1;
  while (kb < 0 && fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmRSS: %ld kB", &kb) != 1) kb = -1;
  fclose(f);
  return kb;
}

int countWeftMappings(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (f == NULL) return -1;
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, f)) n += strstr(line, "/dev/shm/weft") != NULL;
  fclose(f);
  return n;
}

/* Whether a /dev/shm name is a weft segment of pid: "weft-" then dash-separated fields, one of
 * them (the last is random) the creator's pid (lib/shmseg.c: weft-<pid namespace>-<pid>-...). */
static int segmentOf(const char *name, pid_t pid) {
  char want[24];
  snprintf(want, sizeof want, "%d", (int)pid);
  if (strncmp(name, "weft-", 5) != 0) return 0;
  for (const char *f = name + 5, *dash; (dash = strchr(f, '-')) != NULL; f = dash + 1)
    if ((size_t)(dash - f) == strlen(want) && strncmp(f, want, strlen(want)) == 0) return 1;
  return 0;
}

/* Removes the /dev/shm entries named after these processes, listing them in names (a failed
 * check must not leave them to the rest of the suite); returns how many there were. */
int takeSegmentsOf(const pid_t *pids, int n, char *names, size_t len) {
  DIR *d = opendir("/dev/shm");
  if (d == NULL) return 0;
  int found = 0;
  size_t o = 0;
  names[0] = '\0';
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    for (int i = 0; i < n; i++) {
      if (pids[i] <= 0 || !segmentOf(e->d_name, pids[i])) continue;
      found++;
      if (o < len) o += (size_t)snprintf(names + o, len - o, " %s (rank %d)", e->d_name, i);
      char path[300];
      snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
      unlink(path);
    }
  closedir(d);
  return found;
}

/* Every rank process the tests forked since the last segmentsLeft, so that a check of
 * /dev/shm looks at this test's segments only, not those of other weft jobs of the machine. */
#define MAX_NOTED_CHILDREN 4096
static pid_t notedChildren[MAX_NOTED_CHILDREN];
static int notedCount;

void noteChild(pid_t pid) {
  if (pid > 0 && notedCount < MAX_NOTED_CHILDREN) notedChildren[notedCount++] = pid;
}

int segmentsLeft(char *names, size_t len) {
  noteChild(getpid());
  int left = takeSegmentsOf(notedChildren, notedCount, names, len);
  notedCount = 0;
  return left;
}
