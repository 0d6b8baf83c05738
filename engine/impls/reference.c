/*
 * impl_reference.c - the reference DDP (ddp_ref.h) as an implementation
 * under test: `--impl reference` checks ddpsim against itself, which is
 * what the sanity of the pipeline rests on.
 */
#include <stdlib.h>
#include <string.h>

#include "impl.h"

typedef struct ref_state {
    const ddpsim_services *svc;
    ddp_ref *d;
} ref_state;

static int fail(const ddpsim_services *svc)
{
    return svc->set_error(svc->env, ddp_error_text());
}

static int ref_create(const ddpsim_services *svc, void **state)
{
    ref_state *st = calloc(1, sizeof *st);
    if (!st)
        return svc->set_error(svc->env, "out of memory");
    st->svc = svc;
    impl_env *env = impl_env_of(svc);
    if (ddp_ref_create(&env->cfg, env->m, env->wr, &st->d) != DDP_OK || ddp_ref_broadcast_params(st->d) != DDP_OK) {
        int r = fail(svc);
        ddp_ref_destroy(st->d);
        free(st);
        return r;
    }
    /* Its reductions go through the services like any implementation's: the run's backend, and a --fault flip. */
    ddp_ref_set_reducer(st->d, impl_reduce, env, env->backend_avg);
    *state = st;
    return 0;
}

static void ref_destroy(void *state)
{
    ref_state *st = state;
    if (!st)
        return;
    ddp_ref_destroy(st->d);
    free(st);
}

/* Under join the reference is told who runs the op at hand, as the checker's reference is (impl_env). */
static void participants(ref_state *st)
{
    impl_env *env = impl_env_of(st->svc);
    ddp_ref_participants(st->d, env->join_nactive, env->join_highest);
}

static int ref_forward_begin(void *state, int no_sync_active)
{
    (void)no_sync_active; /* the reference tracks no_sync from enter/exit itself */
    ref_state *st = state;
    participants(st);
    return ddp_ref_forward_begin(st->d) == DDP_OK ? 0 : fail(st->svc);
}

static int ref_join_enter(void *state, int divide_by_initial_world_size)
{
    ddp_ref_join_enter(((ref_state *)state)->d, divide_by_initial_world_size);
    return 0;
}

/* The peers' forward, and at once the zeros for their backward: the implementation gets no call at that
 * backward, and its collectives come in the same order either way. */
static int ref_join_shadow(void *state)
{
    ref_state *st = state;
    participants(st);
    if (ddp_ref_join_shadow_forward(st->d, impl_env_of(st->svc)->join_peers_sync) != DDP_OK ||
        ddp_ref_join_shadow_backward(st->d) != DDP_OK)
        return fail(st->svc);
    return 0;
}

static int ref_join_exit(void *state)
{
    ref_state *st = state;
    return ddp_ref_join_exit(st->d, impl_env_of(st->svc)->join_last) == DDP_OK ? 0 : fail(st->svc);
}

static int ref_enter(void *state)
{
    ref_state *st = state;
    return ddp_ref_no_sync_enter(st->d) == DDP_OK ? 0 : fail(st->svc);
}

static int ref_exit(void *state)
{
    ref_state *st = state;
    return ddp_ref_no_sync_exit(st->d) == DDP_OK ? 0 : fail(st->svc);
}

static int ref_ready(void *state, int param)
{
    ddp_ref_grad_ready(((ref_state *)state)->d, param);
    return 0;
}

static int ref_backward_end(void *state)
{
    ref_state *st = state;
    return ddp_ref_backward_end(st->d) == DDP_OK ? 0 : fail(st->svc);
}

static int ref_nothing(void *state)
{
    (void)state; /* ddpsim already zeroed the gradients / took the SGD step */
    return 0;
}

const ddpsim_impl_ops impl_reference_ops = {
    .api_version = DDPSIM_IMPL_API_VERSION,
    .name = "reference",
    .description = "the reference DDP itself (PyTorch semantics): checks ddpsim against itself",
    .create = ref_create,
    .destroy = ref_destroy,
    .forward_begin = ref_forward_begin,
    .no_sync_enter = ref_enter,
    .no_sync_exit = ref_exit,
    .grad_ready = ref_ready,
    .backward_end = ref_backward_end,
    .zero_grad = ref_nothing,
    .step = ref_nothing,
    .join_enter = ref_join_enter,
    .join_shadow = ref_join_shadow,
    .join_exit = ref_join_exit,
};
