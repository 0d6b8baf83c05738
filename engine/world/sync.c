/*
 * sync.c - futex waits with a short spin first.
 *
 * With more ranks than cores (4 ranks on this 2-core machine) long spinning
 * steals the core from the rank being waited for, so a waiter spins only
 * briefly, then yields a few times, then sleeps in the kernel. Sleeps are
 * bounded (20 ms) so the abort word is seen even if a wake-up was lost with a
 * dead process. With a core per rank a waiter spins longer first
 * (sync_set_spin_ns): waking from the kernel takes some 30 us, so a peer a
 * little late put the waiter to sleep, the waiter's late wake-up made the
 * peer wait and sleep in turn, and two ranks settled into sleeping at every
 * collective: a 4 KiB allreduce of 2 ranks took 34 us instead of 4, at
 * random from run to run.
 */
#include "sync.h"

#include "clock.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { SYNC_SPINS = 256, SYNC_YIELDS = 16 };

static uint64_t spin_ns; /* this process's extra spinning before it yields (0: none) */

void sync_set_spin_ns(uint64_t ns)
{
    spin_ns = ns;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}


void sync_wait_for(_Atomic uint32_t *word, uint32_t old, uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
    /* Shared (non-private) futex: the word lives in a segment mapped by several processes. */
    if (atomic_load_explicit(word, memory_order_acquire) == old)
        syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, old, &ts, NULL, 0);
}

ddp_status sync_wait_change(_Atomic uint32_t *word, uint32_t old, _Atomic uint32_t *abort_word)
{
    for (int i = 0; i < SYNC_SPINS; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) != old)
            return DDP_OK;
        cpu_relax();
    }
    if (spin_ns) {
        uint64_t until = clock_now_ns() + spin_ns;
        do {
            for (int i = 0; i < 64; i++) {
                if (atomic_load_explicit(word, memory_order_acquire) != old)
                    return DDP_OK;
                cpu_relax();
            }
        } while (clock_now_ns() < until);
    }
    for (int i = 0; i < SYNC_YIELDS; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) != old)
            return DDP_OK;
        sched_yield();
    }
    for (;;) {
        if (atomic_load_explicit(word, memory_order_acquire) != old)
            return DDP_OK;
        if (abort_word && atomic_load_explicit(abort_word, memory_order_relaxed))
            return ddp_error(DDP_ERR_ABORTED, "world aborted while waiting (a peer rank failed)");
        sync_wait_for(word, old, 20 * 1000 * 1000); /* bounded: see the top */
    }
}


void sync_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

void sync_barrier_init(sync_barrier *b, uint32_t n)
{
    atomic_store(&b->arrived, 0);
    atomic_store(&b->generation, 0);
    b->n = n;
}

ddp_status sync_barrier_wait(sync_barrier *b, _Atomic uint32_t *abort_word)
{
    uint32_t pos;
    return sync_barrier_wait_pos(b, abort_word, &pos);
}

ddp_status sync_barrier_wait_pos(sync_barrier *b, _Atomic uint32_t *abort_word, uint32_t *pos)
{
    /* Read the generation before arriving: the last arrival bumps it. */
    uint32_t gen = atomic_load_explicit(&b->generation, memory_order_acquire);
    *pos = atomic_fetch_add_explicit(&b->arrived, 1, memory_order_acq_rel);
    if (*pos + 1 == b->n) {
        atomic_store_explicit(&b->arrived, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&b->generation, 1, memory_order_release);
        sync_wake_all(&b->generation);
        return DDP_OK;
    }
    return sync_wait_change(&b->generation, gen, abort_word);
}
