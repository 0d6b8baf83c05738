/*
 * bench_coll.c - the allreduce benchmark (bench_coll.h).
 *
 * The memory-traffic bound. For n bytes on N ranks, the in-place allreduce
 * reads, on each rank, its slice of every slot (n bytes) and writes the sum
 * back into that slice of every slot (n bytes): 2n per rank, 2nN in all
 * (bench_coll_traffic). A memcpy of B bytes reads and writes 2B, so at the
 * measured memcpy rate R (bytes copied per second) memory moves 2R bytes per
 * second, and the allreduce cannot take less than 2nN / (2R). R is the machine's:
 * min(N, cores) ranks each memcpy 32 MiB at the same time (after a barrier)
 * and their rates add up, so the ranks of the allreduce are measured against
 * the bandwidth they can get together, not against one core's.
 *
 * The speed of light. That bound turned out loose (the allreduce ran at 0.5
 * to 0.8 of it: caches beat a 32 MiB memcpy's rate). The honest yardstick is
 * a kernel doing exactly the allreduce's unavoidable memory traffic with no
 * synchronization and no ordering, run in the same process over the same
 * slots in the same iterations: rank 0 alone, with min(N, cores) threads,
 * each reading its slice of all N inputs once (a block at a time, summed in
 * a buffer that stays in cache) and writing the sums into all N slots, while
 * the other ranks sleep on a futex. x_sol = the allreduce's time / its time.
 * And for small messages, the floor: a barrier of the N ranks (a futex
 * wake-up round trip), timed in the same run.
 */
#include "bench_coll.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collcheck.h"
#include "clock.h"
#include "stats.h"
#include "world.h"

#define MEMCPY_BYTES ((size_t)32 << 20)

typedef struct bench_args {
    const bench_coll_config *cfg;
    int nsizes;
} bench_args;

/*
 * Layout of the user area: memcpy rate per rank, then times[size][iter][rank]
 * of the algorithm and of the baseline, then wrong[size][rank].
 */
typedef struct bench_area {
    double *memcpy_rate, *times, *base_times;
    double *sol_times;     /* [size][iter]: rank 0's speed-of-light kernel */
    double *barrier_us;    /* [1]: the median barrier of the N ranks */
    uint64_t *wrong;
} bench_area;

static size_t times_count(const bench_coll_config *c, int nsizes)
{
    return (size_t)nsizes * (size_t)c->iters * (size_t)c->nranks;
}

static size_t user_bytes(const bench_coll_config *c, int nsizes)
{
    return (size_t)c->nranks * sizeof(double) + 2 * times_count(c, nsizes) * sizeof(double) +
           ((size_t)nsizes * (size_t)c->iters + 1) * sizeof(double) + (size_t)nsizes * (size_t)c->nranks * sizeof(uint64_t);
}

static bench_area area_of(void *user, const bench_coll_config *c, int nsizes)
{
    bench_area a;
    a.memcpy_rate = user;
    a.times = a.memcpy_rate + c->nranks;
    a.base_times = a.times + times_count(c, nsizes);
    a.sol_times = a.base_times + times_count(c, nsizes);
    a.barrier_us = a.sol_times + (size_t)nsizes * (size_t)c->iters;
    a.wrong = (uint64_t *)(a.barrier_us + 1);
    return a;
}

/* ---- the speed-of-light kernel (rank 0, threads over every rank's slot) ---- */

#define SOL_BLOCK 2048 /* elements summed at a time: the block's sums stay in L1 */
#define SOL_MAX_THREADS 64

