/*
 * sync.h - process-shared waiting on 32-bit words in shared memory.
 *
 * The ranks are separate processes, so waits use Linux futexes on words in
 * the shared segment (not private futexes, which only work within one
 * process). Every wait also watches the world's abort word and gives up with
 * DDP_ERR_ABORTED when it is set, so a rank never blocks forever on a peer
 * that died. Not a general threading library: the comm threads of an
 * implementation use plain pthreads.
 */
#ifndef DDPSIM_SYNC_H
#define DDPSIM_SYNC_H

#include <stdatomic.h>
#include <stdint.h>

#include "status.h"

/*
 * Wait until *word no longer holds `old`. Returns DDP_OK, or DDP_ERR_ABORTED
 * when *abort_word became non-zero first.
 */
ddp_status sync_wait_change(_Atomic uint32_t *word, uint32_t old, _Atomic uint32_t *abort_word);

/* Wait until *word no longer holds old or ns nanoseconds have passed, in the kernel at once (no spinning):
 * for a supervisor that has other things to look at. */
void sync_wait_for(_Atomic uint32_t *word, uint32_t old, uint64_t ns);

/* Wake every process waiting on word. */
void sync_wake_all(_Atomic uint32_t *word);

/* How long this process's waits spin (on top of a few hundred pauses) before they yield and sleep: set per
 * rank by the world, long when every rank has a core of its own, 0 otherwise. */
void sync_set_spin_ns(uint64_t ns);
#define SYNC_SPIN_OWN_CORE_NS 50000u

/* A sense-reversing barrier for n participants living in shared memory. */
typedef struct sync_barrier {
    _Alignas(64) _Atomic uint32_t arrived;
    _Alignas(64) _Atomic uint32_t generation;
    uint32_t n;
} sync_barrier;

void sync_barrier_init(sync_barrier *b, uint32_t n);

/* Returns DDP_OK once all n arrived, or DDP_ERR_ABORTED. */
ddp_status sync_barrier_wait(sync_barrier *b, _Atomic uint32_t *abort_word);
/* The same, telling how many had arrived before the caller (0 = first). */
ddp_status sync_barrier_wait_pos(sync_barrier *b, _Atomic uint32_t *abort_word, uint32_t *pos);

#endif
