/*
 * gpu_probe_nccl.c - gpu_probe for builds with CUDA and NCCL. The CUDA
 * calls run in a forked child that writes its answer into a pipe: the
 * caller stays free of CUDA state and may fork rank processes afterwards.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <nccl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_probe.h"

#define PROBE_TIMEOUT_MS 60000 /* a first CUDA call can take seconds on a large machine */

int gpu_probe_built(void) { return 1; }

void gpu_probe_nccl_version_text(int code, char *buf, size_t len)
{
    if (code >= 10000) /* NCCL >= 2.9: major * 10000 + minor * 100 + patch */
        snprintf(buf, len, "%d.%d.%d", code / 10000, (code % 10000) / 100, code % 100);
    else
        snprintf(buf, len, "%d.%d.%d", code / 1000, (code % 1000) / 100, code % 100);
}

/* In the child: ask, fill *out. */
static void ask(gpu_info *out)
{
    ncclGetVersion(&out->nccl_version);
    cudaRuntimeGetVersion(&out->runtime_version);
    cudaDriverGetVersion(&out->driver_version);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(out->error, sizeof out->error, "cudaGetDeviceCount: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        return;
    }
    if (n < 1) {
        snprintf(out->error, sizeof out->error, "cudaGetDeviceCount: no GPU visible");
        return;
    }
    struct cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, 0);
    if (e != cudaSuccess) {
        snprintf(out->error, sizeof out->error, "cudaGetDeviceProperties: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        return;
    }
    snprintf(out->name, sizeof out->name, "%.127s", prop.name);
    out->memory_bytes = prop.totalGlobalMem;
    out->ngpus = n;
}

ddp_status gpu_probe_query(gpu_info *out)
{
    memset(out, 0, sizeof *out);
    int fd[2];
    if (pipe(fd) != 0)
        return ddp_error(DDP_ERR_SYSTEM, "GPU probe: pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        close(fd[0]);
        close(fd[1]);
        return ddp_error(DDP_ERR_SYSTEM, "GPU probe: fork: %s", strerror(err));
    }
    if (pid == 0) {
        close(fd[0]);
        gpu_info info;
        memset(&info, 0, sizeof info);
        ask(&info);
        ssize_t w = write(fd[1], &info, sizeof info);
        _exit(w == (ssize_t)sizeof info ? 0 : 1);
    }
    close(fd[1]);
    size_t got = 0;
    int timed_out = 0;
    while (got < sizeof *out) {
        struct pollfd p = {.fd = fd[0], .events = POLLIN};
        int r = poll(&p, 1, PROBE_TIMEOUT_MS);
        if (r == 0) {
            timed_out = 1;
            break;
        }
        if (r < 0 && errno == EINTR)
            continue;
        ssize_t k = r < 0 ? -1 : read(fd[0], (char *)out + got, sizeof *out - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fd[0]);
    if (timed_out)
        kill(pid, SIGKILL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (timed_out)
        return ddp_error(DDP_ERR_SYSTEM, "GPU probe: no answer from the CUDA runtime in %d s", PROBE_TIMEOUT_MS / 1000);
    if (got != sizeof *out) {
        if (WIFSIGNALED(st))
            return ddp_error(DDP_ERR_SYSTEM, "GPU probe: the probe process died of signal %d (%s)", WTERMSIG(st),
                             strsignal(WTERMSIG(st)));
        return ddp_error(DDP_ERR_SYSTEM, "GPU probe: the probe process gave no answer (exit status %d)",
                         WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    out->name[sizeof out->name - 1] = '\0';
    out->error[sizeof out->error - 1] = '\0';
    return DDP_OK;
}

void gpu_probe_describe(char *buf, size_t len)
{
    gpu_info g;
    if (gpu_probe_query(&g) != DDP_OK) {
        snprintf(buf, len, "built with NCCL; %s", ddp_error_text());
        return;
    }
    char v[32];
    gpu_probe_nccl_version_text(g.nccl_version, v, sizeof v);
    if (g.ngpus == 0)
        snprintf(buf, len, "built with NCCL %s, CUDA runtime %d.%d; no usable GPU (%s)", v, g.runtime_version / 1000,
                 (g.runtime_version % 1000) / 10, g.error);
    else
        snprintf(buf, len, "built with NCCL %s, CUDA runtime %d.%d, driver %d.%d; %d GPU(s) visible, GPU 0: %s", v,
                 g.runtime_version / 1000, (g.runtime_version % 1000) / 10, g.driver_version / 1000,
                 (g.driver_version % 1000) / 10, g.ngpus, g.name);
}
