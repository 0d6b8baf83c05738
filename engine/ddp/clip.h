/*
 * clip.h - torch.nn.utils.clip_grad_norm_ (torch 1.13
 * torch/nn/utils/clip_grad.py, lines 10-57; torch 2.x's
 * _get_total_norm and _clip_grads_with_norm_ keep the arithmetic):
 *
 *   total_norm = ||g||                  the L2 norm (norm_type=2) of every
 *                                       .grad together, or the largest |g|
 *   coef       = max_norm / (total_norm + 1e-6)
 *              = fl(fl(1 / fl(total_norm + 1e-6)) * max_norm)
 *                                       (Tensor.__rtruediv__ is
 *                                       reciprocal() * other, in float)
 *   g          = g * min(coef, 1)       every .grad, clamped or not
 *
 * The reference's side: the global norm of its gradients computed exactly
 * (each square is exact in double, their sum correctly rounded: exactsum.h),
 * the coefficient torch computes from it, and the interval a correct
 * implementation's coefficient lies in whatever order and grouping it sums
 * in (per tensor, per shard, per rank), given how far its gradients may be
 * from the reference's (the order tolerance's bound). doc/SEMANTICS.md
 * "Clipping" proves the interval.
 */
#ifndef DDPSIM_CLIP_H
#define DDPSIM_CLIP_H

#include <stddef.h>

#include "model.h"

/* torch's 1e-6 in clip_grad_norm_'s denominator. */
#define CLIP_EPS 1e-6

typedef struct clip_ref {
    double norm;       /* the global norm of the reference's gradients (relative error below 2^-51) */
    float total_norm;  /* rounded to float: what clip_grad_norm_ returns (up to its own order's last bits) */
    float coef;        /* torch's coefficient from total_norm, clamped at 1 */
    double lo, hi;     /* a correct implementation's coefficient lies in [lo, hi] */
} clip_ref;

/* The norm of n floats: L2 from the correctly rounded sum of their squares, or (inf_norm) the largest |g|. */
double clip_norm_of(const float *g, size_t n, int inf_norm);

/* torch's clamped coefficient from a float total norm. */
float clip_coef_torch(float total_norm, double max_norm);

/*
 * The reference's norm and coefficient of g (n floats), and the interval of a correct implementation's
 * coefficient when each of its gradients is within E of g (NULL: equal to g).
 */
void clip_reference(const float *g, const float *E, size_t n, double max_norm, int inf_norm, clip_ref *out);

/*
 * A correct clip_grad_norm_ of g (model m's layout), as torch 1.13's CPU loop computes it in float: each
 * parameter's norm over its elements in order, then the norm of those norms; every element multiplied by the
 * coefficient, which it returns. ddpsim's clipping of an implementation that has none of its own.
 */
float clip_grads_torch(const model *m, float *g, double max_norm, int inf_norm);

/* g times coef, each product rounded to float (torch's g.mul_(coef)). */
void clip_scale(float *g, size_t n, float coef);

/*
 * The bound of each element after both sides multiplied by coef (into out, n floats): from E before (NULL: 0)
 * and the reference's g before, |fl(g' c) - fl(g c)| <= c E (1 + u) + 2 u c |g|, rounded up.
 */
void clip_bound_after(const float *g, const float *E, size_t n, float coef, float *out);

#endif