typedef struct sol_pool {
    pthread_t threads[SOL_MAX_THREADS];
    int nthreads, stop, go;       /* go: every worker started; stop: leave (before go: a start failed) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_barrier_t start, done;
    world_rank *wr;
    int n;
    coll_dtype type;
    size_t count;
} sol_pool;

typedef struct sol_worker {
    sol_pool *pool;
    int index;
} sol_worker;

/* Sum n inputs' elements [b, b + m) into acc, and write acc into every input: the vectorized core. */
#define SOL_BLOCK_FN(NAME, T)                                                                            \
    COLL_VECTOR_CLONES static void NAME(T *acc, T *const *x, int n, size_t b, size_t m)                  \
    {                                                                                                    \
        for (size_t i = 0; i < m; i++)                                                                   \
            acc[i] = x[0][b + i];                                                                        \
        for (int r = 1; r < n; r++)                                                                      \
            for (size_t i = 0; i < m; i++)                                                               \
                acc[i] += x[r][b + i];                                                                   \
        for (int r = 0; r < n; r++)                                                                      \
            for (size_t i = 0; i < m; i++)                                                               \
                x[r][b + i] = acc[i];                                                                    \
    }
SOL_BLOCK_FN(sol_block_f, float)
SOL_BLOCK_FN(sol_block_d, double)

/* Thread t's slice of one pass: read every slot's elements [lo, hi) once, write their sum into every slot. */
static void sol_slice(sol_pool *p, int t)
{
    size_t lo = p->count * (size_t)t / (size_t)p->nthreads, hi = p->count * (size_t)(t + 1) / (size_t)p->nthreads;
    void *slots[WORLD_MAX_RANKS];
    for (int r = 0; r < p->n; r++)
        slots[r] = world_slot(p->wr, r);
    if (p->type == COLL_FLOAT) {
        float acc[SOL_BLOCK];
        for (size_t b = lo; b < hi; b += SOL_BLOCK)
            sol_block_f(acc, (float *const *)slots, p->n, b, hi - b < SOL_BLOCK ? hi - b : SOL_BLOCK);
    } else {
        double acc[SOL_BLOCK];
        for (size_t b = lo; b < hi; b += SOL_BLOCK)
            sol_block_d(acc, (double *const *)slots, p->n, b, hi - b < SOL_BLOCK ? hi - b : SOL_BLOCK);
    }
}

static void *sol_main(void *arg)
{
    sol_worker *w = arg;
    sol_pool *p = w->pool;
    pthread_mutex_lock(&p->mu);
    while (!p->go && !p->stop)
        pthread_cond_wait(&p->cv, &p->mu);
    int leave = p->stop;
    pthread_mutex_unlock(&p->mu);
    if (leave)
        return NULL;
    for (;;) {
        pthread_barrier_wait(&p->start);
        if (p->stop)
            return NULL;
        sol_slice(p, w->index);
        pthread_barrier_wait(&p->done);
    }
}

/* One timed pass over count elements of every slot, this thread being worker 0. */
static double sol_pass(sol_pool *p, size_t count)
{
    p->count = count;
    double t0 = clock_now_us();
    pthread_barrier_wait(&p->start);
    sol_slice(p, 0);
    pthread_barrier_wait(&p->done);
    return clock_now_us() - t0;
}

static double measure_memcpy(void)
{
    unsigned char *a = malloc(MEMCPY_BYTES), *b = malloc(MEMCPY_BYTES);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, MEMCPY_BYTES);
    memset(b, 2, MEMCPY_BYTES);
    double t[7];
    for (int i = 0; i < 7; i++) {
        double t0 = clock_now_us();
        memcpy(i % 2 ? a : b, i % 2 ? b : a, MEMCPY_BYTES);
        t[i] = clock_now_us() - t0;
    }
    free(a);
    free(b);
    return (double)MEMCPY_BYTES / (stats_median(t, 7) * 1e-6) * 1e-9;
}

static void fill(void *slot, coll_dtype type, int rank, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        if (type == COLL_FLOAT)
            ((float *)slot)[i] = (float)collcheck_input(rank, i);
        else
            ((double *)slot)[i] = collcheck_input(rank, i);
    }
}

