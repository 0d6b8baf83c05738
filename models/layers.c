/*
 * layers.c - forward and backward of every layer (layers.h).
 *
 * The matrix products go through OpenBLAS, or, under portable math, through
 * kernels of ddpsim's own whose order of additions is fixed by the code
 * (not by a CPU's kernel); everything else is plain loops, which are small
 * next to the products for the models ddpsim trains. The whole tree builds
 * with -ffp-contract=off: no multiply-add is fused behind the source's back.
 */
#include "layers.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static int portable; /* layers_set_portable: the products in ddpsim's fixed-order kernels */

void layers_blas_single_thread(void)
{
    openblas_set_num_threads(1);
}

size_t layers_blas_buffer_bytes(void)
{
    return portable ? 0 : ((size_t)32 << 22) + ((size_t)1 << 20);
}

int layers_blas_threads(void)
{
    return openblas_get_num_threads();
}

void layers_set_portable(int on)
{
    portable = on != 0;
}

const char *layers_math(char *buf, size_t len)
{
    if (portable) {
        snprintf(buf, len, "portable (ddpsim's fixed-order kernels, no FMA; OpenBLAS not used)");
        return buf;
    }
    /* openblas_get_config(): "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64": its second word */
    char version[32] = "?";
    const char *config = openblas_get_config();
    if (config && strncmp(config, "OpenBLAS ", 9) == 0)
        sscanf(config + 9, "%31s", version);
    snprintf(buf, len, "OpenBLAS %s, kernel %s", version, openblas_get_corename()); /* one thread: model_runtime_init */
    return buf;
}

/*
 * Portable dot product: 8 lanes, lane l adding the terms i = l (mod 8) in
 * ascending order, then ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) and the tail in
 * order. The lanes are independent sums the compiler may run as one vector
 * without changing a bit; the order is the code's, the same on every CPU.
 */
static float dot_portable(const float *a, const float *b, int n)
{
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            lane[l] += a[i + l] * b[i + l];
    float s = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/*
 * Rows are taken ROWS_PER_BLOCK at a time so that a weight row, once read, serves them all from cache (a sweep of
 * the weights per block, not per row); blocking changes which element is computed when, never the order of any
 * element's own terms.
 */
#define ROWS_PER_BLOCK 16

/* out = inp * W^T (+ bias after the product, as sgemm's beta = 1 adds it) */
static void linear_forward_portable(float *out, const float *inp, const float *weight, const float *bias, int N,
                                    int In, int Out)
{
    for (int n0 = 0; n0 < N; n0 += ROWS_PER_BLOCK) {
        int n1 = n0 + ROWS_PER_BLOCK < N ? n0 + ROWS_PER_BLOCK : N;
        for (int o = 0; o < Out; o++)
            for (int n = n0; n < n1; n++) {
                float s = dot_portable(inp + (size_t)n * In, weight + (size_t)o * In, In);
                out[(size_t)n * Out + o] = bias ? s + bias[o] : s;
            }
    }
}

/*
 * dinp[n,:] += dout[n,o] * W[o,:] for o ascending, dweight[o,:] += dout[n,o] * inp[n,:] for n ascending: each
 * element accumulates its terms one by one in that order (rows are contiguous: the compiler vectorizes across
 * elements, which changes no element's order).
 */
static void linear_backward_portable(float *dinp, float *dweight, const float *dout, const float *inp,
                                     const float *weight, int N, int In, int Out)
{
    for (int o = 0; o < Out; o++) { /* a weight's gradient row stays in cache over the batch */
        float *dw = dweight + (size_t)o * In;
        for (int n = 0; n < N; n++) {
            float d = dout[(size_t)n * Out + o];
            const float *x = inp + (size_t)n * In;
            for (int i = 0; i < In; i++)
                dw[i] += d * x[i];
        }
    }
    if (!dinp)
        return;
    for (int n0 = 0; n0 < N; n0 += ROWS_PER_BLOCK) {
        int n1 = n0 + ROWS_PER_BLOCK < N ? n0 + ROWS_PER_BLOCK : N;
        for (int o = 0; o < Out; o++) {
            const float *w = weight + (size_t)o * In;
            for (int n = n0; n < n1; n++) {
                float d = dout[(size_t)n * Out + o];
                float *dx = dinp + (size_t)n * In;
                for (int i = 0; i < In; i++)
                    dx[i] += d * w[i];
            }
        }
    }
}

void linear_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int In, int Out)
{
    if (portable) {
        linear_forward_portable(out, inp, weight, bias, N, In, Out);
        return;
    }
    /* As PyTorch's addmm: the bias is in the output before the product is added to it. */
    if (bias)
        for (int n = 0; n < N; n++)
            memcpy(out + (size_t)n * Out, bias, (size_t)Out * sizeof *out);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, Out, In, 1.0f, inp, In, weight, In, bias ? 1.0f : 0.0f,
                out, Out);
}

