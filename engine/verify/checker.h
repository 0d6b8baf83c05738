/*
 * checker.h - the comparison behind every verdict: one rank's gradients of
 * the implementation under test against the reference's, element by
 * element under the run's tolerance, summarised into that rank's record of
 * the grab; and the reference's own check against a single-process replica
 * of the global batch.
 *
 * The checker fills records; it does not decide. judge.h turns the records
 * of a whole run into its verdict.
 */
#ifndef DDPSIM_CHECKER_H
#define DDPSIM_CHECKER_H

#include <stddef.h>

#include "model.h"
#include "tolerance.h"
#include "verify.h"

/*
 * Compare the gradients of impl with those of ref (the same model layout)
 * under tol and add the counts into rec: largest difference and ulp
 * distance over finite pairs, the ulp histogram, elements outside the
 * tolerance, non-finite elements, and the first element that fails. A NaN
 * or an infinity on either side is counted as non-finite and fails.
 */
void checker_compare(const tolerance *tol, const model *ref, const model *impl, verify_record *rec);

/*
 * The reference against a single-process replica of the global batch:
 * S holds the sum over ranks and micro-steps of the local gradients since
 * zero_grad (the replica's gradient buffer), so every parameter the last
 * sync reduced (reduced[p]) must equal S / nranks up to rounding. Records
 * the largest error and the largest |S / nranks| in rec.
 */
void checker_global(const model *ref, const unsigned char *reduced, const model *global, int nranks,
                    verify_record *rec);

#endif
