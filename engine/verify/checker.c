/*
 * checker.c - element-by-element comparison (checker.h).
 */
#include "checker.h"

#include "hash.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Elements of x that are NaN or infinite, and that are not zero (a loop the compiler vectorizes). */
static size_t count_nonfinite(const float *x, size_t n, uint64_t *nonzero)
{
    size_t bad = 0, nz = 0;
    for (size_t i = 0; i < n; i++) {
        bad += !isfinite(x[i]);
        nz += x[i] != 0;
    }
    *nonzero += nz;
    return bad;
}

/* Parameter p's heatmap figures (verify_record.param_*): the worst of what its pieces found. */
static void mark_param(verify_record *rec, int p, uint32_t ulp, double ratio, int nonfinite, int bad)
{
    if (p < 0 || p >= MODEL_MAX_PARAMS)
        return;
    int level = 0;
    for (uint32_t u = ulp; u; u >>= 1)
        level++; /* 1 + floor(log2(ulp)) */
    if (nonfinite)
        level = 255;
    double r = ratio * 200;
    int b = r >= 255 || r != r ? 255 : (int)ceil(r);
    if (level > rec->param_ulp[p])
        rec->param_ulp[p] = (uint8_t)level;
    if (b > rec->param_bound[p])
        rec->param_bound[p] = (uint8_t)b;
    if (bad)
        rec->param_bad[p] |= VERIFY_PARAM_BAD;
}

/* One tensor, element by element, into rec (accumulated locally: rec may live in shared memory). */
static void compare_tensor(const tolerance *tol, verify_record *rec, int p, const float *e, const float *a,
                           const float *allow, size_t count, size_t base)
{
    float tensor_max = 0; /* the largest finite |expected| of this tensor, for ulp-of-max */
    if (tol->kind == TOL_ULP_OF_MAX)
        for (size_t j = 0; j < count; j++)
            if (isfinite(e[j]) && fabsf(e[j]) > tensor_max)
                tensor_max = fabsf(e[j]);
    uint64_t hist[TOL_ULP_BINS] = {0}, nonfinite = 0, ndiff = 0, nonzero = 0;
    double max_abs = rec->max_abs, tensor_ratio = 0;
    uint32_t tensor_ulp = 0;
    for (size_t j = 0; j < count; j++) {
        float ev = e[j], av = a[j];
        int finite = isfinite(ev) && isfinite(av);
        nonzero += ev != 0 || av != 0;
        uint32_t ulp = tol_ulp_distance(ev, av);
        float bound = allow ? allow[j] : 0;
        if (finite) {
            double d = fabs((double)av - ev);
            if (d > max_abs)
                max_abs = d;
            double ratio = d == 0 ? 0 : d / bound; /* something with nothing allowed: infinity */
            if (ratio > tensor_ratio)
                tensor_ratio = ratio;
            if (ulp > tensor_ulp)
                tensor_ulp = ulp;
            hist[tol_ulp_bin(ulp)]++;
        } else if (tol->match_planted && !isfinite(ev) && (isnan(ev) ? isnan(av) : ev == av)) {
            rec->planted++; /* what the reference's planted inf or NaN made, where it made it */
            continue;
        } else {
            nonfinite++;
        }
        if (!tol_match_in(tol, ev, av, tensor_max, bound)) {
            if (!rec->has_first) {
                rec->has_first = 1;
                rec->first_param = p;
                rec->first_index = base + j;
                rec->first_expected = ev;
                rec->first_actual = av;
                rec->first_ulp = ulp;
            }
            ndiff++;
        }
    }
    for (int k = 0; k < TOL_ULP_BINS; k++)
        rec->ulp_hist[k] += hist[k];
    mark_param(rec, p, tensor_ulp, tensor_ratio, nonfinite != 0, ndiff != 0);
    rec->nonfinite += nonfinite;
    rec->ndiff += ndiff;
    rec->nonzero += nonzero;
    rec->max_abs = max_abs;
    rec->max_ulp = tensor_ulp > rec->max_ulp ? tensor_ulp : rec->max_ulp;
    rec->bound_ratio = tensor_ratio > rec->bound_ratio ? tensor_ratio : rec->bound_ratio;
}

