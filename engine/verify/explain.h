/*
 * explain.h - what a rank keeps so that a failing check can say what its
 * values are (pattern.h), and the looking (internal to engine/verify; ops.c
 * calls it at its points). Kept, of each tensor's first EXPLAIN_PREFIX
 * elements: the reference's gradients as the last syncing backward began
 * (this rank's local sum, unreduced), the parameters before the last step
 * (then the gradient that step took), and a digest of the reference's and
 * the implementation's gradients at the last few grabs (a stale value is
 * bitwise an earlier one); and the micro-steps since zero_grad. A pattern is
 * looked for on those elements of the diverging tensor (the ones the rank
 * holds of them): at most 2 x 256 x 4096 floats a rank, whatever the model.
 */
#ifndef DDPSIM_EXPLAIN_H
#define DDPSIM_EXPLAIN_H

#include <stdint.h>

#include "checker.h"
#include "model.h"
#include "pattern.h"
#include "status.h"
#include "verify.h"

#define EXPLAIN_HISTORY 4
#define EXPLAIN_PREFIX 4096 /* elements of a tensor a pattern is looked for on: every one of a smaller tensor */

typedef struct explain_grab_digests {
    int valid;
    uint64_t grab;
    uint64_t ref[MODEL_MAX_PARAMS], impl[MODEL_MAX_PARAMS]; /* 0: not kept (the rank held a part of it) */
} explain_grab_digests;

typedef struct explain_state {
    size_t koff[MODEL_MAX_PARAMS], klen[MODEL_MAX_PARAMS]; /* each tensor's kept elements in the arrays below */
    size_t kept;      /* their total */
    float *pre_sync;  /* the reference's gradients as the last syncing backward began */
    int have_pre_sync;
    /* One buffer, two uses in turn: the reference's parameters before a step until that step's check has run
     * (w_before), then the gradient the step took (stepped: a window that forgets zero_grad adds onto it). */
    float *w_before;
    int have_stepped;
    uint64_t window;  /* micro-steps since zero_grad */
    explain_grab_digests hist[EXPLAIN_HISTORY];
    int next;         /* the ring's next slot */
} explain_state;

ddp_status explain_init(explain_state *e, const model *m);
void explain_free(explain_state *e);
/* A backward ran (before_sync: it syncs, m's gradients are still the local sum). */
void explain_backward(explain_state *e, const model *m, int before_sync);
void explain_zero(explain_state *e);
/* Before the reference's step: m's parameters. */
void explain_before_step(explain_state *e, const model *m);

/*
 * At every grab, on every rank (collectives, when all_running: no rank has run out of inputs): when the
 * record failed on some rank, the pattern of its first diverging tensor into rec->pattern (held: what the
 * rank held, NULL: everything). m is the reference's replica (its last local gradient, model_local_grads).
 * Besides this rank's own sums, the candidates include sums over the ranks of the local gradients (the
 * window's, or its last micro-step's), reduced only when some rank's record failed.
 */
ddp_status explain_grab(explain_state *e, world_rank *wr, int all_running, const model *m, const float *expected,
                        const float *actual, const held_mask *held, const pattern_constants *k, verify_record *rec);
/* After a step's check: the gradient it took (grads), for the next window's grabs. */
void explain_after_step(explain_state *e, const model *m, const float *grads);
/* After a grab's checks: its digests, for the next grabs' stale test. */
void explain_remember_grab(explain_state *e, const model *m, uint64_t grab, const float *expected,
                           const float *actual, const held_mask *held);
/*
 * A step's record failed: the pattern of the first diverging tensor's update (after: the reference's).
 * plain_grads: with momentum or AdamW, the gradients the step took, so that an update along them alone (plain SGD
 * with lr) is named, as plain_kind (PATTERN_NO_MOMENTUM, PATTERN_SGD_UPDATE); NULL with plain SGD.
 */
void explain_step(const explain_state *e, const model *m, const float *after, const float *actual,
                  const float *plain_grads, verify_pattern_kind plain_kind, float lr, const held_mask *held,
                  const pattern_constants *k, verify_record *rec);

#endif
