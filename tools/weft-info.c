/* weft-info: what this weft build holds and how it is set here, as ucx_info or ompi_info do.
 * It prints the library's own tables (the registry of transports and algorithms, the
 * parameter declarations and their checks), so it cannot drift from what the library does.
 *   weft-info            version and features, transports (can each run here, and if not,
 *                        why), algorithms, every WEFT_* parameter: value, default, allowed, help
 *   weft-info -p         the parameters only
 *   weft-info --env-md   the table of docs/env.md (make env-doc writes it there)
 * Exits 1 when a WEFT_* value in the environment is not allowed: the library would refuse it. */
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "copy.h"
#include "reduce.h"
#include "settings.h"
#include "version.h"

static void printTransports(void) {
  printf("Transports (in order of preference; the first that connects two ranks carries them):\n");
  for (int t = 0; weftTransports[t] != NULL; t++) {
    char why[256] = "";
    int ok = weftTransports[t]->query(why, sizeof why);
    printf("  %-8s %s%s\n", weftTransports[t]->name, ok ? "can run here" : "cannot run here: ",
           ok ? "" : why);
  }
}

static void printAlgorithms(void) {
  printf("Algorithms (the tuner picks one per call; WEFT_ALGO forces one):\n");
  for (int a = 0; weftAlgos[a] != NULL; a++) printf("  %-8s AllReduce\n", weftAlgos[a]->name);
}

/* Prints every parameter; returns how many are set to a value the library refuses. */
static int printParams(void) {
  printf("Parameters (WEFT_* environment variables):\n");
  int bad = 0;
  for (int i = 0; i < weftParamTableCount; i++) {
    const struct weftParamInfo *p = &weftParamTable[i];
    char deflt[64], allowed[256];
    weftParamDefault(p, deflt, sizeof deflt);
    weftParamAllowed(p, allowed, sizeof allowed);
    const char *value = weftParamText(p->env);
    int refused = value != NULL && weftSettingsValueOk(p, value) != 0;
    bad += refused;
    if (value == NULL)
      printf("  %s = %s (default)\n", p->env, deflt[0] ? deflt : "(unset)");
    else
      printf("  %s = \"%s\" (environment; default %s)%s\n", p->env, value, deflt[0] ? deflt : "unset",
             refused ? "  NOT ALLOWED: the library refuses it" : "");
    printf("      allowed: %s\n      %s\n", allowed, p->help);
  }
  return bad;
}

static int usage(FILE *out) {
  fprintf(out, "usage: weft-info [-p | --env-md | -h]\n"
               "  (none)    version, build features, transports, algorithms, parameters\n"
               "  -p        parameters only: value, default, what is allowed, meaning\n"
               "  --env-md  the parameter table of docs/env.md (markdown)\n");
  return out == stdout ? 0 : 2;
}

int main(int argc, char **argv) {
  if (argc > 2) return usage(stderr);
  const char *opt = argc == 2 ? argv[1] : "";
  if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) return usage(stdout);
  if (strcmp(opt, "--env-md") == 0) {
    weftParamsPrintMarkdown(stdout);
    return 0;
  }
  if (strcmp(opt, "-p") != 0 && opt[0] != '\0') return usage(stderr);
  if (opt[0] == '\0') {
    printf("%s\n", weftVersionBanner());
    printf("Reduction kernels: %s in use; ", weftReduceKernelName());
    char allowed[256];
    weftReduceCheckSimd("-1", allowed, sizeof allowed); /* a value: the text names this CPU's */
    printf("WEFT_SIMD allows %s\n", allowed);
    printf("Streaming copies: %s, for collectives whose results on this host reach "
           "WEFT_NT_COPY_BYTES\n\n", weftCopyStreamingName());
    printTransports();
    printf("\n");
    printAlgorithms();
    printf("\n");
  }
  return printParams() > 0;
}
