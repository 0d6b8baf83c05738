/*
 * sharded.c - the built-in sharded data parallelism: zero1, zero2, fsdp and
 * hsdp (ddpsim_impl.h ddpsim_shard_mode), one engine with the mode's rules,
 * and the hooks its catalogued bugs (sharded_bugs.c) change.
 *
 * Layout: flat units of consecutive parameters in registration order, each
 * filled up to bucket_cap bytes (a parameter larger than the cap is a unit of
 * its own), padded with zeros to a multiple of the shard group's size S;
 * shard index j owns the j-th padded/S elements of each unit (FSDP's flat
 * parameter, a DeepSpeed partition, a Megatron bucket).
 *
 * A backward's reductions overlap it: when the last gradient of a unit is
 * ready and every unit after it (the backward goes last layer first) has
 * gone, the rank's communication thread takes it: the unit's .grad times
 * fl(1/N) into a padded staging buffer (N the world: the data-parallel
 * degree), a reduce-scatter over the shard group (the world for ZeRO and
 * FSDP) into this rank's slice, added into its gradient shard (copied into
 * one that holds nothing since zero_grad: DeepSpeed's micro_step_id 0,
 * FSDP2's None sharded grad), and the unit's .grad cleared. Which backwards
 * reduce is the mode's: ZeRO-1 and FSDP only a syncing one (no_sync keeps
 * the unsharded local sum), ZeRO-2 every one (DeepSpeed stage 2 reduces every
 * micro-step, stage_1_and_2.py reduce_ready_partitions_and_remove_grads),
 * HSDP every one into a partial sum, all-reduced over the replica group by a
 * syncing one only (FSDP2 set_requires_all_reduce(False),
 * _fsdp_collectives.py foreach_reduce: the reduce-scatter output plus the
 * partial, then the all-reduce). Units with a parameter this backward did not
 * use go at backward_end, in the same order.
 *
 * The step is the optimizer's, on this rank's shards (SGD or AdamW,
 * optim.h's expressions, with the slice's own state); ZeRO then all-gathers the updated parameter slices so every
 * rank holds every parameter, FSDP and HSDP keep parameter shards and gather
 * them into the parameters before each forward (and poison the parameters
 * after each backward, as resharding frees them: ddpsim must not read them).
 * Buffers follow DDP's broadcast_buffers rule (rank 0's, before a forward
 * after one outside no_sync), as the reference does.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clip.h"
#include "comm_worker.h"
#include "impl.h"
#include "optim.h"
#include "scaler.h"
#include "sharded.h"

#define MAXP MODEL_MAX_PARAMS

typedef struct unit {
    int first, np;
    size_t off, len, padded, shard; /* offset into all_grads, real elements, padded, per shard index */
    float *send;                    /* [padded]: the staging buffer */
    float *grad_shard, *param_shard, *partial; /* [shard] each (param_shard: FSDP and HSDP) */
    float *momentum;                /* [shard]: the SGD momentum buffer of this rank's slice (optim.h), or AdamW's
                                     * exp_avg */
    float *second;                  /* [shard]: AdamW's exp_avg_sq of the slice (NULL without AdamW) */
    uint32_t adam_steps;            /* AdamW: the slice's count of steps (every slice steps at every step) */
    int grad_empty, partial_empty;
    int momentum_started;           /* the buffer exists: a copy of the slice's first stepped gradient */
    int pending;                    /* gradients of this backward not yet ready */
    int launched;
} unit;

struct sharded {
    const ddpsim_services *svc;
    const sharded_hooks *h;
    int mode, n, S, R, j;
    int nu;
    unit u[MAXP];
    ddpsim_flat_unit decl[MAXP];
    int unit_of[MAXP];
    float *tmp;                     /* [largest shard] */
    float *gathered;                /* [largest padded] */
    int no_sync_depth, armed, fwd_param_sync;
    int in_backward, reduces, syncs; /* this backward: it reduces; it syncs */
    int next_launch;                /* units launch from the last to the first */
    uint64_t micro;                 /* backwards since the last step (DeepSpeed's micro_step_id) */
    uint64_t steps;
    comm_worker comm;               /* the communication thread */
    scaler_config scaler_cfg;       /* --loss-scale (services version 9), and this rank's GradScaler: */
    scaler_state scaler;
    int found_inf;                  /* ... what its last unscale found over the shard group */
};

