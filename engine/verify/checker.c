/*
 * checker.c - element-by-element comparison (checker.h).
 */
#include "checker.h"

#include <math.h>
#include <string.h>

/* Elements of x that are NaN or infinite (a loop the compiler vectorizes). */
static size_t count_nonfinite(const float *x, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !isfinite(x[i]);
    return bad;
}

/* One tensor, element by element, into rec (accumulated locally: rec may live in shared memory). */
static void compare_tensor(const tolerance *tol, verify_record *rec, int p, const float *e, const float *a,
                           size_t count)
{
    float tensor_max = 0; /* the largest finite |expected| of this tensor, for ulp-of-max */
    if (tol->kind == TOL_ULP_OF_MAX)
        for (size_t j = 0; j < count; j++)
            if (isfinite(e[j]) && fabsf(e[j]) > tensor_max)
                tensor_max = fabsf(e[j]);
    uint64_t hist[TOL_ULP_BINS] = {0}, nonfinite = 0, ndiff = 0;
    double max_abs = rec->max_abs;
    uint32_t max_ulp = rec->max_ulp;
    for (size_t j = 0; j < count; j++) {
        float ev = e[j], av = a[j];
        int finite = isfinite(ev) && isfinite(av);
        uint32_t ulp = tol_ulp_distance(ev, av);
        if (finite) {
            double d = fabs((double)av - ev);
            if (d > max_abs)
                max_abs = d;
            if (ulp > max_ulp)
                max_ulp = ulp;
            hist[tol_ulp_bin(ulp)]++;
        } else {
            nonfinite++;
        }
        if (!tol_match_in(tol, ev, av, tensor_max)) {
            if (!rec->has_first) {
                rec->has_first = 1;
                rec->first_param = p;
                rec->first_index = j;
                rec->first_expected = ev;
                rec->first_actual = av;
                rec->first_ulp = ulp;
            }
            ndiff++;
        }
    }
    for (int k = 0; k < TOL_ULP_BINS; k++)
        rec->ulp_hist[k] += hist[k];
    rec->nonfinite += nonfinite;
    rec->ndiff += ndiff;
    rec->max_abs = max_abs;
    rec->max_ulp = max_ulp;
}

/*
 * A tensor with the same bits on both sides and nothing non-finite in it
 * matches under every tolerance with distance 0: one memcmp instead of the
 * element loop.
 */
void checker_compare(const tolerance *tol, const model *ref, const model *impl, verify_record *rec)
{
    const float *e = model_grads(ref), *a = model_grads(impl);
    for (int p = 0; p < model_nparams(ref); p++) {
        const model_param *par = model_param_at(ref, p);
        const float *ep = e + par->offset, *ap = a + par->offset;
        if (memcmp(ep, ap, par->count * sizeof(float)) == 0 && count_nonfinite(ep, par->count) == 0)
            rec->ulp_hist[0] += par->count;
        else
            compare_tensor(tol, rec, p, ep, ap, par->count);
    }
}

void checker_global(const model *ref, const unsigned char *reduced, const model *global, int nranks,
                    verify_record *rec)
{
    const float *g = model_grads(ref), *S = model_grads(global);
    double err = 0, scale = 0;
    for (int p = 0; p < model_nparams(ref); p++) {
        if (!reduced[p])
            continue;
        const model_param *par = model_param_at(ref, p);
        for (size_t j = par->offset; j < par->offset + par->count; j++) {
            double want = (double)S[j] / nranks, d = fabs(g[j] - want);
            if (!(d <= err))
                err = d; /* NaN propagates into err and fails the check */
            if (fabs(want) > scale)
                scale = fabs(want);
        }
    }
    rec->global_checked = 1;
    rec->global_err = err;
    rec->global_scale = scale;
}
