/*
 * sharded.h - the built-in sharded data parallelism (sharded.c) as an
 * engine the catalogue's sharded bugs (sharded_bugs.c) reuse: each bug is a
 * set of hooks at the points where real implementations went wrong, every
 * one optional (NULL or 0: the correct behaviour). Internal to engine/impls.
 */
#ifndef DDPSIM_SHARDED_H
#define DDPSIM_SHARDED_H

#include <stddef.h>
#include <stdint.h>

#include "ddpsim_impl.h"

typedef struct sharded sharded;

typedef struct sharded_hooks {
    int no_initial_broadcast;
    /* whether this backward reduces, given the mode's answer */
    int (*reduces)(sharded *s, int mode_says);
    /* unit k's staging buffer from its .grad (padded floats; NULL: .grad * fl(1/N), padding zeros) */
    void (*fill)(sharded *s, int k, float *send, const float *grad);
    int fill_at_first_ready;     /* the staging copy is taken at the unit's first ready gradient */
    int unused_blocks;           /* a unit with a parameter this backward did not use is never launched */
    int (*skip)(sharded *s, int k);                       /* 1: unit k is not reduced this time */
    size_t (*scatter_count)(sharded *s, int k);           /* the reduce-scatter's count per rank (NULL: the shard) */
    size_t (*padded)(sharded *s, int k, size_t padded);   /* the layout's padded size of unit k */
    /* ZeRO/FSDP: the reduce-scatter's result `got` into the gradient shard (NULL: (+)=) */
    void (*accumulate)(sharded *s, int k, float *shard, int *empty, const float *got, size_t count);
    /* HSDP: the reduce-scatter's result into the partial sum (NULL: (+)=) */
    void (*accumulate_partial)(sharded *s, int k, float *partial, int *empty, const float *got, size_t count);
    int all_reduce_every_backward;                        /* HSDP: the replica all-reduce never deferred */
    /* HSDP: what the replica all-reduce reduces (NULL: the partial, this backward's included) */
    const float *(*replica_input)(sharded *s, int k, const float *partial, const float *this_backward);
    /* HSDP: after the all-reduce, before `reduced` goes into the gradient shard */
    void (*after_replica)(sharded *s, int k, float *reduced, const float *partial, size_t count);
    void (*after_backward)(sharded *s);
    int (*zero_grad)(sharded *s);                         /* 1: zero_grad done here */
    /* ZeRO's step: gather every slice of unit k into its staging buffer instead (returns -1 on failure) */
    int (*gather_into_send)(sharded *s, int k, float *send, const float *mine, size_t count);
    /* clip: the group the shards' norm is reduced over (a ddpsim_group; -1: none, the rank's own shards) */
    int (*clip_group)(sharded *s);
    /* clip: whether this rank's shard of unit k counts in its part of the norm (NULL: every unit) */
    int (*clip_counts)(sharded *s, int k);
    /* --loss-scale: the unscale's finding is not summed over the shard group (the rank's own shards decide) */
    int found_inf_unreduced;
    /* ... or it is summed, but the rank keeps its own shards' */
    int found_inf_kept_local;
} sharded_hooks;

/* The callbacks of ddpsim_impl_ops, for a mode (ddpsim_shard_mode) and its hooks (NULL: correct). */
int sharded_create(const ddpsim_services *svc, void **state, int mode, const sharded_hooks *h);
void sharded_destroy(void *state);
int sharded_forward_begin(void *state, int no_sync_active);
int sharded_no_sync_enter(void *state);
int sharded_no_sync_exit(void *state);
int sharded_grad_ready(void *state, int p);
int sharded_backward_end(void *state);
int sharded_zero_grad(void *state);
int sharded_optimizer_step(void *state, int *owned);
int sharded_clip_grads(void *state, double max_norm, int inf_norm, float *coef);
int sharded_scaler_scale(void *state, float *scale);
int sharded_scaler_unscale(void *state, int *found_inf);
int sharded_step(void *state);
int sharded_nothing(void *state);
int sharded_layout(void *state, int *nunits, const ddpsim_flat_unit **units);

/* What a hook may ask. */
int sharded_mode(const sharded *s);
int sharded_group_size(const sharded *s);   /* S */
int sharded_syncs(const sharded *s);        /* this backward syncs */
uint64_t sharded_micro(const sharded *s);   /* backwards since the last step */
uint64_t sharded_steps(const sharded *s);
int sharded_unit_count(const sharded *s);
size_t sharded_unit_len(const sharded *s, int k);
const ddpsim_services *sharded_services(const sharded *s);

#endif
