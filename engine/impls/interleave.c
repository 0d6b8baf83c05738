/*
 * interleave.c - --sched: a rank's plugin threads one at a time (interleave.h).
 *
 * Every piece of state here is touched only by the thread holding the baton
 * (the one whose go word was set last), so none of it needs a lock: a
 * thread hands the baton over by storing 1 in the next thread's go word
 * (release) and waits on its own (acquire), with private futexes, never
 * with the pthread calls the plugin's threads are being scheduled through.
 */
#include "interleave.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hash.h"
#include "rng.h"

#define REALTIME_BASE_S 1800000000ll /* the virtual wall clock starts at 2027-01-15 */
#define MONOTONIC_BASE_S 1000ll      /* ... and the monotonic ones at 1000 s */
#define STEP_MIN_NS 1000u            /* each point advances the virtual clock 1 to 100 us */
#define STEP_SPAN_NS 99001u

typedef enum { T_RUNNABLE, T_BLOCKED, T_DRAINING, T_DONE } thread_state;

typedef struct il_thread {
    int id;
    int in_plugin;       /* its calls are the plugin's: a thread the plugin made, or the rank's own in a callback */
    thread_state state;
    const char *call;    /* the call it is blocked in, for a deadlock's report */
    const void *obj;     /* what it waits for: a mutex, condition variable, semaphore or thread; NULL: time only */
    uint64_t deadline;   /* virtual ns; 0: none */
    int timed_out;
    int64_t prio;        /* pct */
    uint64_t since;      /* when it began waiting or draining: signals and drains go in this order */
    _Atomic uint32_t go; /* 1: it holds the baton */
    void *(*fn)(void *);
    void *arg;
    pthread_t pt;
} il_thread;

static struct {
    interleave_config cfg;
    uint64_t key;
    il_thread *t[INTERLEAVE_MAX_THREADS];
    int n;
    uint64_t points, switches, seq, decisions;
    uint64_t digest; /* of every decision: the point and the thread it gave the baton to */
    uint64_t change[INTERLEAVE_MAX_DEPTH]; /* pct: the points where the running thread's priority drops */
    uint64_t horizon;                      /* ... drawn from (after create) the next this many */
    uint64_t vnow;                         /* virtual ns since the start */
    void (*fail)(void *, const char *);
    void *fail_arg;
} il;
static _Atomic int il_on;
static __thread il_thread *me;
/* Set around ddpsim's own calls of the interposed functions made on a plugin's thread (the scheduler's, a service's):
 * they go to libc. */
static __thread int inside;
/* A libc function the program interposes, as libc's (never in tail position: the call returns here). */
#define LIBC(call) __extension__({ inside++; int libc_rc = (call); inside--; libc_rc; })

enum { STREAM_PICK = 1, STREAM_PRIO, STREAM_CHANGE, STREAM_CLOCK, STREAM_WAKE };

/* ---- configuration ---- */

int interleave_parse(const char *text, interleave_config *out, char *msg, size_t len)
{
    memset(out, 0, sizeof *out);
    if (strcmp(text, "off") == 0)
        return 0;
    if (strcmp(text, "random") == 0) {
        out->mode = INTERLEAVE_RANDOM;
        return 0;
    }
    if (strncmp(text, "pct:", 4) == 0) {
        char *end;
        errno = 0;
        long d = strtol(text + 4, &end, 10);
        unsigned long long k = 0;
        int ok = end != text + 4 && errno == 0 && d >= 1 && d <= INTERLEAVE_MAX_DEPTH;
        if (ok && *end == ':') {
            const char *ks = end + 1;
            k = strtoull(ks, &end, 10);
            ok = end != ks && errno == 0 && k >= 1 && k <= UINT32_MAX && ks[0] != '-';
        }
        if (ok && *end == '\0') {
            out->mode = INTERLEAVE_PCT;
            out->depth = (int)d;
            out->horizon = k;
            return 0;
        }
    }
    snprintf(msg, len, "'%s' is not a scheduler: off, random, pct:D or pct:D:K (depth D 1..%d, K >= 1 points)", text,
             INTERLEAVE_MAX_DEPTH);
    return -1;
}

