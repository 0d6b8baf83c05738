/*
 * test_exact.c - the correctly rounded sum (engine/world/exactsum.c).
 *
 * The oracle is written independently of the implementation: exact sums are
 * big integers in 32-bit words kept as separate positive and negative parts,
 * and a result is judged by the definition of rounding rather than by a
 * second rounding routine: r is right when no neighbouring value of the
 * format is strictly closer to the exact sum, and on a tie r is even.
 * Infinity counts as 2^128 (float) or 2^1024 (double), as IEEE 754 rounds.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exactsum.h"
#include "rng.h"
#include "testutil.h"

#define OW 80 /* 32-bit words: bit 0 weighs 2^-1074, up to 2^1024 and carries */

typedef struct big {
    uint32_t pos[OW], neg[OW];
} big;

/* Add sign * m * 2^(bit - 1074) to b. */
static void big_add(big *b, int negative, uint64_t m, int bit)
{
    uint32_t *w = negative ? b->neg : b->pos;
    for (int j = 0; j < 64; j++) {
        if (!((m >> j) & 1))
            continue;
        int at = bit + j;
        uint64_t carry = (uint64_t)1 << (at % 32);
        for (int k = at / 32; carry && k < OW; k++) {
            uint64_t s = (uint64_t)w[k] + carry;
            w[k] = (uint32_t)s;
            carry = s >> 32;
        }
    }
}

/* Add sign * x for a finite double x, or for the format's infinity stand-in. */
static void big_add_double(big *b, double x, int inf_bit)
{
    if (isinf(x)) {
        big_add(b, x < 0, 1, inf_bit);
        return;
    }
    int e;
    double f = frexp(fabs(x), &e); /* |x| = f * 2^e, f in [0.5, 1) */
    if (f == 0)
        return;
    /* x = M * 2^(e-53) with integer M < 2^53: exact for every double. */
    uint64_t m = (uint64_t)ldexp(f, 53);
    int bit = e - 53 + 1074;
    while (bit < 0) { /* subnormal: M carries trailing zeros */
        m >>= 1;
        bit++;
    }
    big_add(b, x < 0, m, bit);
}

/* Compare |a| and |b| where each is pos - neg. Returns -1, 0, 1. */
static void big_magnitude(const big *x, uint32_t *mag)
{
    int cmp = 0;
    for (int k = OW - 1; k >= 0 && !cmp; k--)
        cmp = (x->pos[k] > x->neg[k]) - (x->pos[k] < x->neg[k]);
    const uint32_t *hi = cmp >= 0 ? x->pos : x->neg, *lo = cmp >= 0 ? x->neg : x->pos;
    int64_t borrow = 0;
    for (int k = 0; k < OW; k++) {
        int64_t d = (int64_t)hi[k] - lo[k] - borrow;
        borrow = d < 0;
        mag[k] = (uint32_t)(d + (borrow ? ((int64_t)1 << 32) : 0));
    }
}

static int mag_cmp(const uint32_t *a, const uint32_t *b)
{
    for (int k = OW - 1; k >= 0; k--)
        if (a[k] != b[k])
            return a[k] < b[k] ? -1 : 1;
    return 0;
}

/* |sum(terms) - c| as a magnitude. */
static void distance(const double *terms, int n, double c, int inf_bit, uint32_t *mag)
{
    big b;
    memset(&b, 0, sizeof b);
    for (int k = 0; k < n; k++)
        big_add_double(&b, terms[k], inf_bit);
    big_add_double(&b, -c, inf_bit);
    big_magnitude(&b, mag);
}

/*
 * Is r the correctly rounded value of sum(terms) in a format with
 * significand bits `prec`? Checks both neighbours of r.
 */
static int correctly_rounded(const double *terms, int n, double r, int is_float)
{
    int inf_bit = is_float ? 128 + 1074 : 1024 + 1074;
    uint32_t dr[OW], dn[OW];
    distance(terms, n, r, inf_bit, dr);
    double nb[2];
    if (is_float) {
        nb[0] = nextafterf((float)r, INFINITY);
        nb[1] = nextafterf((float)r, -INFINITY);
    } else {
        nb[0] = nextafter(r, INFINITY);
        nb[1] = nextafter(r, -INFINITY);
    }
    for (int i = 0; i < 2; i++) {
        if (nb[i] == r || isnan(nb[i]))
            continue; /* r is an infinity: nothing beyond it */
        distance(terms, n, nb[i], inf_bit, dn);
        int c = mag_cmp(dr, dn);
        if (c > 0)
            return 0; /* the neighbour is strictly closer */
        if (c == 0) {
            /* Tie: r must be even (an infinity counts as even: 2^128, 2^1024). */
            if (!isinf(r)) {
                uint64_t lsb = is_float ? (test_bits_f((float)r) & 1) : (test_bits_d(r) & 1);
                if (lsb)
                    return 0;
            }
        }
    }
    return 1;
}

