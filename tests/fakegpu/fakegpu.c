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
 * It is honest about what CUDA and NCCL document and ddpsim's plumbing
 * depends on:
 *  - ncclAllReduce only enqueues: the reduction completes on the stream
 *    once every rank has arrived (cudaStreamQuery says cudaErrorNotReady
 *    until then), and copies and events queued behind it wait for it;
 *  - cudaMemcpyAsync between the device and PAGEABLE host memory returns
 *    only once the stream's earlier work and the copy are done (CUDA's
 *    "API synchronization behavior"); with memory from cudaHostAlloc or
 *    cudaHostRegister it returns at once. So a hung allreduce blocks a
 *    pageable copy-out forever, as on a GPU;
 *  - a non-blocking communicator's init returns ncclInProgress, and
 *    ncclCommGetAsyncError says ncclInProgress for a while (FAKEGPU_INIT_MS)
 *    before ncclSuccess;
 *  - two ranks on the same device with the same NCCL_HOSTID (or none: the
 *    host name) are refused at init, "Duplicate GPU detected", as NCCL does.
 *
 * Knobs (environment):
 *   FAKEGPU_NGPUS=K      GPUs cudaGetDeviceCount reports [1]; 0: cudaErrorNoDevice
 *   FAKEGPU_FAIL=CALL:R  CALL fails on rank R (ncclCommInitRankConfig, ncclAllReduce)
 *   FAKEGPU_HANG=R       rank R's allreduce never completes (its stream stays busy)
 *   FAKEGPU_INIT_MS=T    a non-blocking init stays in progress for T ms [20]
 *   FAKEGPU_FORCE_HOSTID=X  every rank reports host id X whatever NCCL_HOSTID says
 *                        (a launcher exporting one id to every rank): shows the
 *                        duplicate-GPU refusal firing
 *   FAKEGPU_LOG=FILE     append a line per probe and per communicator: pids, rank,
 *                        device and the NCCL_* variables the rank ran with
 *   FAKEGPU_SHM_TAG=T    the bootstrap segments are /dev/shm/fakegpuT-<pid>-<n>, not
 *                        fakegpu-<pid>-<n>: a test's own, among those of tests beside it
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
#define FAKE_MAX_RANKS 256
#define FAKE_HOST_LEN 64

typedef struct fake_seg {
    _Atomic uint32_t count, gen;        /* meet(): init's and teardown's barrier */
    _Atomic uint32_t arrived[2];        /* allreduce k's arrivals, k % 2 (ranks are never two apart) */
    struct {
        int device;
        char host[FAKE_HOST_LEN];
    } who[FAKE_MAX_RANKS]; /* each rank's device and host id, for NCCL's duplicate-GPU check */
} fake_seg;

struct ncclComm {
    int rank, nranks;
    fake_seg *seg;
    char *data; /* nranks * FAKE_CAP_BYTES */
    size_t map_bytes;
    ncclResult_t async;
    int hang;
    double ready_at;  /* a non-blocking init is in progress until then */
    uint32_t calls;   /* allreduces enqueued so far */
};

/* Rank r's input to allreduce k: two slots per rank, by k's parity. */
static void *slot(ncclComm_t c, int r, uint32_t k)
{
    return c->data + (size_t)r * FAKE_CAP_BYTES + (k % 2) * (FAKE_CAP_BYTES / 2);
}

struct CUevent_st {
    double t;
};
static int current_device;
struct ncclComm;

/*
 * The stream, per thread (ddpsim's backend uses one stream per thread that reduces): a queue of copies,
 * event records and at most one allreduce, run in order as far as they can go. An allreduce completes
 * when every rank has arrived; with FAKEGPU_HANG on this rank it never does.
 */
enum { Q_COPY, Q_EVENT, Q_ALLREDUCE };
typedef struct q_item {
    int kind;
    void *dst;
    const void *src;
    size_t bytes;
    struct CUevent_st *ev;
    struct ncclComm *comm;   /* Q_ALLREDUCE: */
    uint32_t gen;            /* the arrival generation it waits for */
    size_t count;
    int avg, hang;
} q_item;
#define FAKE_QUEUE 16
static _Thread_local q_item queue[FAKE_QUEUE];
static _Thread_local int qhead, qlen;
static int progress(void);
static char last_error[256] = "";

