/*
 * agreement.c - the implementation's ranks agree after a sync (agreement.h).
 */
#include "agreement.h"

#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "hash.h"

ddp_status agreement_init(agreement_state *a, verify_agreement *out, int nranks)
{
    memset(a, 0, sizeof *a);
    a->out = out;
    a->peer_hashes = calloc((size_t)nranks * MODEL_MAX_PARAMS, sizeof *a->peer_hashes);
    return a->peer_hashes ? DDP_OK : ddp_error(DDP_ERR_NOMEM, "the agreement check");
}

void agreement_free(agreement_state *a)
{
    free(a->peer_hashes);
    memset(a, 0, sizeof *a);
}

ddp_status agreement_check(agreement_state *a, world_rank *wr, const model *layout, const float *grads,
                           const unsigned char *reduced, size_t op, const unsigned char *active)
{
    int np = model_nparams(layout), n = world_size(wr), base = 0;
    while (active && base < n - 1 && !active[base])
        base++;
    uint64_t mine[MODEL_MAX_PARAMS];
    for (int p = 0; p < np; p++) {
        const model_param *par = model_param_at(layout, p);
        mine[p] = reduced[p] && grads ? hash_floats(HASH_INIT, grads + par->offset, par->count) : 0;
    }
    DDP_CHECK(coll_allgather(wr, mine, a->peer_hashes, (size_t)np * sizeof *mine));
    if (grads)
        a->out->syncs++;
    if (a->seen)
        return DDP_OK;
    int bad = -1;
    const uint64_t *first = a->peer_hashes + (size_t)base * np;
    for (int p = 0; p < np && bad < 0; p++)
        for (int r = base + 1; r < n && bad < 0; r++)
            if ((!active || active[r]) && a->peer_hashes[(size_t)r * np + p] != first[p])
                bad = p;
    if (bad < 0)
        return DDP_OK;
    a->seen = 1;
    const model_param *par = model_param_at(layout, bad);
    float *rank0 = malloc(par->count * sizeof *rank0);
    if (!rank0)
        return ddp_error(DDP_ERR_NOMEM, "the agreement check: %zu floats", par->count);
    if (world_rank_id(wr) == base)
        memcpy(rank0, grads + par->offset, par->count * sizeof(float));
    ddp_status s = coll_broadcast(wr, rank0, par->count * sizeof(float), base);
    for (size_t j = 0; s == DDP_OK && grads && j < par->count; j++)
        if (memcmp(&rank0[j], &grads[par->offset + j], sizeof(float)) != 0) {
            *a->out = (verify_agreement){.syncs = a->out->syncs, .differs = 1, .op = op, .param = bad, .index = j,
                                         .base = base, .rank0 = rank0[j], .mine = grads[par->offset + j]};
            break;
        }
    free(rank0);
    return s;
}
