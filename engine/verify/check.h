/*
 * check.h - checking a recorded run (`ddpsim check DIR`, record.h): every
 * rank replays the reference DDP on the local gradients the run recorded
 * (a recorded model, model_create_recorded), op by op, and compares:
 *
 *  - at every grab, the recorded .grad of the implementation with the
 *    reference's, under the run's tolerance (the order tolerance's bound
 *    follows the replay as in a live run);
 *  - after every step, the recorded parameters with the reference's SGD
 *    of the parameters recorded after the previous step (the update's own
 *    rounding allowed, budget.h: a framework's SGD may fuse the multiply
 *    and the add), and at the end with the last step's, exactly;
 *  - after a syncing backward followed by a grab, the implementation's
 *    ranks against each other (agreement.h), and the reference against the
 *    exact average of every rank's recorded local gradients (refcheck.h).
 *
 * The records, the judge and the report are a live run's (verify.h,
 * judge.h): one source of truth for the semantics, the C reference.
 */
#ifndef DDPSIM_CHECK_H
#define DDPSIM_CHECK_H

#include "record.h"
#include "tolerance.h"
#include "verify.h"

typedef struct check_config {
    const record_run *rec;
    tolerance tol;
    double timeout_s;
    int allow_unsynced_comm; /* --allow-unsynced-comm */
    verify_sink sink;       /* where the records go besides the tally (verify.h) */
} check_config;

/* Run the check; out is filled as verify_run fills it (free with verify_result_free). */
ddp_status check_run(const check_config *cfg, verify_result *out);

#endif
