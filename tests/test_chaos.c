/*
 * test_chaos.c - what makes flaky bugs repeatable: chaos changes timing and
 * never the reference's bits; a correct implementation does not depend on
 * it; every fault kind ends as documented and leaves nothing behind; a
 * trace replays the same interleaving; a bad trace is refused.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hash.h"
#include "impl.h"
#include "judge.h"
#include "testutil.h"
#include "trace.h"
#include "verify.h"

static verify_config base(const sched *s, const ddpsim_impl_ops *ops)
{
    verify_config c;
    test_verify_config(&c, s, ops);
    c.nranks = 3;
    c.ddp.bucket_cap = c.ddp.first_bucket_cap = 100; /* several buckets for bucketed to shuffle */
    c.timeout_s = 30;
    return c;
}

/* Hash of every record's reference (or implementation) hash. */
static uint64_t fingerprint(const verify_result *r, int impl)
{
    uint64_t h = HASH_INIT;
    for (size_t k = 0; k < r->ngrabs; k++)
        for (int q = 0; q < r->nranks; q++)
            h = hash_word(h, impl ? verify_at(r, k, q)->impl_hash : verify_at(r, k, q)->ref_hash);
    return h;
}

static void test_chaos_changes_no_bits(void)
{
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse(SCHED_DEFAULT, &s), DDP_OK);
    const ddpsim_impl_ops *impls[2] = {&impl_reference_ops, &impl_bucketed_ops};
    for (int k = 0; k < 2; k++) {
        uint64_t ref0 = 0, impl0 = 0;
        int differ = 0, failed = 0;
        for (uint64_t seed = 0; seed <= 8; seed++) {
            verify_config c = base(&s, impls[k]);
            c.chaos = seed > 0; /* seed 0: no chaos at all, the baseline */
            c.chaos_seed = seed;
            verify_result res;
            if (verify_run(&c, &res) != DDP_OK) {
                failed++;
                verify_result_free(&res);
                continue;
            }
            judgement j;
            judge_run(&res, &j);
            failed += j.verdict != JUDGE_PASS;
            if (seed == 0) {
                ref0 = fingerprint(&res, 0);
                impl0 = fingerprint(&res, 1);
            } else {
                differ += fingerprint(&res, 0) != ref0 || fingerprint(&res, 1) != impl0;
            }
            verify_result_free(&res);
        }
        CU_ASSERT_EQUAL(failed, 0);
        CU_ASSERT_EQUAL(differ, 0);
    }
    sched_free(&s);
}

typedef struct fault_case {
    const char *name;
    verify_fault f;
    ddp_status want;
    world_fate fate; /* of the faulty rank */
    int signal;
} fault_case;

