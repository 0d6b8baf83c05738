/*
 * budget.c - the order tolerance's per-element bound (budget.h).
 *
 * Every update is computed in double from float inputs, widened by the
 * double roundings and stored rounded up (next float towards infinity), so
 * the stored bound is never below the real one; the only float arithmetic is the allreduce of the contributions,
 * whose rounding (N - 1 additions of non-negative terms) is covered by
 * dividing by 1 - gamma(N).
 */
#include "budget.h"

#include <float.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "comm_hook.h"
#include "tolerance.h"

/*
 * x >= 0, computed in double with a few roundings, as a float no smaller than
 * its exact value: x widened by the double roundings of its own computation
 * (each at most 2^-53 of it), then by 2^-23 of itself and the smallest
 * subnormal, more than the float conversion's rounding to nearest can take
 * away (half an ulp: at most 2^-24 of it, or half the smallest subnormal);
 * the product's own double rounding (2^-53) is far inside that margin.
 * Branch-free, so the loops over every element vectorize.
 */
static inline float round_up(double x)
{
    return (float)(x * ((1 + 0x1p-50) * (1 + 0x1p-23)) + 0x1p-149);
}

ddp_status budget_init(order_budget *b, size_t n, int nranks, ddp_comm_hook hook)
{
    memset(b, 0, sizeof *b);
    b->E = calloc(n, sizeof *b->E);
    b->v = calloc(n, sizeof *b->v);
    if (!b->E || !b->v) {
        budget_free(b);
        return ddp_error(DDP_ERR_NOMEM, "the order tolerance's bound: %zu floats", 2 * n);
    }
    b->n = n;
    b->nranks = nranks;
    comm_hook_unit(hook, &b->hook_u, &b->hook_eta);
    return DDP_OK;
}

void budget_free(order_budget *b)
{
    free(b->E);
    free(b->v);
    memset(b, 0, sizeof *b);
}

void budget_zero(order_budget *b)
{
    if (b->any)
        memset(b->E, 0, b->n * sizeof *b->E);
    b->any = 0;
}

void budget_scale(order_budget *b, float f)
{
    budget_scale_bound(b->E, b->n, f);
}

void budget_scale_bound(float *E, size_t n, double f)
{
    for (size_t i = 0; i < n; i++) {
        double d = (double)E[i] * f; /* exact: a power of two */
        float e = (float)d;
        if ((double)e < d) /* below float's normal range the conversion rounded: up, not down */
            e = nextafterf(e, INFINITY);
        E[i] = e > 0 && e < FLT_MIN ? nextafterf(e, INFINITY) : e; /* each side's product rounded there too */
    }
}

/*
 * A gradient that arrived in k pieces is k accumulations, each rounded on
 * both sides. Piece i's sum is g minus the pieces after it, up to the
 * roundings of those k - i additions: so |value after piece i| <= (|g| +
 * the later pieces' magnitudes)(1 + 2ku), and each step widens E as one
 * accumulation does.
 */
static void accumulate_pieces(order_budget *b, const model_param *par, int k, const model *layout, int p, const float *g)
{
    const double u = TOL_U_FLOAT, grow = 1 + 2 * k * u;
    for (size_t j = 0; j < par->count; j++) {
        size_t at = par->offset + j;
        if (b->E[at] == 0)
            continue;
        double tail = 0;
        for (int q = 1; q < k; q++)
            tail += fabs((double)model_piece(layout, p, q)[j]);
        double e = b->E[at];
        for (int q = 0; q < k; q++) {
            e = e * (1 + u) + 2 * u * (fabs((double)g[at]) + tail) * grow / (1 - u);
            if (q + 1 < k)
                tail -= fabs((double)model_piece(layout, p, q + 1)[j]);
        }
        b->E[at] = round_up(e);
    }
}

