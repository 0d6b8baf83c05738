/*
 * test_world.c - the world of ranks and its supervisor: spawning, a rank
 * that fails, crashes or dies inside a collective, a stuck rank and the
 * watchdog, SIGTERM to the supervisor, the death of the supervisor itself,
 * and the promise behind all of them: no process and no /dev/shm segment
 * is left behind.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "coll.h"
#include "testutil.h"
#include "world.h"

typedef struct shared_info {
    pid_t pids[WORLD_MAX_RANKS];
    int ranks_seen[WORLD_MAX_RANKS];
    int sizes_seen[WORLD_MAX_RANKS];
    int segments_during_run;
    volatile int started;
} shared_info;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static world *make_world(int n, double timeout)
{
    world_config cfg = {.nranks = n, .timeout_s = timeout, .slot_bytes = 4096, .user_bytes = sizeof(shared_info)};
    world *w = NULL;
    if (world_create(&cfg, &w) != DDP_OK)
        return NULL;
    memset(world_user_area(w), 0, sizeof(shared_info));
    return w;
}

static void assert_all_gone(world *w)
{
    for (int r = 0; r < world_nranks(w); r++)
        CU_ASSERT(test_pid_gone(world_outcome(w, r)->pid));
}

static ddp_status hello_rank(world_rank *wr, void *arg)
{
    (void)arg;
    shared_info *si = world_rank_user_area(wr);
    si->pids[world_rank_id(wr)] = getpid();
    si->ranks_seen[world_rank_id(wr)] = world_rank_id(wr) + 1;
    si->sizes_seen[world_rank_id(wr)] = world_size(wr);
    if (world_rank_id(wr) == 0)
        si->segments_during_run = test_count_ddpsim_segments(getppid()); /* the world's creator */
    return coll_barrier(wr);
}

static void test_spawn(void)
{
    int before = test_count_ddpsim_segments(getpid());
    static const int ranks[] = {1, 2, 7, 64};
    for (int i = 0; i < 4; i++) {
        int n = ranks[i];
        world *w = make_world(n, 30);
        CU_ASSERT_PTR_NOT_NULL_FATAL(w);
        /* The segment's name is gone as soon as it is created. */
        CU_ASSERT_EQUAL(test_count_ddpsim_segments(getpid()), before);
        for (int run = 0; run < 2; run++) { /* a world runs more than once */
            CU_ASSERT_EQUAL(world_run(w, hello_rank, NULL), DDP_OK);
            shared_info *si = world_user_area(w);
            for (int r = 0; r < n; r++) {
                CU_ASSERT_EQUAL(si->ranks_seen[r], r + 1);
                CU_ASSERT_EQUAL(si->sizes_seen[r], n);
                CU_ASSERT_EQUAL(si->pids[r], world_outcome(w, r)->pid);
                CU_ASSERT_EQUAL(world_outcome(w, r)->fate, WORLD_FATE_OK);
            }
            CU_ASSERT_EQUAL(si->segments_during_run, before);
            assert_all_gone(w);
        }
        world_destroy(w);
    }
}

static void test_bad_config(void)
{
    world *w = (world *)1;
    world_config cfg = {.nranks = 0};
    CU_ASSERT_EQUAL(world_create(&cfg, &w), DDP_ERR_INVALID);
    CU_ASSERT_PTR_NULL(w);
    CU_ASSERT(strstr(ddp_error_last(), "out of range 1..256") != NULL);
    cfg.nranks = 257;
    CU_ASSERT_EQUAL(world_create(&cfg, &w), DDP_ERR_INVALID);
    cfg.nranks = 2;
    cfg.slot_bytes = 8;
    CU_ASSERT_EQUAL(world_create(&cfg, &w), DDP_ERR_INVALID);
}

/*
 * Wait until every rank but this one is inside its collective number seq,
 * as the world itself reports it (no sleeping in the hope that they got
 * there). DDP_ERR_ABORTED when the world is stopped meanwhile.
 */
static ddp_status wait_others_in_coll(world_rank *wr, uint64_t seq)
{
    for (;;) {
        int there = 0;
        for (int r = 0; r < world_size(wr); r++) {
            uint64_t s;
            there += r == world_rank_id(wr) || (world_peer_in_coll(wr, r, &s) && s == seq);
        }
        if (there == world_size(wr))
            return DDP_OK;
        if (world_aborted(wr))
            return DDP_ERR_ABORTED;
        sched_yield();
    }
}

static ddp_status failing_rank(world_rank *wr, void *arg)
{
    (void)arg;
    world_set_op(wr, 3, "bwd");
    if (world_rank_id(wr) == 1) {
        DDP_CHECK(wait_others_in_coll(wr, 1)); /* the others are in the barrier, so the report has something to say */
        return ddp_error(DDP_ERR_INVALID, "rank one refuses");
    }
    return coll_barrier(wr); /* the others wait for rank 1 forever: the supervisor must end them */
}

