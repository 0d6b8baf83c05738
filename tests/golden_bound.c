/*
 * golden_bound.c - running error analysis of the golden run (golden_bound.h).
 *
 * Every quantity of the run is carried as (v, e): v its exact-arithmetic
 * value (in double, whose own rounding is 2^-29 of float's and negligible
 * here), e a bound on |float32 result - v| that holds for every order of
 * additions. The rules, u = 2^-24 and g(k) = k u / (1 - k u):
 *   a sum of K products a_i b_i (+ c), each side carrying its error:
 *     e <= sum(e_a |b| + (|a| + e_a) e_b) + e_c + g(K + 1) (|c| + e_c + sum (|a| + e_a)(|b| + e_b))
 *   relu: e passes through; where |v| <= e the sign is unknown, and the
 *     gradient through it may be kept or dropped: its whole size is error
 *   the mean over N ranks: (1/N) sum (e_r + g(N + 1)(|v_r| + e_r))
 *   SGD, p - lr g (lr the float 0.1f on both sides): e_p + lr e_g + g(2)(|p| + e_p + lr(|g| + e_g))
 * doc/tolerances.md ("The golden run") derives them.
 */
#include "golden_bound.h"

#include "npy.h"
#include "schedule.h"
#include "status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U 0x1p-24
#define I_ 4
#define H_ 8
#define O_ 3
#define W1 0
#define B1 (W1 + H_ * I_)
#define W2 (B1 + H_)
#define B2 (W2 + O_ * H_)

static double gam(int k)
{
    return k * U / (1 - k * U);
}

size_t golden_bound_offset(int p)
{
    static const size_t off[4] = {W1, B1, W2, B2};
    return off[p];
}

typedef struct ve {
    double v, e;
} ve;

/* One rank's replica: parameters and gradients, each element with its bound. */
typedef struct replica {
    ve p[GOLDEN_NPARAMS], g[GOLDEN_NPARAMS];
    float x[GOLDEN_BATCH][I_], y[GOLDEN_BATCH][O_];
} replica;

/* A sum of K terms a_i * b_i plus c, with the bound of any float order. */
typedef struct acc {
    double v, e, mag;
    int k;
} acc;

static void acc_term(acc *s, ve a, ve b)
{
    s->v += a.v * b.v;
    s->e += a.e * fabs(b.v) + (fabs(a.v) + a.e) * b.e;
    s->mag += (fabs(a.v) + a.e) * (fabs(b.v) + b.e);
    s->k++;
}

static ve acc_end(const acc *s, ve c)
{
    return (ve){s->v + c.v, s->e + c.e + gam(s->k + 1) * (fabs(c.v) + c.e + s->mag)};
}

static ve exact(double v)
{
    return (ve){v, 0};
}

static int load_into(const char *dir, const char *rel, float *dst, size_t count)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    npy_array a;
    if (npy_read(path, &a) != DDP_OK) {
        fprintf(stderr, "golden_bound: %s\n", ddp_error_last());
        return -1;
    }
    int ok = a.count == count && a.dtype == NPY_F4;
    if (ok)
        memcpy(dst, a.data, count * sizeof *dst);
    else
        fprintf(stderr, "golden_bound: %s: not %zu float32 values\n", path, count);
    npy_free(&a);
    return ok ? 0 : -1;
}

/* Forward and backward of one micro-batch; the new gradient accumulates onto r->g. */
static void fwd_bwd(replica *r)
{
    ve pre[GOLDEN_BATCH][H_], h[GOLDEN_BATCH][H_], out[GOLDEN_BATCH][O_], dout[GOLDEN_BATCH][O_];
    ve dpre[GOLDEN_BATCH][H_];
    const double c = 2.0 / (GOLDEN_BATCH * O_); /* mse's mean over every element; the float factor is 2/6 rounded */
    for (int n = 0; n < GOLDEN_BATCH; n++) {
        for (int j = 0; j < H_; j++) {
            acc s = {0};
            for (int i = 0; i < I_; i++)
                acc_term(&s, r->p[W1 + j * I_ + i], exact(r->x[n][i]));
            pre[n][j] = acc_end(&s, r->p[B1 + j]);
            h[n][j] = (ve){pre[n][j].v > 0 ? pre[n][j].v : 0, pre[n][j].e};
        }
        for (int o = 0; o < O_; o++) {
            acc s = {0};
            for (int j = 0; j < H_; j++)
                acc_term(&s, r->p[W2 + o * H_ + j], h[n][j]);
            out[n][o] = acc_end(&s, r->p[B2 + o]);
            double d = out[n][o].v - r->y[n][o];
            /* the difference, the rounded factor and the product: three roundings of the float difference */
            dout[n][o] = (ve){c * d, c * out[n][o].e + gam(3) * c * (fabs(d) + out[n][o].e)};
        }
        for (int j = 0; j < H_; j++) {
            acc s = {0};
            for (int o = 0; o < O_; o++)
                acc_term(&s, dout[n][o], r->p[W2 + o * H_ + j]);
            ve dh = acc_end(&s, exact(0));
            int on = pre[n][j].v > 0;
            if (fabs(pre[n][j].v) <= pre[n][j].e) /* the sign is not known: kept or dropped */
                dpre[n][j] = (ve){on ? dh.v : 0, fabs(dh.v) + dh.e};
            else
                dpre[n][j] = on ? dh : exact(0);
        }
    }
    /* The parameters' gradients, each a sum over the batch accumulated onto the gradient held. */
    for (int o = 0; o < O_; o++) {
        for (int j = 0; j < H_; j++) {
            acc s = {0};
            for (int n = 0; n < GOLDEN_BATCH; n++)
                acc_term(&s, dout[n][o], h[n][j]);
            r->g[W2 + o * H_ + j] = acc_end(&s, r->g[W2 + o * H_ + j]);
        }
        acc s = {0};
        for (int n = 0; n < GOLDEN_BATCH; n++)
            acc_term(&s, dout[n][o], exact(1));
        r->g[B2 + o] = acc_end(&s, r->g[B2 + o]);
    }
    for (int j = 0; j < H_; j++) {
        for (int i = 0; i < I_; i++) {
            acc s = {0};
            for (int n = 0; n < GOLDEN_BATCH; n++)
                acc_term(&s, dpre[n][j], exact(r->x[n][i]));
            r->g[W1 + j * I_ + i] = acc_end(&s, r->g[W1 + j * I_ + i]);
        }
        acc s = {0};
        for (int n = 0; n < GOLDEN_BATCH; n++)
            acc_term(&s, dpre[n][j], exact(1));
        r->g[B1 + j] = acc_end(&s, r->g[B1 + j]);
    }
}

