/*
 * optim.h - what `step` does to the parameters: torch.optim.SGD, plain or
 * with momentum (dampening 0, no Nesterov, no weight decay), rounded once
 * per operation as PyTorch's CPU kernels do it (torch/optim/sgd.py,
 * _single_tensor_sgd, 1.13 to 2.x):
 *
 *   plain     p = p + (-lr) * g
 *   momentum  b = g                  at a parameter's first step with a .grad
 *             b = (m * b) + g        after it (buf.mul_(m).add_(g))
 *             p = p + (-lr) * b
 *
 * A parameter whose .grad is None is skipped, buffer and all, as PyTorch
 * skips it; plain SGD steps it with zeros, which leaves it as it was.
 */
#ifndef DDPSIM_OPTIM_H
#define DDPSIM_OPTIM_H

#include "model.h"
#include "status.h"

/* --optimizer momentum without a value: PyTorch's tutorials' and its FSDP parity tests' 0.9. */
#define DDP_DEFAULT_MOMENTUM 0.9f

/* What the last step did to an element's momentum buffer (ddp_optim.last). */
enum { OPTIM_SKIPPED, OPTIM_STARTED, OPTIM_ADVANCED };

typedef struct ddp_optim {
    float lr, momentum;     /* momentum 0: plain SGD, no state */
    size_t n;
    float *buf;             /* [n] the momentum buffers, in the parameters' layout */
    float *prev;            /* [n] ... as they were before the last step (what a bound of it reads) */
    unsigned char *started; /* [n] the buffer exists (PyTorch's state['momentum_buffer']) */
    unsigned char *last;    /* [n] OPTIM_*: what the last step did */
} ddp_optim;

/* An optimizer over n elements; the buffers only with momentum. DDP_ERR_NOMEM. */
ddp_status ddp_optim_init(ddp_optim *o, float lr, float momentum, size_t n);
void ddp_optim_free(ddp_optim *o);

/*
 * One step of w with gradients g (n elements each). defined: per parameter of
 * m, whether its .grad is a tensor (NULL: every one is, as a sharded
 * gradient).
 */
void ddp_optim_step(ddp_optim *o, const model *m, const unsigned char *defined, float *w, const float *g);

/* The direction the last step moved the parameters along (-lr times it): g itself, or the momentum buffers. */
const float *ddp_optim_direction(const ddp_optim *o, const float *g);

/* How a report says the step's momentum: "" for plain SGD, else ", SGD momentum M" (into buf). */
const char *ddp_optim_text(float momentum, char *buf, size_t len);

/* Plain SGD over a whole model: p = p + (-lr) * .grad (the benchmarks' step). */
void ddp_sgd_step(model *m, float lr);

#endif
