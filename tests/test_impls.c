/*
 * test_impls.c - the implementations under test: the bucketed DDP matches
 * the reference bitwise over seeds, rank counts and bucket caps; every
 * catalogued bug is caught (and the one that is right in real arithmetic
 * only bitwise); plugins load, run, and fail with clear errors when broken.
 */
#include <stdio.h>
#include <string.h>

#include "catalogue.h"
#include "impl.h"
#include "judge.h"
#include "testutil.h"
#include "verify.h"

#ifndef PLUGIN_DIR
#define PLUGIN_DIR "tests/plugin"
#endif
#ifndef TEST_DATA_DIR
#define TEST_DATA_DIR "tests/data"
#endif

static verify_config base(const sched *s, const ddpsim_impl_ops *ops)
{
    verify_config c;
    test_verify_config(&c, s, ops);
    return c;
}

/* 0 when every record of the run matched. */
static int run_matches(const verify_config *c)
{
    verify_result res;
    ddp_status s = verify_run(c, &res);
    int bad = s != DDP_OK;
    if (bad)
        fprintf(stderr, "  %s: %s\n", c->impl, ddp_error_last());
    if (!bad) {
        judgement j;
        judge_run(&res, &j);
        bad = j.verdict != JUDGE_PASS;
    }
    verify_result_free(&res);
    return bad;
}

static void test_bucketed_matches(void)
{
    static const int ranks[] = {2, 3, 4, 7};
    static const size_t caps[] = {1, 100, DDP_DEFAULT_BUCKET_CAP};
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse(SCHED_DEFAULT " enter fwd exit bwd grab fwd enter bwd exit grab", &s), DDP_OK);
    int runs = 0, bad = 0;
    for (uint64_t seed = 1; seed <= 3; seed++)
        for (int ri = 0; ri < 4; ri++)
            for (int ci = 0; ci < 3; ci++) {
                verify_config c = base(&s, &impl_bucketed_ops);
                c.seed = seed;
                c.nranks = ranks[ri];
                c.ddp.bucket_cap = c.ddp.first_bucket_cap = caps[ci];
                c.ddp.bucket_view = (int)(seed == 2);
                c.ddp.algo = seed == 3 ? COLL_EXACT : COLL_ORDERED;
                int b = run_matches(&c);
                if (b)
                    fprintf(stderr, "  bucketed: seed %llu, %d ranks, cap %zu differs\n", (unsigned long long)seed,
                            ranks[ri], caps[ci]);
                bad += b;
                runs++;
            }
    /* The attention model and branchy (find_unused) too. */
    verify_config c = base(&s, &impl_bucketed_ops);
    c.model_spec = "attn:10-4-8";
    c.ddp.bucket_cap = c.ddp.first_bucket_cap = 200;
    bad += run_matches(&c);
    c.model_spec = "branchy";
    c.ddp.find_unused = 1;
    c.nranks = 4;
    bad += run_matches(&c);
    CU_ASSERT_EQUAL(runs, 36);
    CU_ASSERT_EQUAL(bad, 0);
    sched_free(&s);
}

static void test_catalogue(void)
{
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse("fwd bwd grab", &s), DDP_OK);
    verify_config c = base(&s, &impl_reference_ops);
    int mutants = 0, caught = 0, bitwise_labels = 0;
    for (int i = 0; i < impl_builtin_count(); i++) {
        const impl_entry *e = impl_builtin_at(i);
        catalogue_outcome o;
        catalogue_run(&c, e->ops, &o);
        if (!e->is_mutant) {
            if (o.failed)
                fprintf(stderr, "  correct implementation %s failed: %s\n", e->ops->name, o.where);
            CU_ASSERT(!o.failed);
            continue;
        }
        mutants++;
        caught += o.failed;
        if (!o.failed)
            fprintf(stderr, "  mutant %s missed\n", e->ops->name);
        /* Only post-divide is right in real arithmetic: it alone must pass a loose tolerance. */
        if (o.failed && !o.fault) {
            CU_ASSERT_EQUAL(o.bitwise_only, e->bitwise_only);
            bitwise_labels += o.bitwise_only;
        }
    }
    CU_ASSERT(mutants >= 17);
    CU_ASSERT_EQUAL(caught, mutants);
    CU_ASSERT_EQUAL(bitwise_labels, 1);
    sched_free(&s);
}