static void test_rank_returns_error(void)
{
    world *w = make_world(4, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    double t0 = now_s();
    CU_ASSERT_EQUAL(world_run(w, failing_rank, NULL), DDP_ERR_RANK_FAILED);
    CU_ASSERT(now_s() - t0 < 10); /* generous: well under the 30 s watchdog it must not wait for */
    const world_rank_outcome *o = world_outcome(w, 1);
    CU_ASSERT_EQUAL(o->fate, WORLD_FATE_FAILED);
    CU_ASSERT(strstr(o->error, "rank one refuses") != NULL);
    CU_ASSERT(strstr(o->error, "test_world.c:") != NULL); /* file:line travels with the message */
    for (int r = 0; r < 4; r++)
        if (r != 1) {
            CU_ASSERT_EQUAL(world_outcome(w, r)->fate, WORLD_FATE_STOPPED);
            CU_ASSERT_STRING_EQUAL(world_outcome(w, r)->coll, "barrier");
        }
    char text[4096];
    world_describe(w, text, sizeof text);
    CU_ASSERT(strstr(text, "rank 1 (pid") != NULL);
    CU_ASSERT(strstr(text, "in op 3 (bwd)") != NULL);
    assert_all_gone(w);
    world_destroy(w);
}

/* Rank 2 is killed inside its 5th allreduce while the others wait in it. */
static ddp_status dies_in_collective(world_rank *wr, void *arg)
{
    (void)arg;
    float buf[1000];
    for (int i = 0; i < 1000; i++)
        buf[i] = 1.0f;
    for (int step = 0; step < 100; step++) {
        world_set_op(wr, step, "step");
        if (step == 4 && world_rank_id(wr) == 2) {
            world_enter_coll(wr, "allreduce");
            DDP_CHECK(wait_others_in_coll(wr, 5)); /* the others are inside allreduce #5 */
            raise(SIGKILL);
        }
        DDP_CHECK(coll_allreduce(wr, buf, 1000, COLL_FLOAT, COLL_AVG, COLL_ORDERED));
    }
    return DDP_OK;
}

static void test_rank_dies_in_collective(void)
{
    int before = test_count_ddpsim_segments(getpid());
    world *w = make_world(4, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    double t0 = now_s();
    CU_ASSERT_EQUAL(world_run(w, dies_in_collective, NULL), DDP_ERR_RANK_FAILED);
    double took = now_s() - t0;
    CU_ASSERT(took < 10); /* generous: the death is noticed at once, not by the 30 s watchdog */
    CU_ASSERT(strstr(ddp_error_last(), "rank 2 was killed by signal 9") != NULL);
    const world_rank_outcome *o = world_outcome(w, 2);
    CU_ASSERT_EQUAL(o->fate, WORLD_FATE_SIGNALED);
    CU_ASSERT_EQUAL(o->signal, SIGKILL);
    CU_ASSERT_EQUAL(o->op_index, 4);
    CU_ASSERT_STRING_EQUAL(o->coll, "allreduce");
    for (int r = 0; r < 4; r++)
        if (r != 2) {
            CU_ASSERT_EQUAL(world_outcome(w, r)->fate, WORLD_FATE_STOPPED);
            CU_ASSERT_STRING_EQUAL(world_outcome(w, r)->coll, "allreduce");
            CU_ASSERT_EQUAL(world_outcome(w, r)->op_index, 4);
        }
    assert_all_gone(w);
    world_destroy(w);
    CU_ASSERT_EQUAL(test_count_ddpsim_segments(getpid()), before);
}

static ddp_status segfaults(world_rank *wr, void *arg)
{
    (void)arg;
    if (world_rank_id(wr) == 0) {
        /* A real invalid write (to a page mapped without access), not undefined behaviour. */
        volatile int *p = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        *p = 1;
    }
    return coll_barrier(wr);
}

static void test_rank_segfaults(void)
{
    world *w = make_world(3, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    CU_ASSERT_EQUAL(world_run(w, segfaults, NULL), DDP_ERR_RANK_FAILED);
    CU_ASSERT_EQUAL(world_outcome(w, 0)->fate, WORLD_FATE_SIGNALED);
    CU_ASSERT_EQUAL(world_outcome(w, 0)->signal, SIGSEGV);
    assert_all_gone(w);
    world_destroy(w);
}

static ddp_status exits_directly(world_rank *wr, void *arg)
{
    (void)arg;
    if (world_rank_id(wr) == 1)
        _exit(7); /* code under test may call exit itself */
    return coll_barrier(wr);
}

static void test_rank_exits_nonzero(void)
{
    world *w = make_world(2, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    CU_ASSERT_EQUAL(world_run(w, exits_directly, NULL), DDP_ERR_RANK_FAILED);
    CU_ASSERT_EQUAL(world_outcome(w, 1)->fate, WORLD_FATE_FAILED);
    CU_ASSERT_EQUAL(world_outcome(w, 1)->exit_code, 7);
    assert_all_gone(w);
    world_destroy(w);
}

/* Rank 3 stops making progress outside any collective; the others wait in a barrier. */
static ddp_status gets_stuck(world_rank *wr, void *arg)
{
    (void)arg;
    world_set_op(wr, 9, "fwd");
    if (world_rank_id(wr) == 3)
        for (;;)
            pause();
    return coll_barrier(wr);
}

static void test_watchdog_names_stuck_rank(void)
{
    world *w = make_world(4, 0.5);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    double t0 = now_s();
    CU_ASSERT_EQUAL(world_run(w, gets_stuck, NULL), DDP_ERR_TIMEOUT);
    double took = now_s() - t0;
    CU_ASSERT(took >= 0.5 && took < 10); /* never before its time; generous after */
    CU_ASSERT(strstr(ddp_error_last(), "no rank made progress") != NULL);
    char text[4096];
    world_describe(w, text, sizeof text);
    CU_ASSERT(strstr(text, "rank 3 (pid") != NULL);
    CU_ASSERT(strstr(text, "in op 9 (fwd), not in a collective [stuck]") != NULL);
    CU_ASSERT(strstr(text, "inside barrier #1 [stuck]") != NULL);
    CU_ASSERT_STRING_EQUAL(world_outcome(w, 3)->coll, "");
    CU_ASSERT_STRING_EQUAL(world_outcome(w, 0)->coll, "barrier");
    assert_all_gone(w);
    world_destroy(w);
}

/*
 * Rank 1 finishes after one barrier; the others go into a second one that
 * needs it. With a watchdog of 60 s, only the deadlock rule can end this
 * run in time: the status says which one did.
 */
static ddp_status one_leaves_early(world_rank *wr, void *arg)
{
    (void)arg;
    world_set_op(wr, 4, "bwd");
    DDP_CHECK(coll_barrier(wr));
    if (world_rank_id(wr) == 1)
        return DDP_OK;
    world_set_op(wr, 5, "grab");
    return coll_barrier(wr);
}

static void test_deadlock_named_at_once(void)
{
    world *w = make_world(3, 60);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    CU_ASSERT_EQUAL(world_run(w, one_leaves_early, NULL), DDP_ERR_DEADLOCK);
    CU_ASSERT(strstr(ddp_error_last(), "deadlock: rank 1 has finished, and every other rank waits in a collective") !=
              NULL);
    char text[4096];
    world_describe(w, text, sizeof text);
    CU_ASSERT(strstr(text, "rank 1 (pid") != NULL && strstr(text, "finished, in op 4 (bwd)") != NULL);
    CU_ASSERT(strstr(text, "in op 5 (grab), inside barrier #2") != NULL);
    CU_ASSERT_EQUAL(world_outcome(w, 0)->fate, WORLD_FATE_STOPPED);
    assert_all_gone(w);
    world_destroy(w);
}

/* Two threads of one rank inside collectives at once: refused by name, not a corrupt barrier. */
static void *second_barrier(void *arg)
{
    return (void *)(intptr_t)coll_barrier(arg);
}

static ddp_status two_threads_collide(world_rank *wr, void *arg)
{
    (void)arg;
    if (world_rank_id(wr) != 0) /* held back until rank 0 is done, so the thread's barrier cannot complete */
        return world_flag_wait(wr, 0, 1);
    pthread_t t;
    if (pthread_create(&t, NULL, second_barrier, wr) != 0)
        return ddp_error(DDP_ERR_SYSTEM, "pthread_create");
    uint64_t seq;
    while (!world_peer_in_coll(wr, 0, &seq))
        usleep(1000);
    ddp_status s = coll_barrier(wr);
    world_flag_set(wr, 1);
    return s;
}

static void test_concurrent_collectives_refused(void)
{
    world *w = make_world(2, 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    CU_ASSERT_EQUAL(world_run(w, two_threads_collide, NULL), DDP_ERR_RANK_FAILED);
    CU_ASSERT(strstr(world_outcome(w, 0)->error, "called barrier while another of its threads was inside collective #1") !=
              NULL);
    assert_all_gone(w);
    world_destroy(w);
}

/* A world whose ranks sleep; used under a supervisor process that the test signals. */
static ddp_status sleeper(world_rank *wr, void *arg)
{
    shared_info *si = arg;
    si->pids[world_rank_id(wr)] = getpid();
    __atomic_fetch_add(&si->started, 1, __ATOMIC_SEQ_CST);
    for (;;) {
        world_set_op(wr, 0, "sleep"); /* keeps the watchdog quiet */
        usleep(10000);
    }
    return DDP_OK;
}

typedef struct supervisor_result {
    int status, signal, fates[8];
} supervisor_result;

/* Fork a process that supervises a 4-rank world of sleepers; returns its pid. */
static pid_t start_supervisor(shared_info *si, supervisor_result *res)
{
    pid_t pid = fork();
    if (pid == 0) {
        world *w = make_world(4, 30);
        if (!w)
            _exit(90);
        ddp_status s = world_run(w, sleeper, si);
        res->status = s;
        res->signal = world_interrupt_signal(w);
        for (int r = 0; r < 4; r++)
            res->fates[r] = world_outcome(w, r)->fate;
        world_destroy(w);
        _exit(s == DDP_ERR_INTERRUPTED ? 128 + res->signal : 91);
    }
    return pid;
}

static int wait_started(shared_info *si, int n)
{
    for (int i = 0; i < 500 && __atomic_load_n(&si->started, __ATOMIC_SEQ_CST) < n; i++)
        usleep(10000);
    return __atomic_load_n(&si->started, __ATOMIC_SEQ_CST) == n;
}

static void test_sigterm_and_sigint_stop_everything(void)
{
    static const int sigs[] = {SIGTERM, SIGINT};
    for (int i = 0; i < 2; i++) {
        shared_info *si = mmap(NULL, sizeof *si, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        supervisor_result *res =
            mmap(NULL, sizeof *res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        CU_ASSERT_FATAL(si != MAP_FAILED && res != MAP_FAILED);
        memset(si, 0, sizeof *si);
        pid_t sup = start_supervisor(si, res);
        CU_ASSERT_FATAL(sup > 0);
        CU_ASSERT(wait_started(si, 4));
        double t0 = now_s();
        kill(sup, sigs[i]);
        int ws = 0;
        waitpid(sup, &ws, 0);
        CU_ASSERT(now_s() - t0 < 10); /* generous: only that it does not hang */
        CU_ASSERT(WIFEXITED(ws) && WEXITSTATUS(ws) == 128 + sigs[i]);
        CU_ASSERT_EQUAL(res->status, DDP_ERR_INTERRUPTED);
        CU_ASSERT_EQUAL(res->signal, sigs[i]);
        for (int r = 0; r < 4; r++) {
            CU_ASSERT_EQUAL(res->fates[r], WORLD_FATE_STOPPED);
            CU_ASSERT(si->pids[r] > 0 && test_pid_gone(si->pids[r]));
        }
        CU_ASSERT_EQUAL(test_count_ddpsim_segments(sup), 0); /* the supervisor's segment never kept a name */
        munmap(si, sizeof *si);
        munmap(res, sizeof *res);
    }
}

/* Even a SIGKILLed supervisor leaves nothing: ranks die with it, the segment had no name. */
static void test_supervisor_killed(void)
{
    shared_info *si = mmap(NULL, sizeof *si, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    supervisor_result *res = mmap(NULL, sizeof *res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CU_ASSERT_FATAL(si != MAP_FAILED && res != MAP_FAILED);
    memset(si, 0, sizeof *si);
    pid_t sup = start_supervisor(si, res);
    CU_ASSERT(wait_started(si, 4));
    kill(sup, SIGKILL);
    waitpid(sup, NULL, 0);
    int gone = 0;
    for (int i = 0; i < 100 && gone < 4; i++) {
        gone = 0;
        for (int r = 0; r < 4; r++)
            gone += test_pid_gone(si->pids[r]);
        if (gone < 4)
            usleep(10000);
    }
    CU_ASSERT_EQUAL(gone, 4);
    CU_ASSERT_EQUAL(test_count_ddpsim_segments(sup), 0);
    munmap(si, sizeof *si);
    munmap(res, sizeof *res);
}

int main(void)
{
    static const test_entry tests[] = {
        {"spawn 1..64 ranks, run twice, no segment name visible", test_spawn},
        {"bad configurations are rejected", test_bad_config},
        {"a rank returning an error stops the others", test_rank_returns_error},
        {"a rank killed inside a collective is reported at once", test_rank_dies_in_collective},
        {"a segfaulting rank is reported with its signal", test_rank_segfaults},
        {"a rank calling _exit(7) is reported with its code", test_rank_exits_nonzero},
        {"a rank that finished while the others wait is a deadlock, named at once", test_deadlock_named_at_once},
        {"two threads of a rank in collectives at once are refused", test_concurrent_collectives_refused},
        {"the watchdog names the stuck rank and where the others wait", test_watchdog_names_stuck_rank},
        {"SIGTERM and SIGINT to the supervisor stop every rank", test_sigterm_and_sigint_stop_everything},
        {"a SIGKILLed supervisor leaves no rank and no segment", test_supervisor_killed},
        TEST_END,
    };
    return test_run_suite("world", tests);
}