/* Page-locked host memory (cudaHostAlloc, cudaHostRegister): copies to and from it are asynchronous. */
#define FAKE_MAX_PINNED 64
static struct {
    const char *p;
    size_t bytes;
} pinned[FAKE_MAX_PINNED];

static int pin(const void *p, size_t bytes)
{
    for (int i = 0; i < FAKE_MAX_PINNED; i++)
        if (!pinned[i].p) {
            pinned[i].p = p;
            pinned[i].bytes = bytes;
            return 0;
        }
    return -1;
}

static int unpin(const void *p)
{
    for (int i = 0; i < FAKE_MAX_PINNED; i++)
        if (pinned[i].p == p) {
            pinned[i].p = NULL;
            return 0;
        }
    return -1;
}

static int is_pinned(const void *p, size_t bytes)
{
    const char *c = p;
    for (int i = 0; i < FAKE_MAX_PINNED; i++)
        if (pinned[i].p && c >= pinned[i].p && c + bytes <= pinned[i].p + pinned[i].bytes)
            return 1;
    return 0;
}

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
    return progress() ? cudaErrorNotReady : cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
    (void)flags;
    *p = malloc(bytes ? bytes : 1);
    if (!*p)
        return cudaErrorMemoryAllocation;
    if (pin(*p, bytes) != 0) {
        free(*p);
        return cudaErrorMemoryAllocation;
    }
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p)
{
    if (unpin(p) != 0)
        return cudaErrorInvalidValue;
    free(p);
    return cudaSuccess;
}
cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned flags)
{
    (void)flags;
    return pin(p, bytes) == 0 ? cudaSuccess : cudaErrorHostMemoryAlreadyRegistered;
}
cudaError_t cudaHostUnregister(void *p) { return unpin(p) == 0 ? cudaSuccess : cudaErrorHostMemoryNotRegistered; }

/*
 * A copy on a stream. Between the device and pageable host memory CUDA returns only once the stream's
 * earlier work and the copy are done: behind a hung allreduce, never (this double blocks, as a GPU
 * would, until the process is killed). With page-locked memory it returns at once.
 */
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s)
{
    (void)s;
    const void *host = kind == cudaMemcpyDeviceToHost ? dst : kind == cudaMemcpyHostToDevice ? src : NULL;
    if (host && !is_pinned(host, bytes)) {
        while (progress())
            usleep(1000);
        memmove(dst, src, bytes);
        return cudaSuccess;
    }
    if (qlen == FAKE_QUEUE)
        return cudaErrorLaunchOutOfResources;
    queue[(qhead + qlen++) % FAKE_QUEUE] = (q_item){.kind = Q_COPY, .dst = dst, .src = src, .bytes = bytes};
    progress();
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
    if (qlen == FAKE_QUEUE)
        return cudaErrorLaunchOutOfResources;
    queue[(qhead + qlen++) % FAKE_QUEUE] = (q_item){.kind = Q_EVENT, .ev = e};
    progress();
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
    /* FAKEGPU_SHM_TAG: a test's own mark in the name, so that it finds its leftovers among those of tests beside it */
    const char *tag = getenv("FAKEGPU_SHM_TAG");
    snprintf(id->internal, sizeof id->internal, "/fakegpu%.16s-%d-%d", tag ? tag : "", (int)getpid(), serial++);
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
    c->map_bytes = sizeof(fake_seg) + 4096 + (size_t)nranks * FAKE_CAP_BYTES;
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
    c->data = (char *)p + sizeof(fake_seg) + 4096;
    if (rank < FAKE_MAX_RANKS) {
        const char *host = getenv("FAKEGPU_FORCE_HOSTID") ? getenv("FAKEGPU_FORCE_HOSTID") : getenv("NCCL_HOSTID");
        char name[FAKE_HOST_LEN] = "";
        if (!host || !*host) {
            gethostname(name, sizeof name - 1);
            host = name;
        }
        c->seg->who[rank].device = current_device;
        snprintf(c->seg->who[rank].host, FAKE_HOST_LEN, "%s", host);
    }
    int ok = meet(c) == 0;
    if (rank == 0)
        shm_unlink(id.internal); /* everyone has it open */
    if (!ok) {
        munmap(c->seg, c->map_bytes);
        free(c);
        snprintf(last_error, sizeof last_error, "fakegpu: peers never arrived");
        return ncclSystemError;
    }
    /* NCCL's bootstrap: two ranks of one host on one device is "Duplicate GPU detected". */
    for (int r = 0; r < nranks && r < FAKE_MAX_RANKS; r++)
        if (r != rank && c->seg->who[r].device == current_device &&
            strcmp(c->seg->who[r].host, c->seg->who[rank].host) == 0) {
            snprintf(last_error, sizeof last_error,
                     "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d (NCCL_HOSTID %s)", rank, r,
                     current_device, c->seg->who[rank].host);
            meet(c); /* every rank has read the table before the segment goes */
            munmap(c->seg, c->map_bytes);
            free(c);
            return ncclInvalidUsage;
        }
    meet(c);
    *out = c;
    /* A non-blocking communicator reports its end through ncclCommGetAsyncError, after a while. */
    c->async = ncclSuccess;
    if (config && config->blocking == 0) {
        c->ready_at = now_s() + env_int("FAKEGPU_INIT_MS", 20) * 1e-3;
        return ncclInProgress;
    }
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r)
{
    *r = c->async == ncclSuccess && now_s() < c->ready_at ? ncclInProgress : c->async;
    return ncclSuccess;
}

