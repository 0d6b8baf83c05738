/*
 * clip.c - clip_grad_norm_'s reference and its bound (clip.h; the proof in
 * doc/SEMANTICS.md "Clipping").
 */
#include "clip.h"

#include <math.h>

#include "exactsum.h"

#define U 0x1p-24 /* float's unit roundoff */

double clip_norm_of(const float *g, size_t n, int inf_norm)
{
    if (inf_norm) {
        double m = 0;
        for (size_t i = 0; i < n; i++)
            m = fmax(m, fabs((double)g[i]));
        return m;
    }
    exact_acc a;
    exact_reset(&a);
    for (size_t i = 0; i < n; i++)
        exact_add(&a, (double)g[i] * g[i]); /* 24-bit significands: the square is exact in double */
    return sqrt(exact_round_d(&a));
}

float clip_coef_torch(float total_norm, double max_norm)
{
    float d = total_norm + (float)CLIP_EPS;
    float c = (1.0f / d) * (float)max_norm;
    return c > 1.0f ? 1.0f : c; /* torch.clamp(max=1.0): a NaN stays NaN */
}

/* (1 + x)^k for |x| small, in double: exp(k log1p(x)). */
static double pow1p(double x, double k)
{
    return exp(k * log1p(x));
}

void clip_reference(const float *g, const float *E, size_t n, double max_norm, int inf_norm, clip_ref *out)
{
    /* The exact norm's own error, and this bound's evaluation in double, are below 2^-50 relative: widen by it. */
    const double slack = 0x1p-50;
    double norm = clip_norm_of(g, n, inf_norm), tlo, thi;
    if (inf_norm) {
        /* The largest |g'| lies between the largest max(|g| - E, 0) and the largest |g| + E; max is exact. */
        tlo = thi = 0;
        for (size_t i = 0; i < n; i++) {
            double a = fabs((double)g[i]), e = E ? E[i] : 0;
            tlo = fmax(tlo, a - e);
            thi = fmax(thi, a + e);
        }
        tlo *= 1 - slack;
        thi *= 1 + slack;
    } else {
        /* ||g'|| within ||E|| of ||g|| (the triangle inequality); then the implementation's sum of squares passes
         * each term through at most K = n + 16 roundings (its square, the additions of any tree over the n
         * elements, up to five levels of a norm taken and squared again: per tensor, unit, rank, group), and its
         * square root one more. */
        double ne = E ? clip_norm_of(E, n, 0) : 0, K = (double)n + 16;
        tlo = fmax(norm * (1 - slack) - ne * (1 + slack), 0) * pow1p(-U, K / 2 + 1);
        thi = (norm * (1 + slack) + ne * (1 + slack)) * pow1p(U, K / 2 + 1);
    }
    /* coef = max / (t + 1e-6), with at most six roundings (max_norm and 1e-6 to float, the addition, the
     * reciprocal or the division, the product), decreasing in t. */
    double clo = max_norm / (thi + CLIP_EPS) * pow1p(-U, 6) * (1 - slack);
    double chi = max_norm / (tlo + CLIP_EPS) * pow1p(U, 6) * (1 + slack);
    out->norm = norm;
    out->total_norm = (float)norm;
    out->coef = clip_coef_torch(out->total_norm, max_norm);
    out->lo = fmin(clo, 1);
    out->hi = fmin(chi, 1);
}

float clip_grads_torch(const model *m, float *g, double max_norm, int inf_norm)
{
    float total = 0;
    for (int p = 0; p < model_nparams(m); p++) {
        const model_param *par = model_param_at(m, p);
        const float *x = g + par->offset;
        float s = 0;
        for (size_t i = 0; i < par->count; i++)
            s = inf_norm ? fmaxf(s, fabsf(x[i])) : s + x[i] * x[i];
        if (inf_norm) {
            total = fmaxf(total, s);
        } else {
            float norm = sqrtf(s);
            total += norm * norm;
        }
    }
    if (!inf_norm)
        total = sqrtf(total);
    float coef = clip_coef_torch(total, max_norm);
    clip_scale(g, model_size(m), coef);
    return coef;
}

void clip_scale(float *g, size_t n, float coef)
{
    for (size_t i = 0; i < n; i++)
        g[i] *= coef;
}

void clip_bound_after(const float *g, const float *E, size_t n, float coef, float *out)
{
    for (size_t i = 0; i < n; i++) {
        double e = E ? E[i] : 0;
        double b = coef * e * (1 + U) + 2 * U * coef * fabs((double)g[i]);
        float f = (float)b;
        out[i] = (double)f < b ? nextafterf(f, INFINITY) : f;
    }
}
