/*
 * judge.h - the one place where the records of a verification run become
 * its verdict. The report, repeat mode, the catalogue runner and the tests
 * all ask judge_run(); nothing else decides pass or fail.
 *
 * The verdict, in this order of precedence:
 *  1. the reference failed its own sanity checks (after a syncing backward
 *     every rank holds the same bits, and each equals the exact average of
 *     every rank's local gradients within a proven rounding bound,
 *     checker.h): then nothing else it says can be trusted, and that is said
 *     first, whatever the grabs show;
 *  2. the implementation diverges: a grab fails on a rank when its record
 *     was never written, or an element is outside the tolerance or not
 *     finite;
 *  3. with the NCCL backend, the ranks received different bits from an
 *     allreduce;
 *  4. nothing was verified: no grab, or every grab compared only zeros;
 *  5. pass.
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
    JUDGE_NOTHING,        /* nothing was verified */
} judge_verdict;

typedef struct judgement {
    judge_verdict verdict;
    size_t grabs_failed;            /* grabs on which some rank fails */
    const verify_record *first;     /* the first failing record (grab order, then rank), or NULL */
    size_t first_grab;
    int first_rank;
    size_t synced_grabs, synced_disagree; /* grabs after a syncing backward; of those, ranks not bitwise equal */
    size_t local_grabs, local_identical;  /* grabs under no_sync (2+ ranks); of those, ranks identical */
    size_t global_checked, global_failed; /* grabs whose reference was checked against the exact average; failed */
    double global_worst;            /* the largest error over its bound seen (<= 1 holds) */
    size_t informative_grabs;       /* grabs where some element on some rank was not zero */
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
