/*
 * nccl_comm.c - the NCCL backend of one rank (nccl_comm.h).
 */
#include "nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "coll.h"
#include "hash.h"
#include "nccl_env.h"

struct nccl_comm {
    world_rank *wr;
    int rank, n;
    nccl_settings set;
    nccl_figures *fig;
    ncclComm_t comm;
    int have_stream, have_events;
    cudaStream_t stream;
    cudaEvent_t ev_start, ev_end;
    float *dev;                 /* device buffer, grown on demand */
    size_t dev_count;
    float *host;                /* page-locked staging (cudaHostAlloc), as large as dev: copies through it are
                                 * asynchronous, so every wait goes through the polling loop (wait_stream). A
                                 * copy to or from pageable memory returns only when the stream's work is done:
                                 * behind a hung allreduce, never, and no deadline or abort could be seen. */
    float *emul;                /* host copy of the input for the CPU ring emulation */
    size_t emul_count;
    int failed;                 /* a call failed: abort instead of finalize */
};


static ddp_status cuda_failed(nccl_comm *c, const char *call, cudaError_t e)
{
    c->failed = 1;
    return ddp_error(DDP_ERR_BACKEND, "%s on GPU %d: %s (%s)", call, c->fig->device, cudaGetErrorString(e),
                     cudaGetErrorName(e));
}

static ddp_status nccl_failed(nccl_comm *c, const char *call, ncclResult_t r)
{
    c->failed = 1;
    const char *detail = c->comm ? ncclGetLastError(c->comm) : ncclGetLastError(NULL);
    return ddp_error(DDP_ERR_BACKEND, "%s: %s%s%s", call, ncclGetErrorString(r), detail && detail[0] ? ": " : "",
                     detail ? detail : "");
}

