/* build/tests/tools/caps CAP...: whether this machine has each capability (tests/common/caps.h),
 * one line each ("CAP: yes" or "CAP: no: why"). Exit 0 if it has them all, 1 if one is missing,
 * 2 if a name has no probe. tests/run-all.sh asks it about every skip. */
#include <stdio.h>

#include "caps.h"

int main(int argc, char **argv) {
  int rc = 0;
  for (int i = 1; i < argc; i++) {
    char why[256];
    int have = capHave(argv[i], why, sizeof why);
    if (have == 1) printf("%s: yes\n", argv[i]);
    else printf("%s: %s: %s\n", argv[i], have == 0 ? "no" : "unknown", why);
    if (have != 1 && rc != 2) rc = have == 0 ? 1 : 2;
  }
  return rc;
}
