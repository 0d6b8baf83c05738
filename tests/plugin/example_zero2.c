/*
 * example_zero2.c - an example plugin for interface version 8: ZeRO-2, the
 * gradients sharded and reduced in every backward (DeepSpeed stage 2), in as
 * few lines as the interface allows. Every parameter is one flat unit,
 * padded with zeros to a multiple of the world size; rank r owns the r-th
 * slice. After each backward it scales .grad by 1/N into a staging buffer,
 * reduce-scatters it, adds its slice into its gradient shard (copies into an
 * empty one) and clears .grad; the step updates its slice of the parameters
 * (torch.optim.SGD: with --optimizer momentum its slice's momentum buffer;
 * with --optimizer adamw torch.optim.AdamW with its slice's moments) and
 * all-gathers the slices. A clip op takes the squares of its shard, summed
 * over the world (every element once), and scales the shard by torch's
 * coefficient (clip_grads, version 8). Under --loss-scale it keeps torch's
 * GradScaler: the scale its loss is multiplied by, the unscale of its shard
 * with the finding of an inf or NaN summed over the world, and the update at
 * the step (scaler_scale, scaler_unscale, version 9).
 *
 *     cc -shared -fPIC $(pkg-config --cflags ddpsim) -o libexample_zero2.so example_zero2.c -lm
 *     ddpsim --ranks 4 --shard zero2 --impl ./libexample_zero2.so
 *
 * ddpsim compares each rank's shard with its slice of the sharded reference
 * at every grab, the padding with zero, and the parameters after each step.
 * Built with -DEXAMPLE_UNPADDED it declares a unit padded to no multiple of
 * the world (the layout is refused, naming the unit), with
 * -DEXAMPLE_DIRTY_PADDING it leaves ones in the staging buffer's padding (the
 * padding check names the element), with -DEXAMPLE_DIVIDE_AFTER it divides the
 * reduced sum by N instead of scaling each gradient first (right in real
 * arithmetic, other bits: --tolerance order passes it), with
 * -DEXAMPLE_PLAIN_SGD it steps with plain SGD whatever the run says (a
 * momentum or AdamW run catches it), with -DEXAMPLE_CLIP_LOCAL it clips by
 * its own shard's norm, never summed over the ranks (a clip's check catches
 * it), and with -DEXAMPLE_API_VERSION=5 as
 * well it is a version-5 plugin (a momentum or AdamW run refuses it):
 * ddpsim's own tests use them all.
 */
#include <ddpsim_impl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef EXAMPLE_API_VERSION
#define EXAMPLE_API_VERSION DDPSIM_IMPL_API_VERSION
#endif

typedef struct zero2 {
    const ddpsim_services *svc;
    size_t total, padded, shard; /* the unit: every parameter, padded to a multiple of N; one rank's slice */
    float *send, *mine, *got, *flat; /* [padded], [shard], [shard], [padded] */
    float *momentum;             /* [shard]: this slice's SGD momentum buffer, or AdamW's exp_avg */
    float *second;               /* [shard]: AdamW's exp_avg_sq */
    int momentum_started;
    unsigned steps;              /* AdamW's count of steps (state['step']) */
    int empty;                   /* the shard holds nothing since zero_grad */
    int sync_buffers;            /* the next forward broadcasts the buffers (DDP's rule, services version 3) */
    float scale;                 /* --loss-scale: GradScaler's scale, its growth tracker, and the last unscale's */
    int tracker, found_inf;      /* ... finding (services version 9) */
    ddpsim_flat_unit unit;
} zero2;

/* Element i of the parameters, in registration order. */
static float *param_at(const ddpsim_services *svc, size_t i)
{
    for (int p = 0; p < svc->nparams; p++) {
        if (i < svc->params[p].count)
            return &svc->params[p].data[i];
        i -= svc->params[p].count;
    }
    return NULL;
}

