/*
 * example_impl.c - an example ddpsim plugin: the smallest correct DDP.
 *
 * Build it as a shared object against ddpsim's installed header:
 *
 *     cc -shared -fPIC $(pkg-config --cflags ddpsim) -o libexample_impl.so example_impl.c
 *     ddpsim --ranks 4 --impl ./libexample_impl.so
 *
 * What it does: broadcasts the parameters (and the buffers) at create;
 * a forward first broadcasts rank 0's buffers when the forward before it
 * ran outside no_sync (broadcast_buffers, PyTorch 1.13 distributed.py
 * forward: require_forward_param_sync); a forward outside
 * no_sync arms the next backward's sync and a forward inside it leaves the
 * arming alone (PyTorch 1.13 distributed.py forward: prepare_for_backward);
 * at the end of an armed backward it disarms, multiplies every gradient by
 * 1/N and sum-allreduces the whole gradient buffer at once. One
 * allreduce instead of DDP's buckets changes no value with ddpsim's ordered
 * or exact reduction, so it matches the reference bit for bit. It does not
 * model find_unused_parameters or gradient_as_bucket_view, and says so.
 * On the token model (--model lm) it is also the trainer: its loss_factor
 * gathers the window's valid tokens once per window and normalizes as
 * --loss-norm intends. Built with -DEXAMPLE_HALF_SCALER it has a
 * scaler_scale without a scaler_unscale, which ddpsim refuses when it loads
 * it; with -DEXAMPLE_LOCAL_TOKENS its trainer divides by its own rank's
 * tokens, not gathered, and with -DEXAMPLE_HALF_FACTOR by twice the window's;
 * with -DEXAMPLE_NAN_GRAD every sync leaves a NaN in the first gradient
 * element, which the step carries into the parameters (ddpsim's own tests).
 */
#include <ddpsim_impl.h>
#include <math.h>
#include <stdlib.h>

typedef struct example {
    const ddpsim_services *svc;
    float window_tokens; /* the token loss: the window's valid tokens (on every rank, gathered) */
    int sync_this_backward;
    int sync_buffers; /* the next forward broadcasts the buffers */
} example;

/* Rank 0's buffers (BatchNorm's running statistics) to every rank; services of version 3 have them. */
static int ex_broadcast_buffers(const ddpsim_services *svc)
{
    if (svc->version < 3 || !svc->nbuffers)
        return 0;
    return svc->broadcast(svc->env, svc->all_buffers, svc->buffers_count * sizeof(float), 0);
}

static int ex_create(const ddpsim_services *svc, void **state)
{
    if (svc->find_unused)
        return svc->set_error(svc->env, "the example plugin does not support find_unused_parameters");
    if (svc->bucket_view)
        return svc->set_error(svc->env, "the example plugin does not support gradient_as_bucket_view");
    example *ex = calloc(1, sizeof *ex);
    if (!ex)
        return svc->set_error(svc->env, "out of memory");
    ex->svc = svc;
    *state = ex;
    for (int p = 0; p < svc->nparams; p++)
        if (svc->broadcast(svc->env, svc->params[p].data, svc->params[p].count * sizeof(float), 0))
            return -1;
    ex->sync_buffers = 1;
    return ex_broadcast_buffers(svc);
}

static void ex_destroy(void *state)
{
    free(state);
}

static int ex_forward_begin(void *state, int no_sync_active)
{
    example *ex = state;
    if (ex->sync_buffers && ex->svc->version >= 3 && ex->svc->broadcast_buffers && ex_broadcast_buffers(ex->svc))
        return -1;
    ex->sync_buffers = !no_sync_active;
    ex->sync_this_backward |= !no_sync_active;
    return 0;
}

static int ex_ignore(void *state)
{
    (void)state;
    return 0;
}

static int ex_grad_ready(void *state, int param)
{
    (void)state;
    (void)param;
    return 0;
}

static int ex_backward_end(void *state)
{
    example *ex = state;
    const ddpsim_services *svc = ex->svc;
    if (!ex->sync_this_backward)
        return 0;
    ex->sync_this_backward = 0;
    float inv = (float)(1.0 / svc->world_size);
    for (size_t i = 0; i < svc->total_count; i++)
        svc->all_grads[i] *= inv;
#ifdef EXAMPLE_NAN_GRAD
    svc->all_grads[0] = NAN; /* the planted fault: a NaN in the first element, synced and then stepped */
#endif
    return svc->allreduce_sum(svc->env, svc->all_grads, svc->total_count);
}

#ifdef EXAMPLE_HALF_SCALER
static int ex_scale(void *state, float *scale)
{
    (void)state;
    *scale = 1.0f;
    return 0;
}
#endif

/*
 * The trainer's loss normalization (interface version 10, the token model): the factor this rank multiplies a
 * micro-batch's summed token loss by, with DDP's average over the ranks after it.
 */
static int ex_loss_factor(void *state, const ddpsim_loss_window *w, float *factor)
{
    example *ex = state;
    const ddpsim_services *svc = ex->svc;
    float here = 0;
    for (int r = 0; r < w->rows; r++)
        here += (float)w->tokens[w->micro * w->rows + r];
    if (w->micro == 0) { /* once per window: its valid tokens, prefetched, summed over the ranks */
        ex->window_tokens = 0;
        for (int i = 0; i < w->micro_steps * w->rows; i++)
            ex->window_tokens += (float)w->tokens[i];
#ifndef EXAMPLE_LOCAL_TOKENS
        if (svc->allreduce_sum(svc->env, &ex->window_tokens, 1))
            return -1;
#endif
    }
    float n = (float)svc->world_size;
#ifdef EXAMPLE_LOCAL_TOKENS
    n = 1.0f; /* the planted mistake: a rank-local mean, then DDP's average */
#endif
    if (w->norm == DDPSIM_LOSS_NORM_GLOBAL_TOKENS)
        *factor = n / ex->window_tokens;
    else if (w->norm == DDPSIM_LOSS_NORM_MICRO_BATCH_MEAN) /* a micro-batch without a token: nothing to weigh */
        *factor = here > 0 ? 1.0f / ((float)w->micro_steps * here) : 0.0f;
    else
        *factor = (float)svc->world_size;
#ifdef EXAMPLE_HALF_FACTOR
    *factor = *factor * 0.5f; /* the planted mistake: a constant factor */
#endif
    return 0;
}

static const ddpsim_impl_ops example_ops = {
    .api_version = DDPSIM_IMPL_API_VERSION,
    .name = "example",
    .description = "the example plugin: one allreduce of all gradients after a syncing backward",
    .create = ex_create,
    .destroy = ex_destroy,
    .forward_begin = ex_forward_begin,
    .no_sync_enter = ex_ignore,
    .no_sync_exit = ex_ignore,
    .grad_ready = ex_grad_ready,
    .backward_end = ex_backward_end,
    .zero_grad = ex_ignore,
    .step = ex_ignore,
#ifdef EXAMPLE_HALF_SCALER
    .scaler_scale = ex_scale,
#endif
    .loss_factor = ex_loss_factor,
};

const ddpsim_impl_ops *ddpsim_impl_get(void)
{
    return &example_ops;
}