static float sum_f(const float *x, int n)
{
    const float *src[256];
    for (int k = 0; k < n; k++)
        src[k] = &x[k];
    return exactsum_f(src, n, 0);
}

static double sum_d(const double *x, int n)
{
    const double *src[256];
    for (int k = 0; k < n; k++)
        src[k] = &x[k];
    return exactsum_d(src, n, 0);
}

/* A float with a random sign, significand and exponent over the whole range, subnormals included. */
static float random_wide_float(uint64_t key, uint64_t i)
{
    uint64_t r = rng_u64(key, i);
    uint32_t bits = (uint32_t)(r & 0x807fffffu) | ((uint32_t)((r >> 32) % 255) << 23);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static double random_wide_double(uint64_t key, uint64_t i)
{
    uint64_t r = rng_u64(key, i);
    uint64_t e = rng_u64(key, i + 1000000007) % 2047;
    uint64_t bits = (r & UINT64_C(0x800fffffffffffff)) | (e << 52);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

static void test_float_random_wide(void)
{
    static const int ns[] = {2, 3, 4, 7, 16, 256};
    int bad = 0, trials = 0;
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        int n = ns[t];
        for (int rep = 0; rep < 200; rep++) {
            float x[256];
            double xd[256];
            uint64_t key = rng_key(rng_key(42, (uint64_t)n), (uint64_t)rep);
            /* Half the trials keep exponents close so cancellation and the fast path both occur. */
            for (int k = 0; k < n; k++) {
                x[k] = random_wide_float(key, (uint64_t)k);
                if (rep % 2)
                    x[k] = ldexpf(frexpf(x[k], &(int){0}), (int)rng_below(key, 500u + (uint64_t)k, 40) - 20);
                if (rep % 4 == 1 && k == n - 1)
                    x[k] = -x[0]; /* exact cancellation of the first term */
                xd[k] = x[k];
            }
            float r = sum_f(x, n);
            trials++;
            if (!correctly_rounded(xd, n, r, 1))
                bad++;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(trials, 1200);
}

static void test_double_random_wide(void)
{
    static const int ns[] = {2, 3, 5, 8, 64};
    int bad = 0;
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        int n = ns[t];
        for (int rep = 0; rep < 200; rep++) {
            double x[64];
            uint64_t key = rng_key(rng_key(7, (uint64_t)n), (uint64_t)rep);
            for (int k = 0; k < n; k++) {
                x[k] = random_wide_double(key, (uint64_t)k);
                if (rep % 2)
                    x[k] = ldexp(frexp(x[k], &(int){0}), (int)rng_below(key, 500u + (uint64_t)k, 120) - 60);
                if (rep % 4 == 1 && k == n - 1)
                    x[k] = -x[0];
            }
            if (!correctly_rounded(x, n, sum_d(x, n), 0))
                bad++;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* Where the plain double sum is exact, the answer is that sum rounded once. */
static void test_float_matches_exact_double_sum(void)
{
    int bad = 0;
    for (int rep = 0; rep < 2000; rep++) {
        float x[8];
        double s = 0;
        uint64_t key = rng_key(99, (uint64_t)rep);
        for (int k = 0; k < 8; k++) {
            /* 24-bit significands within 2^-8..2^8: 8 terms fit in 53 bits, the double sum is exact. */
            x[k] = ((float)(int32_t)(rng_u64(key, (uint64_t)k) >> 40) - 8388608.0f) * 0x1p-15f;
            s += x[k];
        }
        if (test_bits_f(sum_f(x, 8)) != test_bits_f((float)s))
            bad++;
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_hand_cases(void)
{
    /* Ties to even at 1: 1 + 2^-24 is halfway between 1 and 1 + 2^-23. */
    float tie[] = {1.0f, 0x1p-24f};
    CU_ASSERT_EQUAL(test_bits_f(sum_f(tie, 2)), test_bits_f(1.0f));
    /* A term far below breaks the tie upward: the double fast path cannot hold it. */
    float above[] = {1.0f, 0x1p-24f, 0x1p-70f};
    CU_ASSERT_EQUAL(test_bits_f(sum_f(above, 3)), test_bits_f(1.0f + 0x1p-23f));
    float below[] = {1.0f, 0x1p-24f, -0x1p-70f};
    CU_ASSERT_EQUAL(test_bits_f(sum_f(below, 3)), test_bits_f(1.0f));
    /* Order-dependent in float, not here: 2^24 + 1 + 1 = 2^24 + 2 exactly. */
    float assoc[] = {0x1p24f, 1.0f, 1.0f};
    CU_ASSERT_EQUAL(test_bits_f(sum_f(assoc, 3)), test_bits_f(0x1p24f + 2.0f));
    /* Catastrophic cancellation. */
    float cancel[] = {1e30f, 1.0f, -1e30f};
    CU_ASSERT_EQUAL(test_bits_f(sum_f(cancel, 3)), test_bits_f(1.0f));
    /* Overflow: FLT_MAX + half an ulp ties to the even neighbour, which is infinity. */
    float over[] = {FLT_MAX, 0x1p103f};
    CU_ASSERT(isinf(sum_f(over, 2)) && sum_f(over, 2) > 0);
    float just_below[] = {FLT_MAX, 0x1p102f};
    CU_ASSERT_EQUAL(test_bits_f(sum_f(just_below, 2)), test_bits_f(FLT_MAX));
    /* Subnormals add exactly. */
    float sub[] = {0x1p-149f, 0x1p-149f, 0x1p-148f};
    CU_ASSERT_EQUAL(test_bits_f(sum_f(sub, 3)), test_bits_f(0x1p-147f));

    /* Doubles: an intermediate overflow that the exact sum does not have. */
    double big3[] = {DBL_MAX, DBL_MAX, -DBL_MAX};
    CU_ASSERT_EQUAL(test_bits_d(sum_d(big3, 3)), test_bits_d(DBL_MAX));
    double dtie[] = {1.0, 0x1p-53, 0x1p-1074};
    CU_ASSERT_EQUAL(test_bits_d(sum_d(dtie, 3)), test_bits_d(1.0 + 0x1p-52));
    double dtie0[] = {1.0, 0x1p-53};
    CU_ASSERT_EQUAL(test_bits_d(sum_d(dtie0, 2)), test_bits_d(1.0));
    double dsub[] = {0x1p-1074, -0x1p-1073, 0x1p-1074};
    CU_ASSERT_EQUAL(test_bits_d(sum_d(dsub, 3)), test_bits_d(0.0));
    double dover[] = {DBL_MAX, DBL_MAX};
    CU_ASSERT(isinf(sum_d(dover, 2)));
}

static void test_specials(void)
{
    float nanin[] = {1.0f, NAN, 2.0f};
    CU_ASSERT(isnan(sum_f(nanin, 3)));
    float infs[] = {INFINITY, -INFINITY};
    CU_ASSERT(isnan(sum_f(infs, 2)));
    float inf1[] = {INFINITY, 1.0f, -FLT_MAX};
    CU_ASSERT(isinf(sum_f(inf1, 3)) && sum_f(inf1, 3) > 0);
    float ninf[] = {-INFINITY, 1.0f};
    CU_ASSERT(isinf(sum_f(ninf, 2)) && sum_f(ninf, 2) < 0);
    float negz[] = {-0.0f, -0.0f, -0.0f};
    CU_ASSERT_EQUAL(test_bits_f(sum_f(negz, 3)), test_bits_f(-0.0f));
    float mixz[] = {-0.0f, 0.0f};
    CU_ASSERT_EQUAL(test_bits_f(sum_f(mixz, 2)), test_bits_f(0.0f));
    float cancelz[] = {-3.0f, 3.0f};
    CU_ASSERT_EQUAL(test_bits_f(sum_f(cancelz, 2)), test_bits_f(0.0f));
    double dn[] = {NAN, 1.0};
    CU_ASSERT(isnan(sum_d(dn, 2)));
    double dnz[] = {-0.0, -0.0};
    CU_ASSERT_EQUAL(test_bits_d(sum_d(dnz, 2)), test_bits_d(-0.0));
}

/* The accumulator is order-independent by construction; check it on permutations anyway. */
static void test_permutation_invariance(void)
{
    int bad = 0;
    for (int rep = 0; rep < 300; rep++) {
        float x[16], y[16];
        uint64_t key = rng_key(5, (uint64_t)rep);
        for (int k = 0; k < 16; k++)
            x[k] = random_wide_float(key, (uint64_t)k);
        float r0 = sum_f(x, 16);
        for (int p = 0; p < 5; p++) {
            memcpy(y, x, sizeof y);
            for (int k = 15; k > 0; k--) { /* Fisher-Yates with the counter generator */
                int j = (int)rng_below(key, 1000u + (uint64_t)(p * 16 + k), (uint32_t)k + 1);
                float t = y[k];
                y[k] = y[j];
                y[j] = t;
            }
            if (test_bits_f(sum_f(y, 16)) != test_bits_f(r0))
                bad++;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
}

int main(void)
{
    static const test_entry tests[] = {
        {"float: random wide-range sums are correctly rounded", test_float_random_wide},
        {"double: random wide-range sums are correctly rounded", test_double_random_wide},
        {"float: equals the exact double sum rounded once", test_float_matches_exact_double_sum},
        {"hand cases: ties, cancellation, overflow, subnormals", test_hand_cases},
        {"NaN, infinities and signed zeros", test_specials},
        {"permutations give the same bits", test_permutation_invariance},
        TEST_END,
    };
    return test_run_suite("exactsum", tests);
}
