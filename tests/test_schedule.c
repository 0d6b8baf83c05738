/*
 * test_schedule.c - the schedule language (expansion, every error with its
 * position) and the tolerances (parsing, ULP distance, NaN never passing).
 */
#include <math.h>
#include <string.h>

#include "schedule.h"
#include "testutil.h"
#include "tolerance.h"

static int ops_equal(const sched *s, const char *want)
{
    /* want: one letter per op, f b g z s e x, J and X for join_enter and join_exit, c for clip */
    static const char letters[] = "fbgzsexJXc";
    if (strlen(want) != s->nops)
        return 0;
    for (size_t i = 0; i < s->nops; i++)
        if (letters[s->ops[i]] != want[i])
            return 0;
    return 1;
}

static void test_expansion(void)
{
    static const struct {
        const char *text, *ops;
    } ok[] = {
        {"fwd bwd grab", "fbg"},
        {"fwd,bwd,grab,zero,step", "fbgzs"},
        {"nosync{fwd bwd} grab", "efbxg"},
        {"2*(fwd bwd) grab", "fbfbg"},
        {"2 * ( nosync { fwd bwd } )", "efbxefbx"},
        {"enter fwd exit bwd", "efxb"},
        {"fwd enter bwd exit", "febx"},
        {"# a comment\nfwd   # trailing\n bwd\n", "fb"},
        {"3*(2*(grab))", "gggggg"},
        {"grab", "g"},
        {"zero step", "zs"},
        /* What PyTorch 1.13 DDP runs too: forwards without a backward, nested no_sync, a step before any
         * gradient, nothing at all */
        {"fwd fwd bwd", "ffb"},
        {"nosync{fwd} fwd bwd", "efxfb"},
        {"nosync{nosync{fwd bwd} fwd bwd}", "eefbxfbx"},
        {"enter enter exit exit", "eexx"},
        {"fwd step bwd", "fsb"},
        {"step fwd bwd", "sfb"},
        {"0*(fwd bwd) grab", "g"},
        {"", ""},
        {"   # nothing\n", ""},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        sched s;
        CU_ASSERT_EQUAL_FATAL(sched_parse(ok[i].text, &s), DDP_OK);
        if (!ops_equal(&s, ok[i].ops))
            fprintf(stderr, "  '%s' did not expand to %s\n", ok[i].text, ok[i].ops);
        CU_ASSERT(ops_equal(&s, ok[i].ops));
        sched_free(&s);
    }
}

/* clip:MAX[:inf] ops keep their arguments through repetitions; sched_clip_at finds them by op. */
static void test_clip_ops(void)
{
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse("fwd bwd clip:0.5 step zero 2*( fwd bwd clip:1e-2:inf step zero )", &s), DDP_OK);
    CU_ASSERT(ops_equal(&s, "fbcszfbcszfbcsz"));
    CU_ASSERT_EQUAL_FATAL(s.nclips, 3);
    CU_ASSERT_EQUAL(s.clips[0].op, 2);
    CU_ASSERT_EQUAL(s.clips[1].op, 7);
    CU_ASSERT_EQUAL(s.clips[2].op, 12);
    CU_ASSERT_EQUAL(s.clips[0].max_norm, 0.5);
    CU_ASSERT_EQUAL(s.clips[2].max_norm, 1e-2);
    CU_ASSERT(!s.clips[0].inf_norm && s.clips[1].inf_norm && s.clips[2].inf_norm);
    CU_ASSERT_PTR_EQUAL(sched_clip_at(&s, 7), &s.clips[1]);
    CU_ASSERT_PTR_NULL(sched_clip_at(&s, 8));
    sched_free(&s);
    /* a recording's ops without their arguments: refused */
    sched_op ops[] = {OP_FWD, OP_BWD, OP_CLIP, OP_STEP};
    CU_ASSERT_EQUAL(sched_from_ops(ops, 4, NULL, 0, NULL, 0, NULL, 0, &s), DDP_ERR_INVALID);
    /* ... and with them (record version 8), or with arguments that are wrong */
    sched_clip c = {.op = 2, .max_norm = 0.5, .inf_norm = 1};
    CU_ASSERT_EQUAL_FATAL(sched_from_ops(ops, 4, NULL, 0, NULL, 0, &c, 1, &s), DDP_OK);
    CU_ASSERT(sched_clip_at(&s, 2) && sched_clip_at(&s, 2)->inf_norm && s.nclips == 1);
    sched_free(&s);
    c.op = 3;
    CU_ASSERT_EQUAL(sched_from_ops(ops, 4, NULL, 0, NULL, 0, &c, 1, &s), DDP_ERR_INVALID); /* not a clip op */
    c = (sched_clip){.op = 2, .max_norm = -1};
    CU_ASSERT_EQUAL(sched_from_ops(ops, 4, NULL, 0, NULL, 0, &c, 1, &s), DDP_ERR_INVALID);
}

