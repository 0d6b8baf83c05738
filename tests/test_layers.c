/*
 * test_layers.c - every layer's backward against central finite
 * differences, the sgemm linear against its naive loops, accumulation
 * (backward twice gives exactly twice the gradient), and hand-computed
 * values of the activations and losses.
 *
 * Finite differences: the scalar checked is L = sum_i R_i * out_i with fixed
 * random R, in double. Tolerance: 5e-3 * max|grad| + 1e-2 * |grad|. Why:
 * outputs are float (relative error ~6e-8 each); over <= 1000 terms and a
 * step 2h = 2e-3 that is at most ~1e-4 * max|grad| of noise; a wrong
 * backward is off by O(|grad|). Empirical (the truncation error of a finite
 * difference is not a rounding bound): measured at most 0.15 of the
 * tolerance under OpenBLAS's Prescott, Nehalem, Sandybridge, Haswell,
 * SkylakeX and Zen kernels (the program prints it), a margin of 6.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fdcheck.h"
#include "layers.h"
#include "rng.h"
#include "testutil.h"

#define ATOL_FRAC 5e-3
#define RTOL 1e-2

static void fill(float *x, size_t n, uint64_t key, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * rng_uniform_f(key, i);
}

/* Values in +-[0.1, 1]: away from the kinks of relu, so h never crosses one. */
static void fill_away_from_zero(float *x, size_t n, uint64_t key)
{
    for (size_t i = 0; i < n; i++) {
        float u = 0.1f + 0.9f * rng_uniform_f(key, i);
        x[i] = (rng_u64(key, i + 100000) & 1) ? u : -u;
    }
}

static float *zalloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static double dot_r(const float *out, const float *R, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)R[i] * out[i];
    return s;
}

static void expect_fd(const char *what, float *data, const float *grad, size_t n, fd_loss_fn loss, void *ctx)
{
    fd_result r = fd_check(data, grad, n, loss, ctx, 200, ATOL_FRAC, 1e-6, RTOL);
    CU_ASSERT(r.checked > 0);
    if (r.failed)
        fprintf(stderr, "  %s: %zu of %zu elements off, worst %g at %zu\n", what, r.failed, r.checked, r.worst_err,
                r.worst_index);
    CU_ASSERT_EQUAL(r.failed, 0);
}

/* ---- linear ---- */

typedef struct lin_ctx {
    int N, I, O;
    float *inp, *w, *b, *out, *R;
} lin_ctx;

static double lin_loss(void *p)
{
    lin_ctx *c = p;
    linear_forward(c->out, c->inp, c->w, c->b, c->N, c->I, c->O);
    return dot_r(c->out, c->R, (size_t)c->N * c->O);
}

static void test_linear_fd(void)
{
    static const int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {6, 17, 4}};
    for (int s = 0; s < 3; s++) {
        lin_ctx c = {shapes[s][0], shapes[s][1], shapes[s][2], 0, 0, 0, 0, 0};
        size_t ni = (size_t)c.N * c.I, nw = (size_t)c.O * c.I, no = (size_t)c.N * c.O;
        c.inp = zalloc(ni), c.w = zalloc(nw), c.b = zalloc((size_t)c.O), c.out = zalloc(no), c.R = zalloc(no);
        float *di = zalloc(ni), *dw = zalloc(nw), *db = zalloc((size_t)c.O);
        fill(c.inp, ni, 1, -1, 1);
        fill(c.w, nw, 2, -1, 1);
        fill(c.b, (size_t)c.O, 3, -1, 1);
        fill(c.R, no, 4, -1, 1);
        lin_loss(&c);
        linear_backward(di, dw, db, c.R, c.inp, c.w, c.N, c.I, c.O);
        expect_fd("linear dinp", c.inp, di, ni, lin_loss, &c);
        expect_fd("linear dweight", c.w, dw, nw, lin_loss, &c);
        expect_fd("linear dbias", c.b, db, (size_t)c.O, lin_loss, &c);
        free(c.inp), free(c.w), free(c.b), free(c.out), free(c.R), free(di), free(dw), free(db);
    }
}