void budget_accumulate(order_budget *b, const model *layout, const float *g, const unsigned char *used)
{
    if (!b->any)
        return; /* the same local gradient added to the same values: the same bits */
    const double u = TOL_U_FLOAT;
    for (int p = 0; p < model_nparams(layout); p++) {
        if (!used[p])
            continue;
        const model_param *par = model_param_at(layout, p);
        int k = model_npieces(layout, p);
        if (k >= 2) {
            accumulate_pieces(b, par, k, layout, p, g);
            continue;
        }
        for (size_t j = par->offset; j < par->offset + par->count; j++)
            if (b->E[j] != 0)
                b->E[j] = round_up((double)b->E[j] * (1 + u) + 2 * u * fabs((double)g[j]) / (1 - u));
    }
}

/*
 * Without a compressing hook each term takes N + 1 float roundings at most
 * (the scaling, the N - 1 additions). A compressing hook rounds it to its
 * format, divides (a float rounding, then the format's), and adds in the
 * format: N + 2 roundings at the format's u, each also off by up to eta
 * (float16's subnormals are coarse), which this rank's share of the sum
 * carries as 2 (N + 1) eta for both sides.
 */
void budget_before_sync(order_budget *b, const float *g)
{
    double gm = b->hook_u ? tol_gamma(b->nranks + 2, b->hook_u) : tol_gamma(b->nranks + 1, TOL_U_FLOAT);
    double abs_err = 2 * (b->nranks + 1) * b->hook_eta;
    for (size_t j = 0; j < b->n; j++)
        b->v[j] = round_up((double)b->E[j] * (1 + gm) + 2 * gm * fabs((double)g[j]) + abs_err);
}

/* Each term still takes at most N + 1 roundings when some ranks add zeros (exactly), and the result is the sum
 * times 1/div: the bound scales by 1/div. */
ddp_status budget_after_sync(order_budget *b, world_rank *wr, const model *layout, const unsigned char *reduced,
                             int div)
{
    DDP_CHECK(coll_allreduce(wr, b->v, b->n, COLL_FLOAT, COLL_SUM, COLL_ORDERED));
    double scale = 1.0 / div / (1 - tol_gamma(b->nranks, TOL_U_FLOAT));
    for (int p = 0; p < model_nparams(layout); p++) {
        if (!reduced[p])
            continue; /* not reduced: its local gradient, and its bound, stay */
        const model_param *par = model_param_at(layout, p);
        for (size_t j = par->offset; j < par->offset + par->count; j++) {
            b->E[j] = round_up((double)b->v[j] * scale);
            b->any |= b->E[j] != 0;
        }
    }
    return DDP_OK;
}

ddp_status budget_shadow_sync(order_budget *b, world_rank *wr)
{
    memset(b->v, 0, b->n * sizeof *b->v);
    return coll_allreduce(wr, b->v, b->n, COLL_FLOAT, COLL_SUM, COLL_ORDERED);
}

void budget_step(float lr, const float *E, const float *dir, const float *w, size_t n, float *out)
{
    const double u = TOL_U_FLOAT, lr_d = fabs((double)lr);
    for (size_t j = 0; j < n; j++)
        out[j] = round_up(((E ? lr_d * E[j] * (1 + u) : 0) +
                           2 * u * (fabs((double)w[j]) + lr_d * fabs((double)dir[j]))) *
                          (1 + tol_gamma(4, u)));
}

/*
 * The momentum buffer b' = fl(fl(m b) + g) on both sides, |b_impl - b_ref| <= B before and |g_impl - g_ref| <= E.
 * Each side's result is within u (2 + u) m |b| + u |g| + 2^-150 of its exact m b + g (the product's rounding, an
 * underflow's absolute one, then the sum's of a value within (1 + u) of m |b| + |g|), and the exact values differ
 * by at most m B + E; with |b_impl| <= |b_ref| + B and |g_impl| <= |g_ref| + E:
 *   B' <= m B + E + u (2 + u) m (2 |b_ref| + B) + u (2 |g_ref| + E) + 2^-149,
 * evaluated in double (a few roundings of 2^-53: the factor 1 + gamma(8)) and rounded up. A buffer made by this
 * step is a copy of g: B' = E. One left alone keeps its B.
 */
