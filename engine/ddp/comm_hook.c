/*
 * comm_hook.c - PyTorch DDP's built-in communication hooks (comm_hook.h).
 */
#include "comm_hook.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const char *const names[] = {"none", "allreduce", "fp16", "bf16"};

ddp_status ddp_comm_hook_parse(const char *name, ddp_comm_hook *out)
{
    for (int h = 0; h < (int)(sizeof names / sizeof names[0]); h++)
        if (strcmp(name, names[h]) == 0) {
            *out = (ddp_comm_hook)h;
            return DDP_OK;
        }
    return ddp_error(DDP_ERR_INVALID, "communication hook '%s': expected none, allreduce, fp16 or bf16", name);
}

const char *ddp_comm_hook_name(ddp_comm_hook h)
{
    return h >= DDP_HOOK_NONE && h <= DDP_HOOK_BF16 ? names[h] : "?";
}

int ddp_comm_hook_compresses(ddp_comm_hook h)
{
    return h == DDP_HOOK_FP16 || h == DDP_HOOK_BF16;
}

/*
 * x rounded to a binary format of `fraction` fraction bits whose normal
 * numbers start at 2^emin, to nearest, ties to even, Inf beyond `largest`:
 * the step at x's binade (or at 2^emin below it, the subnormals) is a power
 * of two, so x / step is exact and nearbyint (the default rounding mode)
 * does the one rounding. From double, so an exact sum is rounded once.
 */
static double round_to(double x, int fraction, int emin, double largest)
{
    if (x == 0 || !isfinite(x))
        return x; /* keeps -0, Inf, NaN */
    int e;
    frexp(x, &e); /* 2^(e-1) <= |x| < 2^e */
    int binade = e - 1 < emin ? emin : e - 1;
    double step = ldexp(1.0, binade - fraction);
    double q = nearbyint(x / step) * step;
    return fabs(q) > largest ? copysign(INFINITY, x) : q;
}

static double round_format(double x, ddp_comm_hook h)
{
    if (h == DDP_HOOK_FP16)
        return round_to(x, 10, -14, 65504.0); /* IEEE binary16 */
    if (h == DDP_HOOK_BF16)
        return round_to(x, 7, -126, 0x1.fep127); /* bfloat16: float's exponent, 7 fraction bits */
    return x;
}

float comm_hook_round_double(double x, ddp_comm_hook h)
{
    return (float)round_format(x, h); /* a float16 or bfloat16 value is a float: exact */
}

/*
 * The same rounding of a float, on its bits (the hooks round every element
 * twice: this is their cost): the dropped low bits rounded to nearest, ties
 * to even, by adding just under half a step plus the kept last bit; the
 * carry moves into the exponent as it should, up to Inf. float16's
 * subnormals (below 2^-14) take the general path.
 */
float comm_hook_round(float x, ddp_comm_hook h)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    uint32_t a = b & 0x7fffffffu;
    if (h == DDP_HOOK_BF16) {
        if (a > 0x7f800000u)
            return x; /* NaN */
        b += 0x7fffu + ((b >> 16) & 1u);
        b &= 0xffff0000u;
    } else if (h == DDP_HOOK_FP16) {
        if (a >= 0x7f800000u || a < 0x38800000u)
            return comm_hook_round_double(x, h); /* Inf, NaN, zero, and float16's subnormals */
        if (a >= 0x477ff000u)
            b = (b & 0x80000000u) | 0x7f800000u; /* 65520 and up round past 65504 */
        else
            b = (b & 0x80000000u) | ((a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu);
    } else {
        return x;
    }
    memcpy(&x, &b, sizeof x);
    return x;
}

void comm_hook_compress(float *buf, size_t n, int nranks, ddp_comm_hook h)
{
    float fn = (float)nranks;
    if (h == DDP_HOOK_ALLREDUCE) {
        for (size_t i = 0; i < n; i++)
            buf[i] /= fn; /* tensor.div_(world_size) */
        return;
    }
    for (size_t i = 0; i < n; i++)
        buf[i] = comm_hook_round(comm_hook_round(buf[i], h) / fn, h); /* .to(format).div_(world_size) */
}

void comm_hook_sum_gathered(const float *gathered, int nranks, size_t n, ddp_comm_hook h, int exact, float *out)
{
    for (size_t i = 0; i < n; i++) {
        if (exact) {
            double s = 0; /* exact for float16 (multiples of 2^-24 below 2^16, few ranks); bfloat16's range is float's,
                           * where double holds the sum of a few ranks' values exactly unless they lie 2^29 apart */
            for (int r = 0; r < nranks; r++)
                s += gathered[(size_t)r * n + i];
            out[i] = (float)round_format(s, h);
        } else {
            float s = gathered[i];
            for (int r = 1; r < nranks; r++)
                s = comm_hook_round(s + gathered[(size_t)r * n + i], h);
            out[i] = s;
        }
    }
}

void comm_hook_unit(ddp_comm_hook h, double *u, double *eta)
{
    *u = h == DDP_HOOK_FP16 ? 0x1p-11 : h == DDP_HOOK_BF16 ? 0x1p-8 : 0;
    *eta = h == DDP_HOOK_FP16 ? 0x1p-25 : h == DDP_HOOK_BF16 ? 0x1p-134 : 0;
}