static uint64_t count_wrong(const void *slot, coll_dtype type, int n, size_t count)
{
    uint64_t wrong = 0;
    for (size_t i = 0; i < count; i++) {
        double want = 0;
        for (int r = 0; r < n; r++)
            want += collcheck_input(r, i); /* exact: integers and quarters */
        double got = type == COLL_FLOAT ? ((const float *)slot)[i] : ((const double *)slot)[i];
        wrong += !(got == want);
    }
    return wrong;
}

/*
 * One timed allreduce of this rank's freshly filled slot (native: the MPI library's, the MPI world's baseline);
 * the last iteration also counts wrong elements.
 */
static ddp_status timed_allreduce(world_rank *wr, const bench_coll_config *c, coll_algo algo, int native,
                                  size_t count, double *t_out, uint64_t *wrong)
{
    int n = world_size(wr), me = world_rank_id(wr);
    void *slot = world_slot(wr, me);
    fill(slot, c->type, me, count);
    DDP_CHECK(coll_barrier(wr));
    double t0 = clock_now_us();
    if (native)
        DDP_CHECK(coll_allreduce_native(wr, count, c->type));
    else
        DDP_CHECK(coll_allreduce_inplace(wr, count, c->type, COLL_SUM, algo));
    *t_out = clock_now_us() - t0;
    if (wrong) {
        *wrong += count_wrong(slot, c->type, n, count);
        world_publish(wr, wrong, sizeof *wrong);
    }
    return coll_barrier(wr); /* nobody refills a slot another rank still reads */
}

static ddp_status bench_sizes(world_rank *wr, const bench_args *ba, bench_area *a, sol_pool *sol)
{
    const bench_coll_config *c = ba->cfg;
    int n = world_size(wr), me = world_rank_id(wr);
    size_t esz = coll_dtype_size(c->type);
    size_t bytes = c->min_bytes;
    for (int k = 0; k < ba->nsizes; k++, bytes *= 2) {
        size_t count = bytes / esz;
        world_set_op(wr, k, "allreduce");
        for (int it = -c->warmup; it < c->iters; it++) {
            size_t at = ((size_t)k * (size_t)c->iters + (size_t)(it < 0 ? 0 : it)) * (size_t)n + (size_t)me;
            uint64_t *wrong = it == c->iters - 1 ? &a->wrong[(size_t)k * (size_t)n + (size_t)me] : NULL;
            double t, tb = 0;
            /* With a baseline, the two take turns going first, so neither always finds warm caches. */
            if (c->has_baseline && it % 2 == 0)
                DDP_CHECK(timed_allreduce(wr, c, c->baseline, c->mpi_baseline, count, &tb, wrong));
            DDP_CHECK(timed_allreduce(wr, c, c->algo, 0, count, &t, wrong));
            if (c->has_baseline && it % 2 != 0)
                DDP_CHECK(timed_allreduce(wr, c, c->baseline, c->mpi_baseline, count, &tb, wrong));
            if (it >= 0) {
                a->times[at] = t;
                a->base_times[at] = tb;
                world_publish(wr, &a->times[at], sizeof a->times[at]); /* for the parent's side (world.h) */
                world_publish(wr, &a->base_times[at], sizeof a->base_times[at]);
            }
        }
        /* The speed of light on the same slots, as many passes, right after the size's allreduces (the others
         * sleep in the barrier). Not interleaved with them: a rank woken from a long sleep for every allreduce
         * made a 4 KiB message take 30 us instead of 4. */
        for (int it = -c->warmup; me == 0 && sol && it < c->iters; it++) {
            double tsol = sol_pass(sol, count);
            if (it >= 0)
                a->sol_times[(size_t)k * (size_t)c->iters + (size_t)it] = tsol;
        }
        DDP_CHECK(coll_barrier(wr));
    }
    return DDP_OK;
}

/* The floor of a small message: a barrier of the N ranks, the median of many. */
static ddp_status time_barrier(world_rank *wr, double *median_us)
{
    enum { ROUNDS = 201 };
    double t[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
        double t0 = clock_now_us();
        DDP_CHECK(coll_barrier(wr));
        t[i] = clock_now_us() - t0;
    }
    *median_us = stats_median(t, ROUNDS);
    return DDP_OK;
}