void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, int N, int In, int Out)
{
    if (portable)
        linear_backward_portable(dinp, dweight, dout, inp, weight, N, In, Out);
    else if (dinp) /* dinp[N,In] += dout[N,Out] * W[Out,In] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, In, Out, 1.0f, dout, Out, weight, In, 1.0f, dinp, In);
    /* dweight[Out,In] += dout^T[Out,N] * inp[N,In] */
    if (!portable)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Out, In, N, 1.0f, dout, Out, inp, In, 1.0f, dweight, In);
    if (dbias)
        for (int o = 0; o < Out; o++) {
            float s = 0.0f;
            for (int n = 0; n < N; n++)
                s += dout[(size_t)n * Out + o];
            dbias[o] += s;
        }
}

void linear_forward_naive(float *out, const float *inp, const float *weight, const float *bias, int N, int In,
                          int Out)
{
    for (int n = 0; n < N; n++)
        for (int o = 0; o < Out; o++) {
            float s = bias ? bias[o] : 0.0f;
            for (int i = 0; i < In; i++)
                s += inp[(size_t)n * In + i] * weight[(size_t)o * In + i];
            out[(size_t)n * Out + o] = s;
        }
}

void linear_backward_naive(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                           const float *weight, int N, int In, int Out)
{
    for (int n = 0; n < N; n++)
        for (int o = 0; o < Out; o++) {
            float d = dout[(size_t)n * Out + o];
            for (int i = 0; i < In; i++) {
                if (dinp)
                    dinp[(size_t)n * In + i] += d * weight[(size_t)o * In + i];
                dweight[(size_t)o * In + i] += d * inp[(size_t)n * In + i];
            }
            if (dbias)
                dbias[o] += d;
        }
}

/*
 * As PyTorch's relu (clamp_min): only what is below zero becomes 0, so NaN
 * stays NaN and -0 stays -0.
 */
void relu_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = inp[i] < 0.0f ? 0.0f : inp[i];
}

/*
 * PyTorch's threshold_backward on the output: the gradient stops where the
 * output is <= 0 and passes everywhere else, NaN included (!(x <= 0) is
 * true for a NaN input, whose output is NaN).
 */
void relu_backward(float *dinp, const float *dout, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dinp[i] += !(inp[i] <= 0.0f) ? dout[i] : 0.0f;
}

void tanh_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = tanhf(inp[i]);
}

void tanh_backward(float *dinp, const float *dout, const float *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dinp[i] += dout[i] * (1.0f - out[i] * out[i]);
}

#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f
#define SQRT_2_OVER_PI 0.79788456080286535588f
#define GELU_TANH_COEF 0.044715f

void gelu_erf_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = 0.5f * inp[i] * (1.0f + erff(inp[i] * INV_SQRT2));
}

void gelu_erf_backward(float *dinp, const float *dout, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cdf = 0.5f * (1.0f + erff(x * INV_SQRT2));
        float pdf = INV_SQRT_2PI * expf(-0.5f * x * x);
        dinp[i] += dout[i] * (cdf + x * pdf);
    }
}

void gelu_tanh_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * (x + GELU_TANH_COEF * x * x * x)));
    }
}

void gelu_tanh_backward(float *dinp, const float *dout, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float t = tanhf(SQRT_2_OVER_PI * (x + GELU_TANH_COEF * x * x * x));
        float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_TANH_COEF * x * x);
        dinp[i] += dout[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    }
}

void residual_forward(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void residual_backward(float *da, float *db, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

#define LN_EPS 1e-5

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                       const float *bias, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++)
            m += x[c];
        m /= C;
        for (int c = 0; c < C; c++)
            v += (x[c] - m) * (x[c] - m);
        v /= C; /* biased, as PyTorch's layer_norm */
        float r = (float)(1.0 / sqrt(v + LN_EPS));
        float *y = out + (size_t)n * C;
        for (int c = 0; c < C; c++)
            y[c] = ((x[c] - (float)m) * r) * weight[c] + bias[c];
        mean[n] = (float)m;
        rstd[n] = r;
    }
}