static int s_error(sharded *s, const char *msg)
{
    return s->svc->set_error(s->svc->env, msg);
}

int sharded_mode(const sharded *s) { return s->mode; }
int sharded_group_size(const sharded *s) { return s->S; }
int sharded_syncs(const sharded *s) { return s->syncs; }
uint64_t sharded_micro(const sharded *s) { return s->micro; }
uint64_t sharded_steps(const sharded *s) { return s->steps; }
int sharded_unit_count(const sharded *s) { return s->nu; }
size_t sharded_unit_len(const sharded *s, int k) { return s->u[k].len; }
const ddpsim_services *sharded_services(const sharded *s) { return s->svc; }

/* The group a unit's reduce-scatter runs over: the shard group (the world for ZeRO and FSDP: a 1 x N mesh). */
static int scatter_group(const sharded *s)
{
    return s->mode == DDPSIM_SHARD_HSDP ? DDPSIM_GROUP_SHARD : DDPSIM_GROUP_WORLD;
}

/* into (+)= from over count floats: a copy into a shard that holds nothing yet */
static void add_into(float *into, int *empty, const float *from, size_t count)
{
    if (*empty)
        memcpy(into, from, count * sizeof *into);
    else
        for (size_t i = 0; i < count; i++)
            into[i] += from[i];
    *empty = 0;
}

/* ---- one unit's reduction (the communication thread, or the main thread at backward_end) ---- */

static void fill_send(sharded *s, unit *u)
{
    const float *g = s->svc->all_grads + u->off;
    if (s->h && s->h->fill) {
        s->h->fill(s, (int)(u - s->u), u->send, g);
        return;
    }
    coll_mul_inv_n(u->send, g, u->len, s->n);
    memset(u->send + u->len, 0, (u->padded - u->len) * sizeof *u->send);
}

static int reduce_unit(sharded *s, int k)
{
    const ddpsim_services *svc = s->svc;
    unit *u = &s->u[k];
    svc->chaos_point(svc->env, 0x73686431u + (uint32_t)k);
    if (s->h && s->h->skip && s->h->skip(s, k))
        return 0;
    if (!(s->h && s->h->fill_at_first_ready))
        fill_send(s, u);
    size_t per = s->h && s->h->scatter_count ? s->h->scatter_count(s, k) : u->shard;
    memset(s->tmp, 0, u->shard * sizeof *s->tmp);
    if (svc->reduce_scatter_sum(svc->env, scatter_group(s), u->send, s->tmp, per))
        return -1;
    memset(svc->all_grads + u->off, 0, u->len * sizeof(float)); /* the unit's .grad is reduced: cleared */
    if (s->mode != DDPSIM_SHARD_HSDP) {
        if (s->h && s->h->accumulate)
            s->h->accumulate(s, k, u->grad_shard, &u->grad_empty, s->tmp, u->shard);
        else
            add_into(u->grad_shard, &u->grad_empty, s->tmp, u->shard);
        return 0;
    }
    if (s->h && s->h->accumulate_partial)
        s->h->accumulate_partial(s, k, u->partial, &u->partial_empty, s->tmp, u->shard);
    else
        add_into(u->partial, &u->partial_empty, s->tmp, u->shard);
    int all_reduce = s->syncs || (s->h && s->h->all_reduce_every_backward);
    if (!all_reduce)
        return 0;
    const float *reduced = u->partial;
    if (s->h && s->h->replica_input)
        reduced = s->h->replica_input(s, k, u->partial, s->tmp);
    float *t = s->gathered; /* free while no forward gathers */
    memcpy(t, reduced, u->shard * sizeof *t);
    if (svc->allreduce_group(svc->env, DDPSIM_GROUP_REPLICA, t, u->shard))
        return -1;
    if (s->h && s->h->after_replica)
        s->h->after_replica(s, k, t, u->partial, u->shard);
    add_into(u->grad_shard, &u->grad_empty, t, u->shard);
    memset(u->partial, 0, u->shard * sizeof *u->partial);
    u->partial_empty = 1;
    return 0;
}

