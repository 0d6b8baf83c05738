/*
 * gpu_probe_nccl.c - gpu_probe for builds with CUDA and NCCL: reports the
 * NCCL library version and how many GPUs the CUDA runtime sees (none on a
 * machine without a driver, which is not an error here).
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>

#include "gpu_probe.h"

int gpu_probe_built(void) { return 1; }

void gpu_probe_describe(char *buf, size_t len)
{
    int nccl = 0, rt = 0, ngpu = 0;
    ncclGetVersion(&nccl);
    cudaRuntimeGetVersion(&rt);
    cudaError_t e = cudaGetDeviceCount(&ngpu);
    int maj = nccl / 10000, min = (nccl % 10000) / 100, patch = nccl % 100;
    if (e != cudaSuccess)
        snprintf(buf, len, "built with NCCL %d.%d.%d, CUDA runtime %d.%d; no usable GPU (%s)", maj, min, patch,
                 rt / 1000, (rt % 1000) / 10, cudaGetErrorString(e));
    else
        snprintf(buf, len, "built with NCCL %d.%d.%d, CUDA runtime %d.%d; %d GPU(s) visible", maj, min, patch,
                 rt / 1000, (rt % 1000) / 10, ngpu);
}
