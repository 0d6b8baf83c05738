/*
 * mismatch.c - a plugin whose ranks call different collectives: rank 1
 * leaves the last gradient element out of its allreduce. ddpsim must fail
 * the run at once (exit 3) and say which ranks called what, not wait for
 * the watchdog or print "(no message)".
 *
 * Built with -DMISMATCH_EXTRA_AT_END instead, the allreduces agree and rank
 * 0 makes one more when it is destroyed, after the others have finished:
 * a deadlock, which ddpsim must name at once (exit 3) rather than wait.
 */
#include <ddpsim_impl.h>
#include <stdlib.h>
#include <string.h>

typedef struct mm {
    const ddpsim_services *svc;
    int sync;
} mm;

static int mm_create(const ddpsim_services *svc, void **state)
{
    mm *m = calloc(1, sizeof *m);
    if (!m)
        return svc->set_error(svc->env, "out of memory");
    m->svc = svc;
    *state = m;
    for (int p = 0; p < svc->nparams; p++)
        if (svc->broadcast(svc->env, svc->params[p].data, svc->params[p].count * sizeof(float), 0))
            return -1;
    return 0;
}

static void mm_destroy(void *state)
{
#ifdef MISMATCH_EXTRA_AT_END
    mm *m = state;
    if (m->svc->rank == 0)
        m->svc->allreduce_sum(m->svc->env, m->svc->all_grads, 1);
#endif
    free(state);
}

static int mm_forward_begin(void *state, int no_sync_active)
{
    ((mm *)state)->sync |= !no_sync_active;
    return 0;
}

static int mm_nothing(void *state)
{
    (void)state;
    return 0;
}

static int mm_ready(void *state, int param)
{
    (void)state;
    (void)param;
    return 0;
}

static int mm_backward_end(void *state)
{
    mm *m = state;
    const ddpsim_services *svc = m->svc;
    if (!m->sync)
        return 0;
    m->sync = 0;
    float inv = (float)(1.0 / svc->world_size);
    for (size_t i = 0; i < svc->total_count; i++)
        svc->all_grads[i] *= inv;
#ifdef MISMATCH_EXTRA_AT_END
    size_t count = svc->total_count;
#else
    size_t count = svc->total_count - (svc->rank == 1 ? 1 : 0); /* the bug */
#endif
    if (svc->allreduce_sum(svc->env, svc->all_grads, count) == 0)
        return 0;
    /* Interface version 2: ddpsim's words for what went wrong, in the plugin's own message. */
    char msg[600] = "mismatch: its allreduce failed: ";
    strncat(msg, svc->last_error(svc->env), sizeof msg - strlen(msg) - 1);
    return svc->set_error(svc->env, msg);
}

static const ddpsim_impl_ops ops = {
    .api_version = DDPSIM_IMPL_API_VERSION,
    .name = "mismatch",
    .description = "rank 1 allreduces one element fewer than its peers",
    .create = mm_create,
    .destroy = mm_destroy,
    .forward_begin = mm_forward_begin,
    .no_sync_enter = mm_nothing,
    .no_sync_exit = mm_nothing,
    .grad_ready = mm_ready,
    .backward_end = mm_backward_end,
    .zero_grad = mm_nothing,
    .step = mm_nothing,
};

const ddpsim_impl_ops *ddpsim_impl_get(void)
{
    return &ops;
}