void budget_momentum(const ddp_optim *o, const float *g, const float *E, float *B)
{
    const double u = TOL_U_FLOAT, m = o->momentum;
    for (size_t j = 0; j < o->n; j++) {
        double e = E ? E[j] : 0;
        if (o->last[j] == OPTIM_STARTED)
            B[j] = (float)e;
        else if (o->last[j] == OPTIM_ADVANCED)
            B[j] = round_up((m * B[j] + e + u * (2 + u) * m * (2 * fabs((double)o->prev[j]) + B[j]) +
                             u * (2 * fabs((double)g[j]) + e) + 0x1p-149) *
                            (1 + tol_gamma(8, 0x1p-53)));
    }
}

/*
 * AdamW. Each side computes optim.h's rule on its own moments m, v and gradient g with its own roundings; the
 * bound compares each with the exact rule on its own inputs, and the exact rules with each other
 * (doc/SEMANTICS.md, "The step: AdamW", has the proof). With u = 2^-24, g5 = gamma(5), eta = 2^-149 (an
 * underflow's absolute error, counted generously), |x_impl - x_ref| <= D for the inputs:
 *   m' = b1 m + (1 - b1) g: any of the kernels (two products and a sum, a fused one, a lerp in either branch) is
 *        within r(m, g) = g4 (b1 |m| + (1 - b1) |g|) + g4 min(b1, 1 - b1) (|m| + |g|) [+ g3 (1 - b1) |m| when
 *        b1 <= 1/2: the lerp's second branch] + 4 eta of it, so Dm' = b1 Dm + (1 - b1) E + r(m, g) + r(|m| + Dm,
 *        |g| + E);
 *   v' = b2 v + (1 - b2) g g: every term is non-negative, so each side is within g5 of it (+ 5 eta), and
 *        |g_i^2 - g_r^2| <= E (2 |g| + E): Dv' = b2 Dv + (1 - b2) E (2 |g| + E) + g5 (2 b2 v + b2 Dv
 *        + (1 - b2) (g^2 + (|g| + E)^2)) + 10 eta;
 *   d = sqrt(v') / c2 + eps, positive terms: each side within g5 + s of its exact value (s: the double scalars'
 *        own error, below), and |sqrt(a) - sqrt(b)| <= min(sqrt|a - b|, |a - b| / (sqrt a + sqrt b));
 *   q = m' / d: |q_i - q_r| <= Dm' / d_i + |m'| |d_i - d_r| / (d_i d_r), with d_i >= max(eps, d_r - S / c2);
 *   t = (-lr / bc1) q: three roundings (the scalar's, the product's, the quotient's) and s;
 *   p' = p (1 - lr wd) + t: the decay's two roundings on each side, the sum's one on each.
 * The scalars bc1 = 1 - b1^t, bc2 = 1 - b2^t are computed in double on each side (pow, a subtraction, a sqrt):
 * relative s = 16 2^-53 / min(bc1, bc2). Evaluated in double; lower bounds shrunk by 2^-45, the result widened by
 * gamma(16) of 2^-53 and rounded up.
 */
