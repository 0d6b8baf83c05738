/*
 * interpose.c - the synchronization a plugin calls, caught for --sched
 * (engine/impls/interleave.h).
 *
 * ddpsim defines these libc symbols itself and exports them (the link's
 * --dynamic-list, sim/interpose.list), so a plugin dlopen()ed later binds to
 * them before libc's: its code needs no change and no LD_PRELOAD. A call on
 * one of the plugin's threads under a running scheduler, outside ddpsim's
 * own code, goes to the scheduler (interleave_covers: by thread, not by
 * return address, which a call in tail position would leave pointing into
 * ddpsim); every other call (ddpsim's own, OpenBLAS's threads, MPI's, any
 * run without --sched) goes straight on to the next definition, libc's (or
 * a sanitizer's).
 */
#include "config.h" /* first: _GNU_SOURCE for RTLD_NEXT, dlvsym */

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "interleave.h"

/*
 * The next definition of name, or abort: ddpsim cannot run without it. Where
 * libc keeps an old version beside the current one (the condition variables:
 * GLIBC_2.2.5 and GLIBC_2.3.2), dlsym(RTLD_NEXT) may find the old one; then
 * take version, the current. Not dlvsym first: a sanitizer's runtime in
 * between (--race preloads ThreadSanitizer's) defines the name without a
 * version, and skipping it would hide every wait's unlock from it.
 */
static void *next_of(const char *name, const char *version)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (version && p && p == dlvsym(RTLD_NEXT, name, "GLIBC_2.2.5")) {
        void *current = dlvsym(RTLD_NEXT, name, version);
        if (current)
            p = current;
    }
    if (!p)
        abort();
    return p;
}

