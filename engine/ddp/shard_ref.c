/*
 * shard_ref.c - the sharded reference (shard_ref.h).
 */
#include "shard_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const MODE_NAMES[] = {"none", "zero1", "zero2", "fsdp", "hsdp"};

const char *shard_mode_name(shard_mode m)
{
    return (unsigned)m < sizeof MODE_NAMES / sizeof MODE_NAMES[0] ? MODE_NAMES[m] : "?";
}

ddp_status shard_mode_parse(const char *text, shard_mode *out)
{
    for (int m = SHARD_ZERO1; m <= SHARD_HSDP; m++)
        if (text && strcmp(text, MODE_NAMES[m]) == 0) {
            *out = (shard_mode)m;
            return DDP_OK;
        }
    return ddp_error(DDP_ERR_INVALID, "--shard: '%s' is not zero1, zero2, fsdp or hsdp", text ? text : "");
}

int shard_mode_params_sharded(shard_mode m)
{
    return m == SHARD_FSDP || m == SHARD_HSDP;
}

int shard_mode_scatters_unsynced(shard_mode m)
{
    return m == SHARD_ZERO2 || m == SHARD_HSDP;
}

int shard_mode_reads_local(shard_mode m, int last_synced)
{
    return (m == SHARD_ZERO1 || m == SHARD_FSDP) && last_synced != 1;
}

mesh shard_default_mesh(shard_mode m, int nranks)
{
    if (m != SHARD_HSDP)
        return mesh_flat(nranks);
    return nranks >= 4 && nranks % 2 == 0 ? (mesh){2, nranks / 2} : (mesh){nranks, 1};
}

ddp_status shard_check_mesh(shard_mode m, const mesh *given, int nranks, const char *what)
{
    if (given->replicas * given->shards != nranks)
        return ddp_error(DDP_ERR_INVALID, "%s: %dx%d is not %d ranks", what, given->replicas, given->shards, nranks);
    if (given->replicas > 1 && m != SHARD_HSDP)
        return ddp_error(DDP_ERR_INVALID, "%s: %dx%d replicates over %d groups, which is hsdp; %s shards over the "
                                          "whole world (1x%d)",
                         what, given->replicas, given->shards, given->replicas, shard_mode_name(m), nranks);
    return DDP_OK;
}

const char *shard_unmodelled_option(const ddp_config *d)
{
    return d->find_unused ? "find_unused (--find-unused)"
           : d->bucket_view ? "bucket_view (--bucket-view)"
           : d->comm_hook != DDP_HOOK_NONE ? "a communication hook (--comm-hook)"
           : d->static_graph ? "static_graph (--static-graph)"
           : d->algo == COLL_RING ? "the ring order (--algo ring)"
           : NULL;
}

struct shard_ref {
    shard_mode mode;
    mesh mesh;
    coll_algo algo;
    model *m;
    world_rank *wr;
    size_t n;
    float *L, *P, *A; /* reduced in place: L and P are emptied by the reduction that reads them */
    unsigned char *defined; /* [nparams]: L's .grad is a tensor (model_grad_defined's rule) */
    int P_empty, A_empty;   /* nothing reduced into them since they were last emptied */
    /* shard_ref_track_abs: sum |x| of this rank's local gradients behind L, P and A, and their micro-steps */
    double *absL, *absP, *absA;
    uint64_t mL, mP, mA;
};

ddp_status shard_ref_create(shard_mode mode, const mesh *mesh_, coll_algo algo, model *m, world_rank *wr,
                            shard_ref **out)
{
    shard_ref *s = calloc(1, sizeof *s);
    size_t n = model_size(m);
    if (s) {
        s->L = calloc(n, sizeof *s->L);
        s->P = mode == SHARD_HSDP ? calloc(n, sizeof *s->P) : NULL; /* the partial sum is HSDP's alone */
        s->A = calloc(n, sizeof *s->A);
        s->defined = calloc((size_t)model_nparams(m), 1);
    }
    if (!s || !s->L || (mode == SHARD_HSDP && !s->P) || !s->A || !s->defined) {
        shard_ref_destroy(s);
        return ddp_error(DDP_ERR_NOMEM, "the sharded reference: 3 x %zu floats", n);
    }
    s->mode = mode;
    s->mesh = *mesh_;
    s->algo = algo;
    s->m = m;
    s->wr = wr;
    s->n = n;
    s->P_empty = s->A_empty = 1;
    *out = s;
    return DDP_OK;
}

void shard_ref_destroy(shard_ref *s)
{
    if (!s)
        return;
    free(s->absL);
    free(s->absP);
    free(s->absA);
    free(s->L);
    free(s->P);
    free(s->A);
    free(s->defined);
    free(s);
}

/* AccumulateGrad into L: each used parameter's local gradient, copied into a None .grad, added otherwise. */
static void accumulate_local(shard_ref *s)
{
    const float *g = model_local_grads(s->m);
    const unsigned char *used = model_used(s->m);
    for (int p = 0; p < model_nparams(s->m); p++) {
        if (!used[p])
            continue;
        const model_param *mp = model_param_at(s->m, p);
        float *dst = s->L + mp->offset;
        const float *src = g + mp->offset;
        if (!s->defined[p])
            memcpy(dst, src, mp->count * sizeof *dst);
        else
            for (size_t i = 0; i < mp->count; i++)
                dst[i] += src[i];
        s->defined[p] = 1;
    }
}