void budget_adamw(const ddp_optim *o, const float *g, const float *E, const float *w, float *Dm, float *Dv,
                  float *out)
{
    const double u = TOL_U_FLOAT, g3 = tol_gamma(3, u), g4 = tol_gamma(4, u), g5 = tol_gamma(5, u), eta = 0x1p-149;
    const double b1 = o->adamw.beta1, low = b1 < 1 - b1 ? b1 : 1 - b1, lerp2 = b1 <= 0.5 ? g3 * (1 - b1) : 0;
    const double b2 = o->adamw.beta2, eps = o->adamw.eps, lr = fabs((double)o->lr);
    const double lo = 1 - 0x1p-45, widen = 1 + tol_gamma(16, 0x1p-53);
    uint32_t cached = 0;
    double c2 = 1, step = 0, s = 0;
    for (size_t j = 0; j < o->n; j++) {
        if (o->last[j] == OPTIM_SKIPPED) {
            out[j] = 0;
            continue;
        }
        if (o->t[j] != cached) {
            cached = o->t[j];
            double bc1 = 1 - pow(b1, (double)cached), bc2 = 1 - pow(b2, (double)cached);
            c2 = sqrt(bc2);
            step = lr / bc1;
            s = 16 * 0x1p-53 / (bc1 < bc2 ? bc1 : bc2);
        }
        double e = E ? E[j] : 0, gr = fabs((double)g[j]), m0 = fabs((double)o->prev[j]), v0 = o->prev_sq[j];
        double dm = Dm[j], dv = Dv[j];
        double mi = m0 + dm, gi = gr + e; /* the implementation's inputs are no larger */
        dm = b1 * dm + (1 - b1) * e + g4 * (b1 * (m0 + mi) + (1 - b1) * (gr + gi)) +
             g4 * low * (m0 + gr + mi + gi) + lerp2 * (m0 + mi) + 8 * eta;
        dv = b2 * dv + (1 - b2) * e * (2 * gr + e) +
             g5 * (2 * b2 * v0 + b2 * dv + (1 - b2) * (gr * gr + (gr + e) * (gr + e))) + 10 * eta;
        Dm[j] = round_up(dm * widen);
        Dv[j] = round_up(dv * widen);
        dm = Dm[j];
        dv = Dv[j];
        double m1 = fabs((double)o->buf[j]), v1 = o->sq[j], sq1 = sqrt(v1);
        double below = v1 > dv ? sqrt(v1 - dv) * lo : 0;
        double S = dv == 0 ? 0 : sq1 + below > 0 ? fmin(sqrt(dv), dv / ((sq1 + below) * lo)) : sqrt(dv);
        double Dn = sq1 / c2 + eps, rel = g5 + s;
        double dr_lo = Dn * (1 - rel) * lo - 4 * eta;
        double di_lo = fmax(eps, Dn - S / c2) * (1 - rel) * lo - 4 * eta;
        double dd = S / c2 + rel * (2 * Dn + S / c2) + 8 * eta;
        double qr = m1 / dr_lo, dq = dm / di_lo + m1 * dd / (di_lo * dr_lo);
        double dt = step * dq + (g3 + s) * step * (2 * qr + dq) + 4 * eta;
        double T = step * qr * (1 + g3 + s) + 2 * eta;
        double W = (fabs((double)w[j]) / (1 - u) + T) * (1 + tol_gamma(2, u)) + eta;
        double allow = 2 * tol_gamma(2, u) * W + 2 * eta + dt +
                       2 * u * (W * (1 + 2 * tol_gamma(2, u)) + T + dt + 2 * eta) + 2 * eta;
        out[j] = round_up(allow * widen);
    }
}

/*
 * --shard (shard_ref.h). In exact arithmetic every mode's sharded gradient
 * A of an element is (1/N) times the sum of its K = N * mA terms, every
 * rank's local gradient of every micro-step behind A. Any implementation
 * computes it as some tree of K - 1 float additions of those terms, each
 * scaled by fl(1/N) (two roundings) or the sum divided once (one), so
 * |computed - exact| <= gamma(K + 1) * S / N with S the sum of |x| (Higham,
 * Accuracy and Stability of Numerical Algorithms, 2nd ed., section 4.2: a
 * sum in any order is within gamma(n - 1) of the sum of |x|; the scaling is
 * two factors (1 + delta) more), and in the subnormal range each of its K + 1
 * operations adds at most 2^-150 absolutely. ddpsim's reference is one such
 * computation: |impl - ref| is at most twice that. S is summed in double,
 * each rank's micro-steps and then the ranks (K additions of non-negative
 * terms, relative 2^-53 each): widened by 1 + gamma_double(K). The unsharded
 * local sum L (zero1 and fsdp while unsynced) is mL terms of one rank,
 * unscaled: twice gamma(mL) of its own S.
 */