/* The next definition of fn, looked up once (a benign race: every thread finds the same pointer). */
#define NEXT(fn, version)                                                                                              \
    static __typeof__(fn) *next_##fn;                                                                                  \
    __typeof__(fn) *fn##_next = __atomic_load_n(&next_##fn, __ATOMIC_RELAXED);                                         \
    if (!fn##_next) {                                                                                                  \
        *(void **)&fn##_next = next_of(#fn, version);                                                                  \
        __atomic_store_n(&next_##fn, fn##_next, __ATOMIC_RELAXED);                                                     \
    }
#define CAUGHT() interleave_covers()
#define COND_VERSION "GLIBC_2.3.2" /* the condition variables of today's layout (dlsym may find the 2.2.5 ones) */

int pthread_create(pthread_t *restrict t, const pthread_attr_t *restrict attr, void *(*fn)(void *), void *restrict arg)
{
    NEXT(pthread_create, NULL);
    return CAUGHT() ? interleave_thread_create(t, attr, fn, arg) : pthread_create_next(t, attr, fn, arg);
}

int pthread_join(pthread_t t, void **result)
{
    NEXT(pthread_join, NULL);
    return CAUGHT() ? interleave_thread_join(t, result) : pthread_join_next(t, result);
}

void pthread_exit(void *result)
{
    NEXT(pthread_exit, NULL);
    if (CAUGHT())
        interleave_thread_exit(result);
    pthread_exit_next(result);
    __builtin_unreachable();
}

int pthread_mutex_lock(pthread_mutex_t *m)
{
    NEXT(pthread_mutex_lock, NULL);
    return CAUGHT() ? interleave_mutex_lock(m) : pthread_mutex_lock_next(m);
}

int pthread_mutex_trylock(pthread_mutex_t *m)
{
    NEXT(pthread_mutex_trylock, NULL);
    return CAUGHT() ? interleave_mutex_trylock(m) : pthread_mutex_trylock_next(m);
}

int pthread_mutex_unlock(pthread_mutex_t *m)
{
    NEXT(pthread_mutex_unlock, NULL);
    return CAUGHT() ? interleave_mutex_unlock(m) : pthread_mutex_unlock_next(m);
}

int pthread_cond_wait(pthread_cond_t *restrict c, pthread_mutex_t *restrict m)
{
    NEXT(pthread_cond_wait, COND_VERSION);
    return CAUGHT() ? interleave_cond_wait(c, m, NULL) : pthread_cond_wait_next(c, m);
}

int pthread_cond_timedwait(pthread_cond_t *restrict c, pthread_mutex_t *restrict m,
                           const struct timespec *restrict abstime)
{
    NEXT(pthread_cond_timedwait, COND_VERSION);
    return CAUGHT() ? interleave_cond_wait(c, m, abstime) : pthread_cond_timedwait_next(c, m, abstime);
}

int pthread_cond_signal(pthread_cond_t *c)
{
    NEXT(pthread_cond_signal, COND_VERSION);
    return CAUGHT() ? interleave_cond_wake(c, 0) : pthread_cond_signal_next(c);
}

int pthread_cond_broadcast(pthread_cond_t *c)
{
    NEXT(pthread_cond_broadcast, COND_VERSION);
    return CAUGHT() ? interleave_cond_wake(c, 1) : pthread_cond_broadcast_next(c);
}

int sem_wait(sem_t *s)
{
    NEXT(sem_wait, NULL);
    return CAUGHT() ? interleave_sem_wait(s, 0, NULL) : sem_wait_next(s);
}

int sem_trywait(sem_t *s)
{
    NEXT(sem_trywait, NULL);
    return CAUGHT() ? interleave_sem_wait(s, 1, NULL) : sem_trywait_next(s);
}

int sem_timedwait(sem_t *restrict s, const struct timespec *restrict abstime)
{
    NEXT(sem_timedwait, NULL);
    return CAUGHT() ? interleave_sem_wait(s, 0, abstime) : sem_timedwait_next(s, abstime);
}

int sem_post(sem_t *s)
{
    NEXT(sem_post, NULL);
    return CAUGHT() ? interleave_sem_post(s) : sem_post_next(s);
}

int sched_yield(void)
{
    NEXT(sched_yield, NULL);
    return CAUGHT() ? interleave_yield() : sched_yield_next();
}

static uint64_t ns_of(const struct timespec *ts)
{
    return ts->tv_sec < 0 ? 0 : (uint64_t)ts->tv_sec * 1000000000u + (uint64_t)ts->tv_nsec;
}

int nanosleep(const struct timespec *req, struct timespec *rem)
{
    NEXT(nanosleep, NULL);
    if (!CAUGHT())
        return nanosleep_next(req, rem);
    if (rem)
        *rem = (struct timespec){0, 0};
    return interleave_sleep_ns(ns_of(req));
}

int clock_nanosleep(clockid_t id, int flags, const struct timespec *req, struct timespec *rem)
{
    NEXT(clock_nanosleep, NULL);
    struct timespec now;
    if (!CAUGHT() || interleave_clock(id, &now) != 0)
        return clock_nanosleep_next(id, flags, req, rem);
    if (rem)
        *rem = (struct timespec){0, 0};
    uint64_t until = ns_of(req), at = ns_of(&now);
    return interleave_sleep_ns(!(flags & TIMER_ABSTIME) ? until : until > at ? until - at : 0);
}

int usleep(useconds_t us)
{
    NEXT(usleep, NULL);
    return CAUGHT() ? interleave_sleep_ns((uint64_t)us * 1000u) : usleep_next(us);
}

unsigned int sleep(unsigned int s)
{
    NEXT(sleep, NULL);
    if (!CAUGHT())
        return sleep_next(s);
    interleave_sleep_ns((uint64_t)s * 1000000000u);
    return 0;
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    NEXT(clock_gettime, NULL);
    if (CAUGHT() && interleave_clock(id, ts) == 0)
        return 0;
    return clock_gettime_next(id, ts);
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    NEXT(gettimeofday, NULL);
    struct timespec ts;
    if (!CAUGHT() || interleave_clock(CLOCK_REALTIME, &ts) != 0)
        return gettimeofday_next(tv, tz);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *t)
{
    NEXT(time, NULL);
    struct timespec ts;
    if (!CAUGHT() || interleave_clock(CLOCK_REALTIME, &ts) != 0)
        return time_next(t);
    if (t)
        *t = ts.tv_sec;
    return ts.tv_sec;
}
