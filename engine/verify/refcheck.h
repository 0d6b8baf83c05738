/*
 * refcheck.h - the reference's own check on one rank (checker_global): since
 * zero_grad, this rank's local gradients summed in double and their
 * magnitudes in float, how many micro-steps and how many roundings deep; at
 * a grab after a syncing backward the sums are added up over ranks and this
 * rank's slice of the reference is checked against the exact average.
 */
#ifndef DDPSIM_REFCHECK_H
#define DDPSIM_REFCHECK_H

#include <stdint.h>

#include "checker.h"
#include "comm_hook.h"
#include "model.h"
#include "status.h"
#include "verify.h"
#include "world.h"

typedef struct ref_check {
    double *gsum;
    float *gmag;
    uint64_t nacc, depth;
    hook_error hook;      /* a compressing communication hook's roundings since zero_grad */
    size_t n;
    /* Of each parameter, the elements [kept_lo, kept_hi) whose sums this rank holds; the others hold nothing
     * (since zero_grad, or another rank keeps them since the last check) and the next accumulation writes them
     * instead of adding, so neither zero_grad nor the check clears anything. */
    size_t kept_lo[MODEL_MAX_PARAMS], kept_hi[MODEL_MAX_PARAMS];
} ref_check;

ddp_status refcheck_init(ref_check *rc, size_t n, ddp_comm_hook hook);
void refcheck_free(ref_check *rc);
/* zero_grad: nothing accumulated any more. */
void refcheck_zero(ref_check *rc);
/* A backward of ref's model added its local gradients (the used parameters); synced: it was a syncing one. */
void refcheck_accumulate(ref_check *rc, const model *ref, int synced, int nranks);
/*
 * After a syncing backward (a collective: every rank calls it): the sums over
 * ranks, and this rank's slice of ref's gradients against them, into rec.
 * Afterwards each rank keeps the totals of its own slice, so later sums over ranks stay right.
 */
ddp_status refcheck_run(ref_check *rc, world_rank *wr, const model *ref, const unsigned char *reduced,
                        verify_record *rec);

#endif
