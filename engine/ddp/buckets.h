/*
 * buckets.h - how DDP groups parameters into buckets (PyTorch's
 * distributed.py _ddp_init_helper and _DEFAULT_FIRST_BUCKET_BYTES, and
 * reducer.cpp compute_bucket_assignment_by_size and rebuild_buckets).
 *
 * The filling rule: parameters are taken in the order given, a parameter
 * joins the open bucket before its limit is checked, the first bucket closes
 * once it holds at least first_cap bytes and later ones at cap.
 *
 * The constructor's layout: since PyTorch 1.12, without
 * find_unused_parameters (and with static_graph) DDP does not bucket in the
 * first iteration: every parameter goes into one bucket (a limit of
 * sys.maxsize), because the registration order need not be the order of
 * backward. With find_unused_parameters the rule above runs over the
 * registration order and the list is reversed, so bucket 0 holds the
 * last-registered parameters, whose gradients backward produces first.
 *
 * The rebuilt layout (after the first syncing backward, never with
 * find_unused_parameters): the rule over the order gradients became ready,
 * not reversed.
 */
#ifndef DDPSIM_BUCKETS_H
#define DDPSIM_BUCKETS_H

#include <stddef.h>

#include "model.h"

#define DDP_DEFAULT_BUCKET_CAP ((size_t)25 << 20)
#define DDP_DEFAULT_FIRST_BUCKET_CAP ((size_t)1 << 20)

/* The constructor's assignment for m's parameters. Returns the number of buckets. */
int ddp_assign_buckets(const model *m, size_t first_cap, size_t cap, int *bucket_first, int *bucket_count, int max);
/* Fill buckets over parameter sizes in bytes, in the order given, without reversing (positions, not indices). */
int ddp_fill_buckets(const size_t *bytes, int nparams, size_t first_cap, size_t cap, int *first, int *count);
/* The constructor rule over parameter sizes in bytes, in the order they are given. */
int ddp_assign_buckets_bytes(const size_t *bytes, int nparams, size_t first_cap, size_t cap, int *bucket_first,
                             int *bucket_count, int max);

/*
 * PyTorch's layout as lists of parameters. With order == NULL the
 * constructor's (above: one bucket of every parameter in registration
 * order, or with find_unused ddp_assign_buckets' buckets, each one's
 * parameters ascending); otherwise reducer.cpp's rebuild over the n
 * parameters of `order` (the order their gradients became ready). members
 * gets every bucket's parameters in bucket order, one bucket after another
 * (n entries, nparams with order NULL); sizes[k] is bucket k's count.
 * Returns the number of buckets, or -1 when order holds a parameter twice
 * or one m does not have.
 */
int ddp_bucket_layout(const model *m, size_t first_cap, size_t cap, int find_unused, const int *order, int n,
                      int *members, int *sizes);

#endif
