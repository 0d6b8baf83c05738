/*
 * nccl_comm_none.c - the NCCL backend's interface in a build without NCCL.
 */
#include "nccl_comm.h"

#include "gpu_probe.h"

ddp_status nccl_comm_create(world_rank *wr, const nccl_settings *s, nccl_figures *fig, nccl_comm **out)
{
    (void)wr, (void)s, (void)fig;
    *out = NULL;
    return ddp_error(DDP_ERR_INVALID, "%s", GPU_PROBE_NOT_BUILT);
}

ddp_status nccl_comm_allreduce(nccl_comm *c, float *buf, size_t count, int avg)
{
    (void)c, (void)buf, (void)count, (void)avg;
    return ddp_error(DDP_ERR_INVALID, "%s", GPU_PROBE_NOT_BUILT);
}

void nccl_comm_destroy(nccl_comm *c, int abort) { (void)c, (void)abort; }
