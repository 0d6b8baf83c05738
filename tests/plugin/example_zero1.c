/*
 * example_zero1.c - an example plugin for interface version 2's optimizer
 * hook: a DDP whose optimizer is sharded as in ZeRO stage 1. After the
 * gradients are averaged (one allreduce, as example_impl.c), each rank
 * applies SGD only to its own slice of the parameters, with the learning
 * rate the services give, and the ranks then allgather the updated slices,
 * so that every rank ends the step with every parameter. It owns the update
 * (optimizer_step sets *owned), so ddpsim applies no SGD of its own, and
 * ddpsim checks the parameters it leaves after every step.
 *
 *     cc -shared -fPIC $(pkg-config --cflags ddpsim) -o libexample_zero1.so example_zero1.c
 *     ddpsim --ranks 4 --impl ./libexample_zero1.so
 *
 * Written with the same expression as ddpsim's SGD (p + (-lr) * g), the
 * update is bit for bit the reference's. One subtlety: sharding the update
 * is only right when every rank holds the same gradients and the same
 * parameters. A step inside a no_sync window (unsynced, rank-local
 * gradients) must update every parameter on every rank with that rank's own
 * gradient, as plain DDP does, and from then on the ranks' parameters
 * differ, so no later step may be sharded either. The first version of this
 * example sharded there, and the battery's zero-and-step and ends-in-window
 * scenarios caught it. Like example_impl.c it models neither
 * find_unused_parameters nor gradient_as_bucket_view; nor momentum (version
 * 6's services->momentum) or AdamW (version 7's services->adamw_on): an
 * update it owns at some steps and leaves to ddpsim at others would need
 * ddpsim's optimizer state kept at its own steps too.
 */
#include <ddpsim_impl.h>
#include <stdlib.h>
#include <string.h>

typedef struct zero1 {
    const ddpsim_services *svc;
    int sync_this_backward;
    int sync_buffers;    /* the next forward broadcasts the buffers (broadcast_buffers, as example_impl.c) */
    int grads_agree;     /* every rank holds the same gradients: after a sync or a zero_grad, not after a no_sync backward */
    int params_agree;    /* every rank holds the same parameters: until a step on rank-local gradients */
    size_t total, shard; /* parameters in all; per rank (the last rank's slice may be short) */
    float *flat;         /* every rank's slice, gathered: world_size * shard floats */
    float *mine;         /* this rank's updated slice */
} zero1;

/* Rank 0's buffers to every rank; services of version 3 have them. */
static int z_broadcast_buffers(const ddpsim_services *svc)
{
    if (svc->version < 3 || !svc->nbuffers)
        return 0;
    return svc->broadcast(svc->env, svc->all_buffers, svc->buffers_count * sizeof(float), 0);
}

static int z_create(const ddpsim_services *svc, void **state)
{
    if (svc->version < 2)
        return svc->set_error(svc->env, "example_zero1 needs services of interface version 2 (the learning rate)");
    if (svc->find_unused || svc->bucket_view)
        return svc->set_error(svc->env, "example_zero1 models neither find_unused nor gradient_as_bucket_view");
    if (svc->version >= 6 && svc->momentum != 0) /* its fallback to ddpsim's step would find ddpsim's buffers behind */
        return svc->set_error(svc->env, "example_zero1 steps plain SGD: run it without --optimizer momentum");
    if (svc->version >= 7 && svc->adamw_on)
        return svc->set_error(svc->env, "example_zero1 steps plain SGD: run it without --optimizer adamw");
    zero1 *z = calloc(1, sizeof *z);
    *state = z;
    if (!z)
        return svc->set_error(svc->env, "out of memory");
    z->svc = svc;
    z->grads_agree = z->params_agree = 1;
    z->total = svc->total_count;
    z->shard = (z->total + (size_t)svc->world_size - 1) / (size_t)svc->world_size;
    z->flat = calloc((size_t)svc->world_size * z->shard, sizeof(float));
    z->mine = calloc(z->shard, sizeof(float));
    if (!z->flat || !z->mine)
        return svc->set_error(svc->env, "out of memory");
    for (int p = 0; p < svc->nparams; p++)
        if (svc->broadcast(svc->env, svc->params[p].data, svc->params[p].count * sizeof(float), 0))
            return -1;
    z->sync_buffers = 1;
    return z_broadcast_buffers(svc);
}

