/*
 * agreement.h - the implementation's ranks against each other: after a
 * syncing backward every rank must hold the same bits for every parameter
 * the sync reduced. Each rank hashes its gradient per parameter and the
 * hashes are allgathered; only when some differ is the first such
 * parameter's gradient broadcast from rank 0, for each rank that differs to
 * find its first differing element. Every rank takes the same path (the
 * hashes are the same everywhere), so the collectives stay matched; after
 * the first disagreement only the hashes go on.
 */
#ifndef DDPSIM_AGREEMENT_H
#define DDPSIM_AGREEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "status.h"
#include "verify.h"
#include "world.h"

typedef struct agreement_state {
    verify_agreement *out;  /* this rank's (in the shared segment) */
    int seen;               /* some rank differed already (every rank knows) */
    uint64_t *peer_hashes;  /* [nranks][nparams] */
} agreement_state;

ddp_status agreement_init(agreement_state *a, verify_agreement *out, int nranks);
void agreement_free(agreement_state *a);

/*
 * Compare grads (laid out as layout's) across ranks for the parameters in reduced; op: where, for the report.
 * active[r] (NULL: every rank) says which ranks took part in the sync: under join a rank that has run out
 * keeps its own gradients and takes part here with grads NULL; the others are compared with the first
 * active rank.
 */
ddp_status agreement_check(agreement_state *a, world_rank *wr, const model *layout, const float *grads,
                           const unsigned char *reduced, size_t op, const unsigned char *active);

#endif