void interleave_name(const interleave_config *cfg, char *buf, size_t len)
{
    if (cfg->mode == INTERLEAVE_PCT && cfg->horizon)
        snprintf(buf, len, "pct:%d:%llu", cfg->depth, (unsigned long long)cfg->horizon);
    else if (cfg->mode == INTERLEAVE_PCT)
        snprintf(buf, len, "pct:%d", cfg->depth);
    else
        snprintf(buf, len, "%s", cfg->mode == INTERLEAVE_RANDOM ? "random" : "off");
}

double interleave_pct_bound(const interleave_config *cfg, int d, uint32_t n, uint64_t horizon)
{
    if (cfg->mode != INTERLEAVE_PCT || d < 1 || d > cfg->depth || n == 0 || horizon == 0)
        return 0;
    double p = 1.0 / n;
    for (int i = 1; i < d; i++)
        p /= (double)horizon;
    return p;
}

/* ---- the baton ---- */

static void futex(_Atomic uint32_t *word, int op, uint32_t val)
{
    syscall(SYS_futex, (uint32_t *)word, op, val, NULL, NULL, 0);
}

static void baton_wait(il_thread *t)
{
    while (!atomic_load_explicit(&t->go, memory_order_acquire))
        futex(&t->go, FUTEX_WAIT_PRIVATE, 0);
    atomic_store_explicit(&t->go, 0, memory_order_relaxed);
}

static void baton_give(il_thread *to)
{
    atomic_store_explicit(&to->go, 1, memory_order_release);
    futex(&to->go, FUTEX_WAKE_PRIVATE, 1);
}

/* ---- deciding ---- */

static _Noreturn void deadlock(void)
{
    char why[1024];
    size_t at = (size_t)snprintf(why, sizeof why, "deadlock under --sched, every thread of the plugin blocked:");
    for (int i = 0, first = 1; i < il.n && at < sizeof why; i++) {
        const il_thread *t = il.t[i];
        if (t->state == T_DONE)
            continue;
        at += (size_t)snprintf(why + at, sizeof why - at, "%s thread %d%s in %s", first ? "" : ";", t->id,
                               t->id == 0 ? " (the rank's own)" : "", t->call ? t->call : "?");
        first = 0;
    }
    /* From here every call goes to libc: the way out (coverage counters written, the rank's error) may lock */
    atomic_store(&il_on, 0);
    inside++;
    il.fail(il.fail_arg, why);
    abort(); /* fail must not return */
}

/* Every sleeper and timed wait whose end the virtual clock has reached can run again. */
static void time_out(void)
{
    for (int i = 0; i < il.n; i++) {
        il_thread *t = il.t[i];
        if (t->state == T_BLOCKED && t->deadline && t->deadline <= il.vnow) {
            t->state = T_RUNNABLE;
            t->timed_out = 1;
            t->deadline = 0;
        }
    }
}

/* The thread to run next; the virtual clock jumps when only sleepers are left. */
static il_thread *pick(void)
{
    for (;;) {
        time_out();
        il_thread *best = NULL;
        int nrun = 0;
        for (int i = 0; i < il.n; i++) {
            il_thread *t = il.t[i];
            if (t->state != T_RUNNABLE)
                continue;
            nrun++;
            if (!best || t->prio > best->prio)
                best = t;
        }
        if (nrun && il.cfg.mode == INTERLEAVE_RANDOM) {
            uint32_t k = rng_below(rng_key(il.key, STREAM_PICK), il.decisions++, (uint32_t)nrun);
            for (int i = 0; i < il.n; i++)
                if (il.t[i]->state == T_RUNNABLE && k-- == 0)
                    return il.t[i];
        }
        if (best)
            return best;
        for (int i = 0; i < il.n; i++) /* none can run: the first to drain goes on to its wait */
            if (il.t[i]->state == T_DRAINING && (!best || il.t[i]->since < best->since))
                best = il.t[i];
        if (best)
            return best;
        uint64_t next = 0;
        for (int i = 0; i < il.n; i++)
            if (il.t[i]->state == T_BLOCKED && il.t[i]->deadline && (!next || il.t[i]->deadline < next))
                next = il.t[i]->deadline;
        if (!next)
            deadlock();
        if (next > il.vnow)
            il.vnow = next;
    }
}