static void sharded_bound(const double *S, double terms, double div, size_t n, float *out)
{
    const double g = 2 * tol_gamma(terms + 1, TOL_U_FLOAT) * (1 + tol_gamma(terms, 0x1p-53)) / div;
    const double tiny = 2 * (terms + 1) * 0x1p-150;
    for (size_t j = 0; j < n; j++)
        out[j] = round_up(g * S[j] + tiny);
}

ddp_status budget_sharded(const shard_ref *s, world_rank *wr, int reads_local, size_t n, double *scratch, float *out)
{
    uint64_t m = 0;
    if (reads_local) {
        sharded_bound(shard_ref_abs_local(s, &m), (double)m, 1, n, out);
        return DDP_OK;
    }
    const double *mine = shard_ref_abs_sharded(s, &m);
    memcpy(scratch, mine, n * sizeof *scratch);
    int ranks = world_size(wr);
    DDP_CHECK(n ? coll_allreduce(wr, scratch, n, COLL_DOUBLE, COLL_SUM, COLL_ORDERED) : DDP_OK);
    sharded_bound(scratch, (double)m * ranks, ranks, n, out);
    return DDP_OK;
}

/*
 * Model averaging. Rank i steps with its own window's gradient G_i, the sum
 * of its m_i micro-steps' local gradients g_it, and the ranks then average
 * the parameters: p_impl = avg_i fl(p + fl(-lr * G_i)), in exact arithmetic
 * p - (lr / N) * sum_it g_it, which is DDP's step too. Written as a sum of
 * the terms p / N (once per rank) and -lr * g_it / N, every term of the
 * implementation's computation passes through at most K + N + 2 roundings,
 * K = sum_i m_i: m_i - 1 accumulations, the product with lr, the addition to
 * p, the scaling by 1/N (one division, or a product with fl(1/N): two) and
 * N - 1 additions over the ranks; so |p_impl - exact| <= gamma(K + N + 2) *
 * (|p| + lr * A / N), A = sum_it |g_it| (Higham, Accuracy and Stability of
 * Numerical Algorithms, 2nd ed., section 3.1 and 4.2: a sum whose every term
 * carries at most k factors (1 + delta) is within gamma(k) of the sum of the
 * terms' magnitudes). The reference's DDP step takes as many: the
 * accumulation, the scaling, the N - 1 additions of the allreduce, the
 * product with lr and the addition to p. |impl - ref| is at most twice
 * that; each operation that underflows adds at most 2^-150 absolutely. p is
 * the parameter before the step: |p| <= (|w| + lr |g|)(1 + gamma(2)) from
 * the reference's w = fl(p + fl(-lr * g)). A and K are summed in double (K
 * additions of non-negative terms: widened by 1 + gamma_double(K)).
 */
ddp_status budget_averaged_params(world_rank *wr, float lr, const float *w, const float *g, size_t n,
                                  const double *abs_local, double *scratch, float *out)
{
    memcpy(scratch, abs_local, (n + 1) * sizeof *scratch);
    DDP_CHECK(coll_allreduce(wr, scratch, n + 1, COLL_DOUBLE, COLL_SUM, COLL_ORDERED));
    const double u = TOL_U_FLOAT, lr_d = fabs((double)lr), nranks = world_size(wr), K = scratch[n];
    const double gm = 2 * tol_gamma(K + nranks + 2, u) * (1 + tol_gamma(K + 1, 0x1p-53));
    const double before = 1 + tol_gamma(2, u), tiny = 2 * (K + 2 * nranks + 4) * 0x1p-150;
    for (size_t j = 0; j < n; j++) {
        double p = (fabs((double)w[j]) + lr_d * fabs((double)g[j])) * before;
        out[j] = round_up(gm * (p + lr_d * scratch[j] / nranks) + tiny);
    }
    return DDP_OK;
}
