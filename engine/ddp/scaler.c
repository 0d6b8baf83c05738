/*
 * scaler.c - GradScaler's loss scaling (scaler.h).
 */
#include "scaler.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int scaler_power_of_two(double x)
{
    int e;
    return isfinite(x) && x > 0 && frexp(x, &e) == 0.5;
}

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}

/* One number of the spec, up to the next ',' or the end: *p moves past it (and the comma). */
static int number(const char **p, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(*p, &end);
    if (end == *p || errno || (*end && *end != ','))
        return -1;
    *p = *end ? end + 1 : end;
    return 0;
}

/* A float scale: a power of two that float holds (subnormal ones included). */
static int float_scale(double x)
{
    return scaler_power_of_two(x) && x >= 0x1p-149 && x <= 0x1p127;
}

int scaler_parse(const char *spec, scaler_config *out, char *err, size_t errlen)
{
    *out = (scaler_config){.on = 1, .init = SCALER_INIT, .growth = SCALER_GROWTH, .backoff = SCALER_BACKOFF,
                           .interval = SCALER_INTERVAL};
    const char *why = "a power of two from 2^-149 to 2^127: the scaled gradients are then exactly the scale times "
                      "the unscaled ones";
    if (strncmp(spec, "dynamic", 7) != 0) {
        const char *p = spec;
        double s;
        if (number(&p, &s) || *p)
            return fail(err, errlen, "'%s': expected a scale (a number) or dynamic[:INIT,GROWTH,BACKOFF,INTERVAL]",
                        spec);
        if (!float_scale(s))
            return fail(err, errlen, "scale %s: expected %s", spec, why);
        out->init = (float)s;
        return 0;
    }
    out->dynamic = 1;
    const char *p = spec + 7;
    if (!*p)
        return 0;
    if (*p++ != ':' || !*p)
        return fail(err, errlen, "'%s': expected dynamic or dynamic:INIT,GROWTH,BACKOFF,INTERVAL", spec);
    double v[4] = {SCALER_INIT, SCALER_GROWTH, SCALER_BACKOFF, SCALER_INTERVAL};
    static const char *const name[4] = {"INIT", "GROWTH", "BACKOFF", "INTERVAL"};
    for (int k = 0; k < 4 && *p; k++)
        if (number(&p, &v[k]))
            return fail(err, errlen, "'%s': %s is not a number (dynamic:INIT,GROWTH,BACKOFF,INTERVAL)", spec, name[k]);
    if (*p)
        return fail(err, errlen, "'%s': more than INIT,GROWTH,BACKOFF,INTERVAL", spec);
    if (!float_scale(v[0]))
        return fail(err, errlen, "'%s': INIT %g is not %s", spec, v[0], why);
    if (!scaler_power_of_two(v[1]) || v[1] <= 1)
        return fail(err, errlen, "'%s': GROWTH %g is not a power of two above 1 (GradScaler asks > 1; ddpsim %s)",
                    spec, v[1], "a power of two, to keep the scales exact");
    if (!scaler_power_of_two(v[2]) || v[2] >= 1)
        return fail(err, errlen, "'%s': BACKOFF %g is not a power of two below 1 (GradScaler asks < 1; ddpsim %s)",
                    spec, v[2], "a power of two, to keep the scales exact");
    if (v[3] < 1 || v[3] > 1e9 || v[3] != floor(v[3]))
        return fail(err, errlen, "'%s': INTERVAL %g is not a whole number of steps from 1 to 10^9", spec, v[3]);
    out->init = (float)v[0];
    out->growth = v[1];
    out->backoff = v[2];
    out->interval = (int)v[3];
    return 0;
}

void scaler_format(const scaler_config *c, char *buf, size_t len)
{
    if (!c->on)
        snprintf(buf, len, "off");
    else if (!c->dynamic)
        snprintf(buf, len, "%.9g", (double)c->init);
    else
        snprintf(buf, len, "dynamic:%.9g,%.17g,%.17g,%d", (double)c->init, c->growth, c->backoff, c->interval);
}

void scaler_start(const scaler_config *c, scaler_state *s)
{
    s->scale = c->on ? c->init : 1.0f;
    s->tracker = 0;
}

float scaler_inv_scale(float scale)
{
    return (float)(1.0 / (double)scale);
}

int scaler_unscale(float *g, size_t n, float inv_scale)
{
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        found |= !isfinite(g[i]);
        if (inv_scale != 1.0f) /* the kernel's "inv_scale == 1.f ? val : val * inv_scale" */
            g[i] = g[i] * inv_scale;
    }
    return found;
}

void scaler_update(const scaler_config *c, scaler_state *s, int found_inf)
{
    if (!c->on || !c->dynamic)
        return;
    if (found_inf) {
        s->scale = (float)((double)s->scale * c->backoff);
        s->tracker = 0;
        return;
    }
    int successful = s->tracker + 1;
    if (successful == c->interval) {
        float grown = (float)((double)s->scale * c->growth);
        if (isfinite(grown))
            s->scale = grown;
        s->tracker = 0;
    } else {
        s->tracker = successful;
    }
}
