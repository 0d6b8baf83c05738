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

/*
 * The whole battery at 3 ranks: every catalogued bug is caught by some
 * scenario, every correct implementation by none, and only post-divide is
 * right in real arithmetic (it alone passes the order tolerance).
 */
static void test_catalogue(void)
{
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse("fwd bwd grab", &s), DDP_OK);
    verify_config c = base(&s, &impl_reference_ops);
    c.nranks = 3;
    battery_given none = {0};
    int mutants = 0, caught = 0, bitwise_labels = 0;
    for (int i = 0; i < impl_builtin_count(); i++) {
        const impl_entry *e = impl_builtin_at(i);
        if (e->shard_mode != SHARD_NONE)
            continue; /* test_sharded_catalogue */
        catalogue_outcome o;
        catalogue_run(&c, &none, e->ops, &o);
        if (!e->is_mutant) {
            if (o.first >= 0)
                fprintf(stderr, "  correct implementation %s failed in %s: %s\n", e->ops->name,
                        battery_at(o.first)->name, o.where);
            CU_ASSERT_EQUAL(o.ncaught, 0);
            continue;
        }
        mutants++;
        caught += o.first >= 0;
        if (o.first < 0)
            fprintf(stderr, "  mutant %s missed\n", e->ops->name);
        if (o.first >= 0 && !o.fault) {
            CU_ASSERT_EQUAL(o.bitwise_only, e->bitwise_only);
            bitwise_labels += o.bitwise_only;
        }
        /* The scenario built for a bug's class catches it (not only some other scenario by luck). */
        static const struct {
            const char *bug, *scenario;
        } by_class[] = {
            {"disarm-in-no-sync", "arming"},          {"tail-window-dropped", "tail-window"},
            {"reduced-again", "sync-after-sync"},     {"rebuild-drops-accumulation", "sync-after-sync"},
            {"skip-none-grads", "find-unused"},       {"decide-at-backward", "nosync-edges"},
            {"unused-last-step-only", "find-unused"}, {"skip-average-tiny-tensor", "tiny-tensor"},
        };
        for (size_t k = 0; k < sizeof by_class / sizeof by_class[0]; k++) {
            if (strcmp(by_class[k].bug, e->ops->name) != 0)
                continue;
            int sc = -1;
            for (int j = 0; j < battery_count(); j++)
                if (strcmp(battery_at(j)->name, by_class[k].scenario) == 0)
                    sc = j;
            CU_ASSERT_FATAL(sc >= 0);
            if (!o.caught[sc])
                fprintf(stderr, "  %s: not caught by %s\n", by_class[k].bug, by_class[k].scenario);
            CU_ASSERT(o.caught[sc]);
        }
    }
    CU_ASSERT(mutants >= 29);
    CU_ASSERT_EQUAL(caught, mutants);
    CU_ASSERT_EQUAL(bitwise_labels, 1);
    sched_free(&s);
}

/*
 * The sharded catalogue at 3 ranks, each entry over its mode's battery (HSDP
 * on 3 x 1, the default for an odd world): every sharded bug caught, by the
 * scenario of its class where it has one, every correct sharded
 * implementation passing every scenario.
 */