/* Unit k's reduction, on the communication thread. */
static int reduce_on_thread(void *ctx, int k, char *err, size_t len)
{
    sharded *s = ctx;
    int rc = reduce_unit(s, k);
    if (rc)
        snprintf(err, len, "unit %d's reduction in the communication thread: %s", k, s->svc->last_error(s->svc->env));
    return rc;
}

/* Hand every unit that may go (complete, and every later one gone) to the thread, in launch order. */
static void launch_ready(sharded *s, int force)
{
    while (s->next_launch >= 0 && (force || s->u[s->next_launch].pending == 0)) {
        s->u[s->next_launch].launched = 1;
        comm_worker_push(&s->comm, s->next_launch--);
    }
}

static int wait_all(sharded *s)
{
    return comm_worker_wait(&s->comm) ? s_error(s, s->comm.error) : 0;
}

/* ---- layout ---- */

static int build_layout(sharded *s)
{
    const ddpsim_services *svc = s->svc;
    size_t cap = svc->bucket_cap / sizeof(float);
    s->nu = 0;
    for (int p = 0; p < svc->nparams;) {
        unit *u = &s->u[s->nu];
        u->first = p;
        u->off = (size_t)(svc->params[p].grad - svc->all_grads);
        u->len = 0;
        do {
            u->len += svc->params[p].count;
            s->unit_of[p++] = s->nu;
        } while (p < svc->nparams && u->len + svc->params[p].count <= cap);
        u->np = p - u->first;
        size_t S = (size_t)s->S;
        u->padded = (u->len + S - 1) / S * S;
        if (s->h && s->h->padded)
            u->padded = s->h->padded(s, s->nu, u->padded);
        u->shard = u->padded / S;
        u->send = calloc(u->padded, sizeof(float));
        u->grad_shard = calloc(u->shard + 1, sizeof(float));
        u->partial = calloc(u->shard + 1, sizeof(float));
        u->momentum = calloc(u->shard + 1, sizeof(float));
        u->param_shard = DDPSIM_SHARD_FSDP == s->mode || DDPSIM_SHARD_HSDP == s->mode
                             ? calloc(u->shard + 1, sizeof(float)) : NULL;
        u->second = s->svc->adamw_on ? calloc(u->shard + 1, sizeof(float)) : NULL;
        if (!u->send || !u->grad_shard || !u->partial || !u->momentum || (s->svc->adamw_on && !u->second) ||
            (!u->param_shard && (s->mode == DDPSIM_SHARD_FSDP || s->mode == DDPSIM_SHARD_HSDP)))
            return s_error(s, "out of memory for the sharded layout");
        u->grad_empty = u->partial_empty = 1;
        s->decl[s->nu] = (ddpsim_flat_unit){u->first, u->np, u->padded, u->grad_shard, u->param_shard};
        s->nu++;
    }
    size_t big = 0, bigpad = 0;
    for (int k = 0; k < s->nu; k++) {
        big = s->u[k].shard > big ? s->u[k].shard : big;
        bigpad = s->u[k].padded > bigpad ? s->u[k].padded : bigpad;
    }
    s->tmp = calloc(big + 1, sizeof(float));
    s->gathered = calloc(bigpad + 1, sizeof(float));
    return s->tmp && s->gathered ? 0 : s_error(s, "out of memory for the sharded layout");
}