#define CUDA_TRY(c, call)                                \
    do {                                                 \
        cudaError_t cuda_try_e_ = (call);                \
        if (cuda_try_e_ != cudaSuccess)                  \
            return cuda_failed((c), #call, cuda_try_e_); \
    } while (0)

/* Back off gently: spin a little (a fast collective), then sleep 50 us at a time. */
static void pause_poll(unsigned *spins)
{
    if (++*spins < 2000) {
        sched_yield();
        return;
    }
    clock_sleep_us(50);
}

/*
 * Why a wait must stop (DDP_OK: go on waiting): NCCL reported an error,
 * the world is aborting, or the deadline passed.
 */
static ddp_status wait_verdict(nccl_comm *c, const char *what, double t0, double limit_s)
{
    if (c->comm) {
        ncclResult_t ae = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(c->comm, &ae);
        if (r != ncclSuccess)
            return nccl_failed(c, "ncclCommGetAsyncError", r);
        if (ae != ncclSuccess && ae != ncclInProgress)
            return nccl_failed(c, what, ae);
    }
    if (world_aborted(c->wr)) {
        c->failed = 1;
        return ddp_error(DDP_ERR_ABORTED, "%s: another rank failed; NCCL communicator aborted", what);
    }
    if (limit_s > 0 && clock_now_s() - t0 > limit_s) {
        c->failed = 1;
        return ddp_error(DDP_ERR_TIMEOUT, "%s did not finish in %.1f s; NCCL communicator aborted", what, limit_s);
    }
    return DDP_OK;
}

/*
 * A non-blocking communicator's call in progress: wait until NCCL says it is done. Initialisation has its
 * own deadline (init_timeout_s: bootstrapping many ranks, on sockets or time-sliced contexts, can be slow)
 * and tells the world it is making progress while it waits, so the watchdog does not read a slow init as a
 * hang; it still ends at its deadline, or when the world aborts.
 */
static ddp_status wait_comm(nccl_comm *c, const char *what, int init)
{
    double t0 = clock_now_s(), marked = t0;
    double limit = init ? c->set.init_timeout_s : c->set.timeout_s;
    unsigned spins = 0;
    for (;;) {
        if (init && clock_now_s() - marked > 0.25) {
            world_set_op(c->wr, -1, "ncclCommInitRankConfig");
            marked = clock_now_s();
        }
        ncclResult_t ae = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(c->comm, &ae);
        if (r != ncclSuccess)
            return nccl_failed(c, "ncclCommGetAsyncError", r);
        if (ae == ncclSuccess)
            return DDP_OK;
        if (ae != ncclInProgress)
            return nccl_failed(c, what, ae);
        DDP_CHECK(wait_verdict(c, what, t0, limit));
        pause_poll(&spins);
    }
}

/* Wait for everything queued on the stream. */
static ddp_status wait_stream(nccl_comm *c, const char *what)
{
    double t0 = clock_now_s();
    unsigned spins = 0;
    for (;;) {
        cudaError_t e = cudaStreamQuery(c->stream);
        if (e == cudaSuccess)
            return DDP_OK;
        if (e != cudaErrorNotReady)
            return cuda_failed(c, what, e);
        DDP_CHECK(wait_verdict(c, what, t0, c->set.timeout_s));
        pause_poll(&spins);
    }
}

/* An NCCL call on the non-blocking communicator: fine, in progress (then wait), or failed. */
static ddp_status nccl_call(nccl_comm *c, const char *what, ncclResult_t r)
{
    if (r == ncclSuccess)
        return DDP_OK;
    if (r == ncclInProgress)
        return wait_comm(c, what, 0);
    return nccl_failed(c, what, r);
}

static ddp_status setup(nccl_comm *c)
{
    /* The plan of this rank's host: in an MPI job over several, its place among that host's ranks and GPUs. */
    nccl_env_plan plan;
    char host[64] = "";
    int spread = world_local_size(c->wr) < c->n;
    if (spread)
        gethostname(host, sizeof host - 1);
    nccl_env_plan_make(world_local_rank(c->wr), world_local_size(c->wr), c->set.ngpus, spread ? host : NULL, &plan);
    c->fig->device = plan.device;
    c->fig->separate_hosts = plan.separate_hosts;
    DDP_CHECK(nccl_env_apply(&plan));
    CUDA_TRY(c, cudaSetDevice(plan.device));

    /* Rank 0's unique id reaches the others by the world's broadcast: through the shared segment, or over MPI
     * (as nccl-tests bootstraps). A rank 0 that fails here returns, the world aborts, and the others' broadcast
     * ends. */
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (c->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess)
            return nccl_failed(c, "ncclGetUniqueId", r);
    }
    DDP_CHECK(coll_broadcast(c->wr, &id, sizeof id, 0));

    CUDA_TRY(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    c->have_stream = 1;
    CUDA_TRY(c, cudaEventCreate(&c->ev_start));
    cudaError_t e = cudaEventCreate(&c->ev_end);
    if (e != cudaSuccess) {
        cudaEventDestroy(c->ev_start);
        return cuda_failed(c, "cudaEventCreate", e);
    }
    c->have_events = 1;

    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* so every wait can watch the world and a deadline */
    ncclResult_t r = ncclCommInitRankConfig(&c->comm, c->n, id, c->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        /* A failed init may still hand back a communicator to abort. */
        return nccl_failed(c, "ncclCommInitRankConfig", r);
    }
    return wait_comm(c, "ncclCommInitRankConfig", 1);
}

ddp_status nccl_comm_create(world_rank *wr, const nccl_settings *s, nccl_figures *fig, nccl_comm **out)
{
    *out = NULL;
    nccl_comm *c = calloc(1, sizeof *c);
    if (!c)
        return ddp_error(DDP_ERR_NOMEM, "NCCL backend state");
    c->wr = wr;
    c->rank = world_rank_id(wr);
    c->n = world_size(wr);
    c->set = *s;
    if (c->set.ngpus < 1)
        c->set.ngpus = 1;
    c->fig = fig;
    memset(fig, 0, sizeof *fig);
    fig->active = 1;
    fig->digest = HASH_INIT;
    ddp_status st = setup(c);
    if (st != DDP_OK) {
        nccl_comm_destroy(c, 1);
        return st;
    }
    *out = c;
    return DDP_OK;
}

static ddp_status grow(nccl_comm *c, size_t count)
{
    if (count > c->dev_count) {
        if (c->dev)
            cudaFree(c->dev);
        if (c->host)
            cudaFreeHost(c->host);
        c->dev = c->host = NULL;
        c->dev_count = 0;
        CUDA_TRY(c, cudaMalloc((void **)&c->dev, count * sizeof(float)));
        CUDA_TRY(c, cudaHostAlloc((void **)&c->host, count * sizeof(float), cudaHostAllocDefault));
        c->dev_count = count;
    }
    if (c->set.ring_check && count > c->emul_count) {
        float *p = realloc(c->emul, count * sizeof(float));
        if (!p)
            return ddp_error(DDP_ERR_NOMEM, "%zu floats for the ring emulation", count);
        c->emul = p;
        c->emul_count = count;
    }
    return DDP_OK;
}

/* The same reduction on the CPU in ddpsim's ring order: how many elements come out bit for bit the same? */
static ddp_status ring_compare(nccl_comm *c, const float *result, size_t count, int avg)
{
    if (avg)
        coll_mul_inv_n(c->emul, c->emul, count, c->n);
    DDP_CHECK(coll_allreduce(c->wr, c->emul, count, COLL_FLOAT, COLL_SUM, COLL_RING));
    uint64_t same = 0;
    for (size_t i = 0; i < count; i++)
        same += memcmp(&c->emul[i], &result[i], sizeof(float)) == 0;
    c->fig->ring_same += same;
    return DDP_OK;
}

ddp_status nccl_comm_allreduce(nccl_comm *c, float *buf, size_t count, int avg)
{
    if (count == 0)
        return DDP_OK;
    if (c->failed)
        return ddp_error(DDP_ERR_BACKEND, "the NCCL communicator failed earlier");
    /* The current device is per thread, and an implementation may reduce from its own threads. */
    CUDA_TRY(c, cudaSetDevice(c->fig->device));
    DDP_CHECK(grow(c, count));
    if (c->set.ring_check)
        memcpy(c->emul, buf, count * sizeof(float));
    size_t bytes = count * sizeof(float);
    double t0 = clock_now_s();
    memcpy(c->host, buf, bytes);
    CUDA_TRY(c, cudaMemcpyAsync(c->dev, c->host, bytes, cudaMemcpyHostToDevice, c->stream));
    CUDA_TRY(c, cudaEventRecord(c->ev_start, c->stream));
    DDP_CHECK(nccl_call(c, "ncclAllReduce", ncclAllReduce(c->dev, c->dev, count, ncclFloat32,
                                                          avg ? ncclAvg : ncclSum, c->comm, c->stream)));
    CUDA_TRY(c, cudaEventRecord(c->ev_end, c->stream));
    CUDA_TRY(c, cudaMemcpyAsync(c->host, c->dev, bytes, cudaMemcpyDeviceToHost, c->stream));
    DDP_CHECK(wait_stream(c, "ncclAllReduce"));
    memcpy(buf, c->host, bytes);
    double rt = (clock_now_s() - t0) * 1e3;
    float dev_ms = 0;
    CUDA_TRY(c, cudaEventElapsedTime(&dev_ms, c->ev_start, c->ev_end));

    nccl_figures *f = c->fig;
    f->nallreduce++;
    f->elements += count;
    f->device_ms += dev_ms;
    f->roundtrip_ms += rt;
    if (rt > f->max_roundtrip_ms)
        f->max_roundtrip_ms = rt;
    f->digest = hash_floats(f->digest, buf, count);
    if (c->set.ring_check)
        DDP_CHECK(ring_compare(c, buf, count, avg));
    return DDP_OK;
}

void nccl_comm_destroy(nccl_comm *c, int abort)
{
    if (!c)
        return;
    if (abort)
        c->failed = 1;
    if (c->comm) {
        ncclResult_t r = c->failed ? ncclInternalError : ncclCommFinalize(c->comm);
        int clean = r == ncclSuccess || r == ncclInProgress;
        if (!clean || wait_comm(c, "ncclCommFinalize", 0) != DDP_OK)
            ncclCommAbort(c->comm); /* frees it too */
        else
            ncclCommDestroy(c->comm);
        c->comm = NULL;
    }
    if (c->dev)
        cudaFree(c->dev);
    if (c->host)
        cudaFreeHost(c->host);
    if (c->have_events) {
        cudaEventDestroy(c->ev_start);
        cudaEventDestroy(c->ev_end);
    }
    if (c->have_stream)
        cudaStreamDestroy(c->stream);
    free(c->emul);
    free(c);
}
