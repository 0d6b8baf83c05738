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
 * or torch.optim.AdamW (torch 1.13 torch/optim/adamw.py,
 * _single_tensor_adamw, lines 250-310; amsgrad and maximize off), with
 * t the parameter's own count of steps and every scalar computed in double
 * then rounded to float, as a Python float reaches a CPU kernel:
 *
 *   adamw     p = p * (1 - lr wd)                       param.mul_
 *             m = (b1 * m) + (1 - b1) * g               exp_avg.mul_(b1).add_(g, alpha=1-b1)
 *             v = (b2 * v) + ((1 - b2) * g) * g         exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
 *             d = sqrt(v) / sqrt(1 - b2^t) + eps
 *             p = p + ((-lr / (1 - b1^t)) * m) / d      param.addcdiv_(m, d, value=-step_size)
 *
 * (torch 2.x writes the first moment as exp_avg.lerp_(g, 1 - b1), and a
 * kernel may fuse a multiply and an add: other roundings of the same
 * rule, which the order tolerance's bound of a step covers, budget.h.)
 *
 * A parameter whose .grad is None is skipped, buffers, count and all, as
 * PyTorch skips it; plain SGD steps it with zeros, which leaves it as it was.
 */
#ifndef DDPSIM_OPTIM_H
#define DDPSIM_OPTIM_H

#include <math.h>
#include <stdint.h>

#include "model.h"
#include "status.h"

/* --optimizer momentum without a value: PyTorch's tutorials' and its FSDP parity tests' 0.9. */
#define DDP_DEFAULT_MOMENTUM 0.9f

/* --optimizer adamw without values: torch.optim.AdamW's defaults (betas (0.9, 0.999), eps 1e-8, weight decay
 * 0.01); its lr is the run's (--lr). */
#define DDP_DEFAULT_BETA1 0.9
#define DDP_DEFAULT_BETA2 0.999
#define DDP_DEFAULT_ADAM_EPS 1e-8
#define DDP_DEFAULT_WEIGHT_DECAY 0.01

/* torch.optim.AdamW's hyperparameters besides lr, as Python floats (doubles). */
typedef struct ddp_adamw {
    int on;                 /* 0: the step is SGD's */
    double beta1, beta2, eps, weight_decay;
} ddp_adamw;

/* AdamW with the defaults above. */
ddp_adamw ddp_adamw_default(void);
/* NULL when a is AdamW torch.optim.AdamW accepts (0 <= betas < 1, weight decay >= 0 and finite) with an eps in
 * [1e-30, 1e30], else what is wrong. */
const char *ddp_adamw_invalid(const ddp_adamw *a);

/* What the last step did to an element's state (ddp_optim.last). */
enum { OPTIM_SKIPPED, OPTIM_STARTED, OPTIM_ADVANCED };

typedef struct ddp_optim {
    float lr, momentum;     /* momentum 0 and no AdamW: plain SGD, no state */
    ddp_adamw adamw;
    size_t n;
    float *buf;             /* [n] the momentum buffers, or AdamW's exp_avg, in the parameters' layout */
    float *prev;            /* [n] ... as they were before the last step (what a bound of it reads) */
    float *sq, *prev_sq;    /* [n] AdamW's exp_avg_sq, and before the last step */
    uint32_t *t;            /* [n] AdamW: the element's parameter's count of steps (state['step']) */
    unsigned char *started; /* [n] the buffer exists (PyTorch's state['momentum_buffer']) */
    unsigned char *last;    /* [n] OPTIM_*: what the last step did */
} ddp_optim;

/*
 * An optimizer over n elements: torch.optim.AdamW when adamw says so (adamw may be NULL), else SGD with momentum
 * (0: plain). The state only when there is one. DDP_ERR_NOMEM.
 */
ddp_status ddp_optim_init(ddp_optim *o, float lr, float momentum, const ddp_adamw *adamw, size_t n);
/* Whether the step has state that carries from step to step (momentum or AdamW). */
int ddp_optim_stateful(const ddp_optim *o);

/*
 * AdamW's scalars at a step count t, as torch computes them in double and rounds them to float for a kernel:
 * the first moment's factors b1 and 1 - b1, the second's b2 and 1 - b2, the decay 1 - lr wd, the divisor
 * sqrt(1 - b2^t), eps, and -lr / (1 - b1^t).
 */
typedef struct ddp_adamw_scalars {
    float b1, a1, b2, a2, decay, c2, eps, neg_step;
} ddp_adamw_scalars;
ddp_adamw_scalars ddp_adamw_scalars_at(const ddp_adamw *a, float lr, uint32_t t);
/* One element's AdamW step (optim.h's rule) with those scalars: w, m and v updated in place. */
static inline void ddp_adamw_element(const ddp_adamw_scalars *s, float *w, float *m, float *v, float g)
{
    float p = *w * s->decay;
    float mb = s->b1 * *m;
    *m = mb + s->a1 * g;
    float vb = s->b2 * *v;
    *v = vb + (s->a2 * g) * g;
    float d = sqrtf(*v) / s->c2 + s->eps;
    *w = p + (s->neg_step * *m) / d;
}
void ddp_optim_free(ddp_optim *o);

/*
 * One step of w with gradients g (n elements each). defined: per parameter of
 * m, whether its .grad is a tensor (NULL: every one is, as a sharded
 * gradient).
 */
void ddp_optim_step(ddp_optim *o, const model *m, const unsigned char *defined, float *w, const float *g);

/* SGD: the direction the last step moved the parameters along (-lr times it): g itself, or the momentum buffers. */
const float *ddp_optim_direction(const ddp_optim *o, const float *g);

/* How a report says the step's optimizer: "" for plain SGD, else ", SGD momentum M" or ", AdamW betas (B1, B2),
 * eps E, weight decay W" (into buf). */
const char *ddp_optim_text(float momentum, const ddp_adamw *adamw, char *buf, size_t len);

/* Plain SGD over a whole model: p = p + (-lr) * .grad (the benchmarks' step). */
void ddp_sgd_step(model *m, float lr);

#endif