static void test_sharded_catalogue(void)
{
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse("fwd bwd grab", &s), DDP_OK);
    verify_config c = base(&s, &impl_reference_ops);
    c.nranks = 3;
    battery_given none = {0};
    int mutants = 0, caught = 0, correct = 0;
    static const struct {
        const char *bug, *scenario;
    } by_class[] = {
        {"remainder-unit-unreduced", "s-units"}, {"exact-bucket-unreduced", "s-exact-unit"},
        {"unused-param-unit-skipped", "s-unused"}, {"padding-not-zero", "s-padding"},
        {"unpadded-shard-offsets", "s-padding"}, {"one-rank-group-rescales", "s-one-rank-groups"},
        {"zero2-copies-after-first-step", "s-window-3"}, {"hsdp-partial-not-replicated", "s-window-3"},
    };
    for (int i = 0; i < impl_builtin_count(); i++) {
        const impl_entry *e = impl_builtin_at(i);
        if (e->shard_mode == SHARD_NONE)
            continue;
        verify_config run = c;
        run.shard = (shard_mode)e->shard_mode;
        run.mesh = run.shard == SHARD_HSDP ? (mesh){3, 1} : mesh_flat(3);
        catalogue_outcome o;
        catalogue_run(&run, &none, e->ops, &o);
        if (!e->is_mutant) {
            correct++;
            if (o.first >= 0)
                fprintf(stderr, "  correct implementation %s failed in %s: %s\n", e->ops->name,
                        battery_at_for(run.shard, o.first)->name, o.where);
            CU_ASSERT_EQUAL(o.ncaught, 0);
            continue;
        }
        mutants++;
        caught += o.first >= 0;
        if (o.first < 0)
            fprintf(stderr, "  sharded mutant %s missed\n", e->ops->name);
        for (size_t k = 0; k < sizeof by_class / sizeof by_class[0]; k++) {
            if (strcmp(by_class[k].bug, e->ops->name) != 0)
                continue;
            int sc = -1;
            for (int j = 0; j < battery_count_for(run.shard); j++)
                if (strcmp(battery_at_for(run.shard, j)->name, by_class[k].scenario) == 0)
                    sc = j;
            CU_ASSERT_FATAL(sc >= 0);
            if (!o.caught[sc])
                fprintf(stderr, "  %s: not caught by %s\n", by_class[k].bug, by_class[k].scenario);
            CU_ASSERT(o.caught[sc]);
        }
    }
    CU_ASSERT_EQUAL(correct, 4);
    CU_ASSERT(mutants >= 14);
    CU_ASSERT_EQUAL(caught, mutants);
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

/*
 * Interface version 2: the examples of each new hook pass bit for bit over
 * rank counts, chaos seeds (the services' chaos points shake the buckets
 * example's communication thread), zero_grad(set_to_none) and bucket
 * layouts; a plugin built for version 1, its table followed by poison,
 * still runs.
 */
static void test_plugins_v2(void)
{
    static const struct {
        const char *lib;
        int ranks;
        uint64_t chaos;
        int none, view;
        size_t cap;
        const char *model;
    } runs[] = {
        {"libexample_zero1.so", 2, 0, 0, 0, 0, NULL},
        {"libexample_zero1.so", 3, 5, 1, 0, 0, NULL},
        {"libexample_zero1.so", 5, 0, 0, 0, 0, "attn"},
        {"libexample_buckets.so", 3, 0, 0, 0, 1024, NULL},
        {"libexample_buckets.so", 4, 7, 1, 1, 2048, NULL},
        {"libexample_buckets.so", 5, 11, 0, 1, 1024, "attn"},
        {"libexample_buckets.so", 3, 13, 1, 1, 0, "mlp:13-7-5"},
        {"libv1_plugin.so", 3, 0, 0, 0, 0, NULL},
        {"libv1_plugin.so", 3, 3, 1, 0, 0, "branchy"},
    };
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse(SCHED_DEFAULT " enter fwd exit bwd grab fwd enter bwd exit grab", &s), DDP_OK);
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, PLUGIN_DIR "/%s", runs[i].lib);
        impl_handle h;
        CU_ASSERT_EQUAL_FATAL(impl_open(path, &h), DDP_OK);
        verify_config c = base(&s, h.ops);
        c.impl = path;
        c.nranks = runs[i].ranks;
        c.chaos = runs[i].chaos != 0;
        c.chaos_seed = runs[i].chaos;
        c.ddp.set_to_none = runs[i].none;
        c.ddp.bucket_view = runs[i].view;
        if (runs[i].cap)
            c.ddp.bucket_cap = c.ddp.first_bucket_cap = runs[i].cap;
        if (runs[i].model) {
            c.model_spec = runs[i].model;
            c.ddp.find_unused = strcmp(runs[i].model, "branchy") == 0;
        }
        int bad = run_matches(&c);
        if (bad)
            fprintf(stderr, "  run %zu (%s) did not pass\n", i, runs[i].lib);
        CU_ASSERT_EQUAL(bad, 0);
        impl_close(&h);
    }
    sched_free(&s);
    /* The version-2 part of a version-1 table is never read: ddpsim keeps it NULL. */
    impl_handle h;
    CU_ASSERT_EQUAL_FATAL(impl_open(PLUGIN_DIR "/libv1_plugin.so", &h), DDP_OK);
    CU_ASSERT_EQUAL(h.ops->api_version, 1);
    CU_ASSERT_PTR_NULL(h.ops->optimizer_step);
    impl_close(&h);
    CU_ASSERT_EQUAL_FATAL(impl_open(PLUGIN_DIR "/libexample_zero1.so", &h), DDP_OK);
    CU_ASSERT_PTR_NOT_NULL(h.ops->optimizer_step);
    impl_close(&h);
}

