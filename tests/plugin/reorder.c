/*
 * reorder.c - correct DDPs that sum in another order than ddpsim's
 * reference: the same mathematics, other roundings. Built four times:
 *
 *   -DREORDER_REVERSE   ranks added last to first
 *   -DREORDER_PAIRWISE  ranks added as a balanced tree ((0+1)+(2+3))+...
 *   -DREORDER_DOUBLE    ranks added in double, rounded once
 *   -DREORDER_RING      NCCL's ring: chunk c of the buffer starts at rank
 *                       c + 1 and goes around, ending with rank c
 *
 * Each gathers every rank's scaled gradients (allgather) and sums them
 * itself, so every rank computes the same bits. `--tolerance order` must
 * pass all four on every model at any rank count; bitwise must not (for
 * N >= 3, where orders differ).
 */
#include "simple_ddp.h"

typedef struct gathered {
    float *all; /* [N][count] */
} gathered;

#if defined(REORDER_PAIRWISE)
/* The sum of ranks [lo, hi) at element i as a balanced tree. */
static float tree(const float *all, size_t count, size_t i, int lo, int hi)
{
    if (hi - lo == 1)
        return all[(size_t)lo * count + i];
    int mid = lo + (hi - lo) / 2;
    return tree(all, count, i, lo, mid) + tree(all, count, i, mid, hi);
}
#endif

static int reorder_sum(sddp *d, float *buf, size_t count)
{
    const ddpsim_services *svc = d->svc;
    gathered *g = d->user;
    int n = d->n;
    if (svc->allgather(svc->env, buf, g->all, count * sizeof(float)))
        return -1;
    for (size_t i = 0; i < count; i++) {
#if defined(REORDER_REVERSE)
        float s = g->all[(size_t)(n - 1) * count + i];
        for (int r = n - 2; r >= 0; r--)
            s += g->all[(size_t)r * count + i];
#elif defined(REORDER_PAIRWISE)
        float s = tree(g->all, count, i, 0, n);
#elif defined(REORDER_DOUBLE)
        double acc = 0;
        for (int r = 0; r < n; r++)
            acc += g->all[(size_t)r * count + i];
        float s = (float)acc;
#elif defined(REORDER_RING)
        size_t chunk = (count + (size_t)n - 1) / (size_t)n;
        int c = (int)(i / chunk), first = (c + 1) % n;
        float s = g->all[(size_t)first * count + i];
        for (int k = 1; k < n; k++)
            s += g->all[(size_t)((first + k) % n) * count + i];
#else
#error "build with one of -DREORDER_REVERSE, -DREORDER_PAIRWISE, -DREORDER_DOUBLE, -DREORDER_RING"
#endif
        buf[i] = s;
    }
    return 0;
}

static int ro_create(const ddpsim_services *svc, void **state)
{
    static const sddp_hooks hooks = {.sum = reorder_sum};
    sddp *d;
    int rc = sddp_create(svc, &hooks, &d);
    *state = d;
    if (rc)
        return rc;
    gathered *g = calloc(1, sizeof *g);
    d->user = g;
    if (!g || !(g->all = malloc((size_t)svc->world_size * svc->total_count * sizeof(float))))
        return sddp_fail(d, "out of memory");
    return 0;
}

static void ro_destroy(void *state)
{
    sddp *d = state;
    if (d && d->user) {
        free(((gathered *)d->user)->all);
        free(d->user);
    }
    sddp_destroy(d);
}

static int ro_forward_begin(void *state, int no_sync) { return sddp_forward_begin(state, no_sync); }
static int ro_grad_ready(void *state, int p)
{
    sddp_grad_ready(state, p);
    return 0;
}
static int ro_backward_end(void *state) { return sddp_backward_end(state); }
static int ro_zero_grad(void *state)
{
    sddp_zero_grad(state);
    return 0;
}
static int ro_nothing(void *state)
{
    (void)state;
    return 0;
}

#if defined(REORDER_REVERSE)
#define NAME "reverse"
#define WHAT "ranks summed last to first"
#elif defined(REORDER_PAIRWISE)
#define NAME "pairwise"
#define WHAT "ranks summed as a balanced tree"
#elif defined(REORDER_DOUBLE)
#define NAME "double"
#define WHAT "ranks summed in double, rounded once"
#else
#define NAME "ring"
#define WHAT "NCCL's ring order: chunk c starts at rank c + 1"
#endif

static const ddpsim_impl_ops ops = {
    .api_version = DDPSIM_IMPL_API_VERSION,
    .name = "reorder-" NAME,
    .description = WHAT,
    .create = ro_create,
    .destroy = ro_destroy,
    .forward_begin = ro_forward_begin,
    .no_sync_enter = ro_nothing,
    .no_sync_exit = ro_nothing,
    .grad_ready = ro_grad_ready,
    .backward_end = ro_backward_end,
    .zero_grad = ro_zero_grad,
    .step = ro_nothing,
};

const ddpsim_impl_ops *ddpsim_impl_get(void)
{
    return &ops;
}
