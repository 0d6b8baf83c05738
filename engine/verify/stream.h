/*
 * stream.h - the records of a run, from the ranks to the parent as they are
 * written (internal to engine/verify). Each rank writes its record of every
 * check (a grab, a step's parameters, the end) into a ring in the shared
 * segment and says how far it got; the parent's supervisor takes a check
 * once every rank has written it (run.c) and frees its slots. A rank that
 * gets a whole ring ahead of the parent waits for it. So neither the ranks
 * nor the parent hold memory in proportion to the number of checks: a
 * million grabs take the ring's few megabytes.
 *
 * The shared user area: the stream's header, the ring (ring checks x N
 * records), then a verify_rank_area per rank.
 */
#ifndef DDPSIM_STREAM_H
#define DDPSIM_STREAM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "verify.h"
#include "world.h"

/* Records the ring holds at most, over all ranks (about 4.7 MiB of 1,192-byte records); at least 16 checks however
 * many ranks. */
#define STREAM_RING_RECORDS ((size_t)1 << 12)

typedef struct verify_stream {
    _Alignas(64) _Atomic uint64_t consumed; /* checks the parent has taken, in order */
    _Atomic uint32_t consumed_word;         /* changes whenever consumed does: what a waiting rank sleeps on */
    _Atomic uint32_t waiting;               /* ranks waiting for room */
    uint64_t ring;                          /* checks the ring holds */
    _Alignas(64) _Atomic uint64_t produced[WORLD_MAX_RANKS]; /* each rank's checks written, every one done */
} verify_stream;

struct verify_rank_area;

/* How many checks the ring holds for a run of nchecks on nranks. */
size_t stream_ring_checks(size_t nchecks, int nranks);
/* The user area's size, and where its parts are. */
size_t stream_user_bytes(size_t ring, int nranks);
verify_record *stream_ring(void *user);
struct verify_rank_area *stream_rank_areas(void *user, size_t ring, int nranks);
/* The parent, before the ranks start: an empty ring of `ring` checks. */
void stream_init(void *user, size_t ring);

/*
 * A rank: every check before k is written; the record of check k, cleared,
 * once the ring has room for it (waiting for the parent meanwhile). If the
 * world is stopped while it waits, a scratch record nobody reads.
 */
verify_record *stream_next(world_rank *wr, void *user, size_t k);
/* A rank at its end: its first `done` checks are written. */
void stream_finish(world_rank *wr, void *user, size_t done);

/*
 * The parent: hand check k's records (N of them, in rank order) to take(),
 * for every check every rank has written, from `*next` on; with `final`
 * (the ranks have ended) every check left, a rank's missing record being a
 * cleared one (done = 0: never reached). Frees their slots. Returns
 * non-zero when it took something or a rank waits for room.
 */
int stream_take(void *user, int nranks, size_t nchecks, int final, size_t *next,
                void (*take)(void *arg, size_t k, const verify_record *recs), void *arg);

#endif
