/*
 * test_battery.c - the scenario battery (battery.h) both ways. Each bug of
 * tests/plugin/blind.c passes the former default run (the "classic"
 * scenario alone) and is caught by the scenario of its class; the
 * reference, bucketed and every correct reordering (under order) pass every
 * scenario at several rank counts.
 */
#include <stdio.h>
#include <string.h>

#include "battery.h"
#include "impl.h"
#include "testutil.h"

#ifndef PLUGIN_DIR
#define PLUGIN_DIR "tests/plugin"
#endif

static verify_config base_config(const ddpsim_impl_ops *ops, const char *name, int nranks, const char *tol)
{
    verify_config c;
    test_verify_config(&c, NULL, ops);
    c.model_spec = MODEL_DEFAULT_SPEC; /* the command line's defaults: the former default run is classic on them */
    c.batch = 4;
    c.impl = name;
    c.nranks = nranks;
    tol_parse(tol, &c.tol);
    return c;
}

/* Which scenarios fail (a divergence or a fault), as a bit set by battery index; say which when loud. */
static unsigned failing(const verify_config *c, int loud)
{
    battery_given none = {0};
    unsigned mask = 0;
    for (int i = 0; i < battery_count(); i++) {
        battery_outcome o;
        battery_run_one(c, &none, battery_at(i), &o);
        if (battery_failed(&o)) {
            mask |= 1u << i;
            if (loud)
                fprintf(stderr, "  %s: %s fails: %s\n", c->impl, battery_at(i)->name, o.first);
        }
    }
    return mask;
}

static int index_of(const char *name)
{
    for (int i = 0; i < battery_count(); i++)
        if (strcmp(battery_at(i)->name, name) == 0)
            return i;
    return -1;
}

static void test_blind_spots(void)
{
    static const struct {
        const char *lib, *scenario;
    } bugs[] = {
        {"forced_sync_at_4", "window-5"},   {"exit_arms_pending", "nosync-edges"},
        {"buffer_kept_to_zero", "sync-after-sync"}, {"buffer_kept_to_step", "zero-and-step"},
        {"pool_of_6", "window-1"},          {"last_bucket_skipped", "buckets"},
        {"vector_tail", "odd-sizes"},       {"view_adds", "bucket-view"},
        {"skip_unused", "find-unused"},     {"sync_at_step", "ends-in-window"},
        {"sharded_step", "zero-and-step"},   {"buffers_every_forward", "buffers"},
    };
    int classic = index_of("classic");
    CU_ASSERT_EQUAL_FATAL(classic, 0);
    for (size_t b = 0; b < sizeof bugs / sizeof bugs[0]; b++) {
        char path[256];
        snprintf(path, sizeof path, PLUGIN_DIR "/libblind_%s.so", bugs[b].lib);
        impl_handle h;
        CU_ASSERT_EQUAL_FATAL(impl_open(path, &h), DDP_OK);
        verify_config c = base_config(h.ops, h.ops->name, 4, "bitwise");
        unsigned mask = failing(&c, 0);
        int want = index_of(bugs[b].scenario);
        CU_ASSERT(want >= 0);
        if (!(mask & (1u << want)) || (mask & 1u))
            fprintf(stderr, "  %s: classic %s, %s %s\n", bugs[b].lib, mask & 1u ? "CATCHES" : "passes",
                    bugs[b].scenario, mask & (1u << want) ? "catches" : "MISSES");
        CU_ASSERT_EQUAL(mask & 1u, 0);           /* the former default run misses it */
        CU_ASSERT(mask & (1u << want));          /* the scenario of its class catches it */
        impl_close(&h);
    }
}

static void test_correct_pass(void)
{
    static const int ranks[] = {2, 3, 4, 5};
    for (size_t r = 0; r < sizeof ranks / sizeof ranks[0]; r++) {
        verify_config c = base_config(&impl_reference_ops, "reference", ranks[r], "bitwise");
        CU_ASSERT_EQUAL(failing(&c, 1), 0);
        c = base_config(&impl_bucketed_ops, "bucketed", ranks[r], "bitwise");
        CU_ASSERT_EQUAL(failing(&c, 1), 0);
    }
    /* With the ring order a bucket's layout changes bits: bucketed builds PyTorch's (one bucket, then rebuilt). */
    verify_config ring = base_config(&impl_bucketed_ops, "bucketed", 3, "bitwise");
    ring.ddp.algo = COLL_RING;
    CU_ASSERT_EQUAL(failing(&ring, 1), 0);
    static const char *const orders[] = {"reverse", "pairwise", "double", "ring"};
    for (size_t p = 0; p < sizeof orders / sizeof orders[0]; p++) {
        char path[256];
        snprintf(path, sizeof path, PLUGIN_DIR "/libreorder_%s.so", orders[p]);
        impl_handle h;
        CU_ASSERT_EQUAL_FATAL(impl_open(path, &h), DDP_OK);
        for (int n = 3; n <= 7; n += 4) {
            verify_config c = base_config(h.ops, h.ops->name, n, "order");
            CU_ASSERT_EQUAL(failing(&c, 1), 0);
            c = base_config(h.ops, h.ops->name, n, "bitwise");
            CU_ASSERT(failing(&c, 0) != 0); /* bitwise tells the orders apart: the order run above showed something */
        }
        impl_close(&h);
    }
}