/* What the services of one rank did, written into the world's user area. */
typedef struct services_seen {
    int version, zero_to_none, layout_ok, bad_order, buffers_ok;
    uint64_t quiet_points, shaken_points, after_allreduce;
    char error_before[64], error_after[256];
} services_seen;

static ddp_status probe_services(world_rank *wr, void *arg)
{
    (void)arg;
    services_seen *seen = world_rank_user_area(wr);
    model *m = NULL;
    DDP_CHECK(model_create("mlp:512-1024-256", 2, &m));
    ddp_config cfg = {.bucket_cap = DDP_DEFAULT_BUCKET_CAP, .first_bucket_cap = DDP_DEFAULT_FIRST_BUCKET_CAP,
                      .set_to_none = 1};
    impl_env env = {.wr = wr, .m = m, .cfg = cfg, .zero_to_none = 1};
    ddpsim_services svc;
    ddpsim_param_view views[MODEL_MAX_PARAMS];
    impl_services_init(&svc, views, &env);
    seen->version = (int)svc.version;
    seen->zero_to_none = svc.zero_to_none;
    /* Without chaos a chaos point is nothing; with it, each one counts at its site. */
    svc.chaos_point(svc.env, 3);
    seen->quiet_points = env.chaos_count[3];
    env.chaos = 1;
    svc.chaos = 1;
    for (int i = 0; i < 4; i++)
        svc.chaos_point(svc.env, 3);
    seen->shaken_points = env.chaos_count[3];
    float one = 1.0f;
    uint64_t before = 0;
    for (int k = 0; k < 16; k++)
        before += env.chaos_count[k];
    svc.allreduce_sum(svc.env, &one, 1);
    for (int k = 0; k < 16; k++)
        seen->after_allreduce += env.chaos_count[k];
    seen->after_allreduce -= before;
    /* last_error: nothing yet, then ddpsim's words for a collective that failed */
    snprintf(seen->error_before, sizeof seen->error_before, "%s", svc.last_error(svc.env));
    svc.allreduce_sum(svc.env, &one, 0);
    snprintf(seen->error_after, sizeof seen->error_after, "%s", svc.last_error(svc.env));
    /* bucket_layout: the constructor's and a rebuilt one (the hand layouts of test_ddp's rebuild test); with
     * find_unused the constructor fills the caps over the reversed registration order: {1, 2, 3}, {0} */
    int members[MODEL_MAX_PARAMS], sizes[MODEL_MAX_PARAMS];
    int nb = svc.bucket_layout(svc.env, NULL, 0, members, sizes);
    seen->layout_ok = nb == 1 && sizes[0] == 4 && members[0] == 0 && members[1] == 1 && members[2] == 2 &&
                      members[3] == 3; /* no bucketing before the rebuild (find_unused is off) */
    const int ready[4] = {3, 2, 1, 0};
    nb = svc.bucket_layout(svc.env, ready, 4, members, sizes);
    seen->layout_ok &= nb == 2 && sizes[0] == 2 && members[0] == 3 && members[1] == 2 && sizes[1] == 2 &&
                       members[2] == 1 && members[3] == 0;
    const int twice[4] = {3, 3, 1, 0};
    seen->bad_order = svc.bucket_layout(svc.env, twice, 4, members, sizes);
    /* version 3: the buffer views of a model with buffers, and the broadcast_buffers option */
    model *bn = NULL;
    DDP_CHECK(model_create("bn:3-4-2", 2, &bn));
    impl_env benv = {.wr = wr, .m = bn, .cfg = cfg};
    ddpsim_services bsvc;
    ddpsim_param_view bviews[MODEL_MAX_PARAMS];
    impl_services_init(&bsvc, bviews, &benv);
    seen->buffers_ok = bsvc.nbuffers == 3 && strcmp(bsvc.buffers[1].name, "bn.running_var") == 0 &&
                       bsvc.buffers[1].count == 4 && bsvc.buffers[1].data == model_buffers(bn) + 4 &&
                       bsvc.all_buffers == model_buffers(bn) && bsvc.buffers_count == 9 && bsvc.broadcast_buffers == 1 &&
                       svc.nbuffers == 0;
    benv.cfg.no_broadcast_buffers = 1;
    impl_services_init(&bsvc, bviews, &benv);
    seen->buffers_ok &= bsvc.broadcast_buffers == 0;
    model_destroy(bn);
    env.cfg.find_unused = 1;
    nb = svc.bucket_layout(svc.env, NULL, 0, members, sizes);
    seen->layout_ok &= nb == 2 && sizes[0] == 3 && members[0] == 1 && members[1] == 2 && members[2] == 3 &&
                       sizes[1] == 1 && members[3] == 0;
    model_destroy(m);
    return DDP_OK;
}