/*
 * The sgemm path, and portable math's kernels, against plain loops: same math, other summation order.
 * Proven: every term here is at most 1 in size, so each side of a length-K sum (K = I + 1 with the bias, O + 1
 * or N + 1 with the gradient held) is within gamma_K * K of the exact value; 2 gamma_K * K <= K * 1.2e-7 * K.
 */
static void linear_vs_naive(int portable)
{
    layers_set_portable(portable);
    static const int shapes[][3] = {{1, 1, 1}, {2, 3, 5}, {17, 33, 9}, {64, 128, 32}, {5, 1, 300}};
    for (int s = 0; s < 5; s++) {
        int N = shapes[s][0], I = shapes[s][1], O = shapes[s][2];
        size_t ni = (size_t)N * I, nw = (size_t)O * I, no = (size_t)N * O;
        float *x = zalloc(ni), *w = zalloc(nw), *b = zalloc((size_t)O), *dout = zalloc(no);
        float *y1 = zalloc(no), *y2 = zalloc(no);
        float *dx1 = zalloc(ni), *dx2 = zalloc(ni), *dw1 = zalloc(nw), *dw2 = zalloc(nw);
        float *db1 = zalloc((size_t)O), *db2 = zalloc((size_t)O);
        fill(x, ni, 10, -1, 1), fill(w, nw, 11, -1, 1), fill(b, (size_t)O, 12, -1, 1), fill(dout, no, 13, -1, 1);
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            linear_forward(y1, x, w, with_bias ? b : NULL, N, I, O);
            linear_forward_naive(y2, x, w, with_bias ? b : NULL, N, I, O);
            double tol = (I + 1) * 1.2e-7 * (I + 1);
            int bad = 0;
            for (size_t i = 0; i < no; i++)
                bad += !(fabs(y1[i] - y2[i]) <= tol);
            CU_ASSERT_EQUAL(bad, 0);
        }
        linear_backward(dx1, dw1, db1, dout, x, w, N, I, O);
        linear_backward_naive(dx2, dw2, db2, dout, x, w, N, I, O);
        double tol = (N + O + 1) * 1.2e-7 * (N + O + 1);
        int bad = 0;
        for (size_t i = 0; i < ni; i++)
            bad += !(fabs(dx1[i] - dx2[i]) <= tol);
        for (size_t i = 0; i < nw; i++)
            bad += !(fabs(dw1[i] - dw2[i]) <= tol);
        for (int i = 0; i < O; i++)
            bad += !(fabs(db1[i] - db2[i]) <= tol);
        CU_ASSERT_EQUAL(bad, 0);
        free(x), free(w), free(b), free(dout), free(y1), free(y2), free(dx1), free(dx2), free(dw1), free(dw2),
            free(db1), free(db2);
    }
    layers_set_portable(0);
}

static void test_linear_vs_naive(void)
{
    linear_vs_naive(0);
    linear_vs_naive(1);
}

/* Backward accumulates: a second identical backward gives exactly twice the first (a + a is exact). */
static void test_linear_accumulates(void)
{
    int N = 7, I = 9, O = 5;
    size_t ni = (size_t)N * I, nw = (size_t)O * I, no = (size_t)N * O;
    float *x = zalloc(ni), *w = zalloc(nw), *dout = zalloc(no);
    float *dx = zalloc(ni), *dw = zalloc(nw), *db = zalloc((size_t)O);
    float *dx1 = zalloc(ni), *dw1 = zalloc(nw), *db1 = zalloc((size_t)O);
    fill(x, ni, 20, -1, 1), fill(w, nw, 21, -1, 1), fill(dout, no, 22, -1, 1);
    linear_backward(dx, dw, db, dout, x, w, N, I, O);
    memcpy(dx1, dx, ni * 4), memcpy(dw1, dw, nw * 4), memcpy(db1, db, (size_t)O * 4);
    linear_backward(dx, dw, db, dout, x, w, N, I, O);
    int bad = 0, nonzero = 0;
    for (size_t i = 0; i < ni; i++)
        bad += test_bits_f(dx[i]) != test_bits_f(2 * dx1[i]), nonzero += dx1[i] != 0;
    for (size_t i = 0; i < nw; i++)
        bad += test_bits_f(dw[i]) != test_bits_f(2 * dw1[i]);
    for (int i = 0; i < O; i++)
        bad += test_bits_f(db[i]) != test_bits_f(2 * db1[i]);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(nonzero > 0);
    free(x), free(w), free(dout), free(dx), free(dw), free(db), free(dx1), free(dw1), free(db1);
}

