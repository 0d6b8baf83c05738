/*
 * checker.h - the comparison behind every verdict: one rank's gradients of
 * the implementation under test against the reference's, element by
 * element under the run's tolerance, summarised into that rank's record of
 * the grab; and the reference's own check against the exact average of
 * every rank's local gradients.
 *
 * The checker fills records; it does not decide. judge.h turns the records
 * of a whole run into its verdict.
 */
#ifndef DDPSIM_CHECKER_H
#define DDPSIM_CHECKER_H

#include <stddef.h>

#include "model.h"
#include "status.h"
#include "tolerance.h"
#include "verify.h"

/*
 * Compare the implementation's values `actual` with the reference's
 * `expected` (gradients or parameters, laid out as `layout`'s) under tol and
 * add the counts into rec: largest difference and ulp distance over finite
 * pairs, the ulp histogram, elements outside the tolerance, non-finite
 * elements, and the first element that fails. A NaN or an infinity on
 * either side is counted as non-finite and fails. `allow` is the
 * per-element bound of the order tolerance (NULL for the others).
 * In the same pass, rec's digests (checker_hash): ref_hash of expected,
 * impl_hash of actual, and with `reduced` (a synced grab) ref_sync_hash of
 * the reduced parameters of expected. Returns 1 when every element had the
 * same bits on both sides and was finite.
 */
int checker_compare(const tolerance *tol, const model *layout, const float *expected, const float *actual,
                    const float *allow, const unsigned char *reduced, verify_record *rec);

/*
 * What one rank holds of the gradients under sharded data parallelism
 * (ZeRO, FSDP, fairscale's OSS: record.h "grad_shards"): elem[j] != 0 for
 * each element of the layout's gradient buffer the rank owns, param[p]
 * HELD_NONE, HELD_SOME or HELD_ALL of parameter p's. What a rank does not
 * hold is never read.
 */
enum { HELD_NONE, HELD_SOME, HELD_ALL };
typedef struct held_mask {
    unsigned char *elem;
    unsigned char *param;
} held_mask;

/* Nothing held yet (each param HELD_NONE); held_mask_add then held_mask_finish. */
ddp_status held_mask_init(held_mask *h, const model *layout);
void held_mask_clear(held_mask *h, const model *layout); /* nothing held again */
/* Elements [start, start + count) of parameter p (in range: the caller checked). */
void held_mask_add(held_mask *h, const model *layout, int p, size_t start, size_t count);
void held_mask_finish(held_mask *h, const model *layout);
void held_mask_free(held_mask *h);

/*
 * checker_compare over what `held` holds (NULL: everything): the elements
 * it does not hold are neither compared nor counted, nor in impl_hash (a
 * digest of the held elements alone); ref_hash stays the whole reference's.
 */
int checker_compare_held(const tolerance *tol, const model *layout, const float *expected, const float *actual,
                         const float *allow, const unsigned char *reduced, const held_mask *held, verify_record *rec);

/*
 * Whether each parameter's .grad is None, the implementation's (impl_none[p]
 * = 1: None) against the reference's (ref_defined[p] = 0: None), for the
 * parameters `held` holds any of (NULL: all): each that differs counts as
 * one element outside the tolerance, and the first goes to rec (first_none:
 * VERIFY_NONE_ACTUAL or VERIFY_NONE_EXPECTED, index 0) unless an element
 * already failed there (ops.c calls this before the values: it explains
 * the zeros a None reads as). A None .grad reads as zeros in the values, so a
 * wrapper that writes zeros where DDP leaves None (or the reverse) passes
 * every value and fails here.
 */
void checker_compare_none(const model *layout, const unsigned char *ref_defined, const unsigned char *impl_none,
                          const held_mask *held, verify_record *rec);

/*
 * The implementation's buffers (model_buffers) against the reference's,
 * bitwise whatever the run's tolerance: a buffer is a copy of rank 0's (the
 * broadcast) moved by the same forward on the same bits, since the
 * parameters are the reference's at every forward of a passing run (the
 * tolerances that are not bitwise re-base them after each step). Elements
 * whose bits differ count as outside the tolerance, non-finite ones as
 * non-finite; the first one goes to rec (first_buffer set) unless a
 * gradient or parameter already failed there.
 */
void checker_compare_buffers(const model *layout, const float *expected, const float *actual, verify_record *rec);

/*
 * Whether the parameters a check just passed are put into the implementation's replica before the next op: under
 * a tolerance that is not bitwise the drift it allowed (reported as the check's difference) would otherwise grow
 * step by step and feed every later gradient, which the tolerance does not account for.
 */
int checker_rebases(const tolerance *tol, const verify_record *rec);

/* The name of the tensor of rec's first failing element: a parameter's or, with first_buffer, a buffer's. */
const char *checker_first_name(const model *layout, const verify_record *rec);

/*
 * The digest of v's parameters in which (which[p] != 0; NULL: all), in
 * order, as one hash_stream: the bits the ranks must share after a sync.
 */
uint64_t checker_hash(const model *layout, const float *v, const unsigned char *which);


/*
 * The reference checks itself against arithmetic it cannot share a bug
 * with. S holds, per element, the sum over ranks and micro-steps since
 * zero_grad of the local gradients, accumulated in double, and M the sum of
 * their magnitudes, accumulated in float; every rank's local gradient of a
 * micro-step is what a single process computes for that rank's batch, so
 * S / N is the gradient of the global batch, the value DDP promises. The
 * reference reached its value through float arithmetic in which each local
 * gradient went through at most `depth` rounded operations (one per
 * accumulation, N + 1 per sync: the 1/N factor's own rounding, the product,
 * N - 1 additions). With K = accumulations per rank since zero_grad, every
 * element of a parameter the last sync reduced (reduced[p]) must satisfy
 *
 *   |g - S/N| <= (gamma_f(depth) + gamma_d(K + N)) * M / (1 - gamma_f(K + N)) / N
 *
 * (gamma_d covers S's own double rounding and the division; the last factor
 * turns M's float accumulation into an upper bound of the exact magnitude
 * sum). This is a proven bound, so a correct reference never fails it; a
 * missing rank or micro-step, or a wrong divisor, moves g by O(1/N) of the
 * value. Elements [lo, hi) of the gradient buffer are checked (each rank a
 * slice); rec gets the largest |g - S/N| over the bound (NaN fails).
 */
/*
 * With a compressing communication hook (comm_hook.h) every sync also
 * rounds each term to the hook's format N + 2 times (hook->depth counts
 * them over the window) and each such rounding may be off by hook->eta
 * more (float16 subnormals): allowed grows by gamma(hook->depth) at the
 * format's u and by (N + 1) eta per sync.
 */
typedef struct hook_error {
    double u, eta;         /* comm_hook_unit; 0, 0 without a compressing hook */
    uint64_t depth, syncs; /* format roundings on a term's path, and syncs, since zero_grad */
} hook_error;

void checker_global(const model *ref, const unsigned char *reduced, const double *S, const float *M, uint64_t depth,
                    uint64_t K, const hook_error *hook, int nranks, size_t lo, size_t hi, verify_record *rec);

#endif
