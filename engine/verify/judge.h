/*
 * judge.h - the one place where the records of a verification run become
 * its verdict. The report, repeat mode, the catalogue runner and the tests
 * all ask judge_run(); nothing else decides pass or fail.
 *
 * The records arrive check by check while the ranks run (stream.h) and are
 * folded into the run's tally (judge_take_check), so a run of any length
 * is judged in constant memory.
 *
 * The verdict, in this order of precedence:
 *  1. the reference failed its own sanity checks (after a syncing backward
 *     every rank holds the same bits, and each equals the exact average of
 *     every rank's local gradients within a proven rounding bound,
 *     checker.h): then nothing else it says can be trusted, and that is said
 *     first, whatever the grabs show;
 *  2. the implementation diverges: a check (the gradients at a grab, the
 *     parameters after a step or at the end) fails on a rank when its record
 *     was never written, or an element is outside the tolerance or not
 *     finite;
 *  3. with the NCCL backend, the ranks received different bits from an
 *     allreduce;
 *  4. the implementation's ranks disagree: after a syncing backward some
 *     rank holds other bits than rank 0 for a parameter the sync reduced
 *     (verify_agreement), which no tolerance excuses;
 *  5. nothing was verified: no grab, or every grab compared only zeros
 *     (parameters alone do not count: a step scales a gradient's error by
 *     the learning rate, below the parameters' own rounding);
 *  6. pass.
 */
#ifndef DDPSIM_JUDGE_H
#define DDPSIM_JUDGE_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "verify.h"

typedef enum judge_verdict {
    JUDGE_PASS = 0,
    JUDGE_DIVERGES,       /* the implementation under test differs from the reference */
    JUDGE_REFERENCE_BAD,  /* the reference failed its own sanity checks: a bug in ddpsim */
    JUDGE_NCCL_DISAGREE,  /* NCCL gave the ranks different bits */
    JUDGE_NOTHING,        /* nothing was verified */
    JUDGE_RANKS_DISAGREE, /* the implementation's ranks hold different bits after a sync */
} judge_verdict;

typedef struct judgement {
    judge_verdict verdict;
    size_t checks_failed;           /* checks on which some rank fails */
    size_t joined_records;          /* (check, rank) pairs a rank did not reach: it had run out of inputs */
    size_t grabs_failed, params_failed; /* ... of them gradients, parameters */
    size_t params_checked;          /* parameter checks (steps and the end) */
    const verify_record *first;     /* the first failing record (schedule order, then rank), or NULL */
    const sched_check *first_where; /* its check, or NULL (both point into the result judged) */
    size_t first_check;             /* its number (res->checks[first_check] with keep_records) */
    int first_rank;
    const verify_agreement *disagree; /* the implementation's first disagreeing rank's view, or NULL */
    int disagree_rank;
    uint64_t agreement_syncs;       /* syncing backwards at which the implementation's ranks were compared */
    size_t synced_grabs, synced_disagree; /* grabs after a syncing backward; of those, ranks not bitwise equal */
    size_t local_grabs, local_identical;  /* grabs under no_sync (2+ ranks); of those, ranks identical */
    size_t global_checked, global_failed; /* grabs whose reference was checked against the exact average; failed */
    double global_worst;            /* the largest error over its bound seen (<= 1 holds) */
    size_t informative_grabs;       /* grabs where some element on some rank was not zero */
    double bound_worst;             /* order tolerance: the largest |impl - ref| over its bound at any check */
    int nccl_agree;                 /* every rank got the same NCCL bits (1 without NCCL) */
} judgement;

/* 1 when this rank's record of a grab matched. */
int judge_record_ok(const verify_record *r);

/* A run's tally before its first check. */
void judge_tally_init(verify_tally *t);
/* Fold check ck's records (nranks of them, in rank order) into t: checks arrive in schedule order. */
void judge_take_check(verify_tally *t, const sched_check *ck, const verify_record *recs, int nranks);

/* Judge a completed run: its tally, and what the ranks reported of their agreement and of NCCL. */
void judge_run(const verify_result *res, judgement *out);

/*
 * What a run that did not pass found first, in a line for tables: "grab 2,
 * rank 1, 0.weight[3]", "step 0, rank 1, 0.weight[3]", "grab 2, rank 1:
 * never reached", "ranks 0 and 2 differ after op 7, 0.weight[3]", "the
 * reference failed its own sanity checks", ... Parameters are named from
 * layout (NULL: by index). Returns buf.
 */
const char *judge_summary(const judgement *j, const model *layout, char *buf, size_t len);

/*
 * The first divergence of a run that did not pass, as fields rather than a
 * line (JUnit's properties, CI annotations): which check, rank, tensor and
 * element, the two values, their ulps and the pattern. has_element is 0
 * when the failure has no element (never reached, a scale, a clip, padding
 * or a None .grad: the summary says which).
 */
typedef struct judge_facts {
    int known;             /* a diverging record: check and rank are set */
    char check[32];        /* "grab 2", "step 0" */
    char label[64];        /* the check's label in the schedule */
    int rank;
    int has_element;
    char tensor[96];       /* the parameter's (or buffer's) name */
    uint64_t element;
    float expected, actual;
    uint32_t ulps;
    char pattern[256];     /* pattern_text, or "" */
} judge_facts;

/* j's first divergence as fields (layout names the parameters; NULL: by index); known 0 without one. */
void judge_facts_of(const judgement *j, const model *layout, judge_facts *out);

/* The NCCL figures of every rank added up (res->nccl must be set). */
typedef struct judge_nccl_total {
    uint64_t calls, elements, ring_same;
    double device_ms, roundtrip_ms, max_ms;
    int digests_agree;
} judge_nccl_total;
judge_nccl_total judge_nccl_sum(const verify_result *res);

#endif
