/*
 * judge.h - the one place where the records of a verification run become
 * its verdict. The report, repeat mode, the catalogue runner and the tests
 * all ask judge_run(); nothing else decides pass or fail.
 *
 * A grab fails on a rank when its record was never written, or an element
 * is outside the tolerance or not finite. Besides, the reference must pass
 * its own sanity checks (after a syncing backward every rank holds the same
 * bits; where checked, it equals the single-process computation of the
 * global batch within VERIFY_GLOBAL_RTOL), and with the NCCL backend every
 * rank must have received the same bits from every allreduce.
 */
#ifndef DDPSIM_JUDGE_H
#define DDPSIM_JUDGE_H

#include <stddef.h>

#include "verify.h"

typedef enum judge_verdict {
    JUDGE_PASS = 0,
    JUDGE_DIVERGES,       /* the implementation under test differs from the reference */
    JUDGE_REFERENCE_BAD,  /* the reference failed its own sanity checks: a bug in ddpsim */
    JUDGE_NCCL_DISAGREE,  /* NCCL gave the ranks different bits */
} judge_verdict;

typedef struct judgement {
    judge_verdict verdict;
    size_t grabs_failed;            /* grabs on which some rank fails */
    const verify_record *first;     /* the first failing record (grab order, then rank), or NULL */
    size_t first_grab;
    int first_rank;
    size_t synced_grabs, synced_disagree; /* grabs after a syncing backward; of those, ranks not bitwise equal */
    size_t local_grabs, local_identical;  /* grabs under no_sync (2+ ranks); of those, ranks identical */
    size_t global_checked, global_failed; /* rank 0's global-batch checks; of those, outside the bound */
    double global_worst;            /* the largest error over scale seen */
    int nccl_agree;                 /* every rank got the same NCCL bits (1 without NCCL) */
} judgement;

/* 1 when this rank's record of a grab matched. */
int judge_record_ok(const verify_record *r);

/* Judge a completed run. */
void judge_run(const verify_result *res, judgement *out);

/* The NCCL figures of every rank added up (res->nccl must be set). */
typedef struct judge_nccl_total {
    uint64_t calls, elements, ring_same;
    double device_ms, roundtrip_ms, max_ms;
    int digests_agree;
} judge_nccl_total;
judge_nccl_total judge_nccl_sum(const verify_result *res);

#endif
