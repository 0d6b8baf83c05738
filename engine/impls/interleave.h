/*
 * interleave.h - --sched: a rank's plugin threads run one at a time, in an
 * interleaving the seed decides.
 *
 * A plugin's threads race on its own memory; whether a race fires depends on
 * how the threads interleave, which plain runs leave to the kernel. Under
 * --sched every thread of the plugin (the rank's own thread, which calls the
 * callbacks, and each thread the plugin's code creates) holds a baton to run;
 * only one holds it at a time, and at every scheduling point the running
 * thread asks the scheduler which thread runs next. The scheduling points
 * are the synchronization the plugin calls (pthread create, join, exit,
 * mutexes, condition variables, semaphores, sched_yield, sleeps and clock
 * reads: sim/interpose.c catches them) on its threads (those it creates,
 * and the rank's own inside a callback), ddpsim's services (every
 * collective and chaos_point) and each callback ddpsim makes. Between two
 * points a thread runs alone, so the interleaving is a pure function of the
 * seed, the rank and the scheduler's strategy:
 *
 *  - random: each point picks uniformly among the threads that can run;
 *  - pct:D[:K]: probabilistic concurrency testing (Burckhardt, Kothari,
 *    Musuvathi, Nagarakatte, "A Randomized Scheduler with Probabilistic
 *    Guarantees of Finding Bugs", ASPLOS 2010): threads get random distinct
 *    priorities, the highest that can run runs, and at D-1 points drawn
 *    uniformly from K the running thread drops to a priority below every
 *    initial one (the i-th to D-i). A bug of depth d <= D (d ordering
 *    constraints between its threads' steps) in a run of n threads and k <= K
 *    points fires with probability at least 1 / (n K^(d-1)) per seed. PCT
 *    needs K close to k, which a run does not know before it ends: without
 *    :K it is 4 points per callback the schedule makes after the plugin's
 *    create (interleave_horizon), and the report says when a rank went on
 *    for longer.
 *
 * Time is virtual for the plugin's code: its clock reads (clock_gettime,
 * gettimeofday, time) return a clock that starts at a fixed value and
 * advances 1 to 100 us, by the seed, at every point; its sleeps and timed
 * waits block until the virtual clock reaches their end, and when no thread
 * can run the clock jumps to the earliest such end. A bug that depends on
 * wall time fails for a seed and fails again for it.
 *
 * Meeting other ranks is not a point: a collective runs holding the baton,
 * so another rank's progress never decides this rank's interleaving, and a
 * collective the plugin calls reads its buffer where the seed put the call.
 * Only ddpsim's own collectives (the reference's, the checks', made by the
 * rank's thread outside a callback) first let every other thread of the
 * plugin that can run go ahead until each blocks (world_set_meet_hook), at
 * the start of each collective and of each barrier inside one, which does
 * not depend on who arrives last: a thread the plugin left running when its
 * callback returned must not hold up the other ranks. Every thread blocked
 * with nothing to wake it is a deadlock: the rank fails and names each
 * thread's call.
 *
 * A call is the plugin's when the calling thread is one of its own, not
 * where the code lies: a library the plugin calls (libstdc++'s std::thread)
 * is scheduled with it. Not covered, documented in README: atomics and spin
 * loops without a call (mark them with chaos_point or sched_yield),
 * pthread_mutex_timedlock, reader-writer locks and barriers of pthreads, C11
 * threads (glibc calls its own pthreads inside), a library called by the
 * plugin that keeps threads of its own (OpenBLAS: its workers are not the
 * plugin's and would not wake a thread the scheduler holds), and a plugin
 * that blocks in the kernel (a pipe) while holding the baton.
 */
#ifndef DDPSIM_INTERLEAVE_H
#define DDPSIM_INTERLEAVE_H

#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef enum { INTERLEAVE_OFF = 0, INTERLEAVE_RANDOM, INTERLEAVE_PCT } interleave_mode;