/* --clip: a clip before every step a loop clips, the uneven repetitions and join blocks moved with their ops. */
static void test_clip_steps(void)
{
    static const struct {
        const char *text, *ops;
    } cases[] = {
        {"fwd bwd grab step zero", "fbgcsz"},
        {"nosync{fwd bwd} step fwd bwd grab step step zero", "efbxsfbgcscsz"}, /* unsynced: not clipped */
        {"fwd bwd step fwd bwd step zero", "fbsfbcsz"},        /* a backward before the next zero: not clipped */
        {"step fwd bwd zero step", "sfbzs"},                    /* no gradient: not clipped */
        {"[3, -1:1]*( fwd bwd step zero )", "fbcszfbcszfbcsz"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sched s;
        CU_ASSERT_EQUAL_FATAL(sched_parse(cases[i].text, &s), DDP_OK);
        CU_ASSERT_EQUAL_FATAL(sched_clip_steps(&s, 0.25, 0), DDP_OK);
        if (!ops_equal(&s, cases[i].ops))
            fprintf(stderr, "  --clip of '%s' is not %s\n", cases[i].text, cases[i].ops);
        CU_ASSERT(ops_equal(&s, cases[i].ops));
        for (size_t k = 0; k < s.nclips; k++)
            CU_ASSERT(s.ops[s.clips[k].op] == OP_CLIP && s.clips[k].max_norm == 0.25);
        sched_free(&s);
    }
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse("[3, -1:1]*( fwd bwd step zero )", &s), DDP_OK);
    CU_ASSERT_EQUAL_FATAL(sched_clip_steps(&s, 1, 1), DDP_OK);
    CU_ASSERT_EQUAL(s.uneven[0].first_op, 0);
    CU_ASSERT_EQUAL(s.uneven[0].body_ops, 5);
    CU_ASSERT(s.clips[0].inf_norm);
    sched_free(&s);
    /* inside join: the steps stay unclipped; the block's ops move past the clip before it */
    CU_ASSERT_EQUAL_FATAL(sched_parse("fwd bwd step zero join{ [2, -1:1]*( fwd bwd step zero ) } fwd bwd step", &s),
                          DDP_OK);
    CU_ASSERT_EQUAL_FATAL(sched_clip_steps(&s, 1, 0), DDP_OK);
    CU_ASSERT(ops_equal(&s, "fbcszJfbszfbszXfbcs"));
    CU_ASSERT_EQUAL(s.joins[0].enter_op, 5);
    CU_ASSERT_EQUAL(s.joins[0].exit_op, 14);
    CU_ASSERT_EQUAL(s.uneven[0].first_op, 6);
    CU_ASSERT_EQUAL(s.uneven[0].body_ops, 4);
    CU_ASSERT_EQUAL(sched_clip_steps(&s, 1, 0), DDP_ERR_INVALID); /* clip ops of its own now */
    sched_free(&s);
    /* the last iteration's step has no backward after it, the first's has: they would differ, and one body is kept */
    CU_ASSERT_EQUAL_FATAL(sched_parse("[2, -1:1]*( fwd bwd step )", &s), DDP_OK);
    CU_ASSERT_EQUAL(sched_clip_steps(&s, 1, 0), DDP_ERR_INVALID);
    CU_ASSERT(strstr(ddp_error_text(), "would not all be clipped alike") != NULL);
    sched_free(&s);
    CU_ASSERT_EQUAL_FATAL(sched_parse("fwd bwd step", &s), DDP_OK);
    CU_ASSERT_EQUAL(sched_clip_steps(&s, 0, 0), DDP_ERR_INVALID);
    CU_ASSERT_EQUAL(sched_clip_steps(&s, NAN, 0), DDP_ERR_INVALID);
    sched_free(&s);
}