static int z_create(const ddpsim_services *svc, void **state)
{
    if (svc->version < 5 || svc->shard_mode != DDPSIM_SHARD_ZERO2)
        return svc->set_error(svc->env, "example_zero2 is ZeRO-2: run it with --shard zero2");
    zero2 *z = calloc(1, sizeof *z);
    *state = z;
    if (!z)
        return svc->set_error(svc->env, "out of memory");
    size_t n = (size_t)svc->world_size;
    z->svc = svc;
    z->scale = svc->version >= 9 && svc->loss_scale_on ? svc->loss_scale_init : 1.0f;
    z->total = svc->total_count;
    z->padded = (z->total + n - 1) / n * n;
    z->shard = z->padded / n;
    z->send = calloc(z->padded, sizeof(float));
    z->mine = calloc(z->shard, sizeof(float));
    z->got = calloc(z->shard, sizeof(float));
    z->flat = calloc(z->padded, sizeof(float));
    z->momentum = calloc(z->shard, sizeof(float));
    z->second = calloc(z->shard, sizeof(float));
    if (!z->send || !z->mine || !z->got || !z->flat || !z->momentum || !z->second)
        return svc->set_error(svc->env, "out of memory");
#ifdef EXAMPLE_DIRTY_PADDING
    for (size_t i = z->total; i < z->padded; i++)
        z->send[i] = 1.0f;
#endif
    z->empty = z->sync_buffers = 1;
    z->unit = (ddpsim_flat_unit){0, svc->nparams, z->padded, z->mine, NULL};
#ifdef EXAMPLE_UNPADDED
    z->unit.padded = z->total;
#endif
    for (int p = 0; p < svc->nparams; p++) /* DDP's constructor: rank 0's parameters everywhere */
        if (svc->broadcast(svc->env, svc->params[p].data, svc->params[p].count * sizeof(float), 0))
            return -1;
    return svc->nbuffers ? svc->broadcast(svc->env, svc->all_buffers, svc->buffers_count * sizeof(float), 0) : 0;
}

static void z_destroy(void *state)
{
    zero2 *z = state;
    if (z) {
        free(z->send);
        free(z->mine);
        free(z->got);
        free(z->flat);
        free(z->momentum);
        free(z->second);
    }
    free(z);
}

static int z_nothing(void *state)
{
    (void)state;
    return 0;
}

static int z_forward_begin(void *state, int no_sync_active)
{
    zero2 *z = state; /* ZeRO-2 reduces in every backward: no_sync changes nothing for the gradients */
    const ddpsim_services *svc = z->svc;
    /* the buffers as DDP broadcasts them: before a forward after one outside no_sync */
    if (svc->nbuffers && svc->broadcast_buffers && z->sync_buffers &&
        svc->broadcast(svc->env, svc->all_buffers, svc->buffers_count * sizeof(float), 0))
        return -1;
    z->sync_buffers = !no_sync_active;
    return 0;
}

static int z_grad_ready(void *state, int param)
{
    (void)state;
    (void)param;
    return 0;
}

static int z_backward_end(void *state)                      /* ZeRO-2: every backward */
{
    zero2 *z = state;
    const ddpsim_services *svc = z->svc;
    for (size_t i = 0; i < z->total; i++)                   /* DDP's fl(1/N) times each gradient, */
        z->send[i] = svc->all_grads[i] * (float)(1.0 / svc->world_size);   /* the padding left zero */
#ifdef EXAMPLE_DIVIDE_AFTER
    for (size_t i = 0; i < z->total; i++)
        z->send[i] = svc->all_grads[i];
#endif
    if (svc->reduce_scatter_sum(svc->env, DDPSIM_GROUP_WORLD, z->send, z->got, z->shard))
        return -1;
#ifdef EXAMPLE_DIVIDE_AFTER
    for (size_t k = 0; k < z->shard; k++)
        z->got[k] /= (float)svc->world_size;
#endif
    for (size_t k = 0; k < z->shard; k++)                   /* copy into an empty shard, else add */
        z->mine[k] = z->empty ? z->got[k] : z->mine[k] + z->got[k];
    z->empty = 0;
    memset(svc->all_grads, 0, z->total * sizeof(float));    /* reduced: the next backward starts at zero */
    return 0;
}