static void test_faults(void)
{
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse(SCHED_DEFAULT, &s), DDP_OK);
    static const fault_case cases[] = {
        {"crash", {FAULT_CRASH, 1, 7, 0}, DDP_ERR_RANK_FAILED, WORLD_FATE_SIGNALED, SIGKILL},
        {"abort", {FAULT_ABORT, 2, 3, 0}, DDP_ERR_RANK_FAILED, WORLD_FATE_SIGNALED, SIGABRT},
        {"hang", {FAULT_HANG, 0, 5, 0}, DDP_ERR_TIMEOUT, WORLD_FATE_STOPPED, SIGKILL},
        {"slow", {FAULT_SLOW, 1, 0, 5}, DDP_OK, WORLD_FATE_OK, 0},
        {"flip", {FAULT_FLIP, 2, 10, 0}, DDP_OK, WORLD_FATE_OK, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const fault_case *fc = &cases[i];
        int before = test_count_ddpsim_segments(getpid());
        verify_config c = base(&s, &impl_reference_ops);
        c.faults[0] = fc->f;
        c.nfaults = 1;
        c.timeout_s = 1;
        verify_result res;
        ddp_status st = verify_run(&c, &res);
        if (st != fc->want)
            fprintf(stderr, "  %s: status %d (%s)\n", fc->name, st, ddp_error_last());
        CU_ASSERT_EQUAL(st, fc->want);
        CU_ASSERT_PTR_NOT_NULL_FATAL(res.w);
        const world_rank_outcome *o = world_outcome(res.w, fc->f.rank);
        CU_ASSERT_EQUAL(o->fate, fc->fate);
        CU_ASSERT_EQUAL(o->signal, fc->signal);
        if (fc->f.kind == FAULT_CRASH || fc->f.kind == FAULT_HANG)
            CU_ASSERT_EQUAL(o->op_index, fc->f.op); /* where it was when it stopped */
        if (fc->f.kind == FAULT_HANG)
            CU_ASSERT(res.wall_s < 20); /* generous: ended by the 1 s watchdog, not left hanging */
        judgement j;
        memset(&j, 0, sizeof j);
        if (st == DDP_OK)
            judge_run(&res, &j);
        if (fc->f.kind == FAULT_FLIP) {
            /* A flip is a fault of the system under test: the implementation diverges, the reference stays sane. */
            CU_ASSERT_EQUAL(j.verdict, JUDGE_DIVERGES);
            CU_ASSERT_EQUAL(j.synced_disagree, 0);
            CU_ASSERT_EQUAL(j.global_failed, 0);
        }
        if (fc->f.kind == FAULT_SLOW)
            CU_ASSERT_EQUAL(j.verdict, JUDGE_PASS); /* slow changes nothing but time */
        for (int r = 0; r < res.nranks; r++)
            CU_ASSERT(test_pid_gone(world_outcome(res.w, r)->pid));
        verify_result_free(&res);
        CU_ASSERT_EQUAL(test_count_ddpsim_segments(getpid()), before);
    }
    sched_free(&s);
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Keep only the ready and arrive events (without logical times, nor the clock's "us"): the interleaving. */
static void interleaving(const char *text, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (const char *l = text; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        const char *end = strchr(l, '\n');
        size_t n = end ? (size_t)(end - l) : strlen(l);
        const char *ready = strstr(l, "\"ev\": \"ready\""), *arrive = strstr(l, "\"ev\": \"arrive\"");
        if ((ready && ready < l + n) || (arrive && arrive < l + n)) {
            const char *r = strstr(l, "\"rank\""), *us = strstr(l, ", \"us\": ");
            const char *stop = l + n, *resume = stop;
            if (us && us < stop) { /* the line without its time: up to ", "us": N", then on from what follows */
                resume = us + strlen(", \"us\": ");
                while (resume < l + n && *resume != ',' && *resume != '}')
                    resume++;
                stop = us;
            }
            size_t m = (size_t)(stop - r), rest = (size_t)(l + n - resume);
            if (used + m + rest + 2 < len) {
                memcpy(out + used, r, m);
                memcpy(out + used + m, resume, rest);
                used += m + rest;
                out[used++] = '\n';
                out[used] = '\0';
            }
        }
    }
}

/* A run of bucketed under chaos seed `seed` (0: no chaos), traced to path, replaying rp if given; 0 on success. */
static int traced_run(const sched *s, uint64_t seed, const char *path, const verify_replay *rp)
{
    verify_config c = base(s, &impl_bucketed_ops);
    c.chaos = seed > 0;
    c.chaos_seed = seed;
    c.trace_path = path;
    c.replay = rp;
    verify_result res;
    ddp_status st = verify_run(&c, &res);
    judgement j;
    if (st == DDP_OK)
        judge_run(&res, &j);
    verify_result_free(&res);
    if (st != DDP_OK || j.verdict != JUDGE_PASS)
        return -1;
    return trace_merge(path, 3, "test-run", NULL, NULL) == DDP_OK ? 0 : -1;
}

/* The ready events alone, in file order: per rank, the order backward events reached the implementation. */
static void ready_order_of(const char *text, char *out, size_t len)
{
    char all[1 << 19];
    interleaving(text, all, sizeof all);
    size_t used = 0;
    out[0] = '\0';
    for (char *l = strtok(all, "\n"); l; l = strtok(NULL, "\n"))
        if (strstr(l, "\"ready\"") && used + strlen(l) + 2 < len)
            used += (size_t)snprintf(out + used, len - used, "%s\n", l);
}

static void test_chaos_changes_interleaving(void)
{
    /* The detector itself: with chaos off these orders would be equal, and every chaos test above would pass
     * for nothing. Two seeds give two ready orders, and two runs without chaos the same one. */
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse(SCHED_DEFAULT, &s), DDP_OK);
    char dir[200];
    CU_ASSERT_PTR_NOT_NULL_FATAL(test_mkdtemp(dir, sizeof dir, "chaos"));
    char path[4][256];
    static char order[4][1 << 17];
    const uint64_t seeds[4] = {1, 2, 0, 0};
    for (int i = 0; i < 4; i++) {
        snprintf(path[i], sizeof path[i], "%s/t%d.jsonl", dir, i);
        CU_ASSERT_EQUAL_FATAL(traced_run(&s, seeds[i], path[i], NULL), 0);
        ready_order_of(read_all(path[i]), order[i], sizeof order[i]);
        CU_ASSERT(strlen(order[i]) > 100);
        remove(path[i]);
    }
    CU_ASSERT(strcmp(order[0], order[1]) != 0); /* chaos seeds 1 and 2 deliver ready events in other orders */
    CU_ASSERT_STRING_EQUAL(order[2], order[3]); /* without chaos the order is backward's own */
    CU_ASSERT(strcmp(order[0], order[2]) != 0);
    rmdir(dir);
    sched_free(&s);
}

static void test_trace_and_replay(void)
{
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse(SCHED_DEFAULT, &s), DDP_OK);
    char dir[200];
    CU_ASSERT_PTR_NOT_NULL_FATAL(test_mkdtemp(dir, sizeof dir, "trace"));
    char recorded[256], control[256], replayed[256];
    snprintf(recorded, sizeof recorded, "%s/a.jsonl", dir);
    snprintf(control, sizeof control, "%s/b.jsonl", dir);
    snprintf(replayed, sizeof replayed, "%s/c.jsonl", dir);
    const char *key = "test-run";

    CU_ASSERT_EQUAL_FATAL(traced_run(&s, 11, recorded, NULL), 0);
    verify_replay rp;
    CU_ASSERT_EQUAL_FATAL(trace_load(recorded, key, 3, &rp), DDP_OK);
    for (int r = 0; r < 3; r++) {
        CU_ASSERT(rp.nready[r] > 0);
        CU_ASSERT(rp.narrivals[r] > 0);
    }
    /* The control: another chaos seed without replay interleaves otherwise ... */
    CU_ASSERT_EQUAL(traced_run(&s, 12, control, NULL), 0);
    /* ... and with the replay, exactly as recorded. */
    CU_ASSERT_EQUAL(traced_run(&s, 12, replayed, &rp), 0);
    static char a[1 << 19], b[1 << 19], c[1 << 19];
    interleaving(read_all(recorded), a, sizeof a);
    interleaving(read_all(control), b, sizeof b);
    interleaving(read_all(replayed), c, sizeof c);
    CU_ASSERT(strlen(a) > 100);
    CU_ASSERT(strcmp(a, b) != 0);
    CU_ASSERT_STRING_EQUAL(a, c);
    trace_free(&rp);

    /* Traces that must be refused before anything runs, each with why. */
    CU_ASSERT_EQUAL(trace_load(recorded, "another-run", 3, &rp), DDP_ERR_INVALID);
    CU_ASSERT(strstr(ddp_error_last(), "recorded for another run") != NULL);
    CU_ASSERT_EQUAL(trace_load(recorded, key, 2, &rp), DDP_ERR_INVALID); /* rank 2 is not a rank of 2 */
    char *whole = strdup(read_all(recorded));
    CU_ASSERT_PTR_NOT_NULL_FATAL(whole);
    typedef struct bad_trace {
        const char *what, *why;
        char text[1 << 17];
    } bad_trace;
    static bad_trace bad[8];
    int nbad = 0;
    /* cut after the header and 4 events */
    {
        const char *p = whole;
        for (int k = 0; k < 5 && p; k++)
            p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL;
        bad[nbad] = (bad_trace){"truncated after 4 events", "cut short", ""};
        snprintf(bad[nbad++].text, sizeof bad[0].text, "%.*s", p ? (int)(p - whole) : 0, whole);
    }
    /* every arrival position 0 */
    {
        bad_trace *bt = &bad[nbad++];
        *bt = (bad_trace){"every arrival at position 0", "two ranks arrived in position", ""};
        size_t o = 0;
        for (const char *p = whole; *p && o + 2 < sizeof bt->text;) {
            if (strncmp(p, "\"pos\": ", 7) == 0) {
                o += (size_t)snprintf(bt->text + o, sizeof bt->text - o, "\"pos\": 0");
                p += 7;
                while (*p >= '0' && *p <= '9')
                    p++;
            } else {
                bt->text[o++] = *p++;
            }
        }
        bt->text[o] = '\0';
    }
    /* one rank's events removed */
    {
        bad_trace *bt = &bad[nbad++];
        *bt = (bad_trace){"rank 1's events removed", "no events of rank 1", ""};
        size_t o = 0;
        for (const char *l = whole; *l;) {
            const char *e = strchr(l, '\n');
            size_t n = e ? (size_t)(e - l) + 1 : strlen(l);
            if (!(strstr(l, "\"rank\": 1,") && strstr(l, "\"rank\": 1,") < l + n) && o + n < sizeof bt->text) {
                memcpy(bt->text + o, l, n);
                o += n;
            }
            l += n;
        }
        bt->text[o] = '\0';
    }
    bad[nbad++] = (bad_trace){"garbage", "not a ddpsim trace", "garbage!\n"};
    bad[nbad++] = (bad_trace){"an older version", "trace version 1", "{\"ddpsim_trace\": 1, \"run\": \"test-run\"}\n"};
    bad[nbad++] = (bad_trace){"empty", "is empty", ""};
    bad[nbad++] = (bad_trace){"an event of rank 7", "not a rank",
                             "{\"ddpsim_trace\": 2, \"run\": \"test-run\"}\n{\"t\": 0, \"rank\": 7, \"op\": 1, "
                             "\"ev\": \"fwd\"}\n"};
    for (int i = 0; i < nbad; i++) {
        FILE *f = fopen(control, "w");
        fputs(bad[i].text, f);
        fclose(f);
        ddp_status st = trace_load(control, key, 3, &rp);
        if (st != DDP_ERR_INVALID || !strstr(ddp_error_last(), bad[i].why))
            fprintf(stderr, "  %s: %s\n", bad[i].what, ddp_error_last());
        CU_ASSERT_EQUAL(st, DDP_ERR_INVALID);
        CU_ASSERT(strstr(ddp_error_last(), bad[i].why) != NULL);
        CU_ASSERT(strstr(ddp_error_last(), control) != NULL); /* the message names the trace */
    }
    CU_ASSERT_EQUAL(trace_load(dir, key, 3, &rp), DDP_ERR_INVALID);
    CU_ASSERT(strstr(ddp_error_last(), "is a directory") != NULL);
    char missing[600];
    snprintf(missing, sizeof missing, "%s/missing/trace", dir);
    CU_ASSERT_EQUAL(trace_load(missing, key, 3, &rp), DDP_ERR_INVALID);
    free(whole);
    remove(recorded);
    remove(control);
    remove(replayed);
    rmdir(dir);
    sched_free(&s);
}

