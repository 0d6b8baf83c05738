/*
 * gpu_probe.h - what GPU support this build has and what the machine offers.
 *
 * Built from gpu_probe_nccl.c when configure found CUDA and NCCL, from
 * gpu_probe_none.c otherwise, so callers never need an #ifdef.
 *
 * The query runs in a short-lived child process: a process that has touched
 * the CUDA driver must not fork ranks that use CUDA, and the parent of a
 * run forks them all.
 */
#ifndef DDPSIM_GPU_PROBE_H
#define DDPSIM_GPU_PROBE_H

#include <stddef.h>

#include "status.h"

typedef struct gpu_info {
    int ngpus;                                   /* 0 when none is usable */
    int nccl_version;                            /* NCCL_VERSION_CODE form: 22803 = 2.28.3 */
    int runtime_version, driver_version;         /* CUDA's form: 13000 = 13.0 */
    char name[128];                              /* GPU 0 */
    size_t memory_bytes;                         /* GPU 0 */
    char error[256];                             /* why no GPU is usable ("" when ngpus > 0) */
} gpu_info;

/* What every refusal of --backend nccl in a build without NCCL says. */
#define GPU_PROBE_NOT_BUILT \
    "ddpsim was built without NCCL (configure found no CUDA/NCCL; see ./configure --with-cuda --with-nccl)"

/* 1 when this build contains the NCCL backend. */
int gpu_probe_built(void);

/*
 * Ask the CUDA runtime and NCCL, from a child process. DDP_OK when the
 * question was answered (ngpus may be 0, with the CUDA error in error);
 * DDP_ERR_SYSTEM when the probe process could not run or died;
 * DDP_ERR_INVALID in a build without NCCL.
 */
ddp_status gpu_probe_query(gpu_info *out);

/* One line: the NCCL and CUDA versions and the visible GPUs, or why there are none. */
void gpu_probe_describe(char *buf, size_t len);

/* "2.28.3" from 22803 (and the pre-2.9 form 2704 = 2.7.4). */
void gpu_probe_nccl_version_text(int code, char *buf, size_t len);

#endif