static void test_services_v2(void)
{
    world_config wc = {.nranks = 1, .timeout_s = 30, .user_bytes = sizeof(services_seen)};
    world *w = NULL;
    CU_ASSERT_EQUAL_FATAL(world_create(&wc, &w), DDP_OK);
    memset(world_user_area(w), 0, sizeof(services_seen));
    CU_ASSERT_EQUAL_FATAL(world_run(w, probe_services, NULL), DDP_OK);
    const services_seen *seen = world_user_area(w);
    CU_ASSERT_EQUAL(seen->version, DDPSIM_IMPL_API_VERSION);
    CU_ASSERT_EQUAL(seen->buffers_ok, 1);
    CU_ASSERT_EQUAL(seen->zero_to_none, 1);
    CU_ASSERT_EQUAL(seen->quiet_points, 0);
    CU_ASSERT_EQUAL(seen->shaken_points, 4);
    CU_ASSERT_EQUAL(seen->after_allreduce, 1); /* every collective of the services is a chaos point too */
    CU_ASSERT_STRING_EQUAL(seen->error_before, "");
    CU_ASSERT(strstr(seen->error_after, "allreduce") != NULL);
    CU_ASSERT_EQUAL(seen->layout_ok, 1);
    CU_ASSERT_EQUAL(seen->bad_order, -1);
    world_destroy(w);
}

int main(void)
{
    static const test_entry tests[] = {
        {"bucketed matches the reference bitwise over seeds, ranks, caps", test_bucketed_matches},
        {"every catalogued bug is caught; correct implementations pass", test_catalogue},
        {"a mutant's first divergence is recorded", test_mutant_divergence_record},
        {"plugins: the example runs; broken ones are refused clearly", test_plugins},
        {"interface version 2: the examples of every hook pass; a version-1 plugin still runs", test_plugins_v2},
        {"interface versions 2 and 3: the services' chaos points, last error, bucket layouts and buffers", test_services_v2},
        {"the sharded catalogue: every sharded bug caught by its mode's battery, every sharded built-in passes",
         test_sharded_catalogue},
        TEST_END,
    };
    return test_run_suite("implementations", tests);
}
