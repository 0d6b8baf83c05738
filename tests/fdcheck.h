/*
 * fdcheck.h - central finite differences against analytic gradients, shared
 * by the layer and model tests.
 *
 * The caller gives a loss function of the current tensor values (in double)
 * and the analytic gradients already computed. Each checked element x is
 * moved by h = 1e-3 * max(1, |x|) both ways; the difference quotient uses the
 * perturbations actually stored in float, so rounding of x +/- h is not
 * mistaken for a gradient error.
 */
#ifndef DDPSIM_FDCHECK_H
#define DDPSIM_FDCHECK_H

#include <stddef.h>

typedef double (*fd_loss_fn)(void *ctx);

typedef struct fd_result {
    size_t checked, failed;
    double worst_err;   /* largest |fd - analytic| */
    size_t worst_index;
} fd_result;

/*
 * Compare grad[j] with the finite difference of loss w.r.t. data[j] for up
 * to max_checks elements spread over the tensor. An element passes when
 * |fd - an| <= atol + rtol * |an|, where atol = atol_frac * max|grad| +
 * atol_floor; NaN anywhere fails.
 */
fd_result fd_check(float *data, const float *grad, size_t n, fd_loss_fn loss, void *ctx, size_t max_checks,
                   double atol_frac, double atol_floor, double rtol);

/* The largest |fd - an| / (atol + rtol * |an|) of every fd_check so far in this process: how much of its
 * tolerance the run used (the empirical margins in the tests' comments are read off it). */
double fd_worst_fraction(void);

#endif