/* Give the baton to whoever pick() says (maybe the caller) and come back when it is the caller's again. */
static void reschedule(void)
{
    il_thread *self = me, *next = pick();
    il.digest = hash_word(hash_word(il.digest, il.points), (uint64_t)next->id);
    if (next != self) {
        il.switches++;
        baton_give(next);
        baton_wait(self);
    }
    self->state = T_RUNNABLE;
    self->obj = NULL;
    self->call = NULL;
}

/* Time moves, pct's change points fire. */
static void tick(void)
{
    il.points++;
    il.vnow += STEP_MIN_NS + rng_below(rng_key(il.key, STREAM_CLOCK), il.points, STEP_SPAN_NS);
    if (il.cfg.mode == INTERLEAVE_PCT)
        for (int i = 0; i < il.cfg.depth - 1; i++)
            if (il.change[i] == il.points)
                me->prio = il.cfg.depth - 1 - i; /* the (i+1)-th change point: D - (i+1) */
}

/* A point: time moves, and the scheduler may give the baton to another thread. */
static void step(void)
{
    tick();
    reschedule();
}

static void block(const void *obj, const char *call, uint64_t deadline)
{
    me->state = T_BLOCKED;
    me->obj = obj;
    me->call = call;
    me->deadline = deadline;
    me->timed_out = 0;
    me->since = ++il.seq;
    reschedule();
}

/* Every thread blocked on obj can run again. */
static void wake_all(const void *obj)
{
    for (int i = 0; i < il.n; i++)
        if (il.t[i]->state == T_BLOCKED && il.t[i]->obj == obj) {
            il.t[i]->state = T_RUNNABLE;
            il.t[i]->deadline = 0;
        }
}

static int64_t initial_prio(int id)
{
    /* Above every change point's priority (< D); distinct in practice, ties go to the lower id */
    return INTERLEAVE_MAX_DEPTH + 1 + (int64_t)(rng_u64(rng_key(il.key, STREAM_PRIO), (uint64_t)id) >> 2);
}

static il_thread *add_thread(void)
{
    if (il.n == INTERLEAVE_MAX_THREADS)
        return NULL;
    il_thread *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->id = il.n;
    t->prio = initial_prio(t->id);
    il.t[il.n++] = t;
    return t;
}

/* ---- the rank's scheduler ---- */

void interleave_start(const interleave_config *cfg, uint64_t seed, int rank, void (*fail)(void *arg, const char *why),
                      void *arg)
{
    if (cfg->mode == INTERLEAVE_OFF)
        return;
    il.cfg = *cfg;
    il.key = rng_key(rng_key(rng_key(seed, 0x73636864 /* "schd" */), (uint64_t)rank), (uint64_t)cfg->mode);
    il.fail = fail;
    il.fail_arg = arg;
    me = add_thread();
    il.digest = HASH_INIT;
    atomic_store(&il_on, me != NULL);
}

void interleave_horizon(uint64_t callbacks)
{
    if (!interleave_active() || il.cfg.mode != INTERLEAVE_PCT)
        return;
    il.horizon = il.cfg.horizon ? il.cfg.horizon : INTERLEAVE_POINTS_PER_CALLBACK * (callbacks ? callbacks : 1);
    for (int i = 0; i < il.cfg.depth - 1; i++) /* uniform over the next K points */
        il.change[i] = il.points + 1 + rng_u64(rng_key(il.key, STREAM_CHANGE), (uint64_t)i) % il.horizon;
}

