/*
 * optim.h - what `step` does to the parameters: plain SGD, PyTorch's
 * p.add_(p.grad, alpha=-lr), so p = p + (-lr) * grad rounded once per
 * operation as PyTorch's CPU kernel does it.
 */
#ifndef DDPSIM_OPTIM_H
#define DDPSIM_OPTIM_H

#include "model.h"

void ddp_sgd_step(model *m, float lr);

#endif