static int z_zero_grad(void *state)
{
    zero2 *z = state;
    memset(z->mine, 0, z->shard * sizeof(float));
    z->empty = 1;
    return 0;
}

/* What the slice steps along: its gradient shard, or torch.optim.SGD's momentum buffer (a copy, then m * b + g). */
static const float *z_direction(zero2 *z)
{
#ifndef EXAMPLE_PLAIN_SGD
    const float m = z->svc->momentum;
    if (m != 0) {
        for (size_t k = 0; k < z->shard; k++) {
            float decayed = m * z->momentum[k];
            z->momentum[k] = z->momentum_started ? decayed + z->mine[k] : z->mine[k];
        }
        z->momentum_started = 1;
        return z->momentum;
    }
#endif
    return z->mine;
}

#if EXAMPLE_API_VERSION >= 7 && !defined(EXAMPLE_PLAIN_SGD)
/* torch.optim.AdamW on the slice, into slice: the rule of services->adamw_on (version 7), rounded as it is written. */
static void z_adamw(zero2 *z, size_t lo, float *slice)
{
    const ddpsim_services *svc = z->svc;
    z->steps++;
    double bc1 = 1 - pow(svc->beta1, z->steps), bc2 = 1 - pow(svc->beta2, z->steps);
    const float b1 = (float)svc->beta1, a1 = (float)(1 - svc->beta1), b2 = (float)svc->beta2;
    const float a2 = (float)(1 - svc->beta2), decay = (float)(1 - (double)svc->lr * svc->weight_decay);
    const float c2 = (float)sqrt(bc2), eps = (float)svc->eps, neg_step = (float)(-(double)svc->lr / bc1);
    for (size_t k = 0; k < z->shard && lo + k < z->total; k++) {
        float g = z->mine[k], p = *param_at(svc, lo + k) * decay;
        float mb = b1 * z->momentum[k], vb = b2 * z->second[k];
        z->momentum[k] = mb + a1 * g;
        z->second[k] = vb + (a2 * g) * g;
        float d = sqrtf(z->second[k]) / c2 + eps;
        slice[k] = p + (neg_step * z->momentum[k]) / d;
    }
}
#endif

/* The optimizer on this rank's slice (SGD: ddpsim's expression p + (-lr) * g; or AdamW), then every slice to
 * every rank. */
static int z_optimizer_step(void *state, int *owned)
{
    zero2 *z = state;
    const ddpsim_services *svc = z->svc;
    size_t lo = (size_t)svc->rank * z->shard;
    float neg_lr = -svc->lr;
    float *slice = z->send; /* free after the backward */
    for (size_t k = 0; k < z->shard; k++)
        slice[k] = 0.0f;
#if EXAMPLE_API_VERSION >= 7 && !defined(EXAMPLE_PLAIN_SGD)
    if (svc->adamw_on)
        z_adamw(z, lo, slice);
    else
#endif
    {
        const float *dir = z_direction(z);
        for (size_t k = 0; k < z->shard && lo + k < z->total; k++)
            slice[k] = *param_at(svc, lo + k) + neg_lr * dir[k];
    }
    if (svc->allgather_group(svc->env, DDPSIM_GROUP_WORLD, slice, z->flat, z->shard * sizeof(float)))
        return -1;
    for (size_t i = 0; i < z->total; i++)
        *param_at(svc, i) = z->flat[i];
#ifndef EXAMPLE_DIRTY_PADDING
    memset(z->send + z->total, 0, (z->padded - z->total) * sizeof(float)); /* the padding zero again */
#endif
    *owned = 1;
    return 0;
}

#if EXAMPLE_API_VERSION >= 8
/* clip_grad_norm_ over the shards: this slice's squares summed over the world (the padding adds zeros), then
 * min(max_norm / (norm + 1e-6), 1), as torch computes it in float: the reciprocal times max_norm. */
