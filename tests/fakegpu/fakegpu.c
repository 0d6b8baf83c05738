/*
 * fakegpu.c - a test double for the CUDA runtime and NCCL calls that
 * ddpsim's NCCL backend makes, so that the backend's plumbing (GPU probe,
 * per-rank environment, unique-id bootstrap, non-blocking waits, error
 * paths, exit codes, report) is tested on machines without a GPU. It is
 * LD_PRELOADed into a ddpsim built with NCCL (tests/nccl-fake.sh).
 *
 * It is not NCCL and says nothing about NCCL's numerics: "device" memory
 * is host memory, and the allreduce meets the other ranks in a shared
 * memory file named in the unique id and sums in REVERSE rank order
 * (so its bits differ from the reference's rank order, as NCCL's ring
 * does, and the ulp histogram and tolerance have something to show).
 *
 * Knobs (environment):
 *   FAKEGPU_NGPUS=K      GPUs cudaGetDeviceCount reports [1]; 0: cudaErrorNoDevice
 *   FAKEGPU_FAIL=CALL:R  CALL fails on rank R (ncclCommInitRankConfig, ncclAllReduce)
 *   FAKEGPU_HANG=R       rank R's allreduce never completes (its stream stays busy)
 *   FAKEGPU_LOG=FILE     append a line per probe and per communicator: pids, rank,
 *                        device and the NCCL_* variables the rank ran with
 */
#include <cuda_runtime.h>
#include <fcntl.h>
#include <nccl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define FAKE_CAP_BYTES ((size_t)64 << 20) /* per rank; a sparse file */
#define FAKE_WAIT_S 30.0

typedef struct fake_seg {
    _Atomic uint32_t count, gen;
} fake_seg;

struct ncclComm {
    int rank, nranks;
    fake_seg *seg;
    char *data; /* nranks * FAKE_CAP_BYTES */
    size_t map_bytes;
    ncclResult_t async;
    int hang;
};

struct CUevent_st {
    double t;
};
static int current_device;
static _Thread_local int stream_busy; /* FAKEGPU_HANG: a queued allreduce never ends */
static char last_error[256] = "";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

/* FAKEGPU_FAIL=CALL:R names this call on this rank? */
static int injected(const char *call, int rank)
{
    const char *v = getenv("FAKEGPU_FAIL");
    size_t n = strlen(call);
    return v && strncmp(v, call, n) == 0 && v[n] == ':' && atoi(v + n + 1) == rank;
}

static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...)
{
    const char *path = getenv("FAKEGPU_LOG");
    if (!path)
        return;
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
}

/* ---- CUDA runtime ---- */

cudaError_t cudaGetDeviceCount(int *count)
{
    log_line("probe pid=%d ppid=%d\n", (int)getpid(), (int)getppid());
    *count = env_int("FAKEGPU_NGPUS", 1);
    return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "fakegpu %d (a test double, not a GPU)", device);
    prop->totalGlobalMem = (size_t)1 << 30;
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "fakegpu error"; }
const char *cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorFake"; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaSetDevice(int device)
{
    if (device < 0 || device >= env_int("FAKEGPU_NGPUS", 1))
        return cudaErrorInvalidDevice;
    current_device = device;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = malloc(bytes ? bytes : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    *s = (cudaStream_t)malloc(1);
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) { free(s); return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t s)
{
    (void)s;
    return stream_busy ? cudaErrorNotReady : cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s)
{
    (void)kind, (void)s;
    memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    *e = calloc(1, sizeof **e);
    return *e ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) { free(e); return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    (void)s;
    e->t = now_s();
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    *ms = (float)((b->t - a->t) * 1e3);
    return cudaSuccess;
}

/* ---- NCCL ---- */

ncclResult_t ncclGetVersion(int *v) { *v = 22800; return ncclSuccess; }
const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "fakegpu NCCL error"; }
const char *ncclGetLastError(ncclComm_t c) { (void)c; return last_error; }

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    static int serial;
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "/fakegpu-%d-%d", (int)getpid(), serial++);
    int fd = shm_open(id->internal, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
        return ncclSystemError;
    close(fd);
    return ncclSuccess;
}

