/*
 * blas_pool.c - start ddpsim without OpenBLAS's thread pool (blas_pool.h).
 *
 * ddpsim computes on one OpenBLAS thread (model_runtime_init). OpenBLAS's
 * pthread build, Debian's default, starts a pool of worker threads anyway,
 * in its library constructor, before main, one per core. Each worker maps a
 * 128 MiB buffer as it starts; when the mapping fails (under `ulimit -v`) it
 * tries again forever (seen: 38392 failed 128 MiB mmaps in 3 s), and the next
 * fork or exit waits for it, since OpenBLAS joins its workers in a fork
 * handler and at exit: every ddpsim command hung, even `--version`, even
 * after printing an exit-2 message (issue 29, item 2).
 *
 * The constructor sizes the pool from OPENBLAS_NUM_THREADS, and nothing of
 * ddpsim's runs before it; so the one way to a process without the pool is
 * to start again: set OPENBLAS_NUM_THREADS=1 and execute the same program
 * with the same arguments. exec ends a stuck worker without waiting for it.
 */
#include "blas_pool.h"

#include "model.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void blas_pool_restart_without(char **argv)
{
    const char *set = getenv("OPENBLAS_NUM_THREADS");
    /* "1" is what the restart sets: a second start never restarts again, whatever the library does. */
    if (model_blas_threads() <= 1 || (set && strcmp(set, "1") == 0))
        return;
    if (setenv("OPENBLAS_NUM_THREADS", "1", 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    /* No /proc: go on with the pool, as before (it hangs only when its buffers cannot be mapped). */
}
