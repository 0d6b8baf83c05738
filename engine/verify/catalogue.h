/*
 * catalogue.h - running an implementation through the whole scenario
 * battery (battery.h) and saying which scenarios catch it: what
 * `ddpsim --mutants` reports for every catalogued bug, and what the tests
 * ask of every correct implementation (no scenario catches it).
 *
 * A scenario that does not pass (a divergence, or a fault such as a hang
 * the watchdog ends or a collective mismatch) catches the implementation.
 * A divergence is then run again with the order tolerance (budget.h): a
 * bug that passes it is right in real arithmetic, visible only bitwise.
 */
#ifndef DDPSIM_CATALOGUE_H
#define DDPSIM_CATALOGUE_H

#include "battery.h"
#include "impl.h"
#include "verify.h"

#define CATALOGUE_TIMEOUT_S 5.0
#define CATALOGUE_LOOSE_TOLERANCE "order" /* a correct reordering passes it (budget.h) */
#define CATALOGUE_MAX_SCENARIOS 32

typedef struct catalogue_outcome {
    unsigned char caught[CATALOGUE_MAX_SCENARIOS]; /* scenario i did not pass */
    int ncaught;
    int first;             /* the first scenario that caught it (-1: none) */
    int fault;             /* ... through a fault rather than a divergence */
    int bitwise_only;      /* its first divergence passes the loose tolerance */
    int loose_known;       /* the loose tolerance could run that scenario (bitwise_only means something) */
    char where[256];       /* the first scenario's first divergence ("grab 2, rank 0, 0.weight[3]") or fault */
    int interrupted;       /* a run was stopped by this signal: the rest was not run */
} catalogue_outcome;

/* Every scenario of the battery on top of base (ranks, algorithm, batch, seed, lr, caps), then the loose rerun. */
void catalogue_run(const verify_config *base, const battery_given *given, const ddpsim_impl_ops *ops,
                   catalogue_outcome *out);

#endif