static ddp_status bench_rank(world_rank *wr, void *arg)
{
    const bench_args *ba = arg;
    const bench_coll_config *c = ba->cfg;
    int n = world_size(wr), me = world_rank_id(wr);
    bench_area a = area_of(world_rank_user_area(wr), c, ba->nsizes);
    world_set_op(wr, 0, "memcpy");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    DDP_CHECK(coll_barrier(wr));
    if (world_local_rank(wr) < (cores > 0 ? cores : 1)) { /* concurrently on as many ranks as its host has cores */
        a.memcpy_rate[me] = measure_memcpy();
        world_publish(wr, &a.memcpy_rate[me], sizeof a.memcpy_rate[me]);
    }
    DDP_CHECK(coll_barrier(wr));
    world_set_op(wr, 0, "barrier");
    double barrier_us = 0;
    DDP_CHECK(time_barrier(wr, &barrier_us));
    if (me == 0) {
        *a.barrier_us = barrier_us;
        world_publish(wr, a.barrier_us, sizeof *a.barrier_us);
    }
    /* Rank 0's pool for the speed-of-light kernel: min(N, cores) workers, itself included. If one cannot
     * start, those that did are told to leave before they touch a barrier, and the kernel is not run. */
    sol_pool pool, *sol = NULL;
    sol_worker workers[SOL_MAX_THREADS];
    int started = 1;
    if (me == 0 && !world_mpi_active()) { /* the kernel reads every rank's slot: not across MPI processes */
        memset(&pool, 0, sizeof pool);
        pool.wr = wr;
        pool.n = n;
        pool.type = c->type;
        pool.nthreads = n < cores ? n : cores > 0 ? (int)cores : 1;
        if (pool.nthreads > SOL_MAX_THREADS)
            pool.nthreads = SOL_MAX_THREADS;
        pthread_mutex_init(&pool.mu, NULL);
        pthread_cond_init(&pool.cv, NULL);
        pthread_barrier_init(&pool.start, NULL, (unsigned)pool.nthreads);
        pthread_barrier_init(&pool.done, NULL, (unsigned)pool.nthreads);
        for (; started < pool.nthreads; started++) {
            workers[started] = (sol_worker){&pool, started};
            if (pthread_create(&pool.threads[started], NULL, sol_main, &workers[started]) != 0)
                break;
        }
        pthread_mutex_lock(&pool.mu);
        if (started == pool.nthreads)
            pool.go = 1;
        else
            pool.stop = 1;
        pthread_cond_broadcast(&pool.cv);
        pthread_mutex_unlock(&pool.mu);
        if (pool.go)
            sol = &pool;
    }
    ddp_status s = bench_sizes(wr, ba, &a, sol);
    if (me == 0 && !world_mpi_active()) {
        if (pool.go) { /* the workers wait at start: release them to see stop */
            pool.stop = 1;
            pthread_barrier_wait(&pool.start);
        }
        for (int t = 1; t < started; t++)
            pthread_join(pool.threads[t], NULL);
        pthread_barrier_destroy(&pool.start);
        pthread_barrier_destroy(&pool.done);
        pthread_cond_destroy(&pool.cv);
        pthread_mutex_destroy(&pool.mu);
    }
    return s;
}

double bench_coll_traffic(size_t bytes, int nranks)
{
    /* Each rank reads its slice of every slot and writes the sum back into all of them. */
    return (double)bytes * 2.0 * nranks;
}