static int every_param(const model *layout, const unsigned char *which)
{
    for (int p = 0; which && p < model_nparams(layout); p++)
        if (!which[p])
            return 0;
    return 1;
}

/* Floats a fused pass takes at a time from each side: both blocks stay in the L1 cache while they are compared,
 * scanned and hashed. */
#define SCAN_BLOCK 2048

/*
 * A tensor with the same bits on both sides and nothing non-finite in it
 * matches under every tolerance with distance 0, so the normal case is one
 * pass a block at a time: compare the bits, count the non-finite and
 * non-zero elements, feed the reference's digest, all while the block is
 * in cache. A tensor that differs goes through the element loop after.
 */
/* Elements [0, count) of one tensor: the fused pass, then the element loop if they differ; 1 when identical. */
static int compare_run(const tolerance *tol, verify_record *rec, int p, const float *ep, const float *ap,
                       const float *allow, size_t count, size_t base, hash_stream *digest)
{
    uint64_t nz = 0;
    size_t bad = 0;
    int same = 1;
    if (p >= 0 && p < MODEL_MAX_PARAMS)
        rec->param_bad[p] |= VERIFY_PARAM_COMPARED;
    for (size_t b = 0; b < count; b += SCAN_BLOCK) {
        size_t len = count - b < SCAN_BLOCK ? count - b : SCAN_BLOCK;
        same = same && memcmp(ep + b, ap + b, len * sizeof(float)) == 0;
        bad += count_nonfinite(ep + b, len, &nz);
        if (digest)
            hash_stream_add(digest, ep + b, len);
    }
    if (same && bad == 0) {
        rec->nonzero += nz;
        rec->ulp_hist[0] += count;
        return 1;
    }
    compare_tensor(tol, rec, p, ep, ap, allow, count, base);
    return 0;
}

/* The runs of held elements of parameter p: compared (digest NULL) or, with digest, hashed from v. */
static int held_runs(const tolerance *tol, verify_record *rec, const model_param *par, int p, const held_mask *held,
                     const float *e, const float *a, const float *allow, hash_stream *digest, const float *v)
{
    int identical = 1;
    const unsigned char *mine = held->elem + par->offset;
    for (size_t j = 0; j < par->count;) {
        if (!mine[j]) {
            j++;
            continue;
        }
        size_t k = j;
        while (k < par->count && mine[k])
            k++;
        if (digest)
            hash_stream_add(digest, v + par->offset + j, k - j);
        else
            identical &= compare_run(tol, rec, p, e + par->offset + j, a + par->offset + j,
                                     allow ? allow + par->offset + j : NULL, k - j, j, NULL);
        j = k;
    }
    return identical;
}

/* The digest of v's held elements, parameter by parameter. */
static uint64_t hash_held(const model *layout, const float *v, const held_mask *held)
{
    hash_stream digest;
    hash_stream_begin(&digest, HASH_INIT);
    for (int p = 0; p < model_nparams(layout); p++) {
        const model_param *par = model_param_at(layout, p);
        if (held->param[p] == HELD_ALL)
            hash_stream_add(&digest, v + par->offset, par->count);
        else if (held->param[p] == HELD_SOME)
            held_runs(NULL, NULL, par, p, held, NULL, NULL, NULL, &digest, v);
    }
    return hash_stream_end(&digest);
}

/*
 * A tensor with the same bits on both sides and nothing non-finite in it
 * matches under every tolerance with distance 0, so the normal case is one
 * pass a block at a time: compare the bits, count the non-finite and
 * non-zero elements, feed the reference's digest, all while the block is
 * in cache. A tensor that differs goes through the element loop after.
 */