void interleave_stop(interleave_figures *out)
{
    memset(out, 0, sizeof *out);
    if (!atomic_load(&il_on))
        return;
    atomic_store(&il_on, 0);
    out->threads = (uint32_t)il.n;
    out->points = il.points;
    out->switches = il.switches;
    out->virtual_ns = il.vnow;
    out->horizon = il.horizon;
    out->digest = il.digest;
    /* Threads the plugin never joined stay parked on their go words; the rank exits under them. */
}

int interleave_active(void)
{
    return me && atomic_load_explicit(&il_on, memory_order_relaxed);
}

int interleave_covers(void)
{
    return interleave_active() && me->in_plugin && !inside;
}

void interleave_callback(int begin)
{
    if (interleave_active() && me->id == 0)
        me->in_plugin += begin ? 1 : -1;
}

void interleave_ddpsim(int begin)
{
    if (interleave_active())
        inside += begin ? 1 : -1;
}

void interleave_point(void)
{
    if (!interleave_active())
        return;
    step();
}

void interleave_before_wait(void)
{
    if (!interleave_active() || me->in_plugin) /* the plugin's own collectives keep the baton: see interleave.h */
        return;
    int others = 0;
    for (int i = 0; i < il.n; i++)
        others |= il.t[i] != me && (il.t[i]->state == T_RUNNABLE || il.t[i]->state == T_DRAINING);
    if (!others)
        return;
    me->state = T_DRAINING;
    me->call = "a wait on another rank";
    me->since = ++il.seq;
    reschedule();
}

/* ---- threads ---- */

static void finish(void)
{
    me->state = T_DONE;
    wake_all(me);
    baton_give(pick()); /* and never wait again */
}

static void *trampoline(void *arg)
{
    il_thread *t = arg;
    me = t;
    baton_wait(t);
    void *result = t->fn(t->arg);
    finish();
    return result;
}

int interleave_thread_create(pthread_t *pt, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    tick();
    il_thread *t = add_thread();
    if (!t)
        return EAGAIN; /* more threads than the scheduler keeps */
    t->fn = fn;
    t->arg = arg;
    t->in_plugin = 1;
    t->state = T_BLOCKED; /* until it exists */
    t->call = "pthread_create";
    int rc = LIBC(pthread_create(&t->pt, attr, trampoline, t));
    if (rc) {
        t->state = T_DONE;
        return rc;
    }
    *pt = t->pt;
    t->state = T_RUNNABLE;
    reschedule();
    return 0;
}

static il_thread *thread_of(pthread_t pt)
{
    for (int i = 1; i < il.n; i++)
        if (il.t[i]->fn && pthread_equal(il.t[i]->pt, pt))
            return il.t[i];
    return NULL;
}

int interleave_thread_join(pthread_t pt, void **result)
{
    step();
    il_thread *t = thread_of(pt);
    while (t && t->state != T_DONE)
        block(t, "pthread_join", 0);
    return LIBC(pthread_join(pt, result)); /* it has handed the baton on: its real end is near */
}

_Noreturn void interleave_thread_exit(void *result)
{
    if (me->id != 0)
        finish();
    else
        atomic_store(&il_on, 0); /* the rank's own thread leaving: nothing is scheduled after it */
    inside++;
    pthread_exit(result);
}

/* ---- mutexes, condition variables, semaphores ---- */

static int lock_loop(pthread_mutex_t *m)
{
    for (;;) {
        int rc = LIBC(pthread_mutex_trylock(m));
        if (rc != EBUSY)
            return rc;
        block(m, "pthread_mutex_lock", 0);
    }
}

int interleave_mutex_lock(pthread_mutex_t *m)
{
    step();
    return lock_loop(m);
}

int interleave_mutex_trylock(pthread_mutex_t *m)
{
    step();
    return LIBC(pthread_mutex_trylock(m));
}

/* obj was released (rc 0: an unlock, a post): whoever waits for it can run again; then a point. */
static int released(const void *obj, int rc)
{
    if (rc == 0)
        wake_all(obj);
    step();
    return rc;
}

