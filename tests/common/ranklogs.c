/* The ranks' debug logs: see ranklogs.h. */
#include "ranklogs.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void rankLogsTo(const char *base) {
  char file[256];
  snprintf(file, sizeof file, "/tmp/%s.%%p", base);
  setenv("WEFT_DEBUG_FILE", file, 1);
}

/* One log's lines holding needle, counted into *n (the first kept, the others compared). */
static void scanLog(const char *path, const char *needle, char *first, size_t firstLen,
                    int *differ, int *n) {
  char line[1024];
  FILE *f = fopen(path, "r");
  for (char *at; f != NULL && fgets(line, sizeof line, f) != NULL;) {
    if ((at = strstr(line, needle)) == NULL) continue;
    if ((*n)++ == 0) snprintf(first, firstLen, "%s", at);
    else if (differ != NULL) *differ += strcmp(first, at) != 0;
  }
  if (f != NULL) fclose(f);
}

int rankLogLines(const char *base, const char *needle, char *first, size_t firstLen, int *differ,
                 int remove) {
  char own[1024];
  if (first == NULL || firstLen == 0) first = own, firstLen = sizeof own;
  first[0] = '\0';
  DIR *d = opendir("/tmp");
  if (d == NULL) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (strncmp(e->d_name, base, strlen(base)) != 0) continue;
    char path[512];
    snprintf(path, sizeof path, "/tmp/%s", e->d_name);
    scanLog(path, needle, first, firstLen, differ, &n);
    if (remove) unlink(path);
  }
  closedir(d);
  return n;
}
