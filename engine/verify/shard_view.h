/*
 * shard_view.h - a live sharded run's view of the implementation's shards
 * (ddpsim_impl.h version 5 shard_layout): the declared layout checked
 * against what the mode allows, what this rank holds of each check as a
 * held mask (checker.h), its shards laid out as the model's gradient (or
 * parameter) buffer for the checker, and the padding, which must stay
 * exactly zero. Internal to engine/verify.
 */
#ifndef DDPSIM_SHARD_VIEW_H
#define DDPSIM_SHARD_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "checker.h"
#include "ddpsim_impl.h"
#include "mesh.h"
#include "model.h"
#include "shard_ref.h"
#include "verify.h"

typedef struct shard_view {
    shard_mode mode;
    int rank, S, j;
    int nunits;
    const ddpsim_flat_unit *units;
    size_t *off, *len;     /* [nunits]: each unit's first element in the model's buffer, its real elements */
    held_mask held;        /* this rank's slices of every unit */
    float *values;         /* [model_size]: the shards laid out (what is not held stays zero) */
    /* the padding of the last shard_view_read: how many elements are not zero, the first of them */
    uint64_t pad_bad, pad_index;
    int pad_unit;
    float pad_value;
} shard_view;

/*
 * Check the layout the implementation declared (units over m's parameters,
 * on this rank of the mesh) and build the view. DDP_ERR_BACKEND with what
 * is wrong with the layout (the implementation's fault); DDP_ERR_NOMEM.
 */
ddp_status shard_view_init(shard_view *v, shard_mode mode, const mesh *mesh_, int rank, const model *m, int nunits,
                           const ddpsim_flat_unit *units);
void shard_view_free(shard_view *v);
/* The gradient shards (params: the parameter shards) laid out as m's buffer; the padding counted. */
const float *shard_view_read(shard_view *v, const model *m, int params);
/* The padding's first non-zero element into rec, as a divergence, when the last read found one. */
void shard_view_padding_into(const shard_view *v, verify_record *rec);

#endif