/* text into path, then trace_load's status for 2 ranks */
static ddp_status load_text(const char *path, const char *text, verify_replay *rp)
{
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
    return trace_load(path, "test-run", 2, rp);
}

#define STOPPED_HEADER "{\"ddpsim_trace\": 3, \"run\": \"test-run\", \"failure\": \"rank 0 said \\\"no\\\"\"}\n"
#define EV(t, r, ev, rest) "{\"t\": " #t ", \"rank\": " #r ", \"op\": 0, \"ev\": \"" ev "\", \"us\": 1.0" rest "}\n"

static void test_stopped_traces(void)
{
    /* A run that did not finish: rank 0 passed 3 barriers, rank 1 (stopped by the supervisor) 2. The replay
     * forces the 2 both passed, each rank's ready events, and reads how each ended and the failure's words. */
    static const char stopped[] = STOPPED_HEADER
        EV(0, 0, "arrive", ", \"pos\": 0") EV(1, 0, "arrive", ", \"pos\": 1") EV(2, 0, "ready", ", \"param\": 1")
        EV(3, 0, "arrive", ", \"pos\": 0") EV(4, 0, "end", ", \"ready\": 1, \"arrivals\": 3, \"how\": \"failed\"")
        EV(0, 1, "arrive", ", \"pos\": 1") EV(1, 1, "arrive", ", \"pos\": 0")
        "{\"t\": 2, \"rank\": 1, \"op\": 0, \"ev\": \"end\", \"ready\": 0, \"arrivals\": 2, \"how\": \"stopped\"}\n";
    char dir[200], path[300];
    CU_ASSERT_PTR_NOT_NULL_FATAL(test_mkdtemp(dir, sizeof dir, "stopped"));
    snprintf(path, sizeof path, "%s/t.jsonl", dir);
    verify_replay rp;
    CU_ASSERT_EQUAL_FATAL(load_text(path, stopped, &rp), DDP_OK);
    CU_ASSERT_EQUAL(rp.stopped, 1);
    CU_ASSERT_STRING_EQUAL(rp.how[0], "failed");
    CU_ASSERT_STRING_EQUAL(rp.how[1], "stopped");
    CU_ASSERT_STRING_EQUAL(rp.failure, "rank 0 said \"no\"");
    CU_ASSERT_EQUAL(rp.narrivals[0], 2);
    CU_ASSERT_EQUAL(rp.narrivals[1], 2);
    CU_ASSERT_EQUAL(rp.nready[0], 1);
    trace_free(&rp);
    /* The same counts without "how" is a finished run whose ranks disagree: refused, as before. */
    static const char unequal[] = STOPPED_HEADER
        EV(0, 0, "arrive", ", \"pos\": 0") EV(1, 0, "arrive", ", \"pos\": 1") EV(2, 0, "arrive", ", \"pos\": 0")
        EV(3, 0, "end", ", \"ready\": 0, \"arrivals\": 3")
        EV(0, 1, "arrive", ", \"pos\": 1") EV(1, 1, "arrive", ", \"pos\": 0") EV(2, 1, "end", ", \"ready\": 0, \"arrivals\": 2");
    CU_ASSERT_EQUAL(load_text(path, unequal, &rp), DDP_ERR_INVALID);
    CU_ASSERT(strstr(ddp_error_last(), "every barrier is every rank's") != NULL);
    /* A stopped run's shared barriers must still be a permutation: both at position 0 cannot be forced. */
    static const char clash[] = STOPPED_HEADER
        EV(0, 0, "arrive", ", \"pos\": 0") EV(1, 0, "end", ", \"ready\": 0, \"arrivals\": 1, \"how\": \"failed\"")
        EV(0, 1, "arrive", ", \"pos\": 0") EV(1, 1, "end", ", \"ready\": 0, \"arrivals\": 1, \"how\": \"stopped\"");
    CU_ASSERT_EQUAL(load_text(path, clash, &rp), DDP_ERR_INVALID);
    CU_ASSERT(strstr(ddp_error_last(), "two ranks arrived in position 0") != NULL);
    /* Cut mid-line: said as cut short at that line, never as a format error. */
    char cut[sizeof stopped];
    snprintf(cut, sizeof cut, "%.*s", (int)(strstr(stopped, "\"ev\": \"ready\"") - stopped), stopped);
    CU_ASSERT_EQUAL(load_text(path, cut, &rp), DDP_ERR_INVALID);
    CU_ASSERT(strstr(ddp_error_last(), "is cut short at line 4: its last line is incomplete") != NULL);
    remove(path);
    rmdir(dir);
}

int main(void)
{
    static const test_entry tests[] = {
        {"chaos changes no bit of the reference or of bucketed", test_chaos_changes_no_bits},
        {"crash, abort, hang, slow, flip: status, report, cleanup", test_faults},
        {"chaos seeds change the interleaving (the detector fires)", test_chaos_changes_interleaving},
        {"a trace replays its interleaving, which another seed does not give; bad traces are refused",
         test_trace_and_replay},
        {"a run that did not finish replays up to where it stopped; a cut line is said cut short",
         test_stopped_traces},
        TEST_END,
    };
    return test_run_suite("chaos and faults", tests);
}
