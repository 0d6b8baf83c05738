/*
 * gpu_probe_none.c - gpu_probe for builds without CUDA/NCCL.
 */
#include <stdio.h>

#include "gpu_probe.h"

int gpu_probe_built(void) { return 0; }

void gpu_probe_describe(char *buf, size_t len)
{
    snprintf(buf, len, "not built (configure found no CUDA/NCCL; see --with-cuda, --with-nccl)");
}
