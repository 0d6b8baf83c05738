/*
 * pattern.h - what a diverging tensor's values are, in the reference's own
 * terms (internal to engine/verify). A FAIL names the check, rank,
 * parameter and element; the pattern says what kind of bug that is: the
 * implementation's values are a constant times the reference's (N: summed,
 * not averaged; 1/N: averaged twice; k: the window's micro-steps; ...), or
 * its own local gradient never reduced, or the last micro-step's alone, or
 * an earlier check's values (stale), or zero (dropped), or the reference's
 * values rounded otherwise (another summation order); else none is found.
 *
 * An explanation, never a verdict: it is looked for only where the tolerance
 * already failed, on the first diverging tensor of the record, and a
 * candidate explains it when every element of the tensor is within
 * PATTERN_REL of it (relative to the tensor's largest magnitude: the
 * candidates are other sums of the same gradients, so a real match is
 * within rounding, a wrong one off by a whole term).
 */
#ifndef DDPSIM_PATTERN_H
#define DDPSIM_PATTERN_H

#include <stddef.h>
#include <stdint.h>

#include "verify.h"

#define PATTERN_REL 0x1p-14 /* about 6e-5: far above rounding, far below a micro-step's share */

/* What else the values might be, besides a factor of the reference's (pattern_explain tries them in order). */
typedef struct pattern_candidate {
    verify_pattern_kind kind; /* PATTERN_LOCAL, PATTERN_LAST_MICRO, PATTERN_STALE, PATTERN_UNCHANGED, ... */
    const float *values;      /* the tensor's elements, as the diverging one's */
    uint64_t check;           /* for PATTERN_STALE and PATTERN_UNCHANGED: the check the values are from */
} pattern_candidate;

/* The constants a factor is named by (pattern_factor_name); 0 where the run has none. */
typedef struct pattern_constants {
    int nranks;        /* N, the ranks that reduce */
    int running;       /* under join: the ranks still running (N when all are) */
    uint64_t window;   /* k: the micro-steps accumulated since zero_grad */
    int replicas, shards; /* a sharded run's mesh (R x S) */
    double growth;     /* --loss-scale: GradScaler's growth factor (0: none) and the reference's scale at hand */
    double loss_scale;
} pattern_constants;

/*
 * The pattern of actual against expected (count elements of one tensor):
 * zero first, then each candidate, then a constant factor of expected (the
 * least-squares one, named when it is one of the constants; one within
 * rounding of 1 is PATTERN_ROUNDING), then values below PATTERN_REL of
 * expected's as zero (an update lost in the parameters' last bits);
 * PATTERN_NOT_FOUND else. expected all zero: only the candidates can
 * explain it.
 */
void pattern_explain(const float *expected, const float *actual, size_t count, const pattern_candidate *cands,
                     int ncands, const pattern_constants *k, verify_pattern *out);

/*
 * The name of a constant c among the run's (N, 1/N, k, R, S and their square roots, N over the ranks running,
 * 2^j; by priority where they coincide) into p->name (PNAME_NONE: none), p->exponent and p->window.
 */
void pattern_name_factor(double c, const pattern_constants *k, verify_pattern *p);

/* The pattern in words, as the report prints it ("4 x the reference (N: summed, not averaged)"); buf. */
const char *pattern_text(const verify_pattern *p, char *buf, size_t len);
/* ... in a few words, for the battery's first-divergence column ("" for none found). */
const char *pattern_short(const verify_pattern *p, char *buf, size_t len);
/* Its kind as --json names it: "factor", "local", ... ("" for PATTERN_NONE). */
const char *pattern_kind_name(verify_pattern_kind k);
/* A factor's name as --json gives it ("N", "1/N", "k", "2^3", ...), "" when it has none. */
const char *pattern_factor_name(const verify_pattern *p, char *buf, size_t len);

#endif
