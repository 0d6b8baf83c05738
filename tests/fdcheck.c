/*
 * fdcheck.c - finite-difference gradient checks (fdcheck.h).
 */
#include "fdcheck.h"

#include <math.h>

static double worst_fraction;

double fd_worst_fraction(void)
{
    return worst_fraction;
}

fd_result fd_check(float *data, const float *grad, size_t n, fd_loss_fn loss, void *ctx, size_t max_checks,
                   double atol_frac, double atol_floor, double rtol)
{
    fd_result r = {0, 0, 0.0, 0};
    double gmax = 0;
    for (size_t j = 0; j < n; j++)
        if (fabs(grad[j]) > gmax)
            gmax = fabs(grad[j]);
    double atol = atol_frac * gmax + atol_floor;
    size_t stride = n > max_checks ? n / max_checks : 1;
    for (size_t j = 0; j < n; j += stride) {
        float orig = data[j];
        float h = 1e-3f * (fabsf(orig) > 1.0f ? fabsf(orig) : 1.0f);
        data[j] = orig + h;
        float up = data[j];
        double lp = loss(ctx);
        data[j] = orig - h;
        float down = data[j];
        double lm = loss(ctx);
        data[j] = orig;
        double fd = (lp - lm) / ((double)up - (double)down);
        double err = fabs(fd - grad[j]);
        r.checked++;
        double limit = atol + rtol * fabs(grad[j]);
        if (limit > 0 && err / limit > worst_fraction)
            worst_fraction = err / limit;
        if (!(err <= limit)) {
            r.failed++;
        }
        if (!(err <= r.worst_err)) {
            r.worst_err = err;
            r.worst_index = j;
        }
    }
    loss(ctx); /* leave the caller's activations as they were for the original values */
    return r;
}