/* Element i of unit k's parameters (the views need not be one buffer). */
static float *param_elem(const sharded *s, const unit *u, size_t i)
{
    const ddpsim_services *svc = s->svc;
    for (int p = u->first; p < u->first + u->np; p++) {
        if (i < svc->params[p].count)
            return &svc->params[p].data[i];
        i -= svc->params[p].count;
    }
    return NULL;
}

/* This rank's slice of unit k's parameters into out (shard floats, padding zero). */
static void take_param_slice(const sharded *s, const unit *u, float *out)
{
    size_t lo = (size_t)s->j * u->shard;
    for (size_t k = 0; k < u->shard; k++)
        out[k] = lo + k < u->len ? *param_elem(s, u, lo + k) : 0.0f;
}

/* Every shard index's slice of unit k (this rank's in `mine`) into the parameters. */
static int gather_params(sharded *s, unit *u, const float *mine)
{
    const ddpsim_services *svc = s->svc;
    int group = scatter_group(s);
    if (svc->allgather_group(svc->env, group, mine, s->gathered, u->shard * sizeof(float)))
        return -1;
    for (size_t i = 0; i < u->len; i++)
        *param_elem(s, u, i) = s->gathered[i];
    return 0;
}

/* ---- the callbacks ---- */

static int broadcast_buffers(sharded *s)
{
    const ddpsim_services *svc = s->svc;
    if (!svc->nbuffers || !svc->broadcast_buffers || !s->fwd_param_sync)
        return 0;
    return svc->broadcast(svc->env, svc->all_buffers, svc->buffers_count * sizeof(float), 0);
}

int sharded_create(const ddpsim_services *svc, void **state, int mode, const sharded_hooks *h)
{
    if (svc->version < 5 || svc->shard_mode != mode) {
        char msg[200];
        snprintf(msg, sizeof msg, "this implementation is sharded data parallelism of one mode: run it with --shard %s",
                 mode == DDPSIM_SHARD_ZERO1 ? "zero1" : mode == DDPSIM_SHARD_ZERO2 ? "zero2"
                 : mode == DDPSIM_SHARD_FSDP ? "fsdp" : "hsdp");
        return svc->set_error(svc->env, msg);
    }
    sharded *s = calloc(1, sizeof *s);
    *state = s;
    if (!s)
        return svc->set_error(svc->env, "out of memory");
    s->svc = svc;
    s->h = h;
    s->scaler_cfg = impl_scaler_config(svc);
    scaler_start(&s->scaler_cfg, &s->scaler);
    s->mode = mode;
    s->n = svc->world_size;
    s->S = svc->mesh_shards;
    s->R = svc->mesh_replicas;
    s->j = svc->shard_index;
    s->fwd_param_sync = 1;
    if (build_layout(s))
        return -1;
    /* DDP's constructor: rank 0's parameters and buffers everywhere; then each rank keeps its parameter shard. */
    if (!(h && h->no_initial_broadcast))
        for (int p = 0; p < svc->nparams; p++)
            if (svc->broadcast(svc->env, svc->params[p].data, svc->params[p].count * sizeof(float), 0))
                return -1;
    if (svc->nbuffers && svc->broadcast(svc->env, svc->all_buffers, svc->buffers_count * sizeof(float), 0))
        return -1;
    for (int k = 0; k < s->nu; k++)
        if (s->u[k].param_shard)
            take_param_slice(s, &s->u[k], s->u[k].param_shard);
    if (comm_worker_start(&s->comm, reduce_on_thread, s, "unit", impl_env_of(svc)))
        return s_error(s, "cannot start the communication thread");
    return 0;
}

void sharded_destroy(void *state)
{
    sharded *s = state;
    if (!s)
        return;
    comm_worker_stop(&s->comm); /* first: the thread may still reduce a unit */
    for (int k = 0; k < s->nu; k++) {
        free(s->u[k].send);
        free(s->u[k].grad_shard);
        free(s->u[k].param_shard);
        free(s->u[k].partial);
        free(s->u[k].momentum);
        free(s->u[k].second);
    }
    free(s->tmp);
    free(s->gathered);
    free(s);
}