static void sync(replica *rs)
{
    const int N = GOLDEN_RANKS;
    for (int k = 0; k < GOLDEN_NPARAMS; k++) {
        ve m = {0, 0};
        for (int r = 0; r < N; r++) {
            m.v += rs[r].g[k].v / N;
            m.e += (rs[r].g[k].e + gam(N + 1) * (fabs(rs[r].g[k].v) + rs[r].g[k].e)) / N;
        }
        for (int r = 0; r < N; r++)
            rs[r].g[k] = m;
    }
}

static void step(replica *r)
{
    const double lr = (double)0.1f;
    for (int k = 0; k < GOLDEN_NPARAMS; k++) {
        ve p = r->p[k], g = r->g[k];
        r->p[k] = (ve){p.v - lr * g.v, p.e + lr * g.e + gam(2) * (fabs(p.v) + p.e + lr * (fabs(g.v) + g.e))};
    }
}

int golden_bound_compute(const char *dir, const char *schedule, golden_bound *out)
{
    memset(out, 0, sizeof *out);
    sched s;
    if (sched_parse(schedule, &s) != DDP_OK) {
        fprintf(stderr, "golden_bound: %s\n", ddp_error_last());
        return -1;
    }
    static replica rs[GOLDEN_RANKS];
    memset(rs, 0, sizeof rs);
    static const char *const names[4] = {"0.weight", "0.bias", "2.weight", "2.bias"};
    static const size_t counts[4] = {H_ * I_, H_, O_ * H_, O_};
    float init[GOLDEN_NPARAMS];
    for (int p = 0; p < 4; p++) {
        char rel[64];
        snprintf(rel, sizeof rel, "init/%s.npy", names[p]);
        if (load_into(dir, rel, init + golden_bound_offset(p), counts[p]) != 0)
            goto fail;
    }
    for (int r = 0; r < GOLDEN_RANKS; r++)
        for (int k = 0; k < GOLDEN_NPARAMS; k++)
            rs[r].p[k] = exact(init[k]);
    out->bound = calloc(s.ngrabs ? s.ngrabs : 1, sizeof(double) * GOLDEN_RANKS * GOLDEN_NPARAMS);
    if (!out->bound)
        goto fail;
    /* PyTorch 1.13's arming: a forward outside no_sync arms the reducer (prepare_for_backward), one inside
     * leaves it as it is; the next backward syncs if armed, which disarms it (README, "Which backward syncs"). */
    int nosync = 0, forwards = 0, armed = 0;
    for (size_t i = 0; i < s.nops; i++) {
        switch (s.ops[i]) {
        case OP_ENTER:
            nosync = 1;
            break;
        case OP_EXIT:
            nosync = 0;
            break;
        case OP_FWD:
            for (int r = 0; r < GOLDEN_RANKS; r++) {
                char rel[64];
                snprintf(rel, sizeof rel, "rank%d/batch%d.x.npy", r, forwards);
                if (load_into(dir, rel, &rs[r].x[0][0], GOLDEN_BATCH * I_) != 0)
                    goto fail;
                snprintf(rel, sizeof rel, "rank%d/batch%d.y.npy", r, forwards);
                if (load_into(dir, rel, &rs[r].y[0][0], GOLDEN_BATCH * O_) != 0)
                    goto fail;
            }
            armed |= !nosync;
            forwards++;
            break;
        case OP_BWD:
            for (int r = 0; r < GOLDEN_RANKS; r++)
                fwd_bwd(&rs[r]);
            if (armed)
                sync(rs);
            armed = 0;
            break;
        case OP_GRAB:
            for (int r = 0; r < GOLDEN_RANKS; r++)
                for (int k = 0; k < GOLDEN_NPARAMS; k++)
                    out->bound[((size_t)out->ngrabs * GOLDEN_RANKS + r) * GOLDEN_NPARAMS + k] = 2 * rs[r].g[k].e;
            out->ngrabs++;
            break;
        case OP_STEP:
            for (int r = 0; r < GOLDEN_RANKS; r++)
                step(&rs[r]);
            break;
        case OP_ZERO:
            for (int r = 0; r < GOLDEN_RANKS; r++)
                memset(rs[r].g, 0, sizeof rs[r].g);
            break;
        default:
            fprintf(stderr, "golden_bound: op %s is not modelled\n", sched_op_name(s.ops[i]));
            goto fail;
        }
    }
    sched_free(&s);
    return 0;
fail:
    sched_free(&s);
    golden_bound_free(out);
    return -1;
}

void golden_bound_free(golden_bound *b)
{
    free(b->bound);
    b->bound = NULL;
}