static void z_destroy(void *state)
{
    zero1 *z = state;
    if (z) {
        free(z->flat);
        free(z->mine);
    }
    free(z);
}

static int z_forward_begin(void *state, int no_sync_active)
{
    zero1 *z = state;
    if (z->sync_buffers && z->svc->version >= 3 && z->svc->broadcast_buffers && z_broadcast_buffers(z->svc))
        return -1;
    z->sync_buffers = !no_sync_active;
    z->sync_this_backward |= !no_sync_active; /* armed until a backward syncs */
    return 0;
}

static int z_nothing(void *state)
{
    (void)state;
    return 0;
}

static int z_grad_ready(void *state, int param)
{
    (void)state;
    (void)param;
    return 0;
}

static int z_zero_grad(void *state)
{
    ((zero1 *)state)->grads_agree = 1;
    return 0;
}

static int z_backward_end(void *state)
{
    zero1 *z = state;
    const ddpsim_services *svc = z->svc;
    z->grads_agree = z->sync_this_backward;
    if (!z->sync_this_backward)
        return 0;
    z->sync_this_backward = 0;
    float inv = (float)(1.0 / svc->world_size);
    for (size_t i = 0; i < svc->total_count; i++)
        svc->all_grads[i] *= inv;
    return svc->allreduce_sum(svc->env, svc->all_grads, svc->total_count);
}

/* Element i of the parameters, in registration order (the views need not be one buffer). */
static float *param_at(const ddpsim_services *svc, size_t i)
{
    for (int p = 0; p < svc->nparams; p++) {
        if (i < svc->params[p].count)
            return &svc->params[p].data[i];
        i -= svc->params[p].count;
    }
    return NULL;
}

/* SGD on this rank's slice, then every slice to every rank; once anything is rank-local, ddpsim's SGD everywhere. */
static int z_optimizer_step(void *state, int *owned)
{
    zero1 *z = state;
    const ddpsim_services *svc = z->svc;
    if (!z->grads_agree || !z->params_agree) {
        z->params_agree = 0;
        *owned = 0; /* ddpsim's SGD: every parameter, this rank's gradient */
        return 0;
    }
    size_t lo = (size_t)svc->rank * z->shard;
    float neg_lr = -svc->lr;
    for (size_t k = 0; k < z->shard; k++) {
        size_t i = lo + k;
        z->mine[k] = i < z->total ? *param_at(svc, i) + neg_lr * svc->all_grads[i] : 0.0f;
    }
    if (svc->allgather(svc->env, z->mine, z->flat, z->shard * sizeof(float))) {
        /* Say why in ddpsim's words too: the report shows this message. */
        char msg[600] = "example_zero1: the allgather of the updated slices failed: ";
        strncat(msg, svc->last_error(svc->env), sizeof msg - strlen(msg) - 1);
        return svc->set_error(svc->env, msg);
    }
    for (size_t i = 0; i < z->total; i++)
        *param_at(svc, i) = z->flat[i];
    *owned = 1;
    return 0;
}

static const ddpsim_impl_ops zero1_ops = {
    .api_version = DDPSIM_IMPL_API_VERSION,
    .name = "example-zero1",
    .description = "the ZeRO-1 example: averaged gradients, each rank steps its slice, slices allgathered",
    .create = z_create,
    .destroy = z_destroy,
    .forward_begin = z_forward_begin,
    .no_sync_enter = z_nothing,
    .no_sync_exit = z_nothing,
    .grad_ready = z_grad_ready,
    .backward_end = z_backward_end,
    .zero_grad = z_zero_grad,
    .step = z_nothing,
    .optimizer_step = z_optimizer_step,
};

const ddpsim_impl_ops *ddpsim_impl_get(void)
{
    return &zero1_ops;
}