void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, const float *mean, const float *rstd, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float m = mean[n], r = rstd[n];
        /* dx = r * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy * w */
        double dmean = 0, dnm = 0;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * r, dnorm = dy[c] * weight[c];
            dmean += dnorm;
            dnm += dnorm * norm;
        }
        float a = (float)(dmean / C), b = (float)(dnm / C);
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * r, dnorm = dy[c] * weight[c];
            dweight[c] += norm * dy[c];
            dbias[c] += dy[c];
            dx[c] += (dnorm - a - norm * b) * r;
        }
    }
}

void batchnorm_forward(float *out, float *mean, float *rstd, float *running_mean, float *running_var,
                       const float *inp, const float *weight, const float *bias, int N, int C, float momentum)
{
    for (int c = 0; c < C; c++) {
        double m = 0, v = 0;
        for (int n = 0; n < N; n++)
            m += inp[(size_t)n * C + c];
        m /= N;
        for (int n = 0; n < N; n++) {
            double d = inp[(size_t)n * C + c] - m;
            v += d * d;
        }
        float r = (float)(1.0 / sqrt(v / N + LN_EPS)); /* normalised with the biased variance */
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)n * C + c;
            out[i] = ((inp[i] - (float)m) * r) * weight[c] + bias[c];
        }
        mean[c] = (float)m;
        rstd[c] = r;
        running_mean[c] = (1 - momentum) * running_mean[c] + momentum * (float)m;
        running_var[c] = (1 - momentum) * running_var[c] + momentum * (float)(v / (N - 1));
    }
}

void batchnorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, const float *mean, const float *rstd, int N, int C)
{
    for (int c = 0; c < C; c++) {
        float m = mean[c], r = rstd[c];
        /* dx = r * (dnorm - mean_n(dnorm) - norm * mean_n(dnorm * norm)), dnorm = dy * w: the rows share the
         * statistics, so the means run over the batch (LayerNorm's run over the channels). */
        double dmean = 0, dnm = 0, dw = 0, db = 0;
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)n * C + c;
            float norm = (inp[i] - m) * r, dnorm = dout[i] * weight[c];
            dmean += dnorm;
            dnm += dnorm * norm;
            dw += norm * dout[i];
            db += dout[i];
        }
        float a = (float)(dmean / N), b = (float)(dnm / N);
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)n * C + c;
            float norm = (inp[i] - m) * r, dnorm = dout[i] * weight[c];
            dinp[i] += (dnorm - a - norm * b) * r;
        }
        dweight[c] += (float)dw;
        dbias[c] += (float)db;
    }
}

void embedding_forward(float *out, const int *tokens, const float *wte, const float *wpe, int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *e = wte + (size_t)tokens[b * T + t] * C;
            for (int c = 0; c < C; c++)
                o[c] = wpe ? e[c] + wpe[(size_t)t * C + c] : e[c];
        }
}

void embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *de = dwte + (size_t)tokens[b * T + t] * C;
            for (int c = 0; c < C; c++) {
                de[c] += d[c];
                if (dwpe)
                    dwpe[(size_t)t * C + c] += d[c];
            }
        }
}

void attention_forward(float *out, float *att, const float *q, const float *k, const float *v, int B, int T,
                       int C)
{
    float scale = 1.0f / sqrtf((float)C);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *qt = q + ((size_t)b * T + t) * C;
            float *a = att + ((size_t)b * T + t) * T;
            float mx = -INFINITY;
            for (int s = 0; s <= t; s++) {
                const float *ks = k + ((size_t)b * T + s) * C;
                float dot = 0.0f;
                for (int c = 0; c < C; c++)
                    dot += qt[c] * ks[c];
                a[s] = dot * scale;
                if (a[s] > mx)
                    mx = a[s];
            }
            float sum = 0.0f;
            for (int s = 0; s <= t; s++) {
                a[s] = expf(a[s] - mx);
                sum += a[s];
            }
            for (int s = 0; s < T; s++)
                a[s] = s <= t ? a[s] / sum : 0.0f; /* the causal mask */
            float *o = out + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++)
                o[c] = 0.0f;
            for (int s = 0; s <= t; s++) {
                const float *vs = v + ((size_t)b * T + s) * C;
                for (int c = 0; c < C; c++)
                    o[c] += a[s] * vs[c];
            }
        }
}