/* ---- elementwise activations ---- */

typedef void (*act_fwd)(float *, const float *, size_t);
typedef void (*act_bwd)(float *, const float *, const float *, size_t);

typedef struct act_ctx {
    act_fwd fwd;
    float *inp, *out, *R;
    size_t n;
} act_ctx;

static double act_loss(void *p)
{
    act_ctx *c = p;
    c->fwd(c->out, c->inp, c->n);
    return dot_r(c->out, c->R, c->n);
}

static void check_activation(const char *name, act_fwd fwd, act_bwd bwd, int bwd_takes_output)
{
    enum { N = 300 };
    float inp[N], out[N], R[N], dinp[N];
    fill_away_from_zero(inp, N, 30);
    for (int i = 0; i < N; i++)
        inp[i] *= 3.0f; /* cover the tails too */
    fill(R, N, 31, -1, 1);
    act_ctx c = {fwd, inp, out, R, N};
    act_loss(&c);
    memset(dinp, 0, sizeof dinp);
    bwd(dinp, R, bwd_takes_output ? out : inp, N);
    expect_fd(name, inp, dinp, N, act_loss, &c);
    /* Accumulation: the second call adds the same values again. */
    float once[N];
    memcpy(once, dinp, sizeof once);
    bwd(dinp, R, bwd_takes_output ? out : inp, N);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += test_bits_f(dinp[i]) != test_bits_f(2 * once[i]);
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_activations_fd(void)
{
    check_activation("relu", relu_forward, relu_backward, 0);
    check_activation("tanh", tanh_forward, tanh_backward, 1);
    check_activation("gelu erf", gelu_erf_forward, gelu_erf_backward, 0);
    check_activation("gelu tanh", gelu_tanh_forward, gelu_tanh_backward, 0);
}

static void test_activation_values(void)
{
    float x[4] = {-2.0f, -0.5f, 0.0f, 1.0f}, y[4];
    relu_forward(y, x, 4);
    CU_ASSERT(y[0] == 0 && y[1] == 0 && y[2] == 0 && y[3] == 1.0f);
    /* PyTorch: F.gelu(torch.tensor(1.)) = 0.8413447, approximate='tanh' gives 0.8411920. Proven: no BLAS here
     * (the same under every kernel); each constant is the exact value rounded to 7 decimals (within 5e-8), and
     * the float result within a few ulps of it (an ulp is 6e-8 near 0.8, 3.7e-9 near 0.045): 2e-7 covers
     * 5e-8 + 2 ulps. tanh(1) = 0.76159416: the constant is 4e-9 from it, so 1e-7 covers 1.6 ulps. */
    gelu_erf_forward(y, x, 4);
    CU_ASSERT(fabsf(y[3] - 0.8413447f) <= 2e-7f);
    CU_ASSERT(fabsf(y[0] - (-0.0455003f)) <= 2e-7f);
    gelu_tanh_forward(y, x, 4);
    CU_ASSERT(fabsf(y[3] - 0.8411920f) <= 2e-7f);
    CU_ASSERT(y[2] == 0.0f);
    tanh_forward(y, x, 4);
    CU_ASSERT(fabsf(y[3] - 0.7615942f) <= 1e-7f);
}

/* ---- residual, layernorm, embedding, attention ---- */

typedef struct res_ctx {
    float *a, *b, *out, *R;
    size_t n;
} res_ctx;

static double res_loss(void *p)
{
    res_ctx *c = p;
    residual_forward(c->out, c->a, c->b, c->n);
    return dot_r(c->out, c->R, c->n);
}

static void test_residual_fd(void)
{
    enum { N = 50 };
    float a[N], b[N], out[N], R[N], da[N] = {0}, db[N] = {0};
    fill(a, N, 40, -1, 1), fill(b, N, 41, -1, 1), fill(R, N, 42, -1, 1);
    res_ctx c = {a, b, out, R, N};
    res_loss(&c);
    residual_backward(da, db, R, N);
    expect_fd("residual da", a, da, N, res_loss, &c);
    expect_fd("residual db", b, db, N, res_loss, &c);
}

typedef struct ln_ctx {
    int N, C;
    float *inp, *w, *b, *out, *mean, *rstd, *R;
} ln_ctx;

static double ln_loss(void *p)
{
    ln_ctx *c = p;
    layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
    return dot_r(c->out, c->R, (size_t)c->N * c->C);
}

static void test_layernorm_fd(void)
{
    enum { N = 4, C = 13 };
    float inp[N * C], w[C], b[C], out[N * C], mean[N], rstd[N], R[N * C];
    float di[N * C] = {0}, dw[C] = {0}, db[C] = {0};
    fill(inp, N * C, 50, -2, 2), fill(w, C, 51, 0.5f, 1.5f), fill(b, C, 52, -1, 1), fill(R, N * C, 53, -1, 1);
    ln_ctx c = {N, C, inp, w, b, out, mean, rstd, R};
    ln_loss(&c);
    /* The forward normalizes: each row of (out - b) / w has mean 0 and variance 1. */
    double m = 0, v = 0;
    for (int j = 0; j < C; j++)
        m += (out[j] - b[j]) / w[j];
    m /= C;
    for (int j = 0; j < C; j++)
        v += ((out[j] - b[j]) / w[j] - m) * ((out[j] - b[j]) / w[j] - m);
    v /= C;
    /* Proven: the normalized row has mean 0 and variance var/(var + eps), eps = 1e-5 over a variance near 1 (so
     * within 1e-5 of 1, well under 1e-3); float rounding adds C * 6e-8 to the mean, far under 1e-5. */
    CU_ASSERT(fabs(m) < 1e-5 && fabs(v - 1) < 1e-3);
    layernorm_backward(di, dw, db, R, inp, w, mean, rstd, N, C);
    expect_fd("layernorm dinp", inp, di, N * C, ln_loss, &c);
    expect_fd("layernorm dweight", w, dw, C, ln_loss, &c);
    expect_fd("layernorm dbias", b, db, C, ln_loss, &c);
}

typedef struct emb_ctx {
    int B, T, C;
    const int *tok;
    float *wte, *wpe, *out, *R;
} emb_ctx;

static double emb_loss(void *p)
{
    emb_ctx *c = p;
    embedding_forward(c->out, c->tok, c->wte, c->wpe, c->B, c->T, c->C);
    return dot_r(c->out, c->R, (size_t)c->B * c->T * c->C);
}

static void test_embedding_fd(void)
{
    enum { B = 2, T = 3, C = 4, V = 5 };
    int tok[B * T] = {0, 3, 3, 4, 1, 3}; /* token 3 three times: its gradient sums; token 2 never: zero */
    float wte[V * C], wpe[T * C], out[B * T * C], R[B * T * C], dwte[V * C] = {0}, dwpe[T * C] = {0};
    fill(wte, V * C, 60, -1, 1), fill(wpe, T * C, 61, -1, 1), fill(R, B * T * C, 62, -1, 1);
    emb_ctx c = {B, T, C, tok, wte, wpe, out, R};
    emb_loss(&c);
    embedding_backward(dwte, dwpe, R, tok, B, T, C);
    expect_fd("embedding dwte", wte, dwte, V * C, emb_loss, &c);
    expect_fd("embedding dwpe", wpe, dwpe, T * C, emb_loss, &c);
    for (int j = 0; j < C; j++)
        CU_ASSERT_EQUAL(dwte[2 * C + j], 0.0f);
}

typedef struct att_ctx {
    int B, T, C;
    float *q, *k, *v, *out, *att, *R;
} att_ctx;

static double att_loss(void *p)
{
    att_ctx *c = p;
    attention_forward(c->out, c->att, c->q, c->k, c->v, c->B, c->T, c->C);
    return dot_r(c->out, c->R, (size_t)c->B * c->T * c->C);
}

static void test_attention_fd(void)
{
    enum { B = 2, T = 5, C = 6, N = B * T * C };
    float q[N], k[N], v[N], out[N], att[B * T * T], datt[B * T * T], R[N];
    float dq[N] = {0}, dk[N] = {0}, dv[N] = {0};
    fill(q, N, 70, -1, 1), fill(k, N, 71, -1, 1), fill(v, N, 72, -1, 1), fill(R, N, 73, -1, 1);
    att_ctx c = {B, T, C, q, k, v, out, att, R};
    att_loss(&c);
    /* Causal: rows sum to 1, no weight on the future. */
    int bad = 0;
    for (int r = 0; r < B * T; r++) {
        double s = 0;
        for (int j = 0; j < T; j++) {
            s += att[r * T + j];
            bad += j > r % T && att[r * T + j] != 0.0f;
        }
        bad += !(fabs(s - 1) < 1e-6); /* proven: T = 5 probabilities, each within gamma_(T+4) of its exact share */
    }
    CU_ASSERT_EQUAL(bad, 0);
    attention_backward(dq, dk, dv, datt, R, att, q, k, v, B, T, C);
    expect_fd("attention dq", q, dq, N, att_loss, &c);
    expect_fd("attention dk", k, dk, N, att_loss, &c);
    expect_fd("attention dv", v, dv, N, att_loss, &c);
}

/* ---- losses ---- */

typedef struct mse_ctx {
    float *pred, *target;
    size_t n;
} mse_ctx;

static double mse_loss(void *p)
{
    mse_ctx *c = p;
    return mse_forward(c->pred, c->target, c->n);
}

static void test_mse(void)
{
    float pred[2] = {1, 2}, target[2] = {0, 0}, d[2];
    CU_ASSERT_EQUAL(mse_forward(pred, target, 2), 2.5); /* (1 + 4) / 2 */
    mse_backward(d, pred, target, 2);
    CU_ASSERT(d[0] == 1.0f && d[1] == 2.0f); /* 2 (p - t) / n */
    enum { N = 40 };
    float p[N], t[N], dp[N];
    fill(p, N, 80, -1, 1), fill(t, N, 81, -1, 1);
    mse_backward(dp, p, t, N);
    mse_ctx c = {p, t, N};
    expect_fd("mse", p, dp, N, mse_loss, &c);
}

typedef struct ce_ctx {
    float *logits, *probs;
    const int *targets;
    int N, V;
} ce_ctx;

static double ce_loss(void *p)
{
    ce_ctx *c = p;
    return crossentropy_forward(c->probs, c->logits, c->targets, c->N, c->V);
}

static void test_crossentropy(void)
{
    enum { N = 3, V = 7 };
    float logits[N * V] = {0}, probs[N * V], d[N * V];
    int targets[N] = {0, 6, 3};
    /* Equal logits: loss log V, gradient (1/V - onehot) / N. Proven: the loss is summed in double from float
     * log-probabilities (each within a few ulps of log 7 = 1.946, an ulp 1.2e-7 there): under 1e-6;
     * each gradient element is one float division and subtraction from the exact value (< 2 ulps of 0.05 and 0.29,
     * at most 6e-8): under 1e-7. */
    CU_ASSERT(fabs(crossentropy_forward(probs, logits, targets, N, V) - log(7.0)) < 1e-6);
    crossentropy_backward(d, probs, targets, N, V);
    CU_ASSERT(fabsf(d[1] - (1.0f / 7) / 3) < 1e-7f);
    CU_ASSERT(fabsf(d[0] - (1.0f / 7 - 1) / 3) < 1e-7f);
    fill(logits, N * V, 90, -3, 3);
    ce_ctx c = {logits, probs, targets, N, V};
    ce_loss(&c);
    crossentropy_backward(d, probs, targets, N, V);
    expect_fd("crossentropy", logits, d, N * V, ce_loss, &c);
    int bad_target[N] = {0, 7, 1};
    CU_ASSERT(isnan(crossentropy_forward(probs, logits, bad_target, N, V)));
}

/*
 * Not-a-number and infinities go where PyTorch 1.13 sends them (each value
 * below was printed by torch for the inputs [nan, -1, 2, inf, -inf] and
 * -0): relu keeps NaN and -0 and passes the gradient through a NaN; tanh,
 * gelu (both forms) and their gradients propagate NaN and give PyTorch's
 * NaN at -inf; a row with a NaN is NaN in softmax cross-entropy and in
 * layernorm.
 */
static void test_nonfinite_as_pytorch(void)
{
    const float nan = NAN, inf = INFINITY;
    const float x[5] = {nan, -1.0f, 2.0f, inf, -inf}, ones[5] = {1, 1, 1, 1, 1};
    float y[5], d[5];
    relu_forward(y, x, 5);
    CU_ASSERT(isnan(y[0]) && y[1] == 0 && y[2] == 2 && y[3] == inf && y[4] == 0);
    memset(d, 0, sizeof d);
    relu_backward(d, ones, x, 5);
    CU_ASSERT(d[0] == 1 && d[1] == 0 && d[2] == 1 && d[3] == 1 && d[4] == 0);
    const float mz = -0.0f;
    float r;
    relu_forward(&r, &mz, 1);
    CU_ASSERT_EQUAL(test_bits_f(r), test_bits_f(-0.0f));
    float g = 0;
    relu_backward(&g, ones, &mz, 1);
    CU_ASSERT_EQUAL(g, 0);

    tanh_forward(y, x, 5);
    memset(d, 0, sizeof d);
    tanh_backward(d, ones, y, 5);
    CU_ASSERT(isnan(y[0]) && y[3] == 1 && y[4] == -1);
    CU_ASSERT(isnan(d[0]) && d[3] == 0 && d[4] == 0);

    void (*const fwd[2])(float *, const float *, size_t) = {gelu_tanh_forward, gelu_erf_forward};
    void (*const bwd[2])(float *, const float *, const float *, size_t) = {gelu_tanh_backward, gelu_erf_backward};
    for (int k = 0; k < 2; k++) {
        fwd[k](y, x, 5);
        memset(d, 0, sizeof d);
        bwd[k](d, ones, x, 5);
        CU_ASSERT(isnan(y[0]) && y[3] == inf && isnan(y[4]));
        CU_ASSERT(isnan(d[0]) && isnan(d[3]) && isnan(d[4]));
        CU_ASSERT(isfinite(y[1]) && isfinite(y[2]) && isfinite(d[1]) && isfinite(d[2]));
    }

    float logits[6] = {nan, 1.0f, 2.0f, 0.5f, 1.0f, 2.0f}, probs[6];
    int targets[2] = {1, 2};
    double loss = crossentropy_forward(probs, logits, targets, 2, 3);
    CU_ASSERT(isnan(loss));
    CU_ASSERT(isnan(probs[0]) && isnan(probs[1]) && isnan(probs[2]));
    CU_ASSERT(isfinite(probs[3]) && isfinite(probs[4]) && isfinite(probs[5]));

    float ln_out[6], mean[2], rstd[2], w[3] = {1, 1, 1}, b[3] = {0, 0, 0};
    layernorm_forward(ln_out, mean, rstd, logits, w, b, 2, 3);
    CU_ASSERT(isnan(ln_out[0]) && isnan(ln_out[1]) && isnan(ln_out[2]));
    CU_ASSERT(isfinite(ln_out[3]) && isfinite(ln_out[4]) && isfinite(ln_out[5]));
}

int main(void)
{
    static const test_entry tests[] = {
        {"linear: finite differences", test_linear_fd},
        {"linear: sgemm and portable math against naive loops", test_linear_vs_naive},
        {"linear: backward accumulates", test_linear_accumulates},
        {"relu, tanh, gelu (erf, tanh): finite differences and accumulation", test_activations_fd},
        {"activation values", test_activation_values},
        {"residual: finite differences", test_residual_fd},
        {"layernorm: normalizes, finite differences", test_layernorm_fd},
        {"embedding: finite differences, unused rows stay zero", test_embedding_fd},
        {"causal attention: masking, finite differences", test_attention_fd},
        {"mse: hand values, finite differences", test_mse},
        {"cross-entropy: hand values, finite differences, bad target", test_crossentropy},
        {"NaN and infinities propagate as in PyTorch", test_nonfinite_as_pytorch},
        TEST_END,
    };
    int failed = test_run_suite("layers", tests);
    printf("finite differences: at most %.2g of their tolerance\n", fd_worst_fraction());
    return failed;
}
