/*
 * collcheck.c - the collectives self-check (collcheck.h).
 */
#include "collcheck.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "hash.h"
#include "stats.h"

typedef struct rank_record {
    uint64_t wrong;
    uint64_t hash;
} rank_record;

typedef struct check_args {
    const collcheck_case *cases;
    int ncases, iters;
} check_args;

/* Layout of the user area: records[ncases][nranks], then times[ncases][iters] (rank 0). */
size_t collcheck_user_bytes(int ncases, int nranks, int iters)
{
    return (size_t)ncases * (size_t)nranks * sizeof(rank_record) + (size_t)ncases * (size_t)iters * sizeof(double);
}

double collcheck_input(int r, size_t i)
{
    /* Integers in [-512, 512] plus a multiple of 1/4: 256 ranks sum to < 2^18 in quarter steps, exact in float. */
    return (double)((long)((i * 7 + (size_t)r * 13) % 1025) - 512) + 0.25 * (double)((i + (size_t)r) % 4);
}

static double expected_value(const collcheck_case *c, int n, size_t i)
{
    double sum = 0;
    for (int r = 0; r < n; r++)
        sum += collcheck_input(r, i); /* exact: see collcheck_input */
    if (c->op == COLL_SUM)
        return sum;
    if (c->type == COLL_FLOAT)
        return (double)((float)sum / (float)n);
    return sum / n;
}

static ddp_status check_rank(world_rank *wr, void *arg)
{
    const check_args *ca = arg;
    int n = world_size(wr), me = world_rank_id(wr);
    rank_record *records = world_rank_user_area(wr);
    double *times = (double *)(records + (size_t)ca->ncases * (size_t)n);

    for (int k = 0; k < ca->ncases; k++) {
        const collcheck_case *c = &ca->cases[k];
        size_t esz = coll_dtype_size(c->type);
        void *buf = malloc(c->count * esz);
        if (!buf)
            return ddp_error(DDP_ERR_NOMEM, "self-check buffer of %zu elements", c->count);
        rank_record rec = {0, HASH_INIT};
        for (int it = 0; it < ca->iters; it++) {
            for (size_t i = 0; i < c->count; i++) {
                if (c->type == COLL_FLOAT)
                    ((float *)buf)[i] = (float)collcheck_input(me, i);
                else
                    ((double *)buf)[i] = collcheck_input(me, i);
            }
            world_set_op(wr, k, "selfcheck");
            ddp_status s = coll_barrier(wr);
            double t0 = clock_now_us();
            if (s == DDP_OK)
                s = coll_allreduce(wr, buf, c->count, c->type, c->op, c->algo);
            double t1 = clock_now_us();
            if (s != DDP_OK) {
                free(buf);
                return s;
            }
            if (me == 0)
                times[(size_t)k * (size_t)ca->iters + (size_t)it] = t1 - t0;
            for (size_t i = 0; i < c->count; i++) {
                double want = expected_value(c, n, i);
                double got = c->type == COLL_FLOAT ? (double)((float *)buf)[i] : ((double *)buf)[i];
                /* Bitwise: expected values are exact, so any difference is a bug (NaN counts as wrong). */
                if (!(got == want))
                    rec.wrong++;
            }
            if (it == ca->iters - 1)
                rec.hash = hash_bytes(rec.hash, buf, c->count * esz);
        }
        records[(size_t)k * (size_t)n + (size_t)me] = rec;
        free(buf);
    }
    return DDP_OK;
}

ddp_status collcheck_run(world *w, const collcheck_case *cases, int ncases, int iters,
                         collcheck_result *out)
{
    if (ncases <= 0 || iters <= 0)
        return ddp_error(DDP_ERR_INVALID, "self-check needs cases and iterations (%d, %d)", ncases, iters);
    int n = world_nranks(w);
    check_args ca = {cases, ncases, iters};
    memset(world_user_area(w), 0, collcheck_user_bytes(ncases, n, iters));
    DDP_CHECK(world_run(w, check_rank, &ca));

    const rank_record *records = world_user_area(w);
    double *times = (double *)(records + (size_t)ncases * (size_t)n);
    for (int k = 0; k < ncases; k++) {
        collcheck_result *r = &out[k];
        r->c = cases[k];
        r->wrong = 0;
        r->ranks_agree = 1;
        for (int rk = 0; rk < n; rk++) {
            const rank_record *rec = &records[(size_t)k * (size_t)n + (size_t)rk];
            r->wrong += rec->wrong;
            if (rec->hash != records[(size_t)k * (size_t)n].hash)
                r->ranks_agree = 0;
        }
        double *t = times + (size_t)k * (size_t)iters;
        r->median_us = stats_median(t, (size_t)iters);
    }
    return DDP_OK;
}
