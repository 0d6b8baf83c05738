/*
 * refcheck.c - the reference's own check (refcheck.h).
 */
#include "refcheck.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checker.h"
#include "coll.h"

ddp_status refcheck_init(ref_check *rc, size_t n, ddp_comm_hook hook)
{
    memset(rc, 0, sizeof *rc);
    comm_hook_unit(hook, &rc->hook.u, &rc->hook.eta);
    rc->gsum = calloc(n, sizeof *rc->gsum);
    rc->gmag = calloc(n, sizeof *rc->gmag);
    rc->n = n; /* nothing kept: the arrays are zero */
    if (!rc->gsum || !rc->gmag) {
        refcheck_free(rc);
        return ddp_error(DDP_ERR_NOMEM, "the reference's check: %zu doubles and floats", n);
    }
    return DDP_OK;
}

void refcheck_free(ref_check *rc)
{
    free(rc->gsum);
    free(rc->gmag);
    memset(rc, 0, sizeof *rc);
}

void refcheck_zero(ref_check *rc)
{
    memset(rc->kept_lo, 0, sizeof rc->kept_lo);
    memset(rc->kept_hi, 0, sizeof rc->kept_hi);
    rc->nacc = rc->depth = 0;
    rc->hook.depth = rc->hook.syncs = 0;
}

/* The elements [*lo, *hi) of parameter p whose sums this rank holds (an empty range: *lo == *hi). */
static void kept_range(const ref_check *rc, int p, size_t *lo, size_t *hi)
{
    *lo = rc->kept_lo[p];
    *hi = rc->kept_hi[p] > *lo ? rc->kept_hi[p] : *lo;
}

/* One piece of parameter p's local gradient into the sums: added where they hold something, written elsewhere. */
static void add_piece(ref_check *rc, const model_param *par, int p, const float *piece)
{
    double *s = rc->gsum + par->offset;
    float *m = rc->gmag + par->offset;
    size_t lo, hi;
    kept_range(rc, p, &lo, &hi);
    for (size_t j = 0; j < lo; j++) {
        s[j] = piece[j];
        m[j] = fabsf(piece[j]);
    }
    for (size_t j = lo; j < hi; j++) {
        s[j] += piece[j];
        m[j] += fabsf(piece[j]);
    }
    for (size_t j = hi; j < par->count; j++) {
        s[j] = piece[j];
        m[j] = fabsf(piece[j]);
    }
    rc->kept_lo[p] = 0;
    rc->kept_hi[p] = par->count;
}

void refcheck_accumulate(ref_check *rc, const model *ref, int synced, int nranks)
{
    const float *lg = model_local_grads(ref);
    const unsigned char *used = model_used(ref);
    int most = 1; /* the most pieces a parameter's gradient came in: that many accumulations this micro-step */
    for (int p = 0; p < model_nparams(ref); p++) {
        if (!used[p])
            continue;
        const model_param *par = model_param_at(ref, p);
        int k = model_npieces(ref, p);
        if (k >= 2) { /* the pieces themselves: each was added to .grad on its own */
            most = k > most ? k : most;
            for (int q = 0; q < k; q++)
                add_piece(rc, par, p, model_piece(ref, p, q));
            continue;
        }
        add_piece(rc, par, p, lg + par->offset);
    }
    rc->nacc += (uint64_t)most;
    rc->depth += (uint64_t)most + (synced ? (uint64_t)nranks + 1 : 0);
    if (synced && rc->hook.u) { /* compress, divide (float, then the format), N - 1 additions in the format */
        rc->hook.depth += (uint64_t)nranks + 2;
        rc->hook.syncs++;
    }
}

static void clear_range(ref_check *rc, size_t at, size_t count)
{
    memset(rc->gsum + at, 0, count * sizeof *rc->gsum);
    memset(rc->gmag + at, 0, count * sizeof *rc->gmag);
}

ddp_status refcheck_run(ref_check *rc, world_rank *wr, const model *ref, const unsigned char *reduced,
                        verify_record *rec)
{
    int n = world_size(wr), rank = world_rank_id(wr);
    size_t lo, hi;
    for (int p = 0; p < model_nparams(ref); p++) { /* a parameter not accumulated since: its parts holding nothing */
        const model_param *par = model_param_at(ref, p);
        size_t lo_p, hi_p;
        kept_range(rc, p, &lo_p, &hi_p);
        clear_range(rc, par->offset, lo_p);
        clear_range(rc, par->offset + hi_p, par->count - hi_p);
    }
    DDP_CHECK(coll_reduce_scatter(wr, rc->gsum, rc->n, COLL_DOUBLE, COLL_ORDERED));
    DDP_CHECK(coll_reduce_scatter(wr, rc->gmag, rc->n, COLL_FLOAT, COLL_ORDERED));
    coll_split(rc->n, n, rank, &lo, &hi);
    checker_global(ref, reduced, rc->gsum, rc->gmag, rc->depth, rc->nacc, &rc->hook, n, lo, hi, rec);
    /* Each rank keeps the totals of its own slice (what the next sum over ranks adds to) and nothing elsewhere,
     * where the other ranks keep them. */
    for (int p = 0; p < model_nparams(ref); p++) {
        const model_param *par = model_param_at(ref, p);
        size_t a = par->offset > lo ? par->offset : lo, b = par->offset + par->count < hi ? par->offset + par->count : hi;
        rc->kept_lo[p] = a < b ? a - par->offset : 0;
        rc->kept_hi[p] = a < b ? b - par->offset : 0;
    }
    return DDP_OK;
}