static void test_default(void)
{
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse(SCHED_DEFAULT, &s), DDP_OK);
    /* 2 x (2 x (enter fwd bwd exit grab) + fwd bwd grab step zero + fwd bwd grab step zero) */
    CU_ASSERT_EQUAL(s.nops, 40);
    CU_ASSERT_EQUAL(s.nfwd, 8);
    CU_ASSERT_EQUAL(s.ngrabs, 8);
    char labels[8][SCHED_LABEL_LEN];
    sched_grab_labels(&s, labels);
    CU_ASSERT_STRING_EQUAL(labels[0], "after no_sync fwd+bwd");
    CU_ASSERT_STRING_EQUAL(labels[1], "after no_sync fwd+bwd (2 acc)");
    CU_ASSERT_STRING_EQUAL(labels[2], "after fwd+bwd (3 acc)");
    CU_ASSERT_STRING_EQUAL(labels[3], "after fwd+bwd");
    sched_free(&s);
}

static void test_labels(void)
{
    sched s;
    CU_ASSERT_EQUAL_FATAL(
        sched_parse("grab enter fwd exit bwd grab fwd enter bwd exit grab step grab zero grab", &s), DDP_OK);
    char l[5][SCHED_LABEL_LEN];
    sched_grab_labels(&s, l);
    CU_ASSERT_STRING_EQUAL(l[0], "before any backward");
    CU_ASSERT_STRING_EQUAL(l[1], "after no_sync fwd, bwd outside");
    CU_ASSERT_STRING_EQUAL(l[2], "after fwd, bwd in no_sync (2 acc)");
    CU_ASSERT_STRING_EQUAL(l[3], "after fwd, bwd in no_sync (2 acc), step");
    CU_ASSERT_STRING_EQUAL(l[4], "after zero_grad");
    sched_free(&s);
}

