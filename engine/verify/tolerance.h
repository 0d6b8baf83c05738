/*
 * tolerance.h - how two gradients are compared: bitwise (the default),
 * within the proven bound of a reordered summation (order, the default of
 * the NCCL backend: budget.h), within N units in the last place, within N
 * units in the last place of the tensor's largest element (ulp-of-max:N),
 * or within rtol/atol as numpy.allclose
 * (|actual - expected| <= atol + rtol * |expected|). In every mode a NaN or
 * an infinity on either side is a mismatch: non-finite values never pass.
 *
 * Why ulp-of-max: summing the same N numbers in another order (NCCL's ring
 * against the reference's rank order) moves each result by a few ulps of the
 * partial sums, which are about as large as the tensor's largest element. An
 * element that nearly cancels is tiny, so its own ulp is tiny and a plain
 * ulp:N fails it (the CPU ring emulation shows 1000+ ulps on the default
 * run), while the absolute error is as small as anywhere else.
 */
#ifndef DDPSIM_TOLERANCE_H
#define DDPSIM_TOLERANCE_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef enum tol_kind { TOL_BITWISE, TOL_ULP, TOL_CLOSE, TOL_ULP_OF_MAX, TOL_ORDER } tol_kind;

typedef struct tolerance {
    tol_kind kind;
    uint32_t ulps;      /* TOL_ULP, TOL_ULP_OF_MAX */
    double rtol, atol;  /* TOL_CLOSE */
    int match_planted;  /* a run with a planted inf or NaN (--fault inf|nan): an element where the reference is
                         * inf or NaN matches one of the implementation's of the same kind (+inf, -inf, NaN) */
} tolerance;

/* "bitwise" | "order" | "ulp:N" | "ulp-of-max:N" | "rtol=X,atol=Y" (either part may be left out: 0). */
ddp_status tol_parse(const char *text, tolerance *out);
/* The canonical text of t ("bitwise", "ulp:4", "rtol=1e-05,atol=1e-08"). */
const char *tol_format(const tolerance *t, char *buf, size_t len);

/* Distance in units in the last place between two floats (0 for +0 and -0; UINT32_MAX if either is NaN). */
uint32_t tol_ulp_distance(float a, float b);

/* 1 when actual passes against expected (for ulp-of-max, |expected| stands for the tensor's largest). */
int tol_match(const tolerance *t, float expected, float actual);
/*
 * The same, in a tensor whose largest |expected| is tensor_max; for order,
 * within `allow`, the element's proven bound (budget.h).
 */
int tol_match_in(const tolerance *t, float expected, float actual, float tensor_max, float allow);

/*
 * gamma(k) = k u / (1 - k u): the classic bound (Higham, Accuracy and
 * Stability of Numerical Algorithms, 3.1) on the relative error of k
 * rounded operations in a row, unit roundoff u (2^-24 for float, 2^-53 for
 * double). Infinity once k u >= 1 (no bound left).
 */
#define TOL_U_FLOAT 0x1p-24
#define TOL_U_DOUBLE 0x1p-53
double tol_gamma(double k, double u);

/* The gap between x >= 0 and the next float up: one ulp at x's magnitude. */
double tol_ulp_of(float x);

/* A small histogram of ulp distances: bins 0 | 1 | 2-4 | 5-16 | 17-256 | >256. */
#define TOL_ULP_BINS 6
int tol_ulp_bin(uint32_t ulps);
const char *tol_ulp_bin_label(int bin);

#endif
