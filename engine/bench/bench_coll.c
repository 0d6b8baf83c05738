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
 */
#include "bench_coll.h"

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
    uint64_t *wrong;
} bench_area;

static size_t times_count(const bench_coll_config *c, int nsizes)
{
    return (size_t)nsizes * (size_t)c->iters * (size_t)c->nranks;
}

static size_t user_bytes(const bench_coll_config *c, int nsizes)
{
    return (size_t)c->nranks * sizeof(double) + 2 * times_count(c, nsizes) * sizeof(double) +
           (size_t)nsizes * (size_t)c->nranks * sizeof(uint64_t);
}

static bench_area area_of(void *user, const bench_coll_config *c, int nsizes)
{
    bench_area a;
    a.memcpy_rate = user;
    a.times = a.memcpy_rate + c->nranks;
    a.base_times = a.times + times_count(c, nsizes);
    a.wrong = (uint64_t *)(a.base_times + times_count(c, nsizes));
    return a;
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

/* One timed allreduce of this rank's freshly filled slot; the last iteration also counts wrong elements. */
static ddp_status timed_allreduce(world_rank *wr, const bench_coll_config *c, coll_algo algo, size_t count,
                                  double *t_out, uint64_t *wrong)
{
    int n = world_size(wr), me = world_rank_id(wr);
    void *slot = world_slot(wr, me);
    fill(slot, c->type, me, count);
    DDP_CHECK(coll_barrier(wr));
    double t0 = clock_now_us();
    DDP_CHECK(coll_allreduce_inplace(wr, count, c->type, COLL_SUM, algo));
    *t_out = clock_now_us() - t0;
    if (wrong)
        *wrong += count_wrong(slot, c->type, n, count);
    return coll_barrier(wr); /* nobody refills a slot another rank still reads */
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
    if (me < (cores > 0 ? cores : 1))
        a.memcpy_rate[me] = measure_memcpy(); /* concurrently on as many ranks as there are cores */
    DDP_CHECK(coll_barrier(wr));
    size_t esz = coll_dtype_size(c->type);
    size_t bytes = c->min_bytes;
    for (int k = 0; k < ba->nsizes; k++, bytes *= 2) {
        size_t count = bytes / esz;
        world_set_op(wr, k, "allreduce");
        for (int it = -c->warmup; it < c->iters; it++) {
            size_t at = ((size_t)k * (size_t)c->iters + (size_t)(it < 0 ? 0 : it)) * (size_t)n + (size_t)me;
            uint64_t *wrong = it == c->iters - 1 ? &a.wrong[(size_t)k * (size_t)n + (size_t)me] : NULL;
            double t, tb = 0;
            /* With a baseline, the two take turns going first, so neither always finds warm caches. */
            if (c->has_baseline && it % 2 == 0)
                DDP_CHECK(timed_allreduce(wr, c, c->baseline, count, &tb, wrong));
            DDP_CHECK(timed_allreduce(wr, c, c->algo, count, &t, wrong));
            if (c->has_baseline && it % 2 != 0)
                DDP_CHECK(timed_allreduce(wr, c, c->baseline, count, &tb, wrong));
            if (it >= 0) {
                a.times[at] = t;
                a.base_times[at] = tb;
            }
        }
    }
    return DDP_OK;
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
