/* WEFT_ALGO: which algorithms each collective may use (NCCL_ALGO's syntax, lib/algospec.c). */
#ifndef WEFT_ALGOSPEC_H_
#define WEFT_ALGOSPEC_H_

#include <stddef.h>
#include "weft.h"

struct weftAlgoSpec {
  unsigned allowed[weftNumColls]; /* bit a: weftAlgos[a] may run the collective */
  unsigned restricted;            /* WEFT_COLL_BIT of each collective the setting narrowed */
};

/* 0 with spec filled; -1 with the reason in err when text is not a valid WEFT_ALGO. */
int weftAlgoSpecParse(const char *text, struct weftAlgoSpec *spec, char *err, size_t len);
/* The check of WEFT_ALGO (weftParamCheckFn, param.h). */
int weftTuneCheckAlgo(const char *value, char *allowed, size_t len);

#endif
