/*
 * exactsum.h - correctly rounded sums, independent of the order of the terms.
 *
 * Method: a fixed-point "long accumulator" covering every double exactly.
 * Bit 0 weighs 2^-1074 (the smallest subnormal double); the accumulator is an
 * array of signed 64-bit limbs, each holding a 32-bit digit plus room for
 * carries, so up to 2^31 terms add without carry propagation. A term adds
 * its 53-bit significand, shifted to its exponent, into two or three limbs.
 * Rounding normalizes the limbs once, takes the sign, and rounds the
 * magnitude to nearest-even at the target precision (24 bits for float, 53
 * for double), with the target's subnormal range and overflow to infinity.
 * The exact real sum is order-independent, so is its rounding.
 *
 * Specials: any NaN, or +Inf together with -Inf, gives NaN; otherwise an
 * infinity wins. An exact zero is +0 unless every term was -0 (as IEEE's
 * x + y rounds to nearest).
 *
 * exactsum_f/exactsum_d first try plain double addition checked with
 * TwoSum: if no addition lost a bit the double sum is exact and one rounding
 * gives the answer; only otherwise the long accumulator runs.
 */
#ifndef DDPSIM_EXACTSUM_H
#define DDPSIM_EXACTSUM_H

#include <stddef.h>
#include <stdint.h>

#define EXACT_LIMBS 70 /* 2098 bits of doubles + carries, in 32-bit digits, with slack */

typedef struct exact_acc {
    int64_t limb[EXACT_LIMBS];
    int lo, hi;          /* range of limbs touched since reset (lo > hi: none) */
    int nan, pos_inf, neg_inf;
    int all_neg_zero;    /* every term so far was -0 */
    size_t terms;
} exact_acc;

void exact_reset(exact_acc *a);
void exact_add(exact_acc *a, double x);
/* The correctly rounded sum so far, as float or as double. Leaves `a` usable. */
float exact_round_f(exact_acc *a);
double exact_round_d(exact_acc *a);

/* Correctly rounded sum of src[k][i] over k = 0..n-1. */
float exactsum_f(const float *const *src, int n, size_t i);
double exactsum_d(const double *const *src, int n, size_t i);

#endif