int checker_compare_held(const tolerance *tol, const model *layout, const float *e, const float *a,
                         const float *allow, const unsigned char *reduced, const held_mask *held, verify_record *rec)
{
    int identical = 1;
    hash_stream digest;
    hash_stream_begin(&digest, HASH_INIT);
    for (int p = 0; p < model_nparams(layout); p++) {
        const model_param *par = model_param_at(layout, p);
        int state = held ? held->param[p] : HELD_ALL;
        if (state == HELD_ALL) {
            identical &= compare_run(tol, rec, p, e + par->offset, a + par->offset,
                                     allow ? allow + par->offset : NULL, par->count, 0, &digest);
            continue;
        }
        hash_stream_add(&digest, e + par->offset, par->count);
        if (state == HELD_SOME)
            identical &= held_runs(tol, rec, par, p, held, e, a, allow, NULL, NULL);
    }
    rec->ref_hash = hash_stream_end(&digest);
    if (held)
        rec->impl_hash = hash_held(layout, a, held);
    else
        rec->impl_hash = identical ? rec->ref_hash : checker_hash(layout, a, NULL);
    if (reduced)
        rec->ref_sync_hash = every_param(layout, reduced) ? rec->ref_hash : checker_hash(layout, e, reduced);
    return identical;
}

int checker_compare(const tolerance *tol, const model *layout, const float *e, const float *a, const float *allow,
                    const unsigned char *reduced, verify_record *rec)
{
    return checker_compare_held(tol, layout, e, a, allow, reduced, NULL, rec);
}

void checker_compare_none(const model *layout, const unsigned char *ref_defined, const unsigned char *impl_none,
                          const held_mask *held, verify_record *rec)
{
    for (int p = 0; p < model_nparams(layout); p++) {
        if ((held && held->param[p] == HELD_NONE) || (ref_defined[p] != 0) != (impl_none[p] != 0))
            continue;
        rec->ndiff++;
        if (p < MODEL_MAX_PARAMS)
            rec->param_bad[p] = VERIFY_PARAM_COMPARED | VERIFY_PARAM_BAD;
        if (!rec->has_first) {
            rec->has_first = 1;
            rec->first_param = p;
            rec->first_index = 0;
            rec->first_none = impl_none[p] ? VERIFY_NONE_ACTUAL : VERIFY_NONE_EXPECTED;
            rec->first_expected = rec->first_actual = 0;
            rec->first_ulp = 0;
        }
    }
}

ddp_status held_mask_init(held_mask *h, const model *layout)
{
    h->elem = calloc(model_size(layout) ? model_size(layout) : 1, 1);
    h->param = calloc((size_t)model_nparams(layout), 1);
    if (!h->elem || !h->param) {
        held_mask_free(h);
        return ddp_error(DDP_ERR_NOMEM, "what a rank holds: %zu elements", model_size(layout));
    }
    return DDP_OK;
}

void held_mask_clear(held_mask *h, const model *layout)
{
    memset(h->elem, 0, model_size(layout));
    memset(h->param, HELD_NONE, (size_t)model_nparams(layout));
}

void held_mask_add(held_mask *h, const model *layout, int p, size_t start, size_t count)
{
    memset(h->elem + model_param_at(layout, p)->offset + start, 1, count);
}

void held_mask_finish(held_mask *h, const model *layout)
{
    for (int p = 0; p < model_nparams(layout); p++) {
        const model_param *par = model_param_at(layout, p);
        size_t n = 0;
        for (size_t j = 0; j < par->count; j++)
            n += h->elem[par->offset + j] != 0;
        h->param[p] = n == 0 ? HELD_NONE : n == par->count ? HELD_ALL : HELD_SOME;
    }
}

void held_mask_free(held_mask *h)
{
    free(h->elem);
    free(h->param);
    h->elem = h->param = NULL;
}