static int z_clip_grads(void *state, double max_norm, int inf_norm, float *coef)
{
    zero2 *z = state;
    float norm = 0;
    for (size_t k = 0; k < z->shard; k++)
        norm = inf_norm ? fmaxf(norm, fabsf(z->mine[k])) : norm + z->mine[k] * z->mine[k];
#ifndef EXAMPLE_CLIP_LOCAL
    const ddpsim_services *svc = z->svc;
    if (inf_norm) {
        float *all = malloc((size_t)svc->world_size * sizeof *all);
        if (!all || svc->allgather(svc->env, &norm, all, sizeof norm)) {
            free(all);
            return svc->set_error(svc->env, "clip_grads: the norm's all-gather failed");
        }
        for (int r = 0; r < svc->world_size; r++)
            norm = fmaxf(norm, all[r]);
        free(all);
    } else if (svc->allreduce_sum(svc->env, &norm, 1)) {
        return -1;
    }
#endif
    if (!inf_norm)
        norm = sqrtf(norm);
    float c = (1.0f / (norm + 1e-6f)) * (float)max_norm;
    *coef = c > 1.0f ? 1.0f : c; /* torch.clamp: a NaN stays NaN */
    for (size_t k = 0; k < z->shard; k++)
        z->mine[k] *= *coef;
    return 0;
}
#endif

#if EXAMPLE_API_VERSION >= 9
/* GradScaler.scale: the loss times this rank's scale. */
static int z_scaler_scale(void *state, float *scale)
{
    *scale = ((zero2 *)state)->scale;
    return 0;
}

/* GradScaler.unscale_ of the slice: times (float)(1 / (double)scale), an inf or NaN in it summed over the world. */
static int z_scaler_unscale(void *state, int *found_inf)
{
    zero2 *z = state;
    float inv = (float)(1.0 / (double)z->scale), found = 0;
    for (size_t k = 0; k < z->shard; k++) {
        if (!isfinite(z->mine[k]))
            found = 1;
        if (inv != 1.0f)
            z->mine[k] *= inv;
    }
    if (z->svc->allreduce_sum(z->svc->env, &found, 1))
        return -1;
    *found_inf = z->found_inf = found > 0;
    return 0;
}

/* The step's callback, taken or skipped: GradScaler.update (back off after a skip, grow after `interval` taken). */
static int z_step(void *state)
{
    zero2 *z = state;
    const ddpsim_services *svc = z->svc;
    if (svc->loss_scale_on && svc->loss_scale_dynamic && z->found_inf) {
        z->scale = (float)(z->scale * svc->loss_scale_backoff);
        z->tracker = 0;
    } else if (svc->loss_scale_on && svc->loss_scale_dynamic && ++z->tracker == svc->loss_scale_interval) {
        float grown = (float)(z->scale * svc->loss_scale_growth);
        if (isfinite(grown))
            z->scale = grown;
        z->tracker = 0;
    }
    z->found_inf = 0;
    return 0;
}
#endif

static int z_layout(void *state, int *nunits, const ddpsim_flat_unit **units)
{
    zero2 *z = state;
    *nunits = 1;
    *units = &z->unit;
    return 0;
}

static const ddpsim_impl_ops zero2_ops = {
    .api_version = EXAMPLE_API_VERSION,
    .name = "example-zero2",
    .description = "the ZeRO-2 example: one padded unit, reduce-scattered every backward, slices stepped and gathered",
    .create = z_create,
    .destroy = z_destroy,
    .forward_begin = z_forward_begin,
    .no_sync_enter = z_nothing,
    .no_sync_exit = z_nothing,
    .grad_ready = z_grad_ready,
    .backward_end = z_backward_end,
    .zero_grad = z_zero_grad,
#if EXAMPLE_API_VERSION >= 9
    .step = z_step,
#else
    .step = z_nothing,
#endif
    .optimizer_step = z_optimizer_step,
    .shard_layout = z_layout,
#if EXAMPLE_API_VERSION >= 8
    .clip_grads = z_clip_grads,
#endif
#if EXAMPLE_API_VERSION >= 9
    .scaler_scale = z_scaler_scale,
    .scaler_unscale = z_scaler_unscale,
#endif
};

const ddpsim_impl_ops *ddpsim_impl_get(void)
{
    return &zero2_ops;
}
