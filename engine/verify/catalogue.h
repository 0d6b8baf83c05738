/*
 * catalogue.h - running implementations through the configurations that
 * make the catalogued bugs visible (what `ddpsim --mutants` reports):
 *
 *   1 default          the default accumulate-then-sync schedule, 3 ranks
 *                      (1/3 is not a power of two, so the order of scaling shows)
 *   2 no_sync edges    a forward inside no_sync with its backward outside,
 *                      and the reverse
 *   3 branchy          find_unused on branchy, windows of three where head_a
 *                      is used only in earlier micro-steps
 *   4 tiny tensor      a model with a single-element tensor (mlp:8-16-1)
 *
 * A run that does not pass (a divergence, or a fault such as a hang the
 * watchdog ends) catches the implementation.
 */
#ifndef DDPSIM_CATALOGUE_H
#define DDPSIM_CATALOGUE_H

#include "impl.h"
#include "verify.h"

#define CATALOGUE_TIMEOUT_S 5.0
#define CATALOGUE_LOOSE_TOLERANCE "order" /* a correct reordering passes it (budget.h) */

typedef struct catalogue_config {
    const char *what, *model, *schedule;
    int ranks, find_unused;
} catalogue_config;

int catalogue_nconfigs(void);
const catalogue_config *catalogue_config_at(int i);

typedef struct catalogue_outcome {
    int failed;            /* did not pass */
    int fault;             /* ... through a fault rather than a divergence */
    int config;            /* the first configuration that caught it (-1: none) */
    int bitwise_only;      /* a divergence that a loose tolerance no longer sees */
    char where[160];       /* "grab 2, rank 0, 0.weight[3]" or "fault: ..." */
} catalogue_outcome;

/*
 * Run implementation e through the configurations in order until one does
 * not pass, on top of base (algorithm, batch, seed, lr, caps); then, for a
 * divergence, the same configuration again with the loose tolerance.
 */
void catalogue_run(const verify_config *base, const ddpsim_impl_ops *ops, catalogue_outcome *out);

#endif