#define INTERLEAVE_MAX_DEPTH 8
#define INTERLEAVE_MAX_THREADS 64
#define INTERLEAVE_POINTS_PER_CALLBACK 4 /* PCT's K when not given: this many for each callback (measured: 4.5 for
                                          * the buckets example on its scenario, 270 points for 60 callbacks) */

typedef struct interleave_config {
    interleave_mode mode;
    int depth;        /* pct: D */
    uint64_t horizon; /* pct: K, the points its change points are drawn from (0: from the schedule) */
} interleave_config;

/* "off", "random", "pct:D" or "pct:D:K" (D 1..8, K >= 1; without it 0, from the schedule). 0, or -1 with msg. */
int interleave_parse(const char *text, interleave_config *out, char *msg, size_t len);
/* The configuration as interleave_parse reads it back ("pct:2:2000"). */
void interleave_name(const interleave_config *cfg, char *buf, size_t len);

/* What a rank's scheduler did: for the report's figures and PCT's bound. */
typedef struct interleave_figures {
    uint32_t threads; /* the plugin's threads, the rank's own included */
    uint64_t points;  /* scheduling points */
    uint64_t switches;
    uint64_t virtual_ns; /* the virtual clock at the end */
    uint64_t horizon;    /* pct: the K its change points were drawn from */
    uint64_t digest;     /* of every decision (the point, the thread given the baton): the interleaving's fingerprint */
} interleave_figures;

/*
 * The lower bound PCT gives a bug of depth d <= D in a run of n threads over
 * horizon K (1 / (n K^(d-1))); 0 when d > D or for another mode.
 */
double interleave_pct_bound(const interleave_config *cfg, int d, uint32_t n, uint64_t horizon);

/*
 * In a rank, before its implementation is created: the calling thread
 * becomes thread 0 and holds the baton. fail is called, and must not return,
 * when every thread is blocked (a deadlock), with the reason.
 */
void interleave_start(const interleave_config *cfg, uint64_t seed, int rank, void (*fail)(void *arg, const char *why),
                      void *arg);
/*
 * After the plugin's create, the callbacks the rest of the run makes: pct
 * draws its change points from the next K points (K: the configuration's,
 * or INTERLEAVE_POINTS_PER_CALLBACK per callback).
 */
void interleave_horizon(uint64_t callbacks);
/* After the implementation is destroyed: scheduling ends; its figures. */
void interleave_stop(interleave_figures *out);

/* Whether the calling thread's call of an interposed function is scheduled: the plugin's thread, not in ddpsim's code. */
int interleave_covers(void);
/* The rank's own thread enters (1) or leaves (0) a callback of the plugin: its calls are the plugin's meanwhile. */
void interleave_callback(int begin);
/* A service enters (1) or leaves (0) ddpsim's own code on the calling thread: its calls go to libc meanwhile. */
void interleave_ddpsim(int begin);
/* Whether the calling thread is one of the plugin's threads under a running scheduler. */
int interleave_active(void);

/* A scheduling point of the calling thread (a callback, a service, chaos_point); no-op when not active. */
void interleave_point(void);
/* Before the calling thread begins anything with other ranks (world_set_meet_hook): outside the plugin's code, its
 * other threads that can run go first. */
void interleave_before_wait(void);

/* The synchronization of the plugin's code, under the scheduler (sim/interpose.c calls them when covered). */
int interleave_thread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);
int interleave_thread_join(pthread_t t, void **result);
_Noreturn void interleave_thread_exit(void *result);
int interleave_mutex_lock(pthread_mutex_t *m);
int interleave_mutex_trylock(pthread_mutex_t *m);
int interleave_mutex_unlock(pthread_mutex_t *m);
int interleave_cond_wait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *abstime);
int interleave_cond_wake(pthread_cond_t *c, int all);
int interleave_sem_wait(sem_t *s, int try, const struct timespec *abstime);
int interleave_sem_post(sem_t *s);
int interleave_yield(void);
int interleave_sleep_ns(uint64_t ns);
/* The virtual time of clock id (CLOCK_REALTIME or a monotonic one); a point. 0, or -1 for a clock not virtual. */
int interleave_clock(clockid_t id, struct timespec *ts);

#endif
