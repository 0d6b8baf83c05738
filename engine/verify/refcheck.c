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
    rc->n = n;
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
    memset(rc->gsum, 0, rc->n * sizeof *rc->gsum);
    memset(rc->gmag, 0, rc->n * sizeof *rc->gmag);
    rc->nacc = rc->depth = 0;
    rc->hook.depth = rc->hook.syncs = 0;
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
            for (int q = 0; q < k; q++) {
                const float *piece = model_piece(ref, p, q);
                for (size_t j = 0; j < par->count; j++) {
                    rc->gsum[par->offset + j] += piece[j];
                    rc->gmag[par->offset + j] += fabsf(piece[j]);
                }
            }
            continue;
        }
        for (size_t j = par->offset; j < par->offset + par->count; j++) {
            rc->gsum[j] += lg[j];
            rc->gmag[j] += fabsf(lg[j]);
        }
    }
    rc->nacc += (uint64_t)most;
    rc->depth += (uint64_t)most + (synced ? (uint64_t)nranks + 1 : 0);
    if (synced && rc->hook.u) { /* compress, divide (float, then the format), N - 1 additions in the format */
        rc->hook.depth += (uint64_t)nranks + 2;
        rc->hook.syncs++;
    }
}

ddp_status refcheck_run(ref_check *rc, world_rank *wr, const model *ref, const unsigned char *reduced,
                        verify_record *rec)
{
    int n = world_size(wr), rank = world_rank_id(wr);
    size_t lo, hi;
    DDP_CHECK(coll_allreduce(wr, rc->gsum, rc->n, COLL_DOUBLE, COLL_SUM, COLL_ORDERED));
    DDP_CHECK(coll_allreduce(wr, rc->gmag, rc->n, COLL_FLOAT, COLL_SUM, COLL_ORDERED));
    coll_split(rc->n, n, rank, &lo, &hi);
    checker_global(ref, reduced, rc->gsum, rc->gmag, rc->depth, rc->nacc, &rc->hook, n, lo, hi, rec);
    if (rank != 0) {
        memset(rc->gsum, 0, rc->n * sizeof *rc->gsum);
        memset(rc->gmag, 0, rc->n * sizeof *rc->gmag);
    }
    return DDP_OK;
}
