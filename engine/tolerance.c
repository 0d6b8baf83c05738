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
    if (strcmp(text, "bitwise") == 0) {
        out->kind = TOL_BITWISE;
        return DDP_OK;
    }
    if (strncmp(text, "ulp:", 4) == 0) {
        errno = 0;
        char *end;
        unsigned long v = strtoul(text + 4, &end, 10);
        if (text[4] < '0' || text[4] > '9' || *end || errno || v > 1000000000ul)
            return ddp_error(DDP_ERR_INVALID, "tolerance '%s': ulp:N needs N in 0..1000000000", text);
        out->kind = TOL_ULP;
        out->ulps = (uint32_t)v;
        return DDP_OK;
    }
    out->kind = TOL_CLOSE;
    const char *p = text;
    int seen = 0;
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
                             "tolerance '%s': expected bitwise, ulp:N or rtol=X,atol=Y with X, Y >= 0", text);
        seen++;
        if (comma && comma[1] == '\0')
            return ddp_error(DDP_ERR_INVALID, "tolerance '%s': trailing comma", text);
        p = comma ? comma + 1 : end;
    }
    if (!seen)
        return ddp_error(DDP_ERR_INVALID, "tolerance '%s': expected bitwise, ulp:N or rtol=X,atol=Y", text);
    return DDP_OK;
}

const char *tol_format(const tolerance *t, char *buf, size_t len)
{
    switch (t->kind) {
    case TOL_BITWISE: snprintf(buf, len, "bitwise"); break;
    case TOL_ULP: snprintf(buf, len, "ulp:%u", t->ulps); break;
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

int tol_match(const tolerance *t, float expected, float actual)
{
    if (!isfinite(expected) || !isfinite(actual))
        return 0;
    switch (t->kind) {
    case TOL_BITWISE: return memcmp(&expected, &actual, sizeof expected) == 0;
    case TOL_ULP: return tol_ulp_distance(expected, actual) <= t->ulps;
    case TOL_CLOSE: return fabs((double)actual - expected) <= t->atol + t->rtol * fabs((double)expected);
    }
    return 0;
}
