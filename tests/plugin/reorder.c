/*
 * reorder.c - correct DDPs that sum in another order than ddpsim's
 * reference: the same mathematics, other roundings. Built four times:
 *
 *   -DREORDER_REVERSE   ranks added last to first
 *   -DREORDER_PAIRWISE  ranks added as a balanced tree ((0+1)+(2+3))+...
 *   -DREORDER_DOUBLE    ranks added in double, rounded once
 *   -DREORDER_RING      NCCL's ring: chunk c of the buffer starts at rank
 *                       c + 1 and goes around, ending with rank c
 *   -DREORDER_FP16      fp16_compress_hook's arithmetic (each gradient to
 *                       float16, divided by N, summed in float16), ranks
 *                       added last to first: correct under --comm-hook
 *                       fp16 --tolerance order, bitwise at 2 ranks, and a
 *                       compression nobody asked for without --comm-hook.
 *                       Its float16 rounding is written from the format's
 *                       bits, independently of ddpsim's (comm_hook.c).
 *
 * Each gathers every rank's scaled gradients (allgather) and sums them
 * itself, so every rank computes the same bits. `--tolerance order` must
 * pass all four on every model at any rank count; bitwise must not (for
 * N >= 3, where orders differ).
 */
#include "simple_ddp.h"

#include <math.h>
#include <stdint.h>

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

#if defined(REORDER_FP16)
/* float -> IEEE binary16 bits, to nearest, ties to even. */
static uint16_t half_bits(float x)
{
    uint32_t f;
    memcpy(&f, &x, sizeof f);
    uint16_t sign = (uint16_t)((f >> 16) & 0x8000u);
    uint32_t a = f & 0x7fffffffu;
    if (a >= 0x7f800000u)
        return sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u); /* Inf, NaN */
    if (a >= 0x477ff000u)
        return sign | 0x7c00u; /* rounds beyond 65504 */
    if (a >= 0x38800000u) {    /* normal: drop 13 bits, rebias the exponent from 127 to 15 */
        uint32_t r = a + 0x0fffu + ((a >> 13) & 1u);
        return sign | (uint16_t)((r - 0x38000000u) >> 13);
    }
    if (a < 0x33000000u)
        return sign; /* below 2^-25 (and 2^-25 itself, a tie, to the even 0) */
    uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u, shift = 126 - e; /* subnormal: units of 2^-24 */
    uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u)))
        q++;
    return sign | (uint16_t)q;
}

static float half_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000u) ? -v : v;
}

static float half(float x) { return half_value(half_bits(x)); }

/* bucket.to(float16).div_(N): PyTorch divides in float and rounds to float16 again. */
static void fp16_compress(sddp *d, int param, float *g, size_t count)
{
    (void)param;
    for (size_t i = 0; i < count; i++)
        g[i] = half(half(g[i]) / (float)d->n);
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
#elif defined(REORDER_FP16)
        float s = g->all[(size_t)(n - 1) * count + i];
        for (int r = n - 2; r >= 0; r--)
            s = half(s + g->all[(size_t)r * count + i]);
#elif defined(REORDER_RING)
        size_t chunk = (count + (size_t)n - 1) / (size_t)n;
        int c = (int)(i / chunk), first = (c + 1) % n;
        float s = g->all[(size_t)first * count + i];
        for (int k = 1; k < n; k++)
            s += g->all[(size_t)((first + k) % n) * count + i];
#else
#error "build with one of -DREORDER_REVERSE, -DREORDER_PAIRWISE, -DREORDER_DOUBLE, -DREORDER_RING, -DREORDER_FP16"
#endif
        buf[i] = s;
    }
    return 0;
}

static int ro_create(const ddpsim_services *svc, void **state)
{
#if defined(REORDER_FP16)
    static const sddp_hooks hooks = {.sum = reorder_sum, .scale = fp16_compress};
#else
    static const sddp_hooks hooks = {.sum = reorder_sum};
#endif
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
static int ro_join_enter(void *state, int divide) { return sddp_join_enter(state, divide); }
static int ro_join_shadow(void *state) { return sddp_join_shadow(state); }
static int ro_join_exit(void *state) { return sddp_join_exit(state); }

#if defined(REORDER_REVERSE)
#define NAME "reverse"
#define WHAT "ranks summed last to first"
#elif defined(REORDER_PAIRWISE)
#define NAME "pairwise"
#define WHAT "ranks summed as a balanced tree"
#elif defined(REORDER_DOUBLE)
#define NAME "double"
#define WHAT "ranks summed in double, rounded once"
#elif defined(REORDER_FP16)
#define NAME "fp16"
#define WHAT "fp16_compress_hook's arithmetic, ranks summed in float16 last to first"
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
    .join_enter = ro_join_enter,
    .join_shadow = ro_join_shadow,
    .join_exit = ro_join_exit,
};

const ddpsim_impl_ops *ddpsim_impl_get(void)
{
    return &ops;
}