int sharded_forward_begin(void *state, int no_sync_active)
{
    sharded *s = state;
    if (broadcast_buffers(s))
        return -1;
    s->fwd_param_sync = !no_sync_active;
    s->armed |= !no_sync_active; /* DDP's arming: a forward outside no_sync arms the next backward's sync */
    for (int k = 0; k < s->nu; k++)
        if (s->u[k].param_shard && gather_params(s, &s->u[k], s->u[k].param_shard))
            return -1;
    return 0;
}

int sharded_no_sync_enter(void *state)
{
    ((sharded *)state)->no_sync_depth++;
    return 0;
}

int sharded_no_sync_exit(void *state)
{
    ((sharded *)state)->no_sync_depth--;
    return 0;
}

static void begin_backward(sharded *s)
{
    s->in_backward = 1;
    s->syncs = s->armed;
    s->reduces = s->syncs || s->mode == DDPSIM_SHARD_ZERO2 || s->mode == DDPSIM_SHARD_HSDP;
    if (s->h && s->h->reduces)
        s->reduces = s->h->reduces(s, s->reduces);
    for (int k = 0; k < s->nu; k++) {
        s->u[k].pending = s->u[k].np;
        s->u[k].launched = 0;
    }
    s->next_launch = s->nu - 1;
}

int sharded_grad_ready(void *state, int p)
{
    sharded *s = state;
    if (!s->in_backward)
        begin_backward(s);
    if (!s->reduces)
        return 0;
    unit *u = &s->u[s->unit_of[p]];
    if (s->h && s->h->fill_at_first_ready && u->pending == u->np)
        fill_send(s, u); /* the staging copy taken at the first gradient, the rest not in yet */
    u->pending--;
    if (!(s->h && s->h->fill_at_first_ready) || u->pending == 0)
        launch_ready(s, 0);
    return 0;
}

int sharded_backward_end(void *state)
{
    sharded *s = state;
    if (!s->in_backward)
        begin_backward(s);
    if (s->reduces) {
        if (s->h && s->h->fill_at_first_ready)
            for (int k = 0; k < s->nu; k++)
                if (s->u[k].pending == s->u[k].np && !s->u[k].launched)
                    fill_send(s, &s->u[k]);
        if (!(s->h && s->h->unused_blocks))
            launch_ready(s, 1); /* units holding a parameter this backward did not use */
        if (wait_all(s))
            return -1;
    }
    if (s->syncs)
        s->armed = 0;
    s->in_backward = 0;
    s->micro++;
    if (s->h && s->h->after_backward)
        s->h->after_backward(s);
    /* FSDP and HSDP free the gathered parameters after the backward (reshard): ddpsim must not read them */
    for (int k = 0; k < s->nu; k++)
        if (s->u[k].param_shard)
            for (size_t i = 0; i < s->u[k].len; i++)
                *param_elem(s, &s->u[k], i) = NAN;
    return 0;
}

int sharded_zero_grad(void *state)
{
    sharded *s = state;
    if (s->h && s->h->zero_grad && s->h->zero_grad(s))
        return 0;
    for (int k = 0; k < s->nu; k++) {
        unit *u = &s->u[k];
        memset(u->grad_shard, 0, u->shard * sizeof(float));
        memset(u->partial, 0, u->shard * sizeof(float));
        u->grad_empty = u->partial_empty = 1;
    }
    return 0;
}

/*
 * What SGD moves this rank's slice of unit u along: its gradient shard, or with momentum the slice's buffer,
 * torch.optim.SGD's (a copy of the gradient at the first step, then m * b + g, each rounded).
 */
static const float *step_direction(const sharded *s, unit *u, size_t elems)
{
    const float m = s->svc->momentum;
    if (m == 0)
        return u->grad_shard;
    for (size_t i = 0; i < elems; i++) {
        float decayed = m * u->momentum[i];
        u->momentum[i] = u->momentum_started ? decayed + u->grad_shard[i] : u->grad_shard[i];
    }
    u->momentum_started = 1;
    return u->momentum;
}

