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
    uint64_t h = 1469598103934665603ull;
    for (size_t k = 0; k < r->ngrabs; k++)
        for (int q = 0; q < r->nranks; q++)
            h = (h ^ (impl ? verify_at(r, k, q)->impl_hash : verify_at(r, k, q)->ref_hash)) * 1099511628211ull;
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
        int before = test_count_ddpsim_segments();
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
            CU_ASSERT(res.wall_s < 3.0);
        size_t ndiff = 0;
        for (size_t g = 0; st == DDP_OK && g < res.ngrabs; g++)
            for (int r = 0; r < res.nranks; r++)
                ndiff += verify_at(&res, g, r)->ndiff;
        if (fc->f.kind == FAULT_FLIP)
            CU_ASSERT(ndiff > 0); /* the checker catches the flipped bit */
        if (fc->f.kind == FAULT_SLOW)
            CU_ASSERT_EQUAL(ndiff, 0); /* slow changes nothing but time */
        for (int r = 0; r < res.nranks; r++)
            CU_ASSERT(test_pid_gone(world_outcome(res.w, r)->pid));
        verify_result_free(&res);
        CU_ASSERT_EQUAL(test_count_ddpsim_segments(), before);
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

/* Keep only the ready and arrive events (without logical times): the interleaving. */
static void interleaving(const char *text, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (const char *l = text; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        const char *end = strchr(l, '\n');
        size_t n = end ? (size_t)(end - l) : strlen(l);
        if ((strstr(l, "\"ready\"") && strstr(l, "\"ready\"") < l + n) ||
            (strstr(l, "\"arrive\"") && strstr(l, "\"arrive\"") < l + n)) {
            const char *r = strstr(l, "\"rank\"");
            size_t m = n - (size_t)(r - l);
            if (used + m + 2 < len) {
                memcpy(out + used, r, m);
                used += m;
                out[used++] = '\n';
                out[used] = '\0';
            }
        }
    }
}

static void test_trace_and_replay(void)
{
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse(SCHED_DEFAULT, &s), DDP_OK);
    char dir[] = "/tmp/ddpsim-trace-XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    char first[256], second[256];
    snprintf(first, sizeof first, "%s/a.jsonl", dir);
    snprintf(second, sizeof second, "%s/b.jsonl", dir);
    const char *key = "test-run";

    verify_config c = base(&s, &impl_bucketed_ops);
    c.chaos = 1;
    c.chaos_seed = 11;
    c.trace_path = first;
    verify_result res;
    CU_ASSERT_EQUAL(verify_run(&c, &res), DDP_OK);
    verify_result_free(&res);
    CU_ASSERT_EQUAL(trace_merge(first, 3, key, "\"chaos\": 11"), DDP_OK);

    verify_replay rp;
    CU_ASSERT_EQUAL_FATAL(trace_load(first, key, 3, &rp), DDP_OK);
    for (int r = 0; r < 3; r++) {
        CU_ASSERT(rp.nready[r] > 0);
        CU_ASSERT(rp.narrivals[r] > 0);
    }
    /* Replayed under another chaos seed, the interleaving is the recorded one. */
    c.chaos_seed = 12;
    c.trace_path = second;
    c.replay = &rp;
    CU_ASSERT_EQUAL(verify_run(&c, &res), DDP_OK);
    verify_result_free(&res);
    CU_ASSERT_EQUAL(trace_merge(second, 3, key, NULL), DDP_OK);
    static char a[1 << 19], b[1 << 19];
    interleaving(read_all(first), a, sizeof a);
    interleaving(read_all(second), b, sizeof b);
    CU_ASSERT(strlen(a) > 100);
    CU_ASSERT_STRING_EQUAL(a, b);
    trace_free(&rp);

    /* Traces that must be refused. */
    CU_ASSERT_EQUAL(trace_load(first, "another-run", 3, &rp), DDP_ERR_INVALID);
    CU_ASSERT(strstr(ddp_error_last(), "recorded for another run") != NULL);
    CU_ASSERT_EQUAL(trace_load(first, key, 2, &rp), DDP_ERR_INVALID); /* rank 2 is not a rank of 2 */
    static const char *const bad[] = {
        "not a trace\n",
        "{\"ddpsim_trace\": 1, \"run\": \"test-run\"}\n{\"t\": 0, \"rank\": 0}\n",
        "{\"ddpsim_trace\": 1, \"run\": \"test-run\"}\n{\"t\": 0, \"rank\": 0, \"op\": 1, \"ev\": \"ready\"}\n",
        "{\"ddpsim_trace\": 1, \"run\": \"test-run\"}\n{\"t\": 0, \"rank\": 0, \"op\": 1, \"ev\": \"arrive\", \"pos\": 7}\n",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        FILE *f = fopen(second, "w");
        fputs(bad[i], f);
        fclose(f);
        CU_ASSERT_EQUAL(trace_load(second, key, 3, &rp), DDP_ERR_INVALID);
    }
    CU_ASSERT_EQUAL(trace_load("/nonexistent/trace", key, 3, &rp), DDP_ERR_INVALID);
    remove(first);
    remove(second);
    rmdir(dir);
    sched_free(&s);
}

int main(void)
{
    static const test_entry tests[] = {
        {"chaos changes no bit of the reference or of bucketed", test_chaos_changes_no_bits},
        {"crash, abort, hang, slow, flip: status, report, cleanup", test_faults},
        {"a trace replays the same interleaving; bad traces are refused", test_trace_and_replay},
        TEST_END,
    };
    return test_run_suite("chaos and faults", tests);
}
