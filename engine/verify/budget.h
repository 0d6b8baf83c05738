/*
 * budget.h - the order tolerance (--tolerance order): how far, element by
 * element, an implementation that computes DDP's sums in another order may
 * be from the reference, proven from the arithmetic rather than tuned.
 *
 * u = 2^-24 and gamma(k) = k u / (1 - k u) (tolerance.h). Each element
 * carries a budget E, the largest |impl - ref| a correct implementation can
 * have reached by now; the comparison passes when |impl - ref| <= E. E
 * starts at 0 (so until the first sync the two must be equal: they are the
 * same local gradients) and follows the operations:
 *
 *  - a sync over N ranks: every correct way to average (multiply each
 *    contribution by fl(1/N) or divide it by N, or divide the sum; add in any
 *    order or tree, in float or wider) passes each contribution g_r through
 *    at most N + 1 rounded operations, so each side is within
 *    gamma(N+1)/N * sum_r |g_r| of the exact average of its own inputs
 *    (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 4.2).
 *    With |g'_r - g_r| <= E_r on the way in:
 *
 *        E <- 1/N * sum_r ( E_r (1 + gamma(N+1)) + 2 gamma(N+1) |g_r| )
 *
 *    The sum of the magnitudes is reduced alongside the reference's sum (a
 *    float allreduce of this vector), and the result is rounded up;
 *  - an accumulation g <- g + l of the same local gradient on both sides:
 *    |fl(a' + l) - fl(a + l)| <= E (1 + u) + 2u |a + l|, with
 *    |a + l| <= |fl(a + l)| / (1 - u); nothing when E = 0;
 *  - zero_grad: E <- 0.
 *
 * The 2 gamma(N+1) per sync is the 2 gamma(N-1) sum_r |x_r| plus
 * the rounding of the 1/N scaling on both sides. A missing rank or
 * micro-step, or a wrong divisor, moves an element by O(1/N) of its
 * magnitude: far beyond E, which is O(N u) of it.
 *
 * Parameters after a step w' = w - lr g: each side rounds the product and
 * the difference at most once each (the implementation may own its update),
 * so |w'_impl - w'_ref| <= lr E (1 + u) + 2u (|w'_ref| + lr |g|), rounded
 * up; at the end of the run (parameters rebased after every passing step)
 * the bound is 0. With momentum (optim.h) the step moves along the buffer,
 * whose own bound budget_momentum carries from step to step
 * (doc/SEMANTICS.md, "The step").
 */
#ifndef DDPSIM_BUDGET_H
#define DDPSIM_BUDGET_H

#include <stddef.h>

#include "comm_hook.h"
#include "model.h"
#include "shard_ref.h"
#include "status.h"
#include "world.h"

typedef struct order_budget {
    float *E;   /* per gradient element: the bound by now */
    float *v;   /* this rank's contribution to the next sync's bound */
    size_t n;
    int nranks;
    int any;    /* some element of E is not zero (before the first sync since zero_grad none is) */
    double hook_u, hook_eta; /* a compressing communication hook's rounding (comm_hook_unit), 0 without */
} order_budget;

/* hook: the run's communication hook; a compressing one rounds every term to its format (comm_hook.h). */
ddp_status budget_init(order_budget *b, size_t n, int nranks, ddp_comm_hook hook);
void budget_free(order_budget *b);

/* zero_grad. */
void budget_zero(order_budget *b);

/*
 * Both sides' gradients multiplied by the same power of two f (GradScaler's unscale): the bound of their difference
 * is f times the old one, exactly, rounded up where it falls below float's normal range.
 */
void budget_scale(order_budget *b, float f);
/* ... the same for a bound of n elements held elsewhere (the sharded one, budget_sharded's), f a power of two in
 * double (a product of unscales may leave float's range). */
void budget_scale_bound(float *E, size_t n, double f);

/* A backward accumulated into the reference's gradients g the parameters marked used. */
void budget_accumulate(order_budget *b, const model *layout, const float *g, const unsigned char *used);

/* Before a sync: this rank's contribution to the bound, from its gradients g as they go in. */
void budget_before_sync(order_budget *b, const float *g);

/*
 * After the reference's sync, which divided by div (the world size, or under join without
 * divide_by_initial_world_size the ranks still running): the new bound of every parameter it reduced (a
 * collective: every rank calls it, a rank that has run out through budget_shadow_sync).
 */
ddp_status budget_after_sync(order_budget *b, world_rank *wr, const model *layout, const unsigned char *reduced,
                             int div);
/* A rank that ran out, in its peers' sync: it added exact zeros, and its own gradients and bound stay. */
ddp_status budget_shadow_sync(order_budget *b, world_rank *wr);

/*
 * The bound on the parameters after a step p + (-lr) * dir (w: the reference's new parameters) into out: the
 * update's own rounding (a fused multiply-add or not), and dir's bound E carried through lr (NULL: dir is the
 * same on both sides; otherwise the gradients were compared under their own tolerance at the grab). dir is the
 * gradient, or the momentum buffer with budget_momentum's bound.
 */
void budget_step(float lr, const float *E, const float *dir, const float *w, size_t n, float *out);
/*
 * The momentum buffers' bound after the last step of o (optim.h), which took the reference's gradients g, bounded
 * by E (NULL: exact): B holds the buffers' bound before the step and gets it after (o->n elements, carried from
 * step to step: a buffer keeps every earlier gradient's error, decayed by the momentum).
 */
void budget_momentum(const ddp_optim *o, const float *g, const float *E, float *B);
/*
 * AdamW (optim.h): the parameters' bound after the last step of o into out (o->n elements), and the moments'
 * bounds Dm (exp_avg) and Dv (exp_avg_sq), carried from step to step like budget_momentum's B. g: the reference's
 * gradients of the step, bounded by E (NULL: exact); w: the reference's new parameters. It holds for any
 * implementation that computes the rule with its own roundings: torch 1.13's kernels, 2.x's lerp, fused
 * multiply-adds, the order of addcdiv's product and quotient (doc/SEMANTICS.md, "The step: AdamW").
 */
void budget_adamw(const ddp_optim *o, const float *g, const float *E, const float *w, float *Dm, float *Dv,
                  float *out);

/*
 * --shard: the bound at a grab of a sharded run, every element, between the
 * implementation's value and the sharded reference's (budget.c says why):
 * the unsharded local sum's (reads_local: zero1 and fsdp while unsynced) or
 * the sharded gradient's, which sums every rank's |x| (a collective: every
 * rank calls it at the same check). scratch: n doubles.
 */
ddp_status budget_sharded(const shard_ref *s, world_rank *wr, int reads_local, size_t n, double *scratch, float *out);
/*
 * Model averaging (record.h's "averages": "parameters"): the parameters after
 * a step, between an implementation that steps each rank with its own local
 * gradient and then averages the parameters over the ranks, and the
 * reference's DDP step (budget.c says why). abs_local: this rank's sum of
 * |local gradient| over the micro-steps since zero_grad, in double, n + 1
 * entries (the last: how many micro-steps), summed over the ranks into
 * scratch (n + 1; a collective: every rank calls it). w: the reference's
 * parameters after its step, g: the gradient it stepped with.
 */
ddp_status budget_averaged_params(world_rank *wr, float lr, const float *w, const float *g, size_t n,
                                  const double *abs_local, double *scratch, float *out);

#endif
