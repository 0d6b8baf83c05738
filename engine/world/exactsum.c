/*
 * exactsum.c - the long accumulator described in exactsum.h.
 */
#include "exactsum.h"

#include <math.h>
#include <string.h>

#define DIGIT_BITS 32
#define DIGIT_MASK ((int64_t)0xffffffff)

void exact_reset(exact_acc *a)
{
    memset(a, 0, sizeof *a);
    a->lo = EXACT_LIMBS;
    a->hi = -1;
    a->all_neg_zero = 1;
}

static void touch(exact_acc *a, int lo, int hi)
{
    if (lo < a->lo)
        a->lo = lo;
    if (hi > a->hi)
        a->hi = hi;
}

void exact_add(exact_acc *a, double x)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int neg = (int)(bits >> 63);
    int e = (int)((bits >> 52) & 0x7ff);
    uint64_t m = bits & ((UINT64_C(1) << 52) - 1);
    a->terms++;
    if (!(neg && e == 0 && m == 0))
        a->all_neg_zero = 0;
    if (e == 0x7ff) {
        if (m)
            a->nan = 1;
        else if (neg)
            a->neg_inf = 1;
        else
            a->pos_inf = 1;
        return;
    }
    /* value = m * 2^(pos - 1074): pos is the bit index of m's lowest bit. */
    int pos = 0;
    if (e) {
        m |= UINT64_C(1) << 52;
        pos = e - 1;
    }
    if (m == 0)
        return;
    int limb = pos / DIGIT_BITS, shift = pos % DIGIT_BITS;
    unsigned __int128 v = (unsigned __int128)m << shift; /* at most 84 bits: three digits */
    int64_t d0 = (int64_t)(uint64_t)(v & 0xffffffffu);
    int64_t d1 = (int64_t)(uint64_t)((v >> 32) & 0xffffffffu);
    int64_t d2 = (int64_t)(uint64_t)(v >> 64);
    if (neg) {
        d0 = -d0;
        d1 = -d1;
        d2 = -d2;
    }
    a->limb[limb] += d0;
    a->limb[limb + 1] += d1;
    a->limb[limb + 2] += d2;
    touch(a, limb, limb + 2);
}

/*
 * Bring limbs lo..hi+1 to digits in [0, 2^32), carrying upward; the carry out
 * of the top lands in limb hi+1 (signed). Returns the index of that limb.
 */
static int normalize(int64_t *limb, int lo, int hi)
{
    int64_t carry = 0;
    for (int j = lo; j <= hi; j++) {
        int64_t v = limb[j] + carry;
        carry = v >> DIGIT_BITS; /* arithmetic shift: floor division by 2^32 */
        limb[j] = v & DIGIT_MASK;
    }
    limb[hi + 1] += carry;
    return hi + 1;
}

/* Bit `bit` of the magnitude held in digits (0 below lo). */
static int bit_at(const int64_t *d, int lo, int bit)
{
    if (bit < 0 || bit / DIGIT_BITS < lo)
        return 0;
    return (int)((d[bit / DIGIT_BITS] >> (bit % DIGIT_BITS)) & 1);
}

/* Any bit below `bit` (exclusive) set? */
static int any_below(const int64_t *d, int lo, int bit)
{
    if (bit <= 0)
        return 0;
    int top = (bit - 1) / DIGIT_BITS;
    if (top < lo)
        return 0;
    int nb = bit - top * DIGIT_BITS; /* bits of digit `top` that are below `bit` */
    int64_t mask = nb >= DIGIT_BITS ? DIGIT_MASK : (((int64_t)1 << nb) - 1);
    if (d[top] & mask)
        return 1;
    for (int j = lo; j < top; j++)
        if (d[j])
            return 1;
    return 0;
}

/*
 * Round the accumulated exact value to `prec` significant bits with the
 * smallest representable unit at bit `qmin` (bit 0 = 2^-1074). Returns the
 * rounded value as a double (exact for both targets: prec <= 53).
 */
static double round_to(exact_acc *a, int prec, int qmin)
{
    if (a->nan || (a->pos_inf && a->neg_inf))
        return NAN;
    if (a->pos_inf)
        return INFINITY;
    if (a->neg_inf)
        return -INFINITY;
    if (a->hi < a->lo)
        return a->all_neg_zero && a->terms ? -0.0 : 0.0;

    int64_t d[EXACT_LIMBS];
    int lo = a->lo, top = a->hi + 1;
    memcpy(d + lo, a->limb + lo, (size_t)(a->hi - lo + 1) * sizeof *d);
    d[top] = 0;
    normalize(d, lo, top - 1);
    int neg = d[top] < 0;
    if (neg) {
        for (int j = lo; j <= top; j++)
            d[j] = -d[j];
        normalize(d, lo, top - 1);
    }
    /* Now d[lo..top] are the non-negative digits of |sum| (d[top] is small). */
    int h = top;
    while (h >= lo && d[h] == 0)
        h--;
    if (h < lo)
        return a->all_neg_zero ? -0.0 : 0.0;
    int msb = h * DIGIT_BITS + (63 - __builtin_clzll((unsigned long long)d[h]));

    int cut = msb - prec + 1;
    if (cut < qmin)
        cut = qmin;
    uint64_t mant = 0;
    for (int b = msb; b >= cut; b--)
        mant = (mant << 1) | (uint64_t)bit_at(d, lo, b);
    int guard = bit_at(d, lo, cut - 1);
    int sticky = any_below(d, lo, cut - 1);
    if (guard && (sticky || (mant & 1)))
        mant++;
    double v = ldexp((double)mant, cut - 1074);
    return neg ? -v : v;
}

float exact_round_f(exact_acc *a)
{
    /* float: 24 bits, smallest unit 2^-149 = bit 925; (float) of the double is exact or overflows to Inf. */
    return (float)round_to(a, 24, 1074 - 149);
}

double exact_round_d(exact_acc *a)
{
    return round_to(a, 53, 0);
}

/* Error-free: a + b == s + err exactly (Knuth's TwoSum), with no overflow. */
static inline double two_sum_err(double a, double b, double s)
{
    double bb = s - a;
    return (a - (s - bb)) + (b - bb);
}

float exactsum_f(const float *const *src, int n, size_t i)
{
    double s = src[0][i];
    int exact = 1;
    for (int k = 1; k < n; k++) {
        double x = src[k][i];
        double t = s + x;
        if (two_sum_err(s, x, t) != 0.0)
            exact = 0;
        s = t;
    }
    /* A float sum in double cannot overflow; NaN/Inf fall to the exact path for their rules. */
    if (exact && isfinite(s) && s != 0.0)
        return (float)s;
    exact_acc a;
    exact_reset(&a);
    for (int k = 0; k < n; k++)
        exact_add(&a, src[k][i]);
    return exact_round_f(&a);
}

double exactsum_d(const double *const *src, int n, size_t i)
{
    double s = src[0][i];
    int exact = 1;
    for (int k = 1; k < n; k++) {
        double t = s + src[k][i];
        if (!isfinite(t) || two_sum_err(s, src[k][i], t) != 0.0)
            exact = 0;
        s = t;
    }
    if (exact && isfinite(s) && s != 0.0)
        return s;
    exact_acc a;
    exact_reset(&a);
    for (int k = 0; k < n; k++)
        exact_add(&a, src[k][i]);
    return exact_round_d(&a);
}