/* Which backwards sync: the reducer's arming (distributed.py forward, reducer.cpp finalize_backward). */
static void test_arming_counts(void)
{
    static const struct {
        const char *text;
        size_t nsyncs;
        const char *label; /* of the first grab */
    } cases[] = {
        {"fwd nosync{fwd bwd} grab", 1, "after no_sync fwd+bwd, armed"},
        {"nosync{fwd bwd} grab", 0, "after no_sync fwd+bwd"},
        {"nosync{fwd} fwd bwd grab", 1, "after fwd+bwd"},
        {"fwd bwd nosync{fwd bwd} grab", 1, "after no_sync fwd+bwd (2 acc)"},
        {"nosync{ nosync{fwd bwd} fwd bwd } grab", 0, "after no_sync fwd+bwd (2 acc)"},
        {"nosync{ nosync{fwd bwd} fwd bwd } fwd bwd grab", 1, "after fwd+bwd (3 acc)"},
        {"fwd fwd bwd grab", 1, "after fwd+bwd"},
        {"3*(fwd) nosync{fwd bwd} fwd bwd grab", 2, "after fwd+bwd (2 acc)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sched s;
        CU_ASSERT_EQUAL_FATAL(sched_parse(cases[i].text, &s), DDP_OK);
        char l[1][SCHED_LABEL_LEN];
        sched_grab_labels(&s, l);
        if (s.nsyncs != cases[i].nsyncs || strcmp(l[0], cases[i].label) != 0)
            fprintf(stderr, "  '%s': %zu syncs, '%s'\n", cases[i].text, s.nsyncs, l[0]);
        CU_ASSERT_EQUAL(s.nsyncs, cases[i].nsyncs);
        CU_ASSERT_STRING_EQUAL(l[0], cases[i].label);
        sched_free(&s);
    }
    /* static_graph: before 2.1 an unarmed backward through a forward of the first iteration fails; from 2.1 the
     * first backward must be armed, and nothing after it matters (schedule.h). */
    static const struct {
        const char *text;
        ssize_t first_iteration, first_backward;
    } sg[] = {
        {"fwd bwd nosync{fwd bwd}", 4, -1},         {"fwd bwd enter fwd exit bwd", 5, -1},
        {"nosync{fwd bwd} fwd bwd", -1, 2},         {"fwd bwd fwd bwd nosync{fwd bwd}", -1, -1},
        {"fwd nosync{fwd bwd}", -1, -1},            {"fwd bwd nosync{fwd} fwd bwd", -1, -1},
        {"nosync{fwd} bwd", -1, 3},                 {"nosync{fwd bwd} fwd bwd fwd bwd nosync{fwd bwd}", -1, 2},
    };
    for (size_t i = 0; i < sizeof sg / sizeof sg[0]; i++) {
        sched s;
        CU_ASSERT_EQUAL_FATAL(sched_parse(sg[i].text, &s), DDP_OK);
        ssize_t old = sched_static_graph_conflict(&s, 1), now = sched_static_graph_conflict(&s, 0);
        if (old != sg[i].first_iteration || now != sg[i].first_backward)
            fprintf(stderr, "  static_graph '%s': %zd (first iteration), %zd (first backward)\n", sg[i].text, old, now);
        CU_ASSERT_EQUAL(old, sg[i].first_iteration);
        CU_ASSERT_EQUAL(now, sg[i].first_backward);
        sched_free(&s);
    }
    /* A step between a forward and its backward: refused only while gradients exist. */
    static const struct {
        const char *text;
        int set_to_none;
        ssize_t op;
    } steps[] = {
        {"fwd step bwd", 0, -1},        {"fwd bwd fwd step bwd", 0, 3}, {"fwd bwd zero fwd step bwd", 0, 4},
        {"fwd bwd zero fwd step bwd", 1, -1}, {"fwd bwd step fwd bwd", 0, -1},
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        sched s;
        CU_ASSERT_EQUAL_FATAL(sched_parse(steps[i].text, &s), DDP_OK);
        CU_ASSERT_EQUAL(sched_step_conflict(&s, steps[i].set_to_none), steps[i].op);
        sched_free(&s);
    }
}

static void test_errors(void)
{
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"fwd bwd jump", "line 1, column 9: expected an op"},
        {"fwd\n  bwd grabb", "line 2, column 7: expected an op"},
        {"2*(fwd bwd", "expected ')' (found the end)"},
        {"nosync{fwd bwd", "expected '}'"},
        {"fwd bwd)", "column 8: unbalanced bracket"},
        {"nosync{fwd bwd)", "unbalanced bracket"},
        {"bwd", "op 0 (bwd): no forward"},
        {"fwd bwd bwd", "op 2 (bwd): no forward"},
        {"nosync{fwd bwd} bwd", "op 4 (bwd): no forward"},
        {"fwd bwd exit", "op 2 (exit): not inside no_sync"},
        {"nosync{fwd bwd} exit", "op 4 (exit): not inside no_sync"},
        {"exit", "op 0 (exit): not inside no_sync"},
        {"nosync{exit}", "not inside no_sync"},
        {"100001*(grab)", "a repeat count must be 0..100000"},
        {"99999999999999999999*(grab)", "a repeat count must be 0..100000"},
        {"2(fwd bwd)", "expected '*'"},
        {"2*fwd", "expected '(' after 'N*'"},
        {"2*()", "a repeated group is empty"},
        {"nosync fwd", "expected '{' after 'nosync'"},
        {"100000*(100000*(grab))", "more than 10000000 ops"},
        {"fwdbwd", "expected an op"},
        /* The token quoted is cut before a UTF-8 character, not inside it (12 bytes would end in the middle of
         * the sixth 2-byte e-acute), and a control character is named, not printed. */
        {"fwd x\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9",
         "(found 'x\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9')"},
        {"fwd \x1b[31m", "(found the control character 0x1b)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sched s;
        ddp_error_clear();
        CU_ASSERT_EQUAL(sched_parse(bad[i].text, &s), DDP_ERR_INVALID);
        CU_ASSERT_PTR_NULL(s.ops);
        if (!strstr(ddp_error_last(), bad[i].msg))
            fprintf(stderr, "  '%s': got '%s', wanted '%s'\n", bad[i].text, ddp_error_last(), bad[i].msg);
        CU_ASSERT(strstr(ddp_error_last(), bad[i].msg) != NULL);
    }
    /* Deep nesting is bounded, not a stack overflow. */
    char deep[400] = "";
    for (int i = 0; i < 70; i++)
        strcat(deep, "1*(");
    sched s;
    CU_ASSERT_EQUAL(sched_parse(deep, &s), DDP_ERR_INVALID);
    CU_ASSERT(strstr(ddp_error_last(), "deeper than 64") != NULL);
}