/* The step of this rank's slice of unit u: its elems parameters p, in place (optim.h's SGD or AdamW). */
static void step_slice(const sharded *s, unit *u, float *p, size_t elems)
{
    const ddpsim_services *svc = s->svc;
    if (svc->adamw_on) {
        ddp_adamw a = {1, svc->beta1, svc->beta2, svc->eps, svc->weight_decay};
        ddp_adamw_scalars sc = ddp_adamw_scalars_at(&a, svc->lr, ++u->adam_steps);
        for (size_t i = 0; i < elems; i++)
            ddp_adamw_element(&sc, &p[i], &u->momentum[i], &u->second[i], u->grad_shard[i]);
        return;
    }
    const float *dir = step_direction(s, u, elems), neg_lr = -svc->lr;
    for (size_t i = 0; i < elems; i++)
        p[i] = p[i] + neg_lr * dir[i];
}

int sharded_optimizer_step(void *state, int *owned)
{
    sharded *s = state;
    for (int k = 0; k < s->nu; k++) {
        unit *u = &s->u[k];
        size_t lo = (size_t)s->j * u->shard;
        size_t elems = lo >= u->len ? 0 : u->len - lo < u->shard ? u->len - lo : u->shard;
        if (u->param_shard) {
            step_slice(s, u, u->param_shard, elems);
            continue;
        }
        float *mine = s->tmp;
        take_param_slice(s, u, mine);
        step_slice(s, u, mine, elems);
        if (s->h && s->h->gather_into_send) {
            if (s->h->gather_into_send(s, k, u->send, mine, u->shard))
                return -1;
            for (size_t i = 0; i < u->len; i++)
                *param_elem(s, u, i) = u->send[i];
        } else if (gather_params(s, u, mine))
            return -1;
    }
    s->micro = 0;
    s->steps++;
    *owned = 1;
    return 0;
}

/*
 * clip_grad_norm_ over the shards (ddpsim_impl.h clip_grads): this rank's squares (or largest |g|) over its
 * gradient shards, the padding's zeros included, reduced over the shard group (after a sync every replica holds
 * the same shards, so the shard group covers every element once: torch's FSDP2 clip_grad_norm_ reduces the
 * DTensor norm over the mesh's shard dimension), then torch's coefficient applied to every shard.
 */
int sharded_clip_grads(void *state, double max_norm, int inf_norm, float *coef)
{
    sharded *s = state;
    const ddpsim_services *svc = s->svc;
    float local = 0;
    for (int k = 0; k < s->nu; k++)
        for (size_t i = 0; (!s->h || !s->h->clip_counts || s->h->clip_counts(s, k)) && i < s->u[k].shard; i++) {
            float g = s->u[k].grad_shard[i];
            local = inf_norm ? fmaxf(local, fabsf(g)) : local + g * g;
        }
    int group = s->h && s->h->clip_group ? s->h->clip_group(s) : scatter_group(s);
    float total = local;
    if (group >= 0 && !inf_norm && svc->allreduce_group(svc->env, group, &total, 1))
        return -1;
    if (group >= 0 && inf_norm) {
        int size = group == DDPSIM_GROUP_SHARD ? s->S : group == DDPSIM_GROUP_REPLICA ? s->R : s->n;
        float *all = malloc((size_t)size * sizeof *all);
        if (!all)
            return s_error(s, "clip_grads: out of memory");
        int bad = svc->allgather_group(svc->env, group, &local, all, sizeof local);
        for (int r = 0; r < size && !bad; r++)
            total = fmaxf(total, all[r]);
        free(all);
        if (bad)
            return -1;
    }
    *coef = clip_coef_torch(inf_norm ? total : sqrtf(total), max_norm);
    for (int k = 0; k < s->nu; k++)
        clip_scale(s->u[k].grad_shard, s->u[k].shard, *coef);
    return 0;
}