void checker_global(const model *ref, const unsigned char *reduced, const double *S, const float *M, uint64_t depth,
                    uint64_t K, const hook_error *hook, int nranks, size_t lo, size_t hi, verify_record *rec)
{
    const float *g = model_grads(ref);
    double terms = (double)K + nranks;
    double chain = (1 + tol_gamma((double)depth, TOL_U_FLOAT)) *
                   (1 + (hook->depth ? tol_gamma((double)hook->depth, hook->u) : 0)); /* both roundings' products */
    double rel = (chain - 1 + tol_gamma(terms, TOL_U_DOUBLE)) / (1 - tol_gamma(terms, TOL_U_FLOAT)) / nranks;
    double abs_allowed = (double)hook->syncs * (nranks + 1) * hook->eta * chain;
    double worst = 0;
    for (int p = 0; p < model_nparams(ref); p++) {
        const model_param *par = model_param_at(ref, p);
        size_t a = par->offset > lo ? par->offset : lo, b = par->offset + par->count < hi ? par->offset + par->count : hi;
        if (!reduced[p] || a >= b)
            continue;
        for (size_t j = a; j < b; j++) {
            double d = fabs((double)g[j] - S[j] / nranks), allowed = rel * M[j] + abs_allowed;
            double ratio = d == 0 ? 0 : d / allowed; /* d > 0 with nothing allowed: infinity */
            if (!(ratio <= worst) && !isnan(worst))
                worst = ratio; /* a NaN sticks in worst and fails the check */
        }
    }
    rec->global_checked = 1;
    rec->global_ratio = worst;
}

uint64_t checker_hash(const model *layout, const float *v, const unsigned char *which)
{
    hash_stream digest;
    hash_stream_begin(&digest, HASH_INIT);
    for (int p = 0; p < model_nparams(layout); p++)
        if (!which || which[p]) {
            const model_param *par = model_param_at(layout, p);
            hash_stream_add(&digest, v + par->offset, par->count);
        }
    return hash_stream_end(&digest);
}

void checker_compare_buffers(const model *layout, const float *expected, const float *actual, verify_record *rec)
{
    size_t n = model_buffers_size(layout);
    if (n == 0 || memcmp(expected, actual, n * sizeof *expected) == 0) {
        for (size_t j = 0; j < n; j++)
            rec->nonfinite += !isfinite(expected[j]);
        return;
    }
    for (int b = 0; b < model_nbuffers(layout); b++) {
        const model_buffer *buf = model_buffer_at(layout, b);
        const float *e = expected + buf->offset, *a = actual + buf->offset;
        for (size_t j = 0; j < buf->count; j++) {
            uint32_t ue, ua;
            memcpy(&ue, &e[j], sizeof ue);
            memcpy(&ua, &a[j], sizeof ua);
            int bad = !isfinite(e[j]) || !isfinite(a[j]);
            if (ue == ua && !bad)
                continue;
            rec->nonfinite += bad;
            rec->ndiff += !bad;
            if (!rec->has_first) {
                rec->has_first = 1;
                rec->first_buffer = 1;
                rec->first_param = b;
                rec->first_index = j;
                rec->first_expected = e[j];
                rec->first_actual = a[j];
                rec->first_ulp = tol_ulp_distance(e[j], a[j]);
            }
        }
    }
}

const char *checker_first_name(const model *layout, const verify_record *rec)
{
    int n = !layout ? 0 : rec->first_buffer ? model_nbuffers(layout) : model_nparams(layout);
    if (rec->first_param < 0 || rec->first_param >= n)
        return "?";
    return rec->first_buffer ? model_buffer_at(layout, rec->first_param)->name
                             : model_param_at(layout, rec->first_param)->name;
}

int checker_rebases(const tolerance *tol, const verify_record *rec)
{
    return tol->kind != TOL_BITWISE && rec->ndiff == 0 && rec->nonfinite == 0;
}