/* into (+)= from: a copy when into is empty */
static void add_into(float *into, int *empty, const float *from, size_t n)
{
    if (*empty)
        memcpy(into, from, n * sizeof *into);
    else
        for (size_t i = 0; i < n; i++)
            into[i] += from[i];
    *empty = 0;
}

ddp_status shard_ref_track_abs(shard_ref *s)
{
    s->absL = calloc(s->n, sizeof *s->absL);
    s->absP = calloc(s->n, sizeof *s->absP);
    s->absA = calloc(s->n, sizeof *s->absA);
    if (!s->absL || !s->absP || !s->absA)
        return ddp_error(DDP_ERR_NOMEM, "the sharded reference's bound: 3 x %zu doubles", s->n);
    return DDP_OK;
}

const double *shard_ref_abs_local(const shard_ref *s, uint64_t *micro)
{
    *micro = s->mL;
    return s->absL;
}

const double *shard_ref_abs_sharded(const shard_ref *s, uint64_t *micro)
{
    *micro = s->mA;
    return s->absA;
}

/* The terms of one sum move into the next: to += from, from emptied. */
static void move_abs(double *to, uint64_t *mto, double *from, uint64_t *mfrom, size_t n)
{
    for (size_t i = 0; i < n; i++)
        to[i] += from[i];
    memset(from, 0, n * sizeof *from);
    *mto += *mfrom;
    *mfrom = 0;
}

ddp_status shard_ref_backward(shard_ref *s, int syncs)
{
    accumulate_local(s);
    if (s->absL) {
        const float *g = model_local_grads(s->m);
        const unsigned char *used = model_used(s->m);
        for (int p = 0; p < model_nparams(s->m); p++) {
            const model_param *mp = model_param_at(s->m, p);
            for (size_t i = 0; used[p] && i < mp->count; i++)
                s->absL[mp->offset + i] += fabs((double)g[mp->offset + i]);
        }
        s->mL++;
    }
    int reduces = syncs || shard_mode_scatters_unsynced(s->mode);
    if (!reduces)
        return DDP_OK;
    if (s->absL) {
        if (s->mode != SHARD_HSDP)
            move_abs(s->absA, &s->mA, s->absL, &s->mL, s->n);
        else {
            move_abs(s->absP, &s->mP, s->absL, &s->mL, s->n);
            if (syncs)
                move_abs(s->absA, &s->mA, s->absP, &s->mP, s->n);
        }
    }
    /* L is emptied by its reduction, so it is scaled and reduced where it lies; P likewise (no scratch copy) */
    int n = world_size(s->wr);
    coll_mul_inv_n(s->L, s->L, s->n, n);
    if (s->mode != SHARD_HSDP) {
        DDP_CHECK(mesh_allreduce_sum(s->wr, &s->mesh, MESH_WORLD, s->L, s->n, s->algo));
        add_into(s->A, &s->A_empty, s->L, s->n);
        memset(s->L, 0, s->n * sizeof *s->L);
        return DDP_OK;
    }
    DDP_CHECK(mesh_allreduce_sum(s->wr, &s->mesh, MESH_SHARD, s->L, s->n, s->algo));
    add_into(s->P, &s->P_empty, s->L, s->n);
    memset(s->L, 0, s->n * sizeof *s->L);
    if (!syncs)
        return DDP_OK;
    DDP_CHECK(mesh_allreduce_sum(s->wr, &s->mesh, MESH_REPLICA, s->P, s->n, s->algo));
    add_into(s->A, &s->A_empty, s->P, s->n);
    s->P_empty = 1;
    return DDP_OK;
}

void shard_ref_zero(shard_ref *s, int set_to_none)
{
    memset(s->L, 0, s->n * sizeof *s->L);
    if (s->P)
        memset(s->P, 0, s->n * sizeof *s->P);
    memset(s->A, 0, s->n * sizeof *s->A);
    s->P_empty = s->A_empty = 1;
    if (s->absL) {
        memset(s->absL, 0, s->n * sizeof *s->absL);
        memset(s->absP, 0, s->n * sizeof *s->absP);
        memset(s->absA, 0, s->n * sizeof *s->absA);
        s->mL = s->mP = s->mA = 0;
    }
    if (set_to_none)
        memset(s->defined, 0, (size_t)model_nparams(s->m));
}

shard_mode shard_ref_mode(const shard_ref *s)
{
    return s->mode;
}

mesh shard_ref_mesh(const shard_ref *s)
{
    return s->mesh;
}

int shard_ref_reads_local(const shard_ref *s, int last_synced)
{
    return shard_mode_reads_local(s->mode, last_synced);
}

const float *shard_ref_grads(const shard_ref *s, int last_synced)
{
    return shard_mode_reads_local(s->mode, last_synced) ? s->L : s->A;
}

const float *shard_ref_sharded(const shard_ref *s)
{
    return s->A;
}

float *shard_ref_sharded_mut(shard_ref *s)
{
    return s->A;
}