int sharded_nothing(void *state)
{
    (void)state;
    return 0;
}

/* GradScaler.scale: the loss times this rank's scale. */
int sharded_scaler_scale(void *state, float *scale)
{
    *scale = ((sharded *)state)->scaler.scale;
    return 0;
}

/*
 * GradScaler.unscale_ of the shards (ddpsim_impl.h scaler_unscale): this rank's shards times 1/scale, and whether any
 * element of them was inf or NaN, summed over the shard group (after a sync every replica holds the same shards, so
 * the shard group sees every element: FSDP's ShardedGradScaler all-reduces found_inf, fairscale PR #182). A bug's
 * hook may say where the sum goes (found_inf_group).
 */
int sharded_scaler_unscale(void *state, int *found_inf)
{
    sharded *s = state;
    const ddpsim_services *svc = s->svc;
    float inv = scaler_inv_scale(s->scaler.scale), found = 0;
    for (int k = 0; k < s->nu; k++)
        found += (float)scaler_unscale(s->u[k].grad_shard, s->u[k].shard, inv);
    float mine = found;
    if (!(s->h && s->h->found_inf_unreduced) && svc->allreduce_group(svc->env, scatter_group(s), &found, 1))
        return -1;
    s->found_inf = (s->h && s->h->found_inf_kept_local ? mine : found) > 0;
    *found_inf = s->found_inf;
    return 0;
}

/* The step's callback: GradScaler.update from this rank's finding (the update itself is optimizer_step's). */
int sharded_step(void *state)
{
    sharded *s = state;
    scaler_update(&s->scaler_cfg, &s->scaler, s->found_inf);
    s->found_inf = 0;
    return 0;
}

int sharded_layout(void *state, int *nunits, const ddpsim_flat_unit **units)
{
    sharded *s = state;
    *nunits = s->nu;
    *units = s->decl;
    return 0;
}

/* ---- the four correct ones ---- */

#define SHARDED_OPS(var, text, mode, what)                                                                           \
    static int create_##var(const ddpsim_services *svc, void **state) { return sharded_create(svc, state, mode, NULL); } \
    const ddpsim_impl_ops var = {                                                                                    \
        .api_version = DDPSIM_IMPL_API_VERSION, .name = text, .description = what, .create = create_##var,           \
        .destroy = sharded_destroy, .forward_begin = sharded_forward_begin, .no_sync_enter = sharded_no_sync_enter, \
        .no_sync_exit = sharded_no_sync_exit, .grad_ready = sharded_grad_ready,                                      \
        .backward_end = sharded_backward_end, .zero_grad = sharded_zero_grad, .step = sharded_step,                  \
        .optimizer_step = sharded_optimizer_step, .shard_layout = sharded_layout,                                    \
        .clip_grads = sharded_clip_grads, .scaler_scale = sharded_scaler_scale,                                      \
        .scaler_unscale = sharded_scaler_unscale,                                                                    \
    };
SHARDED_OPS(impl_zero1_ops, "zero1", DDPSIM_SHARD_ZERO1,
            "ZeRO-1 (--shard zero1): local accumulation under no_sync, a syncing backward reduce-scatters, each rank "
            "steps its shard and all-gathers")
SHARDED_OPS(impl_zero2_ops, "zero2", DDPSIM_SHARD_ZERO2,
            "ZeRO-2 (--shard zero2): every backward reduce-scatters into the gradient shards (DeepSpeed stage 2)")
SHARDED_OPS(impl_fsdp_ops, "fsdp", DDPSIM_SHARD_FSDP,
            "FSDP (--shard fsdp): sharded parameters gathered before each forward, unsharded accumulation under "
            "no_sync")
SHARDED_OPS(impl_hsdp_ops, "hsdp", DDPSIM_SHARD_HSDP,
            "HSDP (--shard hsdp --mesh RxS): reduce-scatter every backward in the shard group, the replica "
            "all-reduce deferred to the syncing one")
