/*
 * tolerance.c - parsing and applying tolerances (tolerance.h).
 */
#include "tolerance.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_nonneg(const char *s, const char *end, double *out)
{
    char buf[64];
    size_t n = (size_t)(end - s);
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    char *e;
    double v = strtod(buf, &e);
    if (*e || errno || !isfinite(v) || v < 0)
        return -1;
    *out = v;
    return 0;
}

ddp_status tol_parse(const char *text, tolerance *out)
{
    memset(out, 0, sizeof *out);
    if (!text)
        return ddp_error(DDP_ERR_INVALID, "no tolerance");
    if (strcmp(text, "bitwise") == 0 || strcmp(text, "order") == 0) {
        out->kind = text[0] == 'b' ? TOL_BITWISE : TOL_ORDER;
        return DDP_OK;
    }
    int of_max = strncmp(text, "ulp-of-max:", 11) == 0;
    if (of_max || strncmp(text, "ulp:", 4) == 0) {
        const char *num = text + (of_max ? 11 : 4);
        errno = 0;
        char *end;
        unsigned long v = strtoul(num, &end, 10);
        if (*num < '0' || *num > '9' || *end || errno || v > 1000000000ul)
            return ddp_error(DDP_ERR_INVALID, "tolerance '%s': %s needs N in 0..1000000000", text,
                             of_max ? "ulp-of-max:N" : "ulp:N");
        out->kind = of_max ? TOL_ULP_OF_MAX : TOL_ULP;
        out->ulps = (uint32_t)v;
        return DDP_OK;
    }
    /* rtol=X,atol=Y: each key once and both given (a repeated key would let the last silently win), X in
     * [0, 1) (a relative tolerance of 100% passes anything of the right sign), Y finite and >= 0. */
    out->kind = TOL_CLOSE;
    const char *p = text;
    int seen = 0, have_rtol = 0, have_atol = 0;
    while (*p) {
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        double *dst = NULL;
        if (strncmp(p, "rtol=", 5) == 0)
            dst = &out->rtol;
        else if (strncmp(p, "atol=", 5) == 0)
            dst = &out->atol;
        if (!dst || parse_nonneg(p + 5, end, dst) != 0)
            return ddp_error(DDP_ERR_INVALID,
                             "tolerance '%s': expected bitwise, order, ulp:N, ulp-of-max:N or rtol=X,atol=Y with X, Y >= 0", text);
        int *have = dst == &out->rtol ? &have_rtol : &have_atol;
        if (*have)
            return ddp_error(DDP_ERR_INVALID, "tolerance '%s': %.4s given twice", text, p);
        *have = 1;
        seen++;
        if (comma && comma[1] == '\0')
            return ddp_error(DDP_ERR_INVALID, "tolerance '%s': trailing comma", text);
        p = comma ? comma + 1 : end;
    }
    if (!seen)
        return ddp_error(DDP_ERR_INVALID, "tolerance '%s': expected bitwise, order, ulp:N, ulp-of-max:N or rtol=X,atol=Y", text);
    if (!have_rtol || !have_atol)
        return ddp_error(DDP_ERR_INVALID, "tolerance '%s': rtol=X,atol=Y needs both (write 0 for the one you do not want)",
                         text);
    if (out->rtol >= 1)
        return ddp_error(DDP_ERR_INVALID, "tolerance '%s': rtol must be below 1 (%g would pass anything of the right sign)",
                         text, out->rtol);
    return DDP_OK;
}

const char *tol_format(const tolerance *t, char *buf, size_t len)
{
    switch (t->kind) {
    case TOL_BITWISE: snprintf(buf, len, "bitwise"); break;
    case TOL_ORDER: snprintf(buf, len, "order"); break;
    case TOL_ULP: snprintf(buf, len, "ulp:%u", t->ulps); break;
    case TOL_ULP_OF_MAX: snprintf(buf, len, "ulp-of-max:%u", t->ulps); break;
    case TOL_CLOSE: snprintf(buf, len, "rtol=%g,atol=%g", t->rtol, t->atol); break;
    }
    return buf;
}

/* Map float bits onto integers that increase with the value (both zeros to 0). */
static int64_t ordered(float x)
{
    int32_t i;
    memcpy(&i, &x, sizeof i);
    return i < 0 ? -(int64_t)(i & 0x7fffffff) : (int64_t)i;
}

uint32_t tol_ulp_distance(float a, float b)
{
    if (isnan(a) || isnan(b))
        return UINT32_MAX;
    int64_t d = ordered(a) - ordered(b);
    if (d < 0)
        d = -d;
    return d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

double tol_ulp_of(float x)
{
    x = fabsf(x);
    if (!isfinite(x))
        return INFINITY;
    return (double)nextafterf(x, INFINITY) - (double)x;
}

int tol_match_in(const tolerance *t, float expected, float actual, float tensor_max, float allow)
{
    if (!isfinite(expected) || !isfinite(actual))
        return 0;
    switch (t->kind) {
    case TOL_BITWISE: return memcmp(&expected, &actual, sizeof expected) == 0;
    case TOL_ORDER: return fabs((double)actual - expected) <= allow;
    case TOL_ULP: return tol_ulp_distance(expected, actual) <= t->ulps;
    case TOL_ULP_OF_MAX: {
        float scale = isfinite(tensor_max) && fabsf(tensor_max) > fabsf(expected) ? fabsf(tensor_max) : fabsf(expected);
        return fabs((double)actual - expected) <= (double)t->ulps * tol_ulp_of(scale);
    }
    case TOL_CLOSE: return fabs((double)actual - expected) <= t->atol + t->rtol * fabs((double)expected);
    }
    return 0;
}

int tol_match(const tolerance *t, float expected, float actual)
{
    return tol_match_in(t, expected, actual, expected, 0);
}

int tol_ulp_bin(uint32_t ulps)
{
    return ulps == 0 ? 0 : ulps == 1 ? 1 : ulps <= 4 ? 2 : ulps <= 16 ? 3 : ulps <= 256 ? 4 : 5;
}

const char *tol_ulp_bin_label(int bin)
{
    static const char *const labels[TOL_ULP_BINS] = {"0", "1", "2-4", "5-16", "17-256", ">256"};
    return bin >= 0 && bin < TOL_ULP_BINS ? labels[bin] : "?";
}

double tol_gamma(double k, double u)
{
    double ku = k * u;
    return ku < 1 ? ku / (1 - ku) : HUGE_VAL;
}
