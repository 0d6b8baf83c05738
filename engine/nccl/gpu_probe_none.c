/*
 * gpu_probe_none.c - gpu_probe for builds without CUDA/NCCL.
 */
#include <stdio.h>
#include <string.h>

#include "gpu_probe.h"

int gpu_probe_built(void) { return 0; }

ddp_status gpu_probe_query(gpu_info *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->error, sizeof out->error, "%s", GPU_PROBE_NOT_BUILT);
    return ddp_error(DDP_ERR_INVALID, "%s", GPU_PROBE_NOT_BUILT);
}

void gpu_probe_describe(char *buf, size_t len)
{
    snprintf(buf, len, "not built (configure found no CUDA/NCCL; see --with-cuda, --with-nccl)");
}

void gpu_probe_nccl_version_text(int code, char *buf, size_t len)
{
    snprintf(buf, len, "%d", code);
}