/* A mutant's run reports its first divergence: sync-on-exit is wrong at the first grab. */
static void test_mutant_divergence_record(void)
{
    impl_handle h;
    CU_ASSERT_EQUAL_FATAL(impl_open("sync-on-exit", &h), DDP_OK);
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse("nosync{fwd bwd} grab fwd bwd grab", &s), DDP_OK);
    verify_config c = base(&s, h.ops);
    verify_result res;
    CU_ASSERT_EQUAL_FATAL(verify_run(&c, &res), DDP_OK);
    const verify_record *r0 = verify_at(&res, 0, 0);
    CU_ASSERT(r0->ndiff > 0 && r0->has_first);
    CU_ASSERT_EQUAL(r0->first_param, 0);
    CU_ASSERT_EQUAL(r0->first_index, 0);
    CU_ASSERT(r0->first_expected != r0->first_actual);
    CU_ASSERT_EQUAL(verify_at(&res, 0, 1)->has_first, 1); /* every rank sees it */
    verify_result_free(&res);
    sched_free(&s);
    impl_close(&h);
}

static void test_plugins(void)
{
    impl_handle h;
    CU_ASSERT_EQUAL_FATAL(impl_open(PLUGIN_DIR "/libexample_impl.so", &h), DDP_OK);
    CU_ASSERT_STRING_EQUAL(h.ops->name, "example");
    CU_ASSERT_PTR_NULL(h.entry);
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse(SCHED_DEFAULT, &s), DDP_OK);
    verify_config c = base(&s, h.ops);
    c.impl = PLUGIN_DIR "/libexample_impl.so";
    c.nranks = 3;
    CU_ASSERT_EQUAL(run_matches(&c), 0);
    /* An implementation that fails a callback fails the run with its own message. */
    c.model_spec = "branchy";
    c.ddp.find_unused = 1;
    verify_result res;
    CU_ASSERT_EQUAL(verify_run(&c, &res), DDP_ERR_RANK_FAILED);
    /* Whichever rank failed first carries the message (the others may be stopped before they write theirs). */
    int explained = 0;
    for (int r = 0; r < c.nranks; r++)
        explained += world_outcome(res.w, r)->fate == WORLD_FATE_FAILED &&
                     strstr(world_outcome(res.w, r)->error, "failed in create: the example plugin does not support");
    CU_ASSERT(explained >= 1);
    verify_result_free(&res);
    impl_close(&h);
    sched_free(&s);

    static const struct {
        const char *path, *msg;
    } bad[] = {
        {PLUGIN_DIR "/libbad_version.so", "was built for interface version 99"},
        {PLUGIN_DIR "/libno_entry.so", "does not export ddpsim_impl_get()"},
        {PLUGIN_DIR "/libnull_ops.so", "returned NULL"},
        {PLUGIN_DIR "/libnull_callback.so", "leaves a callback of ddpsim_impl_ops NULL"},
        {PLUGIN_DIR "/libmissing.so", "cannot load plugin"},
        {TEST_DATA_DIR "/pytorch-ddp-mlp-3ranks/manifest.json", "cannot load plugin"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CU_ASSERT_EQUAL(impl_open(bad[i].path, &h), DDP_ERR_INVALID);
        if (!strstr(ddp_error_last(), bad[i].msg))
            fprintf(stderr, "  %s: '%s'\n", bad[i].path, ddp_error_last());
        CU_ASSERT(strstr(ddp_error_last(), bad[i].msg) != NULL);
        CU_ASSERT_PTR_NULL(h.ops);
    }
    CU_ASSERT_EQUAL(impl_open("no-such-builtin", &h), DDP_ERR_INVALID);
    CU_ASSERT(strstr(ddp_error_last(), "unknown implementation 'no-such-builtin'") != NULL);
}

int main(void)
{
    static const test_entry tests[] = {
        {"bucketed matches the reference bitwise over seeds, ranks, caps", test_bucketed_matches},
        {"every catalogued bug is caught; correct implementations pass", test_catalogue},
        {"a mutant's first divergence is recorded", test_mutant_divergence_record},
        {"plugins: the example runs; broken ones are refused clearly", test_plugins},
        TEST_END,
    };
    return test_run_suite("implementations", tests);
}
