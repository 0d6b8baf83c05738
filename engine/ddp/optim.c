/*
 * optim.c - the optimizer step of `step` (optim.h).
 */
#include "optim.h"

void ddp_sgd_step(model *m, float lr)
{
    float *w = model_weights(m);
    const float *g = model_grads(m);
    float neg_lr = -lr;
    for (size_t i = 0; i < model_size(m); i++)
        w[i] = w[i] + neg_lr * g[i];
}