void attention_backward(float *dq, float *dk, float *dv, float *datt, const float *dout, const float *att,
                        const float *q, const float *k, const float *v, int B, int T, int C)
{
    float scale = 1.0f / sqrtf((float)C);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *a = att + ((size_t)b * T + t) * T;
            float *da = datt + ((size_t)b * T + t) * T;
            const float *dot_ = dout + ((size_t)b * T + t) * C;
            /* out = att v: datt = dout v^T, dv += att^T dout */
            for (int s = 0; s <= t; s++) {
                const float *vs = v + ((size_t)b * T + s) * C;
                float *dvs = dv + ((size_t)b * T + s) * C;
                float d = 0.0f;
                for (int c = 0; c < C; c++) {
                    d += dot_[c] * vs[c];
                    dvs[c] += a[s] * dot_[c];
                }
                da[s] = d;
            }
            /* softmax: dpre = att * (datt - sum(att * datt)) */
            float inner = 0.0f;
            for (int s = 0; s <= t; s++)
                inner += a[s] * da[s];
            const float *qt = q + ((size_t)b * T + t) * C;
            float *dqt = dq + ((size_t)b * T + t) * C;
            for (int s = 0; s <= t; s++) {
                float dpre = a[s] * (da[s] - inner) * scale;
                const float *ks = k + ((size_t)b * T + s) * C;
                float *dks = dk + ((size_t)b * T + s) * C;
                for (int c = 0; c < C; c++) {
                    dqt[c] += dpre * ks[c];
                    dks[c] += dpre * qt[c];
                }
            }
        }
}

double mse_forward(const float *pred, const float *target, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)pred[i] - (double)target[i];
        s += d * d;
    }
    return s / (double)n;
}

void mse_backward(float *dpred, const float *pred, const float *target, size_t n)
{
    /* PyTorch: grad = (input - target) * (2 / numel), the factor rounded to float once. */
    float norm = (float)(2.0 / (double)n);
    for (size_t i = 0; i < n; i++)
        dpred[i] = (pred[i] - target[i]) * norm;
}

/* Softmax of every row into probs; the summed -log p[target] of the rows kept (ignore: skip ignored targets). */
static double crossentropy_rows(float *probs, const float *logits, const int *targets, int N, int V, int ignore)
{
    double loss = 0;
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * V;
        float *p = probs + (size_t)n * V;
        int t = targets[n];
        int skip = ignore && t == LAYERS_IGNORE_TARGET;
        if (!skip && (t < 0 || t >= V))
            return NAN;
        float mx = l[0];
        for (int v = 1; v < V; v++)
            if (l[v] > mx)
                mx = l[v];
        double sum = 0;
        for (int v = 0; v < V; v++) {
            p[v] = expf(l[v] - mx);
            sum += p[v];
        }
        float inv = (float)(1.0 / sum);
        for (int v = 0; v < V; v++)
            p[v] *= inv;
        if (!skip)
            loss -= (double)(l[t] - mx) - log(sum);
    }
    return loss;
}

double crossentropy_forward(float *probs, const float *logits, const int *targets, int N, int V)
{
    return crossentropy_rows(probs, logits, targets, N, V, 0) / N;
}

double crossentropy_sum_forward(float *probs, const float *logits, const int *targets, int N, int V)
{
    return crossentropy_rows(probs, logits, targets, N, V, 1);
}

void crossentropy_sum_backward(float *dlogits, const float *probs, const int *targets, int N, int V, float factor)
{
    for (int n = 0; n < N; n++) {
        float *d = dlogits + (size_t)n * V;
        if (targets[n] == LAYERS_IGNORE_TARGET) {
            memset(d, 0, (size_t)V * sizeof *d);
            continue;
        }
        for (int v = 0; v < V; v++) {
            float onehot = v == targets[n] ? 1.0f : 0.0f;
            d[v] = (probs[(size_t)n * V + v] - onehot) * factor;
        }
    }
}

void crossentropy_backward(float *dlogits, const float *probs, const int *targets, int N, int V)
{
    float invn = 1.0f / (float)N;
    for (int n = 0; n < N; n++)
        for (int v = 0; v < V; v++) {
            float onehot = v == targets[n] ? 1.0f : 0.0f;
            dlogits[(size_t)n * V + v] = (probs[(size_t)n * V + v] - onehot) * invn;
        }
}