/*
 * Enqueue: this rank's input goes into the slot of its k-th allreduce (k % 2: a rank can be one allreduce
 * ahead of another, never two), and it arrives; the sum, in REVERSE rank order, is taken on the stream once
 * every rank has.
 */
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t s)
{
    (void)s;
    if (type != ncclFloat32 || (op != ncclSum && op != ncclAvg) || count * sizeof(float) > FAKE_CAP_BYTES / 2)
        return ncclInvalidArgument;
    if (injected("ncclAllReduce", c->rank)) {
        snprintf(last_error, sizeof last_error, "fakegpu: injected failure of ncclAllReduce on rank %d", c->rank);
        return ncclUnhandledCudaError;
    }
    if (qlen == FAKE_QUEUE)
        return ncclInternalError;
    q_item it = {.kind = Q_ALLREDUCE, .dst = recv, .comm = c, .gen = c->calls, .count = count,
                 .avg = op == ncclAvg, .hang = c->hang};
    if (!c->hang) { /* a hung rank never even arrives */
        memcpy(slot(c, c->rank, c->calls), send, count * sizeof(float));
        atomic_fetch_add(&c->seg->arrived[c->calls % 2], 1);
    }
    c->calls++;
    queue[(qhead + qlen++) % FAKE_QUEUE] = it;
    progress();
    return ncclSuccess;
}

/* Run the stream's queue as far as it can go; 1 while something is still waiting. */
static int progress(void)
{
    while (qlen) {
        q_item *it = &queue[qhead];
        if (it->kind == Q_COPY) {
            memmove(it->dst, it->src, it->bytes);
        } else if (it->kind == Q_EVENT) {
            it->ev->t = now_s();
        } else {
            ncclComm_t c = it->comm;
            _Atomic uint32_t *arrived = &c->seg->arrived[it->gen % 2];
            /* every rank's arrival for this allreduce: the counter runs on by nranks per use of its parity */
            uint32_t want = (uint32_t)c->nranks * (it->gen / 2 + 1);
            if (it->hang || atomic_load(arrived) < want)
                return 1;
            float *out = it->dst, scale = it->avg ? (float)(1.0 / c->nranks) : 1.0f;
            for (size_t i = 0; i < it->count; i++) {
                float acc = 0;
                for (int r = c->nranks - 1; r >= 0; r--) {
                    float x = ((const float *)slot(c, r, it->gen))[i];
                    acc += it->avg ? x * scale : x;
                }
                out[i] = acc;
            }
        }
        qhead = (qhead + 1) % FAKE_QUEUE;
        qlen--;
    }
    return 0;
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