/*
 * Uneven inputs and join: the expansion, every rank's count at a world size, who runs each op, the last
 * joiner, and every refusal with where and why.
 */
static void test_uneven(void)
{
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse("fwd bwd join{ [3, -1:1, 0:2]*( fwd bwd grab ) } fwd bwd", &s), DDP_OK);
    CU_ASSERT(ops_equal(&s, "fbJfbgfbgfbgXfb"));
    CU_ASSERT_EQUAL(s.njoins, 1);
    CU_ASSERT_EQUAL(s.nuneven, 1);
    CU_ASSERT_EQUAL(s.joins[0].enter_op, 2);
    CU_ASSERT_EQUAL(s.joins[0].exit_op, 12);
    CU_ASSERT_EQUAL(s.joins[0].divide_by_initial_world_size, 1);
    CU_ASSERT_EQUAL(s.joins[0].uneven, 0);
    CU_ASSERT_EQUAL(s.uneven[0].first_op, 3);
    CU_ASSERT_EQUAL(s.uneven[0].body_ops, 3);
    CU_ASSERT_EQUAL(s.uneven[0].iterations, 3);
    uint32_t counts[8]; /* room for 2 uneven repetitions x 3 ranks below */
    CU_ASSERT_EQUAL(sched_resolve(&s, 4, counts), DDP_OK);
    CU_ASSERT(counts[0] == 2 && counts[1] == 3 && counts[2] == 3 && counts[3] == 1);
    /* op 6 (iteration 1's fwd): ranks 0, 1 and 2 run it; op 9 (iteration 2's): ranks 1 and 2 */
    unsigned char active[4];
    int highest;
    CU_ASSERT_EQUAL(sched_participants(&s, counts, 4, 6, active, &highest), 3);
    CU_ASSERT(active[0] && active[1] && active[2] && !active[3] && highest == 2);
    CU_ASSERT_EQUAL(sched_participants(&s, counts, 4, 9, active, &highest), 2);
    CU_ASSERT(!active[0] && active[1] && active[2] && !active[3] && highest == 2);
    CU_ASSERT_EQUAL(sched_participants(&s, counts, 4, 13, active, &highest), 4); /* after the block: everyone */
    CU_ASSERT_EQUAL(sched_last_joiner(&s, counts, 4, 0), 2);
    CU_ASSERT_EQUAL(sched_join_of(&s, 5), 0);
    CU_ASSERT_EQUAL(sched_join_of(&s, 13), -1);
    /* at 2 ranks both are named, and neither runs the 3 iterations */
    ddp_error_clear();
    CU_ASSERT_EQUAL(sched_resolve(&s, 2, counts), DDP_ERR_INVALID);
    CU_ASSERT(strstr(ddp_error_last(), "line 1, column 15: at 2 ranks no rank runs the repetition 3 times") != NULL);
    sched_free(&s);
    /* rank -1 is rank 1 at 2 ranks: named twice */
    CU_ASSERT_EQUAL_FATAL(sched_parse("fwd bwd [3, 1:2, -1:1]*( fwd bwd )", &s), DDP_OK);
    CU_ASSERT_EQUAL(sched_resolve(&s, 3, NULL), DDP_OK);
    CU_ASSERT_EQUAL(sched_resolve(&s, 2, NULL), DDP_ERR_INVALID);
    CU_ASSERT(strstr(ddp_error_last(), "line 1, column 9: the uneven count names rank 1 twice at 2 ranks") != NULL);
    sched_free(&s);

    /* the option, and an uneven repetition repeated whole: each copy its own */
    CU_ASSERT_EQUAL_FATAL(sched_parse("fwd bwd 2*( join(divide_by_initial_world_size=false){ [2, 1:1]*( fwd bwd ) } )",
                                      &s), DDP_OK);
    CU_ASSERT(ops_equal(&s, "fbJfbfbXJfbfbX"));
    CU_ASSERT(s.njoins == 2 && s.nuneven == 2 && s.joins[1].enter_op == 8 && s.uneven[1].first_op == 9);
    CU_ASSERT_EQUAL(s.joins[1].divide_by_initial_world_size, 0);
    CU_ASSERT_EQUAL(sched_resolve(&s, 3, counts), DDP_OK);
    CU_ASSERT(sched_runs(&s, counts, 3, 11, 0) && !sched_runs(&s, counts, 3, 11, 1) && sched_runs(&s, counts, 3, 11, 2));
    sched_free(&s);

    /* outside join: allowed (PyTorch hangs there; ddpsim names the deadlock) */
    CU_ASSERT_EQUAL_FATAL(sched_parse("fwd bwd [2, -1:1]*( fwd bwd )", &s), DDP_OK);
    CU_ASSERT_EQUAL(s.uneven[0].join, -1);
    ddp_error_clear();
    CU_ASSERT_EQUAL(sched_resolve(&s, 3, NULL), DDP_OK);
    CU_ASSERT_EQUAL(sched_resolve(&s, 1, NULL), DDP_ERR_INVALID); /* the only rank is the last: nobody runs 2 */
    CU_ASSERT(strstr(ddp_error_last(), "at 1 rank no rank runs the repetition 2 times") != NULL);
    sched_free(&s);

    CU_ASSERT_EQUAL_FATAL(sched_parse("[2, 5:1]*( fwd bwd )", &s), DDP_OK);
    CU_ASSERT_EQUAL(sched_resolve(&s, 4, NULL), DDP_ERR_INVALID);
    CU_ASSERT(strstr(ddp_error_last(), "names rank 5, but the run has 4 ranks") != NULL);
    sched_free(&s);
    /* a rank that runs out before the first syncing backward */
    CU_ASSERT_EQUAL_FATAL(sched_parse("join{ [2, 1:0]*( fwd bwd ) }", &s), DDP_OK);
    CU_ASSERT_EQUAL(sched_resolve(&s, 2, NULL), DDP_ERR_INVALID);
    CU_ASSERT(strstr(ddp_error_last(), "rank 1 runs out at op 1, before the run's first syncing backward (op 2)") != NULL);
    sched_free(&s);

    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"join{ join{ fwd bwd } }", "column 7: join does not nest"},
        {"[2, 1:1]*( join{ fwd bwd } )", "a join block inside an uneven repetition"},
        {"[2, 1:1]*( [2]*( fwd bwd ) )", "uneven repetitions do not nest"},
        {"join{ [2, 1:1]*( fwd bwd ) grab }", "line 1, column 7: inside join, an uneven repetition must end the block"},
        {"fwd bwd [2, 1:1]*( fwd )", "each iteration of an uneven repetition must be whole: a forward waits"},
        {"fwd bwd [2, 1:1]*( enter fwd bwd )", "no_sync is not as it found it"},
        {"join{ fwd fwd bwd }", "op 2 (fwd): inside join, the forward at op 1 ran outside no_sync"},
        {"fwd join{ enter fwd bwd exit }", "op 4 (bwd): inside join, a backward synced by a forward before the join"},
        {"join{ fwd } bwd", "op 2 (join_exit): inside join, the forward at op 1"},
        {"[2, 1:1 fwd", "expected ']' or 'RANK:COUNT'"},
        {"[2, 1 2]*(fwd bwd)", "expected ':' after the rank"},
        {"[2, 1:1, 1:2]*(fwd bwd)", "this rank already has its own count"},
        {"[2, -0:1]*(fwd bwd)", "a rank must be 0..1000000"},
        {"[2, 1:100001]*(fwd bwd)", "a repeat count must be 0..100000"},
        {"join(divide=false){fwd bwd}", "expected 'divide_by_initial_world_size=true|false'"},
        {"join(divide_by_initial_world_size=maybe){fwd bwd}", "expected 'true' or 'false'"},
        {"join fwd", "expected '{' after 'join'"},
        {"join_enter", "expected an op"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ddp_error_clear();
        CU_ASSERT_EQUAL(sched_parse(bad[i].text, &s), DDP_ERR_INVALID);
        if (!strstr(ddp_error_last(), bad[i].msg))
            fprintf(stderr, "  '%s': got '%s', wanted '%s'\n", bad[i].text, ddp_error_last(), bad[i].msg);
        CU_ASSERT(strstr(ddp_error_last(), bad[i].msg) != NULL);
    }
    /* a recorded run's blocks that do not match its ops are refused */
    sched_op ops[] = {OP_FWD, OP_BWD, OP_JOIN_ENTER, OP_FWD, OP_BWD, OP_JOIN_EXIT};
    sched_join j = {.enter_op = 2, .exit_op = 4, .divide_by_initial_world_size = 1};
    CU_ASSERT_EQUAL(sched_from_ops(ops, 6, NULL, 0, &j, 1, NULL, 0, &s), DDP_ERR_INVALID);
    j.exit_op = 5;
    sched_uneven u = {.first_op = 3, .body_ops = 2, .iterations = 1, .count = 1};
    CU_ASSERT_EQUAL(sched_from_ops(ops, 6, &u, 1, &j, 1, NULL, 0, &s), DDP_OK);
    CU_ASSERT(s.joins[0].uneven == 0 && s.uneven[0].join == 0);
    sched_free(&s);
    u.body_ops = 9;
    CU_ASSERT_EQUAL(sched_from_ops(ops, 6, &u, 1, &j, 1, NULL, 0, &s), DDP_ERR_INVALID);
}

