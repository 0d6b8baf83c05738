/*
 * golden_bound.h - a proven per-element bound for the golden PyTorch run
 * (tests/data/pytorch-ddp-mlp-3ranks: mlp:4-8-3, relu, mse, batch 2 per rank,
 * 3 ranks, SGD lr 0.1): how far any float32 computation of its gradients, in
 * any order of additions (PyTorch's, or ddpsim's under any BLAS kernel), can
 * be from the exact-arithmetic run. Two such computations are within twice
 * that of each other. The derivation is in doc/tolerances.md ("The golden
 * run").
 */
#ifndef DDPSIM_GOLDEN_BOUND_H
#define DDPSIM_GOLDEN_BOUND_H

#include <stddef.h>

#define GOLDEN_RANKS 3
#define GOLDEN_BATCH 2
#define GOLDEN_NPARAMS 67 /* 0.weight [8,4], 0.bias [8], 2.weight [3,8], 2.bias [3] */

typedef struct golden_bound {
    int ngrabs;
    double *bound; /* [grab][rank][GOLDEN_NPARAMS]: the bound on |ddpsim's - PyTorch's| (twice one side's) */
} golden_bound;

/* The bound for each grab of schedule (ddpsim's grammar) run on the golden inputs in dir; 0, or -1 (said). */
int golden_bound_compute(const char *dir, const char *schedule, golden_bound *out);
void golden_bound_free(golden_bound *b);
/* The offset of parameter index p (model order) in a grab's GOLDEN_NPARAMS values. */
size_t golden_bound_offset(int p);

#endif
