/*
 * optim.c - the optimizer step of `step` (optim.h).
 */
#include "optim.h"

void ddp_sgd_step(model *m, float lr)
{
    float *w = model_weights(m);
    const float *g = model_grads(m);
    float neg_lr = -lr;
    size_t n = model_size(m); /* once: the stores through w could change *m as far as the compiler knows */
    for (size_t i = 0; i < n; i++)
        w[i] = w[i] + neg_lr * g[i];
}