ddp_status bench_coll_run(const bench_coll_config *c, bench_coll_result *out)
{
    memset(out, 0, sizeof *out);
    size_t esz = coll_dtype_size(c->type);
    if (c->min_bytes < esz || c->max_bytes < c->min_bytes || c->max_bytes > BENCH_COLL_MAX_BYTES)
        return ddp_error(DDP_ERR_INVALID, "sizes must run from %zu bytes up to at most 1 GiB (got %zu..%zu)", esz,
                         c->min_bytes, c->max_bytes);
    if (c->iters < 1 || c->warmup < 0)
        return ddp_error(DDP_ERR_INVALID, "bench: %d iterations, %d warm-up", c->iters, c->warmup);
    if (c->mpi_baseline && (!world_mpi_active() || !c->has_baseline))
        return ddp_error(DDP_ERR_INVALID, "bench: MPI_Allreduce as the baseline needs an MPI world (--world mpi)");
    int nsizes = 0;
    for (size_t b = c->min_bytes; b <= c->max_bytes && nsizes < BENCH_COLL_MAX_ROWS; b *= 2)
        nsizes++;
    size_t largest = c->min_bytes << (nsizes - 1);
    world_config wc = {.nranks = c->nranks,
                       .timeout_s = c->timeout_s,
                       .slot_bytes = largest < 64 ? 64 : largest,
                       .user_bytes = user_bytes(c, nsizes)};
    world *w = NULL;
    DDP_CHECK(world_create(&wc, &w));
    memset(world_user_area(w), 0, wc.user_bytes);
    bench_args ba = {c, nsizes};
    ddp_status s = world_run(w, bench_rank, &ba);
    if (s != DDP_OK) {
        world_destroy(w);
        return s;
    }
    bench_area a = area_of(world_user_area(w), c, nsizes);
    for (int r = 0; r < c->nranks; r++)
        out->memcpy_gbps += a.memcpy_rate[r];
    out->barrier_us = *a.barrier_us;
    double *per_iter = malloc(3 * (size_t)c->iters * sizeof *per_iter);
    if (!per_iter) {
        world_destroy(w);
        return ddp_error(DDP_ERR_NOMEM, "bench results");
    }
    size_t bytes = c->min_bytes;
    for (int k = 0; k < nsizes; k++, bytes *= 2) {
        bench_coll_row *row = &out->rows[k];
        row->bytes = bytes / esz * esz;
        row->count = bytes / esz;
        double *base_iter = per_iter + c->iters, *ratio_iter = base_iter + c->iters;
        for (int it = 0; it < c->iters; it++) {
            double slowest = 0, base_slowest = 0;
            for (int r = 0; r < c->nranks; r++) {
                size_t at = ((size_t)k * (size_t)c->iters + (size_t)it) * (size_t)c->nranks + (size_t)r;
                if (a.times[at] > slowest)
                    slowest = a.times[at];
                if (a.base_times[at] > base_slowest)
                    base_slowest = a.base_times[at];
            }
            per_iter[it] = slowest;
            base_iter[it] = base_slowest;
            ratio_iter[it] = base_slowest > 0 ? slowest / base_slowest : 0;
        }
        if (c->has_baseline) {
            row->baseline_us = stats_median(base_iter, (size_t)c->iters);
            row->ratio = stats_median(ratio_iter, (size_t)c->iters);
        }
        row->time_us = stats_median(per_iter, (size_t)c->iters);
        row->sol_us = stats_median(a.sol_times + (size_t)k * (size_t)c->iters, (size_t)c->iters);
        row->x_sol = row->sol_us > 0 ? row->time_us / row->sol_us : 0;
        row->algbw = (double)row->bytes / (row->time_us * 1e-6) * 1e-9;
        row->busbw = row->algbw * 2.0 * (c->nranks - 1) / c->nranks;
        row->bound_us = out->memcpy_gbps > 0 ? bench_coll_traffic(row->bytes, c->nranks) / (2.0 * out->memcpy_gbps * 1e3)
                                             : 0;
        for (int r = 0; r < c->nranks; r++)
            row->wrong += a.wrong[(size_t)k * (size_t)c->nranks + (size_t)r];
    }
    out->nrows = nsizes;
    free(per_iter);
    world_destroy(w);
    return DDP_OK;
}