/*
 * The examples of the plugin interface pass every scenario they accept (the
 * ZeRO-1 one shards its update only while the ranks' gradients and
 * parameters agree: its first version did not, and zero-and-step caught it).
 */
static void test_examples_pass(void)
{
    static const char *const libs[] = {"libexample_impl.so", "libexample_zero1.so", "libexample_buckets.so"};
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, PLUGIN_DIR "/%s", libs[i]);
        impl_handle h;
        CU_ASSERT_EQUAL_FATAL(impl_open(path, &h), DDP_OK);
        for (int n = 3; n <= 4; n++) {
            verify_config c = base_config(h.ops, h.ops->name, n, "bitwise");
            c.ddp.bucket_cap = c.ddp.first_bucket_cap = 4096;
            CU_ASSERT_EQUAL(failing(&c, 1), 0);
        }
        impl_close(&h);
    }
}

/* The scenarios' own promises: their schedules parse, each has grabs and syncs, their names are unique. */
static void test_scenarios_well_formed(void)
{
    CU_ASSERT(battery_count() >= 14);
    int syncs8 = 0, ends_in_window = 0;
    for (int i = 0; i < battery_count(); i++) {
        const scenario *sc = battery_at(i);
        sched s;
        CU_ASSERT_EQUAL_FATAL(sched_parse(sc->schedule, &s), DDP_OK);
        CU_ASSERT(s.ngrabs > 0 && s.nsyncs > 0);
        syncs8 |= s.nsyncs >= 8;
        /* a window left open at the end: the last backward did not sync and no zero came after it */
        int open = 0;
        for (size_t k = 0; k < s.nops; k++) {
            if (s.ops[k] == OP_ZERO)
                open = 0;
            if (s.ops[k] == OP_ENTER)
                open = 1;
        }
        ends_in_window |= open || strcmp(sc->name, "ends-in-window") == 0;
        CU_ASSERT_PTR_EQUAL(battery_find(sc->name), sc);
        sched_free(&s);
    }
    CU_ASSERT(syncs8);
    CU_ASSERT(ends_in_window);
    CU_ASSERT_PTR_NULL(battery_find("no-such-scenario"));
}

/*
 * The loss-scale scenarios (DDP's and the sharded one, with and without --clip's inserted ops): their overflow is
 * planted on the last rank in the first backward after the first step (the second window's first micro-step, whose
 * inf must survive the accumulation), and their own GradScaler is dynamic with a growth inside the run.
 */
static void test_loss_scale_scenarios(void)
{
    const scenario *scs[] = {battery_find("loss-scale"), battery_find_for(SHARD_ZERO2, "s-loss-scale")};
    for (int i = 0; i < 2; i++)
        for (int clip = 0; clip < 2; clip++) {
            CU_ASSERT_PTR_NOT_NULL_FATAL(scs[i]);
            verify_config run;
            verify_config_defaults(&run);
            run.nranks = 3;
            run.clip_max = clip ? 0.01 : 0;
            battery_given given = {0};
            sched s;
            CU_ASSERT_EQUAL_FATAL(battery_apply(scs[i], &given, &run, &s), DDP_OK);
            CU_ASSERT(run.ddp.scaler.on && run.ddp.scaler.dynamic && run.ddp.scaler.interval == 2);
            CU_ASSERT_EQUAL_FATAL(run.nfaults, 1);
            CU_ASSERT_EQUAL(run.faults[0].kind, FAULT_INF);
            CU_ASSERT_EQUAL(run.faults[0].rank, 2);
            long first_step = -1, first_bwd_after = -1;
            for (size_t k = 0; k < s.nops; k++) {
                if (s.ops[k] == OP_STEP && first_step < 0)
                    first_step = (long)k;
                if (s.ops[k] == OP_BWD && first_step >= 0 && first_bwd_after < 0)
                    first_bwd_after = (long)k;
            }
            CU_ASSERT_EQUAL(run.faults[0].op, first_bwd_after);
            CU_ASSERT_EQUAL(s.ops[run.faults[0].op - 2], OP_ENTER); /* inside no_sync: accumulated, not yet synced */
            CU_ASSERT_EQUAL(s.nclips > 0, clip);
            sched_free(&s);
        }
}

int main(void)
{
    static const test_entry tests[] = {
        {"the scenarios are well formed", test_scenarios_well_formed},
        {"loss-scale: the overflow on the last rank in the second window's first micro-step, --clip or not",
         test_loss_scale_scenarios},
        {"each blind spot of the former default is caught by its scenario", test_blind_spots},
        {"reference and bucketed pass bitwise at 2-5 ranks (and in ring order), the reorderings under order",
         test_correct_pass},
        {"the interface's examples pass every scenario they accept", test_examples_pass},
        TEST_END,
    };
    return test_run_suite("scenario battery", tests);
}
