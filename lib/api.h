/* How the library defines the functions of include/weft.h. Each definition is marked
 * WEFT_PUBLIC and followed by WEFT_PROFILING_ALIAS(name):
 *   WEFT_PUBLIC weftResult_t weftCommCount(...) { ... }
 *   WEFT_PROFILING_ALIAS(weftCommCount);
 * The definition is weak, so a profiler's own weftX (in the program, or a library loaded
 * first) takes its place without a duplicate-symbol error, even when linking libweft.a; the
 * alias pweftX is strong and always names the library's code (NCCL's pncclX). Everything else
 * in the library has hidden visibility (-fvisibility=hidden in the Makefile). */
#ifndef WEFT_API_H_
#define WEFT_API_H_

#define WEFT_PUBLIC __attribute__((weak))
#define WEFT_PROFILING_ALIAS(fn) extern __typeof__(fn) p##fn __attribute__((alias(#fn)))

#endif