/* All ranks of c meet; -1 after FAKE_WAIT_S (a peer is gone). */
static int meet(ncclComm_t c)
{
    uint32_t g = atomic_load(&c->seg->gen);
    if (atomic_fetch_add(&c->seg->count, 1) + 1 == (uint32_t)c->nranks) {
        atomic_store(&c->seg->count, 0);
        atomic_fetch_add(&c->seg->gen, 1);
        return 0;
    }
    double t0 = now_s();
    while (atomic_load(&c->seg->gen) == g) {
        if (now_s() - t0 > FAKE_WAIT_S)
            return -1;
        sched_yield();
    }
    return 0;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config)
{
    *out = NULL;
    const char *vars[] = {"NCCL_HOSTID", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", "NCCL_ALGO", "NCCL_PROTO",
                          "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"};
    char env[512];
    size_t at = 0;
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        at += (size_t)snprintf(env + at, sizeof env - at, " %s=%s", vars[i], v ? v : "-");
    }
    log_line("comm rank=%d nranks=%d device=%d pid=%d ppid=%d%s\n", rank, nranks, current_device, (int)getpid(),
             (int)getppid(), env);
    if (injected("ncclCommInitRankConfig", rank)) {
        shm_unlink(id.internal); /* the peers waiting for it are stopped by ddpsim; leave nothing behind */
        snprintf(last_error, sizeof last_error, "fakegpu: injected failure of ncclCommInitRankConfig on rank %d", rank);
        return ncclSystemError;
    }
    ncclComm_t c = calloc(1, sizeof *c);
    if (!c)
        return ncclSystemError;
    c->rank = rank;
    c->nranks = nranks;
    c->hang = env_int("FAKEGPU_HANG", -1) == rank;
    c->map_bytes = 4096 + (size_t)nranks * FAKE_CAP_BYTES;
    int fd = shm_open(id.internal, O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)c->map_bytes) != 0) {
        snprintf(last_error, sizeof last_error, "fakegpu: cannot open the bootstrap segment %s", id.internal);
        if (fd >= 0)
            close(fd);
        free(c);
        return ncclSystemError;
    }
    void *p = mmap(NULL, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        free(c);
        return ncclSystemError;
    }
    c->seg = p;
    c->data = (char *)p + 4096;
    int ok = meet(c) == 0;
    if (rank == 0)
        shm_unlink(id.internal); /* everyone has it open */
    if (!ok) {
        munmap(c->seg, c->map_bytes);
        free(c);
        snprintf(last_error, sizeof last_error, "fakegpu: peers never arrived");
        return ncclSystemError;
    }
    *out = c;
    /* A non-blocking communicator reports its end through ncclCommGetAsyncError. */
    c->async = ncclSuccess;
    return config && config->blocking == 0 ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r)
{
    *r = c->async;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t s)
{
    (void)s;
    if (type != ncclFloat32 || (op != ncclSum && op != ncclAvg) || count * sizeof(float) > FAKE_CAP_BYTES)
        return ncclInvalidArgument;
    if (injected("ncclAllReduce", c->rank)) {
        snprintf(last_error, sizeof last_error, "fakegpu: injected failure of ncclAllReduce on rank %d", c->rank);
        return ncclUnhandledCudaError;
    }
    if (c->hang) {
        stream_busy = 1;
        return ncclSuccess;
    }
    memcpy(c->data + (size_t)c->rank * FAKE_CAP_BYTES, send, count * sizeof(float));
    if (meet(c) != 0)
        return c->async = ncclSystemError;
    float *out = recv, scale = op == ncclAvg ? (float)(1.0 / c->nranks) : 1.0f;
    for (size_t i = 0; i < count; i++) {
        float acc = 0;
        for (int r = c->nranks - 1; r >= 0; r--) {
            float x = ((const float *)(c->data + (size_t)r * FAKE_CAP_BYTES))[i];
            acc += op == ncclAvg ? x * scale : x;
        }
        out[i] = acc;
    }
    if (meet(c) != 0)
        return c->async = ncclSystemError;
    return ncclSuccess;
}

static void release(ncclComm_t c)
{
    munmap(c->seg, c->map_bytes);
    free(c);
}
ncclResult_t ncclCommFinalize(ncclComm_t c) { (void)c; return ncclSuccess; }
ncclResult_t ncclCommDestroy(ncclComm_t c) { release(c); return ncclSuccess; }
ncclResult_t ncclCommAbort(ncclComm_t c)
{
    log_line("abort rank=%d\n", c->rank);
    release(c);
    return ncclSuccess;
}
