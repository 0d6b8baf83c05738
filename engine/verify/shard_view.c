/*
 * shard_view.c - the implementation's shards as the checker sees them
 * (shard_view.h).
 */
#include "shard_view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How far past the parameters a unit may be padded: less than S * max(128, its widest row) (ddpsim_impl.h). */
static size_t padding_allowed(const model *m, const ddpsim_flat_unit *u, int S)
{
    size_t row = 128;
    for (int p = u->first_param; p < u->first_param + u->nparams; p++) {
        const model_param *mp = model_param_at(m, p);
        if (mp->ndim == 2 && (size_t)mp->shape[1] > row)
            row = (size_t)mp->shape[1];
    }
    return (size_t)S * row;
}

static ddp_status bad_layout(const char *what, int k)
{
    return ddp_error(DDP_ERR_BACKEND, "its sharded layout (shard_layout), flat unit %d: %s", k, what);
}

ddp_status shard_view_init(shard_view *v, shard_mode mode, const mesh *mesh_, int rank, const model *m, int nunits,
                           const ddpsim_flat_unit *units)
{
    memset(v, 0, sizeof *v);
    v->mode = mode;
    v->rank = rank;
    v->S = mesh_->shards;
    v->j = mesh_group_index(mesh_, MESH_SHARD, rank);
    int np = model_nparams(m);
    if (nunits < 1 || nunits > np || !units)
        return ddp_error(DDP_ERR_BACKEND, "its sharded layout (shard_layout) has %d flat units for %d parameters",
                         nunits, np);
    char what[256];
    int next = 0;
    for (int k = 0; k < nunits; k++) {
        const ddpsim_flat_unit *u = &units[k];
        if (u->first_param != next || u->nparams < 1 || u->first_param + u->nparams > np) {
            snprintf(what, sizeof what, "parameters %d..%d, where the units must cover parameters %d..%d in order",
                     u->first_param, u->first_param + u->nparams - 1, next, np - 1);
            return bad_layout(what, k);
        }
        size_t len = 0;
        for (int p = u->first_param; p < u->first_param + u->nparams; p++)
            len += model_param_at(m, p)->count;
        if (u->padded < len || u->padded % (size_t)v->S != 0 || u->padded - len >= padding_allowed(m, u, v->S)) {
            snprintf(what, sizeof what,
                     "padded to %zu elements for %zu: a unit is padded to a multiple of the shard group's size %d, "
                     "by less than %zu",
                     u->padded, len, v->S, padding_allowed(m, u, v->S));
            return bad_layout(what, k);
        }
        if (!u->grad_shard)
            return bad_layout("no grad_shard", k);
        if (shard_mode_params_sharded(mode) && !u->param_shard)
            return bad_layout("no param_shard, where --shard fsdp and hsdp shard the parameters", k);
        next = u->first_param + u->nparams;
    }
    if (next != np) {
        snprintf(what, sizeof what, "the units end at parameter %d of %d", next, np);
        return bad_layout(what, nunits - 1);
    }
    v->nunits = nunits;
    v->units = units;
    v->off = calloc((size_t)nunits, sizeof *v->off);
    v->len = calloc((size_t)nunits, sizeof *v->len);
    v->values = calloc(model_size(m) ? model_size(m) : 1, sizeof *v->values);
    if (!v->off || !v->len || !v->values) {
        shard_view_free(v);
        return ddp_error(DDP_ERR_NOMEM, "the sharded view: %zu floats", model_size(m));
    }
    ddp_status s = held_mask_init(&v->held, m);
    if (s != DDP_OK) {
        shard_view_free(v);
        return s;
    }
    for (int k = 0; k < nunits; k++) {
        const ddpsim_flat_unit *u = &units[k];
        v->off[k] = model_param_at(m, u->first_param)->offset;
        size_t shard = u->padded / (size_t)v->S, lo = (size_t)v->j * shard, hi = lo + shard, at = 0;
        for (int p = u->first_param; p < u->first_param + u->nparams; p++) {
            size_t count = model_param_at(m, p)->count;
            size_t a = lo > at ? lo : at, b = hi < at + count ? hi : at + count;
            if (a < b)
                held_mask_add(&v->held, m, p, a - at, b - a);
            at += count;
        }
        v->len[k] = at;
    }
    held_mask_finish(&v->held, m);
    return DDP_OK;
}

void shard_view_free(shard_view *v)
{
    free(v->off);
    free(v->len);
    free(v->values);
    held_mask_free(&v->held);
    v->off = v->len = NULL;
    v->values = NULL;
}

const float *shard_view_read(shard_view *v, const model *m, int params)
{
    (void)m;
    v->pad_bad = 0;
    for (int k = 0; k < v->nunits; k++) {
        const ddpsim_flat_unit *u = &v->units[k];
        const float *src = params ? u->param_shard : u->grad_shard;
        size_t shard = u->padded / (size_t)v->S, lo = (size_t)v->j * shard;
        for (size_t i = 0; i < shard; i++) {
            size_t e = lo + i;
            if (e < v->len[k]) {
                v->values[v->off[k] + e] = src[i];
            } else if (src[i] != 0.0f) {
                if (v->pad_bad++ == 0) {
                    v->pad_unit = k;
                    v->pad_index = e;
                    v->pad_value = src[i];
                }
            }
        }
    }
    return v->values;
}

void shard_view_padding_into(const shard_view *v, verify_record *rec)
{
    if (!v->pad_bad)
        return;
    rec->ndiff += v->pad_bad;
    if (rec->has_first)
        return;
    rec->has_first = 1;
    rec->first_padding = 1;
    rec->first_param = v->pad_unit;
    rec->first_index = v->pad_index;
    rec->first_expected = 0.0f;
    rec->first_actual = v->pad_value;
    rec->first_ulp = 0;
}