static void test_tolerance_parse(void)
{
    tolerance t;
    char buf[64];
    CU_ASSERT_EQUAL(tol_parse("bitwise", &t), DDP_OK);
    CU_ASSERT_EQUAL(t.kind, TOL_BITWISE);
    CU_ASSERT_EQUAL(tol_parse("ulp:4", &t), DDP_OK);
    CU_ASSERT(t.kind == TOL_ULP && t.ulps == 4);
    CU_ASSERT_STRING_EQUAL(tol_format(&t, buf, sizeof buf), "ulp:4");
    CU_ASSERT_EQUAL(tol_parse("rtol=1e-5,atol=1e-8", &t), DDP_OK);
    CU_ASSERT(t.kind == TOL_CLOSE && t.rtol == 1e-5 && t.atol == 1e-8);
    CU_ASSERT_EQUAL(tol_parse("atol=0.5,rtol=0", &t), DDP_OK);
    CU_ASSERT(t.rtol == 0 && t.atol == 0.5);
    /* Strict: each key once (the last would silently win), both keys, rtol below 1 (issue 29, item 11). */
    static const char *const bad[] = {"", "bits", "ulp:", "ulp:-1", "ulp:x", "rtol=-1", "rtol=nan", "rtol=1,", "tol=1",
                                      "rtol=1e-3", "atol=0.5", "rtol=1e-3,atol=1e-5,rtol=1", "atol=1,atol=2,rtol=0",
                                      "rtol=1,atol=0", "rtol=2,atol=0", "rtol=1,atol=", "rtol=inf"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CU_ASSERT_EQUAL(tol_parse(bad[i], &t), DDP_ERR_INVALID);
}

static void test_tolerance_match(void)
{
    tolerance bit = {.kind = TOL_BITWISE}, ulp2 = {.kind = TOL_ULP, .ulps = 2},
              close = {.kind = TOL_CLOSE, .rtol = 1e-3, .atol = 1e-6};
    float one = 1.0f, up1 = nextafterf(1.0f, 2.0f), up3 = nextafterf(nextafterf(up1, 2.0f), 2.0f);
    CU_ASSERT(tol_match(&bit, one, one));
    CU_ASSERT(!tol_match(&bit, one, up1));
    CU_ASSERT(!tol_match(&bit, 0.0f, -0.0f)); /* bitwise means the bits */
    CU_ASSERT_EQUAL(tol_ulp_distance(one, up3), 3);
    CU_ASSERT_EQUAL(tol_ulp_distance(0.0f, -0.0f), 0);
    CU_ASSERT_EQUAL(tol_ulp_distance(-1e-45f, 1e-45f), 2); /* across zero: -min, 0, +min */
    CU_ASSERT(tol_match(&ulp2, one, nextafterf(up1, 2.0f)));
    CU_ASSERT(!tol_match(&ulp2, one, up3));
    CU_ASSERT(tol_match(&close, 1000.0f, 1000.9f));
    CU_ASSERT(!tol_match(&close, 1000.0f, 1001.1f));
    /* Non-finite values never pass, in any mode, even against themselves. */
    const tolerance *all[] = {&bit, &ulp2, &close};
    for (int i = 0; i < 3; i++) {
        CU_ASSERT(!tol_match(all[i], NAN, NAN));
        CU_ASSERT(!tol_match(all[i], 1.0f, NAN));
        CU_ASSERT(!tol_match(all[i], INFINITY, INFINITY));
        CU_ASSERT(!tol_match(all[i], 1.0f, -INFINITY));
    }
    CU_ASSERT_EQUAL(tol_ulp_distance(NAN, 1.0f), UINT32_MAX);
}

static void test_tolerance_ulp_of_max(void)
{
    tolerance t;
    char buf[64];
    CU_ASSERT_EQUAL(tol_parse("ulp-of-max:64", &t), DDP_OK);
    CU_ASSERT(t.kind == TOL_ULP_OF_MAX && t.ulps == 64);
    CU_ASSERT_STRING_EQUAL(tol_format(&t, buf, sizeof buf), "ulp-of-max:64");
    static const char *const bad[] = {"ulp-of-max:", "ulp-of-max:-3", "ulp-of-max:4x", "ulp-of-max"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CU_ASSERT_EQUAL(tol_parse(bad[i], &t), DDP_ERR_INVALID);
    /* ulp(1) = 2^-23: within 4 ulps of a tensor whose largest element is 1 ... */
    tolerance u4 = {.kind = TOL_ULP_OF_MAX, .ulps = 4};
    float tiny = 1e-6f, eps = 0x1p-23f;
    CU_ASSERT_DOUBLE_EQUAL(tol_ulp_of(1.0f), eps, 0);
    CU_ASSERT(tol_match_in(&u4, tiny, tiny + 4 * eps, 1.0f, 0));
    CU_ASSERT(!tol_match_in(&u4, tiny, tiny + 5 * eps, 1.0f, 0));
    /* ... where plain ulp:4 fails the same nearly-cancelled element by thousands of its own ulps */
    tolerance plain = {.kind = TOL_ULP, .ulps = 4};
    CU_ASSERT(!tol_match(&plain, tiny, tiny + 4 * eps));
    CU_ASSERT(tol_ulp_distance(tiny, tiny + 4 * eps) > 1000);
    /* the element itself sets the scale when it is the largest; non-finite never passes */
    CU_ASSERT(tol_match_in(&u4, 1024.0f, 1024.0f + 4 * 1024 * eps, 0.0f, 0));
    CU_ASSERT(!tol_match_in(&u4, NAN, NAN, 1.0f, 0));
    CU_ASSERT(!tol_match_in(&u4, 1.0f, INFINITY, 1.0f, 0));
    CU_ASSERT(!tol_match_in(&u4, tiny, 1.0f, INFINITY, 0)); /* a non-finite scale is ignored, not a licence */
}

static void test_ulp_bins(void)
{
    static const uint32_t ulps[] = {0, 1, 2, 4, 5, 16, 17, 256, 257, UINT32_MAX};
    static const int bins[] = {0, 1, 2, 2, 3, 3, 4, 4, 5, 5};
    for (size_t i = 0; i < sizeof ulps / sizeof ulps[0]; i++)
        CU_ASSERT_EQUAL(tol_ulp_bin(ulps[i]), bins[i]);
    CU_ASSERT_STRING_EQUAL(tol_ulp_bin_label(0), "0");
    CU_ASSERT_STRING_EQUAL(tol_ulp_bin_label(TOL_ULP_BINS - 1), ">256");
}

int main(void)
{
    static const test_entry tests[] = {
        {"expansion of ops, repeats, nosync, comments", test_expansion},
        {"the default schedule", test_default},
        {"clip ops and their arguments", test_clip_ops},
        {"--clip puts a clip before every step a loop clips", test_clip_steps},
        {"grab labels", test_labels},
        {"arming: which backwards sync; a step inside fwd..bwd only without gradients", test_arming_counts},
        {"every error names where and what", test_errors},
        {"uneven inputs and join: expansion, counts, who runs what, refusals", test_uneven},
        {"tolerance parsing", test_tolerance_parse},
        {"tolerance matching; NaN and Inf never pass", test_tolerance_match},
        {"ulp-of-max: ulps of the tensor's largest element", test_tolerance_ulp_of_max},
        {"ulp histogram bins", test_ulp_bins},
        TEST_END,
    };
    return test_run_suite("schedule", tests);
}