int interleave_mutex_unlock(pthread_mutex_t *m)
{
    return released(m, LIBC(pthread_mutex_unlock(m)));
}

/* An absolute time of a virtual clock as a deadline; the base tells the clock (realtime's is far above). */
static uint64_t deadline_of(const struct timespec *abstime)
{
    long long base = abstime->tv_sec >= REALTIME_BASE_S / 2 ? REALTIME_BASE_S : MONOTONIC_BASE_S;
    long long ns = (abstime->tv_sec - base) * 1000000000ll + abstime->tv_nsec;
    return ns <= (long long)il.vnow ? il.vnow + 1 : (uint64_t)ns; /* 0 means none: an end already past is now */
}

int interleave_cond_wait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *abstime)
{
    tick();
    int rc = LIBC(pthread_mutex_unlock(m));
    if (rc)
        return rc;
    wake_all(m);
    block(c, abstime ? "pthread_cond_timedwait" : "pthread_cond_wait", abstime ? deadline_of(abstime) : 0);
    int timed_out = me->timed_out;
    rc = lock_loop(m);
    return rc ? rc : timed_out ? ETIMEDOUT : 0;
}

int interleave_cond_wake(pthread_cond_t *c, int all)
{
    tick();
    if (all) {
        wake_all(c);
    } else { /* which waiter a signal wakes is unspecified: the seed's pick among them */
        int nwait = 0;
        for (int i = 0; i < il.n; i++)
            nwait += il.t[i]->state == T_BLOCKED && il.t[i]->obj == c;
        uint32_t k = nwait ? rng_below(rng_key(il.key, STREAM_WAKE), il.points, (uint32_t)nwait) : 0;
        for (int i = 0; i < il.n && nwait; i++)
            if (il.t[i]->state == T_BLOCKED && il.t[i]->obj == c && k-- == 0) {
                il.t[i]->state = T_RUNNABLE;
                il.t[i]->deadline = 0;
                break;
            }
    }
    reschedule();
    return 0;
}

int interleave_sem_wait(sem_t *s, int try, const struct timespec *abstime)
{
    step();
    uint64_t deadline = abstime ? deadline_of(abstime) : 0;
    for (;;) {
        if (LIBC(sem_trywait(s)) == 0)
            return 0;
        if (errno != EAGAIN || try)
            return -1;
        block(s, abstime ? "sem_timedwait" : "sem_wait", deadline);
        if (me->timed_out) {
            errno = ETIMEDOUT;
            return -1;
        }
    }
}

int interleave_sem_post(sem_t *s)
{
    return released(s, LIBC(sem_post(s)));
}

/* ---- yielding, time ---- */

int interleave_yield(void)
{
    tick();
    if (il.cfg.mode == INTERLEAVE_PCT) { /* below every other thread that can run: a spin loop lets them go */
        for (int i = 0; i < il.n; i++)
            if (il.t[i] != me && il.t[i]->state == T_RUNNABLE && il.t[i]->prio <= me->prio)
                me->prio = il.t[i]->prio - 1;
    }
    reschedule();
    return 0;
}

int interleave_sleep_ns(uint64_t ns)
{
    tick();
    if (ns == 0) {
        reschedule();
        return 0;
    }
    block(NULL, "a sleep", il.vnow + ns);
    return 0;
}

int interleave_clock(clockid_t id, struct timespec *ts)
{
    long long base;
    if (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)
        base = REALTIME_BASE_S;
    else if (id == CLOCK_MONOTONIC || id == CLOCK_MONOTONIC_RAW || id == CLOCK_MONOTONIC_COARSE ||
             id == CLOCK_BOOTTIME)
        base = MONOTONIC_BASE_S;
    else
        return -1; /* CPU-time clocks stay real */
    step();
    ts->tv_sec = (time_t)(base + (long long)(il.vnow / 1000000000u));
    ts->tv_nsec = (long)(il.vnow % 1000000000u);
    return 0;
}
