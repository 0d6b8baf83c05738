/*
 * gpu_probe.h - what GPU support this build has and what the machine offers.
 *
 * Built from gpu_probe_nccl.c when configure found CUDA and NCCL, from
 * gpu_probe_none.c otherwise, so callers never need an #ifdef.
 */
#ifndef DDPSIM_GPU_PROBE_H
#define DDPSIM_GPU_PROBE_H

#include <stddef.h>

/* 1 when this build contains the NCCL backend. */
int gpu_probe_built(void);

/* One line: the NCCL and CUDA versions and the visible GPUs, or why there are none. */
void gpu_probe_describe(char *buf, size_t len);

#endif
