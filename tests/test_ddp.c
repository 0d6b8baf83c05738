/*
 * test_ddp.c - the reference DDP's semantic rules, each with expectations
 * computed by hand (tiny models, values whose sums are exact) or from the
 * rule's own definition:
 *   the initial broadcast; the sync decision taken at forward; the
 *   accumulated gradient is what a syncing backward reduces; 1/N before the
 *   sum (and in-place division with gradient_as_bucket_view); unused
 *   parameters with find_unused (across ranks and across the window, and
 *   untouched when unused everywhere); the error without find_unused; the
 *   bucket assignment; zero_grad and step; the token loss's windows and
 *   factors on ragged data, and global-tokens' gradient (loss_norm.h).
 * Ranks write what they see into the shared area; the parent asserts.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "ddp_ref.h"
#include "loss_norm.h"
#include "model.h"
#include "rng.h"
#include "scaler.h"
#include "testutil.h"
#include "world.h"

#define SLOTS 64 /* floats per rank per checkpoint */
#define CHECKPOINTS 16

typedef struct results {
    int status[WORLD_MAX_RANKS];
    char error[WORLD_MAX_RANKS][200];
    float v[CHECKPOINTS][8][SLOTS];
} results;

typedef ddp_status (*scenario_fn)(world_rank *wr, results *res);

static ddp_status scenario_rank(world_rank *wr, void *arg)
{
    results *res = world_rank_user_area(wr);
    ddp_status s = ((scenario_fn)arg)(wr, res);
    res->status[world_rank_id(wr)] = s;
    if (s != DDP_OK)
        snprintf(res->error[world_rank_id(wr)], sizeof res->error[0], "%s", ddp_error_last());
    return DDP_OK; /* the parent judges the status */
}

/* Run a scenario on n ranks; returns the results (static storage, valid until the next call). */
static results *run_scenario(int n, scenario_fn fn)
{
    static results copy;
    world_config cfg = {.nranks = n, .timeout_s = 30, .user_bytes = sizeof(results)};
    world *w = NULL;
    memset(&copy, 0, sizeof copy);
    if (world_create(&cfg, &w) != DDP_OK)
        return NULL;
    memset(world_user_area(w), 0, sizeof(results));
    ddp_status s = world_run(w, scenario_rank, (void *)fn);
    memcpy(&copy, world_user_area(w), sizeof copy);
    world_destroy(w);
    if (s != DDP_OK) {
        fprintf(stderr, "  world: %s\n", ddp_error_last());
        return NULL;
    }
    return &copy;
}

static ddp_config cfg_default(void)
{
    return (ddp_config){.algo = COLL_ORDERED, .bucket_cap = DDP_DEFAULT_BUCKET_CAP,
                        .first_bucket_cap = DDP_DEFAULT_FIRST_BUCKET_CAP, .lr = 0.5f};
}

/*
 * The linear model y = w x + b (mlp:1-1), batch 1, target 0, w = 1, b = 0:
 * pred = x, so dL/dw = 2 x^2 and dL/db = 2 x. Rank r's micro-step m uses
 * x = r + 1 + m.
 */
typedef struct lin {
    model *m;
    ddp_ref *d;
    model_batch b;
    int rank;
} lin;

static ddp_status lin_setup(world_rank *wr, lin *l, ddp_config cfg)
{
    l->rank = world_rank_id(wr);
    DDP_CHECK(model_create("mlp:1-1", 1, &l->m));
    DDP_CHECK(model_batch_alloc(l->m, &l->b));
    /* Rank 0 holds w = 1, b = 0; the others hold junk the broadcast must replace. */
    model_weights(l->m)[0] = l->rank == 0 ? 1.0f : 7.0f + (float)l->rank;
    model_weights(l->m)[1] = l->rank == 0 ? 0.0f : -3.0f;
    DDP_CHECK(ddp_ref_create(&cfg, l->m, wr, &l->d));
    return ddp_ref_broadcast_params(l->d);
}

static ddp_status lin_fwd(lin *l, int micro)
{
    l->b.x[0] = (float)(l->rank + 1 + micro);
    l->b.y[0] = 0.0f;
    return ddp_ref_forward(l->d, &l->b);
}

static void lin_save(lin *l, results *res, int cp)
{
    float *out = res->v[cp][l->rank];
    out[0] = model_grads(l->m)[0];
    out[1] = model_grads(l->m)[1];
    out[2] = model_weights(l->m)[0];
    out[3] = model_weights(l->m)[1];
    out[4] = (float)ddp_ref_last_synced(l->d);
}

static void lin_free(lin *l)
{
    ddp_ref_destroy(l->d);
    model_batch_free(&l->b);
    model_destroy(l->m);
}

/* Each checkpoint starts from zero gradients on a fresh window. */
static ddp_status decisions(world_rank *wr, results *res)
{
    lin l;
    DDP_CHECK(lin_setup(wr, &l, cfg_default()));
    lin_save(&l, res, 0); /* after the broadcast */
    /* 1: fwd bwd -> synced */
    DDP_CHECK(lin_fwd(&l, 0));
    DDP_CHECK(ddp_ref_backward(l.d));
    lin_save(&l, res, 1);
    ddp_ref_zero_grad(l.d);
    /* 2: nosync{fwd bwd} -> local */
    DDP_CHECK(ddp_ref_no_sync_enter(l.d));
    DDP_CHECK(lin_fwd(&l, 0));
    DDP_CHECK(ddp_ref_backward(l.d));
    DDP_CHECK(ddp_ref_no_sync_exit(l.d));
    lin_save(&l, res, 2); /* exiting no_sync did not sync */
    ddp_ref_zero_grad(l.d);
    /* 3: enter fwd exit bwd -> local: decided at forward */
    DDP_CHECK(ddp_ref_no_sync_enter(l.d));
    DDP_CHECK(lin_fwd(&l, 0));
    DDP_CHECK(ddp_ref_no_sync_exit(l.d));
    DDP_CHECK(ddp_ref_backward(l.d));
    lin_save(&l, res, 3);
    ddp_ref_zero_grad(l.d);
    /* 4: fwd enter bwd exit -> synced: decided at forward */
    DDP_CHECK(lin_fwd(&l, 0));
    DDP_CHECK(ddp_ref_no_sync_enter(l.d));
    DDP_CHECK(ddp_ref_backward(l.d));
    DDP_CHECK(ddp_ref_no_sync_exit(l.d));
    lin_save(&l, res, 4);
    ddp_ref_zero_grad(l.d);
    /* 5: nosync{fwd bwd} fwd bwd -> the accumulated gradient of both micro-steps is averaged */
    DDP_CHECK(ddp_ref_no_sync_enter(l.d));
    DDP_CHECK(lin_fwd(&l, 0));
    DDP_CHECK(ddp_ref_backward(l.d));
    DDP_CHECK(ddp_ref_no_sync_exit(l.d));
    DDP_CHECK(lin_fwd(&l, 1));
    DDP_CHECK(ddp_ref_backward(l.d));
    lin_save(&l, res, 5);
    /* 6: step with lr 0.5 on those averaged gradients, then 7: zero_grad */
    ddp_ref_step(l.d);
    lin_save(&l, res, 6);
    ddp_ref_zero_grad(l.d);
    lin_save(&l, res, 7);
    /* Misuse is an error, not a crash. */
    if (ddp_ref_backward(l.d) != DDP_ERR_INVALID || ddp_ref_no_sync_exit(l.d) != DDP_ERR_INVALID)
        res->v[8][l.rank][0] = 1.0f;
    /* Nested no_sync is fine; an exit with none open is not. */
    DDP_CHECK(ddp_ref_no_sync_enter(l.d));
    DDP_CHECK(ddp_ref_no_sync_enter(l.d));
    DDP_CHECK(ddp_ref_no_sync_exit(l.d));
    DDP_CHECK(ddp_ref_no_sync_exit(l.d));
    if (ddp_ref_no_sync_exit(l.d) != DDP_ERR_INVALID)
        res->v[8][l.rank][1] = 1.0f;
    lin_free(&l);
    return DDP_OK;
}

/* PyTorch's arming (distributed.py forward, reducer.cpp finalize_backward), one checkpoint each. */
static ddp_status arming(world_rank *wr, results *res)
{
    lin l;
    DDP_CHECK(lin_setup(wr, &l, cfg_default()));
    /* 0: fwd nosync{fwd bwd} -> synced: the first forward armed, the second left it armed */
    DDP_CHECK(lin_fwd(&l, 0));
    DDP_CHECK(ddp_ref_no_sync_enter(l.d));
    DDP_CHECK(lin_fwd(&l, 1));
    DDP_CHECK(ddp_ref_backward(l.d));
    DDP_CHECK(ddp_ref_no_sync_exit(l.d));
    lin_save(&l, res, 0);
    ddp_ref_zero_grad(l.d);
    /* 1: nosync{fwd} fwd bwd -> synced, the gradient of the last forward */
    DDP_CHECK(ddp_ref_no_sync_enter(l.d));
    DDP_CHECK(lin_fwd(&l, 0));
    DDP_CHECK(ddp_ref_no_sync_exit(l.d));
    DDP_CHECK(lin_fwd(&l, 1));
    DDP_CHECK(ddp_ref_backward(l.d));
    lin_save(&l, res, 1);
    ddp_ref_zero_grad(l.d);
    /* 2: nosync{ nosync{fwd bwd} fwd bwd } -> local: the inner exit restored the outer no_sync */
    DDP_CHECK(ddp_ref_no_sync_enter(l.d));
    DDP_CHECK(ddp_ref_no_sync_enter(l.d));
    DDP_CHECK(lin_fwd(&l, 0));
    DDP_CHECK(ddp_ref_backward(l.d));
    DDP_CHECK(ddp_ref_no_sync_exit(l.d));
    DDP_CHECK(lin_fwd(&l, 1));
    DDP_CHECK(ddp_ref_backward(l.d));
    DDP_CHECK(ddp_ref_no_sync_exit(l.d));
    lin_save(&l, res, 2);
    /* 3: then fwd bwd -> the three micro-steps averaged */
    DDP_CHECK(lin_fwd(&l, 0));
    DDP_CHECK(ddp_ref_backward(l.d));
    lin_save(&l, res, 3);
    ddp_ref_zero_grad(l.d);
    /* 4: fwd bwd nosync{fwd bwd} -> the sync disarmed: the second micro-step stays local */
    DDP_CHECK(lin_fwd(&l, 0));
    DDP_CHECK(ddp_ref_backward(l.d));
    DDP_CHECK(ddp_ref_no_sync_enter(l.d));
    DDP_CHECK(lin_fwd(&l, 1));
    DDP_CHECK(ddp_ref_backward(l.d));
    DDP_CHECK(ddp_ref_no_sync_exit(l.d));
    lin_save(&l, res, 4);
    /* fwd bwd bwd: a second backward through a graph already freed, as PyTorch refuses it */
    ddp_ref_zero_grad(l.d);
    DDP_CHECK(lin_fwd(&l, 0));
    DDP_CHECK(ddp_ref_backward(l.d));
    if (ddp_ref_backward(l.d) != DDP_ERR_INVALID)
        res->v[5][l.rank][0] = 1.0f;
    lin_free(&l);
    return DDP_OK;
}


static void expect_pair(const results *r, int cp, int rank, float gw, float gb)
{
    const float *v = r->v[cp][rank];
    if (v[0] != gw || v[1] != gb)
        fprintf(stderr, "  checkpoint %d rank %d: grads (%g, %g), expected (%g, %g)\n", cp, rank, (double)v[0],
                (double)v[1], (double)gw, (double)gb);
    CU_ASSERT_EQUAL(test_bits_f(v[0]), test_bits_f(gw));
    CU_ASSERT_EQUAL(test_bits_f(v[1]), test_bits_f(gb));
}

static void test_decisions(void)
{
    /* Two ranks. Micro-step 0: rank 0 x = 1 -> (2, 2); rank 1 x = 2 -> (8, 4).
     * Micro-step 1: rank 0 x = 2 -> (8, 4); rank 1 x = 3 -> (18, 6). */
    results *r = run_scenario(2, decisions);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    for (int k = 0; k < 2; k++) {
        CU_ASSERT_EQUAL(r->status[k], DDP_OK);
        if (r->status[k] != DDP_OK)
            fprintf(stderr, "  rank %d: %s\n", k, r->error[k]);
        /* broadcast: everyone holds rank 0's w = 1, b = 0 */
        CU_ASSERT(r->v[0][k][2] == 1.0f && r->v[0][k][3] == 0.0f);
        expect_pair(r, 1, k, 5.0f, 3.0f); /* (2 + 8) / 2, (2 + 4) / 2 */
        CU_ASSERT_EQUAL(r->v[1][k][4], 1.0f);
        expect_pair(r, 4, k, 5.0f, 3.0f);
        CU_ASSERT_EQUAL(r->v[4][k][4], 1.0f);
        expect_pair(r, 5, k, 18.0f, 8.0f); /* ((2 + 8) + (8 + 18)) / 2, ((2 + 4) + (4 + 6)) / 2 */
        CU_ASSERT(r->v[6][k][2] == 1.0f - 0.5f * 18.0f && r->v[6][k][3] == -4.0f);
        expect_pair(r, 7, k, 0.0f, 0.0f);
        CU_ASSERT(r->v[8][k][0] == 0.0f && r->v[8][k][1] == 0.0f);
    }
    expect_pair(r, 2, 0, 2.0f, 2.0f);
    expect_pair(r, 2, 1, 8.0f, 4.0f);
    CU_ASSERT_EQUAL(r->v[2][0][4], 0.0f);
    expect_pair(r, 3, 0, 2.0f, 2.0f);
    expect_pair(r, 3, 1, 8.0f, 4.0f);
}

static void test_arming(void)
{
    /* Micro-step 0: rank 0 (2, 2), rank 1 (8, 4); micro-step 1: rank 0 (8, 4), rank 1 (18, 6). */
    results *r = run_scenario(2, arming);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    for (int k = 0; k < 2; k++) {
        CU_ASSERT_EQUAL(r->status[k], DDP_OK);
        if (r->status[k] != DDP_OK)
            fprintf(stderr, "  rank %d: %s\n", k, r->error[k]);
        expect_pair(r, 0, k, 13.0f, 5.0f);
        CU_ASSERT_EQUAL(r->v[0][k][4], 1.0f);
        expect_pair(r, 1, k, 13.0f, 5.0f);
        CU_ASSERT_EQUAL(r->v[1][k][4], 1.0f);
        CU_ASSERT_EQUAL(r->v[2][k][4], 0.0f);
        expect_pair(r, 3, k, 23.0f, 11.0f); /* ((2 + 8 + 2) + (8 + 18 + 8)) / 2, ((2 + 4 + 2) + (4 + 6 + 4)) / 2 */
        CU_ASSERT_EQUAL(r->v[4][k][4], 0.0f);
        CU_ASSERT_EQUAL(r->v[5][k][0], 0.0f);
    }
    expect_pair(r, 2, 0, 10.0f, 6.0f);
    expect_pair(r, 2, 1, 26.0f, 10.0f);
    expect_pair(r, 4, 0, 13.0f, 7.0f);  /* (2 + 8) / 2 + 8, (2 + 4) / 2 + 4 */
    expect_pair(r, 4, 1, 23.0f, 9.0f);
}

/*
 * 1/N before the sum. Each rank's gradient is set to a chosen value and a
 * syncing step with zero local gradient (x = 0, target = b = 0) reduces it.
 */
static float chosen_grad(int rank, int which)
{
    uint64_t key = rng_key(77, (uint64_t)which);
    return (rng_uniform_f(key, (uint64_t)rank) + 0.5f) * (rank == 1 ? 3.0f : 1.0f);
}

/* Variants: 0 plain, 1 gradient_as_bucket_view, 2 the same with a zero_grad(set_to_none) before every sync. */
static ddp_status scale_order(world_rank *wr, results *res)
{
    for (int view = 0; view < 3; view++) {
        ddp_config cfg = cfg_default();
        cfg.bucket_view = view > 0;
        cfg.set_to_none = view == 2;
        lin l;
        DDP_CHECK(lin_setup(wr, &l, cfg));
        for (int which = 0; which < SLOTS; which++) {
            if (view == 2)
                ddp_ref_zero_grad(l.d);
            model_grads(l.m)[0] = chosen_grad(l.rank, which);
            model_grads(l.m)[1] = 0.0f;
            model_grad_defined(l.m)[0] = model_grad_defined(l.m)[1] = 1; /* a .grad with that value, not None */
            l.b.x[0] = 0.0f;
            l.b.y[0] = 0.0f;
            DDP_CHECK(ddp_ref_forward(l.d, &l.b));
            DDP_CHECK(ddp_ref_backward(l.d));
            res->v[view][l.rank][which] = model_grads(l.m)[0];
        }
        lin_free(&l);
    }
    return DDP_OK;
}

static void test_scale_before_sum(void)
{
    results *r = run_scenario(3, scale_order);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    float inv = (float)(1.0 / 3);
    int differs_from_sum_then_divide = 0, view_differs = 0, first_sync_tells = 0;
    for (int which = 0; which < SLOTS; which++) {
        float g0 = chosen_grad(0, which), g1 = chosen_grad(1, which), g2 = chosen_grad(2, which);
        float mul = (g0 * inv + g1 * inv) + g2 * inv;      /* PyTorch: multiply while copying into the bucket */
        float div = (g0 / 3.0f + g1 / 3.0f) + g2 / 3.0f;   /* gradient_as_bucket_view: divide in place */
        float later = ((g0 + g1) + g2) / 3.0f;             /* what a sum-then-average would give */
        differs_from_sum_then_divide += test_bits_f(mul) != test_bits_f(later);
        view_differs += test_bits_f(mul) != test_bits_f(div);
        /* gradient_as_bucket_view: the first sync multiplies while copying the grad into its bucket
         * (it is no alias of the view yet), every later one divides the view in place. */
        float view = which == 0 ? mul : div;
        first_sync_tells += which == 0 && test_bits_f(mul) != test_bits_f(div);
        for (int k = 0; k < 3; k++) {
            CU_ASSERT_EQUAL(test_bits_f(r->v[0][k][which]), test_bits_f(mul));
            CU_ASSERT_EQUAL(test_bits_f(r->v[1][k][which]), test_bits_f(view));
            /* a None .grad is no bucket's view: every sync after zero_grad(set_to_none) multiplies again */
            CU_ASSERT_EQUAL(test_bits_f(r->v[2][k][which]), test_bits_f(mul));
        }
    }
    /* The chosen values must tell the orders apart, or the test shows nothing. */
    CU_ASSERT(differs_from_sum_then_divide > 0);
    CU_ASSERT(view_differs > 0);
    CU_ASSERT(first_sync_tells > 0);
}

/*
 * find_unused on branchy. Expected values come from a plain local replica
 * (no DDP) whose gradients all ranks share with allgather:
 *   window A: one micro-step, rank 0 runs head_a only, rank 1 head_b only;
 *   window B: micro-step 1 (no_sync) as A, micro-step 2 both run head_b only,
 *             so head_a was used only in an earlier micro-step, on rank 0.
 * "unused" never runs: each rank plants its own value in its gradient first,
 * and the sync must leave it untouched.
 */
static ddp_status unused_params(world_rank *wr, results *res)
{
    int rank = world_rank_id(wr), n = world_size(wr);
    ddp_config cfg = cfg_default();
    cfg.find_unused = 1;
    model *m = NULL, *plain = NULL;
    DDP_CHECK(model_create("branchy:3-4-2", 2, &m));
    DDP_CHECK(model_create("branchy:3-4-2", 2, &plain));
    model_init(m, 5, rank);
    ddp_ref *d = NULL;
    DDP_CHECK(ddp_ref_create(&cfg, m, wr, &d));
    DDP_CHECK(ddp_ref_broadcast_params(d));
    memcpy(model_weights(plain), model_weights(m), model_size(m) * sizeof(float));
    size_t P = model_size(m);
    float *all = malloc((size_t)n * P * sizeof(float));
    model_batch b;
    DDP_CHECK(model_batch_alloc(m, &b));
    int ua = model_param_find(m, "unused.weight"), ha = model_param_find(m, "head_a.weight");
    int hb = model_param_find(m, "head_b.weight"), tr = model_param_find(m, "trunk.weight");
    for (int window = 0; window < 2; window++) {
        ddp_ref_zero_grad(d);
        model_zero_grad(plain);
        const model_param *up = model_param_at(m, ua);
        for (size_t j = 0; j < up->count; j++)
            model_grads(m)[up->offset + j] = model_grads(plain)[up->offset + j] = (float)(rank + 1) * 0.25f;
        int micro_steps = window == 0 ? 1 : 2;
        for (int micro = 0; micro < micro_steps; micro++) {
            model_batch_fill(m, &b, 5, rank, (uint64_t)(window * 10 + micro));
            b.branch = micro == 0 ? (rank == 0 ? 1 : 2) : 2;
            int last = micro == micro_steps - 1;
            if (!last)
                DDP_CHECK(ddp_ref_no_sync_enter(d));
            DDP_CHECK(ddp_ref_forward(d, &b));
            DDP_CHECK(ddp_ref_backward(d));
            if (!last)
                DDP_CHECK(ddp_ref_no_sync_exit(d));
            DDP_CHECK(model_forward(plain, &b, NULL));
            model_backward(plain);
        }
        DDP_CHECK(coll_allgather(wr, model_grads(plain), all, P * sizeof(float)));
        /* For each checked tensor: the first element, DDP's value and the expectation. */
        const int checked[4] = {tr, ha, hb, ua};
        float inv = (float)(1.0 / n);
        for (int c = 0; c < 4; c++) {
            size_t off = model_param_at(m, checked[c])->offset;
            float want = 0.0f;
            for (int k = 0; k < n; k++)
                want = k == 0 ? all[off] * inv : want + all[(size_t)k * P + off] * inv;
            if (checked[c] == ua)
                want = model_grads(plain)[off]; /* unused everywhere: the local value stays */
            res->v[window][rank][2 * c] = model_grads(m)[off];
            res->v[window][rank][2 * c + 1] = want;
        }
    }
    /* Without find_unused the same step is PyTorch's error. */
    ddp_ref_destroy(d);
    cfg.find_unused = 0;
    DDP_CHECK(ddp_ref_create(&cfg, m, wr, &d));
    b.branch = 1;
    DDP_CHECK(ddp_ref_forward(d, &b));
    ddp_status s = ddp_ref_backward(d);
    res->v[2][rank][0] = s == DDP_ERR_INVALID && strstr(ddp_error_last(), "find_unused") ? 1.0f : 0.0f;
    free(all);
    model_batch_free(&b);
    ddp_ref_destroy(d);
    model_destroy(m);
    model_destroy(plain);
    return DDP_OK;
}

static void test_unused_parameters(void)
{
    results *r = run_scenario(2, unused_params);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    for (int k = 0; k < 2; k++) {
        CU_ASSERT_EQUAL(r->status[k], DDP_OK);
        if (r->status[k] != DDP_OK)
            fprintf(stderr, "  rank %d: %s\n", k, r->error[k]);
        for (int window = 0; window < 2; window++)
            for (int c = 0; c < 4; c++) {
                float got = r->v[window][k][2 * c], want = r->v[window][k][2 * c + 1];
                if (test_bits_f(got) != test_bits_f(want))
                    fprintf(stderr, "  window %d rank %d tensor %d: %g, expected %g\n", window, k, c, (double)got,
                            (double)want);
                CU_ASSERT_EQUAL(test_bits_f(got), test_bits_f(want));
            }
        /* The planted value survived on each rank: unused everywhere is never averaged. */
        CU_ASSERT_EQUAL(r->v[0][k][6], (float)(k + 1) * 0.25f);
        CU_ASSERT_EQUAL(r->v[2][k][0], 1.0f);
    }
    /* head_a was used by rank 0 only: both ranks hold half of rank 0's gradient, non-zero. */
    CU_ASSERT(r->v[0][0][2] != 0.0f && r->v[0][0][2] == r->v[0][1][2]);
    CU_ASSERT(r->v[1][0][2] != 0.0f && r->v[1][0][2] == r->v[1][1][2]);
}

/*
 * PyTorch before 2.4 (--find-unused-rule syncing-backward): head_a is used
 * under no_sync by rank 0 only, then by no rank's syncing backward. Without
 * gradient_as_bucket_view each rank keeps its own .grad (rank 0 its local
 * gradient, rank 1 None); with it rank 0's defined .grad is averaged all the
 * same (its bucket's view, which the allreduce writes: half of it at 2
 * ranks) and rank 1's None stays None. Checkpoint `view`, slots: head_a's
 * first element, rank 0's local value, whether this rank's .grad was averaged.
 */
static ddp_status unused_with_view(world_rank *wr, results *res)
{
    int rank = world_rank_id(wr);
    for (int view = 0; view < 2; view++) {
        ddp_config cfg = cfg_default();
        cfg.find_unused = 1;
        cfg.find_unused_syncing_backward = 1;
        cfg.bucket_view = view;
        model *m = NULL;
        DDP_CHECK(model_create("branchy:3-4-2", 2, &m));
        model_init(m, 5, rank);
        ddp_ref *d = NULL;
        DDP_CHECK(ddp_ref_create(&cfg, m, wr, &d));
        DDP_CHECK(ddp_ref_broadcast_params(d));
        model_batch b;
        DDP_CHECK(model_batch_alloc(m, &b));
        int ha = model_param_find(m, "head_a.weight");
        size_t off = model_param_at(m, ha)->offset;
        float local = 0.0f;
        for (int micro = 0; micro < 2; micro++) {
            model_batch_fill(m, &b, 5, rank, (uint64_t)micro);
            b.branch = micro == 0 ? (rank == 0 ? 1 : 2) : 2;
            if (micro == 0)
                DDP_CHECK(ddp_ref_no_sync_enter(d));
            DDP_CHECK(ddp_ref_forward(d, &b));
            DDP_CHECK(ddp_ref_backward(d));
            if (micro == 0) {
                DDP_CHECK(ddp_ref_no_sync_exit(d));
                local = model_grads(m)[off];
            }
        }
        res->v[view][rank][0] = model_grads(m)[off];
        res->v[view][rank][1] = local;
        res->v[view][rank][2] = ddp_ref_averaged_params(d)[ha];
        res->v[view][rank][3] = ddp_ref_reduced_params(d)[ha];
        model_batch_free(&b);
        ddp_ref_destroy(d);
        model_destroy(m);
    }
    return DDP_OK;
}

static void test_unused_with_bucket_view(void)
{
    results *r = run_scenario(2, unused_with_view);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT(r->status[0] == DDP_OK && r->status[1] == DDP_OK);
    float g = r->v[0][0][1];
    CU_ASSERT(g != 0.0f);
    /* Without the view: kept, each rank its own. */
    CU_ASSERT_EQUAL(r->v[0][0][0], g);
    CU_ASSERT_EQUAL(r->v[0][1][0], 0.0f);
    CU_ASSERT(r->v[0][0][2] == 0.0f && r->v[0][1][2] == 0.0f);
    /* With it: rank 0's defined .grad is averaged (g/2 + 0), rank 1's None stays None; not "reduced" (the ranks
     * need not agree). */
    CU_ASSERT_EQUAL(r->v[1][0][0], g * 0.5f);
    CU_ASSERT_EQUAL(r->v[1][1][0], 0.0f);
    CU_ASSERT(r->v[1][0][2] == 1.0f && r->v[1][1][2] == 0.0f);
    CU_ASSERT(r->v[1][0][3] == 0.0f && r->v[1][1][3] == 0.0f);
}

/* PyTorch's hooks' arithmetic (comm_hook.h), by hand: the roundings, the prelude, the two sums. */
static void test_comm_hook_arithmetic(void)
{
    const ddp_comm_hook F = DDP_HOOK_FP16, B = DDP_HOOK_BF16;
    CU_ASSERT_EQUAL(comm_hook_round(1.0f / 3.0f, F), 0.333251953125f);        /* 0x3555 */
    CU_ASSERT_EQUAL(comm_hook_round(1.0f + 0x1p-11f, F), 1.0f);               /* a tie: to the even 1 */
    CU_ASSERT_EQUAL(comm_hook_round(1.0f + 3 * 0x1p-11f, F), 1.0f + 0x1p-9f); /* a tie: to the even 1 + 2^-9 */
    CU_ASSERT_EQUAL(comm_hook_round(65519.0f, F), 65504.0f);
    CU_ASSERT(isinf(comm_hook_round(65520.0f, F)) && comm_hook_round(-65520.0f, F) < 0);
    CU_ASSERT_EQUAL(comm_hook_round(0x1p-24f, F), 0x1p-24f);                  /* the smallest subnormal */
    CU_ASSERT_EQUAL(comm_hook_round(0x1p-25f, F), 0.0f);                      /* half of it: a tie, to 0 */
    CU_ASSERT_EQUAL(comm_hook_round(0x1.000002p-25f, F), 0x1p-24f);
    CU_ASSERT_EQUAL(comm_hook_round(3 * 0x1p-26f, F), 0x1p-24f);
    CU_ASSERT_EQUAL(comm_hook_round(5 * 0x1p-25f, F), 2 * 0x1p-24f);          /* 2.5 steps: to the even 2 */
    CU_ASSERT(signbit(comm_hook_round(-0x1p-30f, F)));                        /* -0 keeps its sign */
    CU_ASSERT(isnan(comm_hook_round(NAN, F)) && isnan(comm_hook_round(NAN, B)));
    CU_ASSERT_EQUAL(comm_hook_round(1.0f / 3.0f, B), 0.333984375f);           /* 0x3eab */
    CU_ASSERT_EQUAL(comm_hook_round(1.0f + 0x1p-8f, B), 1.0f);
    CU_ASSERT_EQUAL(comm_hook_round(1.0f + 3 * 0x1p-8f, B), 1.0f + 0x1p-6f);
    CU_ASSERT(isinf(comm_hook_round(3.4028234e38f, B)));                       /* FLT_MAX rounds past bf16's largest */
    CU_ASSERT_EQUAL(comm_hook_round(0x1p-130f, B), 0x1p-130f); /* bfloat16 subnormals: steps of 2^-133 */
    CU_ASSERT_EQUAL(comm_hook_round(0x1p-140f, B), 0.0f);
    /* The prelude: allreduce divides in float; fp16 rounds, divides, rounds. */
    float v[2] = {1.0f, 3.0f};
    comm_hook_compress(v, 2, 3, DDP_HOOK_ALLREDUCE);
    CU_ASSERT(v[0] == 1.0f / 3.0f && v[1] == 1.0f);
    v[0] = 1.0f, v[1] = 65519.0f;
    comm_hook_compress(v, 2, 3, F);
    CU_ASSERT(v[0] == 0.333251953125f && v[1] == comm_hook_round(65504.0f / 3.0f, F));
    /* The sums: 1 + 2^-11 + 2^-11 in rank order ties back to 1 twice; the exact sum is 1 + 2^-10. */
    const float g[3] = {1.0f, 0x1p-11f, 0x1p-11f};
    float out;
    comm_hook_sum_gathered(g, 3, 1, F, 0, &out);
    CU_ASSERT_EQUAL(out, 1.0f);
    comm_hook_sum_gathered(g, 3, 1, F, 1, &out);
    CU_ASSERT_EQUAL(out, 1.0f + 0x1p-10f);
    /* The fast rounding on a float's bits agrees with the general one, over a sweep of every binade. */
    unsigned mismatches = 0;
    for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4093) {
        uint32_t b32 = (uint32_t)bits;
        float x;
        memcpy(&x, &b32, sizeof x);
        for (int k = 0; k < 2; k++) {
            ddp_comm_hook fmt = k ? B : F;
            float fast = comm_hook_round(x, fmt), slow = comm_hook_round_double(x, fmt);
            mismatches += !(memcmp(&fast, &slow, sizeof fast) == 0 || (isnan(fast) && isnan(slow)));
        }
    }
    CU_ASSERT_EQUAL(mismatches, 0);
    ddp_comm_hook h;
    CU_ASSERT(ddp_comm_hook_parse("fp16", &h) == DDP_OK && h == F);
    CU_ASSERT_EQUAL(ddp_comm_hook_parse("fp8", &h), DDP_ERR_INVALID);
    CU_ASSERT_STRING_EQUAL(ddp_comm_hook_name(DDP_HOOK_ALLREDUCE), "allreduce");
}

static void test_bucket_assignment(void)
{
    model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(model_create_layout("mlp:4-8-3", 2, &m), DDP_OK);
    /* 0.weight 128 B, 0.bias 32 B, 2.weight 96 B, 2.bias 12 B */
    int f[8], c[8];
    CU_ASSERT_EQUAL(ddp_assign_buckets(m, DDP_DEFAULT_FIRST_BUCKET_CAP, DDP_DEFAULT_BUCKET_CAP, f, c, 8), 1);
    CU_ASSERT(f[0] == 0 && c[0] == 4);
    /* limits 100, 100: {0.weight} closes at 128; {0.bias, 2.weight} at 128; {2.bias} is left; then reversed */
    CU_ASSERT_EQUAL(ddp_assign_buckets(m, 100, 100, f, c, 8), 3);
    CU_ASSERT(f[0] == 3 && c[0] == 1);
    CU_ASSERT(f[1] == 1 && c[1] == 2);
    CU_ASSERT(f[2] == 0 && c[2] == 1);
    /* the first limit applies to the first-registered parameters only */
    CU_ASSERT_EQUAL(ddp_assign_buckets(m, 1 << 20, 1, f, c, 8), 1);
    CU_ASSERT_EQUAL(ddp_assign_buckets(m, 1, 1, f, c, 8), 4);
    CU_ASSERT(f[0] == 3 && f[1] == 2 && f[2] == 1 && f[3] == 0);
    model_destroy(m);
}

/*
 * One syncing micro-step of mlp:5-6-4 (batch 3, seed 8, rank-distinct data)
 * under cfg, reducing through fn (a backend reducer; NULL: the CPU
 * collectives). The first SLOTS gradients go to out, the bucket count to
 * *nbuckets.
 */
static ddp_status one_sync(world_rank *wr, ddp_config cfg, ddp_reduce_fn fn, void *ctx, int backend_avg, float *out,
                           int *nbuckets)
{
    int rank = world_rank_id(wr);
    model *m = NULL;
    DDP_CHECK(model_create("mlp:5-6-4", 3, &m));
    model_init(m, 8, rank);
    ddp_ref *d = NULL;
    model_batch b = {0};
    ddp_status s = ddp_ref_create(&cfg, m, wr, &d);
    if (s == DDP_OK && fn)
        ddp_ref_set_reducer(d, fn, ctx, backend_avg);
    if (s == DDP_OK)
        s = ddp_ref_broadcast_params(d);
    if (s == DDP_OK)
        s = model_batch_alloc(m, &b);
    if (s == DDP_OK) {
        model_batch_fill(m, &b, 8, rank, 0);
        s = ddp_ref_forward(d, &b);
    }
    if (s == DDP_OK)
        s = ddp_ref_backward(d);
    if (s == DDP_OK) {
        size_t n = model_size(m) < SLOTS ? model_size(m) : SLOTS;
        memcpy(out, model_grads(m), n * sizeof(float));
        *nbuckets = ddp_ref_nbuckets(d);
    }
    model_batch_free(&b);
    ddp_ref_destroy(d);
    model_destroy(m);
    return s;
}

/*
 * With the ordered algorithm, bucket sizes change no value: one bucket or
 * one per parameter, same bits. (With find_unused, so that the first sync
 * already uses the caps: without it the first sync is one bucket whatever
 * they are.)
 */
static ddp_status buckets_values(world_rank *wr, results *res)
{
    int rank = world_rank_id(wr);
    for (int variant = 0; variant < 3; variant++) {
        ddp_config cfg = cfg_default();
        cfg.find_unused = 1;
        if (variant == 1)
            cfg.bucket_cap = cfg.first_bucket_cap = 1;
        if (variant == 2)
            cfg.bucket_cap = cfg.first_bucket_cap = 130; /* {0.weight, 0.bias}, {2.weight, 2.bias} */
        int nb = 0;
        DDP_CHECK(one_sync(wr, cfg, NULL, NULL, 0, res->v[variant][rank], &nb));
        res->v[3][rank][variant] = (float)nb;
    }
    return DDP_OK;
}

static void test_buckets_change_no_value(void)
{
    results *r = run_scenario(3, buckets_values);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    for (int k = 0; k < 3; k++) {
        CU_ASSERT_EQUAL(r->v[3][k][0], 1.0f);
        CU_ASSERT_EQUAL(r->v[3][k][1], 4.0f);
        CU_ASSERT(r->v[3][k][2] > 1.0f && r->v[3][k][2] < 4.0f);
        CU_ASSERT_EQUAL(memcmp(r->v[0][k], r->v[1][k], sizeof r->v[0][k]), 0);
        CU_ASSERT_EQUAL(memcmp(r->v[0][k], r->v[2][k], sizeof r->v[0][k]), 0);
        CU_ASSERT_EQUAL(memcmp(r->v[0][k], r->v[0][0], sizeof r->v[0][k]), 0);
    }
}

/* A stand-in backend: counts what it is asked, then reduces on the CPU (averaging as ncclAvg: x * (1/N), then the sum). */
typedef struct fake_backend {
    world_rank *wr;
    int calls, avg_calls;
    float last_in; /* the first element of the last buffer it got (the last bucket: 0.weight) */
} fake_backend;

static ddp_status fake_reduce(void *ctx, float *buf, size_t count, int avg)
{
    fake_backend *b = ctx;
    b->calls++;
    b->last_in = buf[0];
    b->avg_calls += avg;
    if (avg) {
        float inv = (float)(1.0 / world_size(b->wr));
        for (size_t i = 0; i < count; i++)
            buf[i] *= inv;
    }
    return coll_allreduce(b->wr, buf, count, COLL_FLOAT, COLL_SUM, COLL_ORDERED);
}

/* Checkpoint variant: 0 CPU collectives, 1 a backend that sums (with find_unused), 2 a backend that averages. */
static ddp_status backend_values(world_rank *wr, results *res)
{
    int rank = world_rank_id(wr);
    for (int variant = 0; variant < 3; variant++) {
        ddp_config cfg = cfg_default();
        cfg.bucket_cap = cfg.first_bucket_cap = 1; /* with find_unused one bucket per tensor: 4 reductions */
        cfg.find_unused = variant == 1;
        fake_backend fb = {.wr = wr};
        int nb = 0;
        DDP_CHECK(one_sync(wr, cfg, variant ? fake_reduce : NULL, &fb, variant == 2, res->v[variant][rank], &nb));
        res->v[3][rank][3 * variant] = (float)fb.calls;
        res->v[3][rank][3 * variant + 1] = (float)fb.avg_calls;
        res->v[3][rank][3 * variant + 2] = fb.last_in;
    }
    return DDP_OK;
}

static void test_backend_reducer(void)
{
    results *r = run_scenario(3, backend_values);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    for (int k = 0; k < 3; k++) {
        const float *c = r->v[3][k];
        CU_ASSERT_EQUAL(c[3], 5.0f); /* 4 buckets + the find_unused flags */
        CU_ASSERT_EQUAL(c[4], 0.0f);
        CU_ASSERT_EQUAL(c[6], 1.0f); /* without find_unused the first sync is one bucket, averaged by the backend */
        CU_ASSERT_EQUAL(c[7], 1.0f);
        /* The averaging backend got the bucket unscaled: x, where the summing one got x * (1/3) ... */
        CU_ASSERT_EQUAL(test_bits_f(c[8] * (float)(1.0 / 3)), test_bits_f(c[5]));
        CU_ASSERT(c[8] != c[5]);
        /* ... and both give the CPU collectives' bits (PyTorch's multiply by 1/N, then the same sum). */
        CU_ASSERT_EQUAL(memcmp(r->v[0][k], r->v[1][k], sizeof r->v[0][k]), 0);
        CU_ASSERT_EQUAL(memcmp(r->v[0][k], r->v[2][k], sizeof r->v[0][k]), 0);
    }
}

/*
 * PyTorch's buckets on a model larger than 1 MiB: mlp:512-1024-256 has
 * 0.weight [1024, 512] (2 MiB), 0.bias (4 KiB), 2.weight [256, 1024]
 * (1 MiB), 2.bias (1 KiB). Without find_unused the constructor does not
 * bucket (distributed.py _ddp_init_helper, PyTorch >= 1.12: a limit of
 * sys.maxsize): one bucket {0, 1, 2, 3}. The rebuild takes the ready order
 * of the first sync, 2.bias, 2.weight, 0.bias, 0.weight, with the 1 MiB
 * first-bucket cap and 25 MiB after, not reversed: {3, 2} closes at 1 MiB +
 * 1 KiB, and {1, 0} is the rest.
 */
static ddp_status rebuild_layout(world_rank *wr, results *res)
{
    ddp_config cfg = cfg_default();
    model *m = NULL;
    ddp_ref *d = NULL;
    model_batch b;
    DDP_CHECK(model_create("mlp:512-1024-256", 2, &m));
    DDP_CHECK(model_batch_alloc(m, &b));
    model_init(m, 1, world_rank_id(wr));
    DDP_CHECK(ddp_ref_create(&cfg, m, wr, &d));
    DDP_CHECK(ddp_ref_broadcast_params(d));
    float *v = res->v[0][world_rank_id(wr)];
    int members[MODEL_MAX_PARAMS], k = 0;
    /* the layout each forward ran in: a no_sync step (records nothing), the first sync, two more */
    const char *plan = "NSFF";
    for (const char *c = plan; *c; c++) {
        if (*c == 'N')
            DDP_CHECK(ddp_ref_no_sync_enter(d));
        model_batch_fill(m, &b, 1, world_rank_id(wr), (uint64_t)(c - plan));
        DDP_CHECK(ddp_ref_forward(d, &b));
        for (int j = 0; j < ddp_ref_nbuckets(d) && k + 6 < SLOTS; j++) {
            int n = ddp_ref_bucket(d, j, members, MODEL_MAX_PARAMS);
            v[k++] = (float)n;
            for (int q = 0; q < n; q++)
                v[k++] = (float)members[q];
        }
        v[k++] = -1; /* end of this layout */
        DDP_CHECK(ddp_ref_backward(d));
        if (*c == 'N')
            DDP_CHECK(ddp_ref_no_sync_exit(d));
    }
    ddp_ref_destroy(d);
    model_batch_free(&b);
    model_destroy(m);
    return DDP_OK;
}

static void test_bucket_rebuild(void)
{
    results *r = run_scenario(2, rebuild_layout);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    /* per bucket its size and members; -1 ends a layout. Forwards 1 (no_sync) and 2 (the first sync) run in the
     * constructor's layout; forward 3 rebuilds before it runs, from forward 2's ready order; forward 4 keeps it. */
    static const float want[] = {4, 0, 1, 2, 3, -1, 4, 0, 1, 2, 3, -1, 2, 3, 2, 2, 1, 0, -1, 2, 3, 2, 2, 1, 0, -1};
    for (int rank = 0; rank < 2; rank++) {
        CU_ASSERT_EQUAL(r->status[rank], DDP_OK);
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
            CU_ASSERT_EQUAL(r->v[0][rank][i], want[i]);
    }
}

/* ---- GradScaler (scaler.h) ---- */

static void test_scaler_parse(void)
{
    scaler_config c;
    char err[256], back[96];
    CU_ASSERT_EQUAL(scaler_parse("dynamic", &c, err, sizeof err), 0);
    CU_ASSERT(c.on && c.dynamic && c.init == 65536.0f && c.growth == 2.0 && c.backoff == 0.5 && c.interval == 2000);
    CU_ASSERT_EQUAL(scaler_parse("dynamic:1024,4,0.25,3", &c, err, sizeof err), 0);
    CU_ASSERT(c.dynamic && c.init == 1024.0f && c.growth == 4.0 && c.backoff == 0.25 && c.interval == 3);
    scaler_format(&c, back, sizeof back);
    CU_ASSERT_STRING_EQUAL(back, "dynamic:1024,4,0.25,3");
    CU_ASSERT_EQUAL(scaler_parse("dynamic:8", &c, err, sizeof err), 0); /* the rest GradScaler's defaults */
    CU_ASSERT(c.init == 8.0f && c.growth == 2.0 && c.backoff == 0.5 && c.interval == 2000);
    CU_ASSERT_EQUAL(scaler_parse("128", &c, err, sizeof err), 0);
    CU_ASSERT(c.on && !c.dynamic && c.init == 128.0f);
    CU_ASSERT_EQUAL(scaler_parse("0.0625", &c, err, sizeof err), 0);
    scaler_format(&c, back, sizeof back);
    CU_ASSERT_STRING_EQUAL(back, "0.0625");
    static const struct {
        const char *spec, *says;
    } bad[] = {
        {"3", "a power of two"},
        {"0", "a power of two"},
        {"-2", "a power of two"},
        {"inf", "a power of two"},
        {"nan", "a power of two"},
        {"1e39", "a power of two"},
        {"2^3", "expected a scale"},
        {"", "expected a scale"},
        {"dyn", "expected a scale"},
        {"dynamicx", "expected dynamic or"},
        {"dynamic:", "expected dynamic or"},
        {"dynamic:1024,3", "GROWTH 3 is not a power of two above 1"},
        {"dynamic:1024,0.5", "GROWTH 0.5 is not a power of two above 1"},
        {"dynamic:1024,2,0.75", "BACKOFF 0.75 is not a power of two below 1"},
        {"dynamic:1024,2,1", "BACKOFF 1 is not a power of two below 1"},
        {"dynamic:1024,2,0.5,0", "INTERVAL 0 is not a whole number"},
        {"dynamic:1024,2,0.5,2.5", "INTERVAL 2.5 is not a whole number"},
        {"dynamic:1,2,0.5,4,5", "more than INIT,GROWTH,BACKOFF,INTERVAL"},
        {"dynamic:x", "INIT is not a number"},
        {"dynamic:1000", "INIT 1000 is not a power of two"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CU_ASSERT_EQUAL(scaler_parse(bad[i].spec, &c, err, sizeof err), -1);
        if (!strstr(err, bad[i].says))
            printf("\n'%s': '%s' does not say '%s'\n", bad[i].spec, err, bad[i].says);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, bad[i].says));
    }
}

/*
 * GradScaler's update (_amp_update_scale_), hand values: growth after `interval` unskipped steps in a row, backoff and
 * a reset tracker on a skipped one, a growth past float's range not taken (and the tracker reset all the same); a
 * static scale never moves. unscale_: found_inf from inf, -inf or NaN before the product; with inv_scale 1 the
 * values are left as they are (a NaN's payload included).
 */
static void test_scaler_rules(void)
{
    scaler_config c;
    char err[128];
    CU_ASSERT_EQUAL_FATAL(scaler_parse("dynamic:1024,2,0.5,3", &c, err, sizeof err), 0);
    scaler_state s;
    scaler_start(&c, &s);
    static const int found[] = {0, 0, 0, 0, 1, 1, 0, 0, 0};
    static const float want_scale[] = {1024, 1024, 2048, 2048, 1024, 512, 512, 512, 1024};
    static const int want_tracker[] = {1, 2, 0, 1, 0, 0, 1, 2, 0};
    for (int k = 0; k < 9; k++) {
        scaler_update(&c, &s, found[k]);
        CU_ASSERT_EQUAL(s.scale, want_scale[k]);
        CU_ASSERT_EQUAL(s.tracker, want_tracker[k]);
    }
    CU_ASSERT_EQUAL(scaler_inv_scale(1024.0f), 0x1p-10f);
    s.scale = 0x1p127f;
    s.tracker = 2;
    scaler_update(&c, &s, 0);
    CU_ASSERT(s.scale == 0x1p127f && s.tracker == 0);
    scaler_config fixed;
    CU_ASSERT_EQUAL_FATAL(scaler_parse("256", &fixed, err, sizeof err), 0);
    scaler_start(&fixed, &s);
    for (int k = 0; k < 5; k++)
        scaler_update(&fixed, &s, k & 1);
    CU_ASSERT(s.scale == 256.0f && s.tracker == 0);

    float g[4] = {2.0f, -4.0f, 1.0f, 8.0f};
    CU_ASSERT_EQUAL(scaler_unscale(g, 4, 0.5f), 0);
    CU_ASSERT(g[0] == 1.0f && g[1] == -2.0f && g[2] == 0.5f && g[3] == 4.0f);
    float bad[3][3] = {{1, INFINITY, 2}, {1, -INFINITY, 2}, {1, NAN, 2}};
    for (int k = 0; k < 3; k++) {
        CU_ASSERT_EQUAL(scaler_unscale(bad[k], 3, 0.5f), 1);
        CU_ASSERT(bad[k][0] == 0.5f && bad[k][2] == 1.0f);
    }
    uint32_t payload = 0x7fc01234u, after;
    float x;
    memcpy(&x, &payload, sizeof x);
    CU_ASSERT_EQUAL(scaler_unscale(&x, 1, 1.0f), 1);
    memcpy(&after, &x, sizeof after);
    CU_ASSERT_EQUAL(after, payload);
}

/* The token loss (loss_norm.h): windows of three micro-steps (two in no_sync) and of one. */
#define NORM_SCHEDULE "nosync{fwd bwd fwd bwd} fwd bwd step zero fwd bwd step zero"
#define NORM_MODEL "lm:32-8-16"

/*
 * The windows hold each rank's counts as model_row_tokens gives them, ragged as promised (rank 1 sparse, one of
 * its micro-batches without a valid token); the intended factor holds computed with one rounding or two and not
 * three ulps off, inf or NaN, except where there is no token to weigh; a rank-local factor matches its mistake.
 */
static void test_loss_windows(void)
{
    sched s;
    model *m = NULL;
    CU_ASSERT_FATAL(sched_parse(NORM_SCHEDULE, &s) == DDP_OK);
    CU_ASSERT_FATAL(model_create_layout(NORM_MODEL, 4, &m) == DDP_OK);
    loss_windows lw[4];
    for (int r = 0; r < 4; r++)
        CU_ASSERT_FATAL(loss_windows_build(&lw[r], &s, m, 1, 4, r) == DDP_OK);
    CU_ASSERT_EQUAL(lw[0].nbwd, 4);
    CU_ASSERT_EQUAL(lw[0].win_micro_steps[0], 3);
    CU_ASSERT_EQUAL(lw[0].win_micro_steps[1], 1);
    CU_ASSERT_EQUAL(lw[0].bwd_micro[2], 2);
    CU_ASSERT_EQUAL(lw[0].bwd_window[3], 1);
    uint64_t total = 0, own[4] = {0};
    int rows[4], empty_batch = 0;
    for (int r = 0; r < 4; r++)
        for (uint64_t b = 0; b < 3; b++) {
            model_row_tokens(m, 1, r, b, rows);
            uint64_t t = 0;
            for (int j = 0; j < 4; j++)
                t += (uint64_t)rows[j];
            CU_ASSERT_EQUAL(lw[r].bwd_tokens[b], t);
            empty_batch |= t == 0;
            total += t;
            own[r] += t;
        }
    CU_ASSERT_EQUAL(lw[0].win_tokens[0], total);
    CU_ASSERT_EQUAL(lw[2].win_tokens[0], total); /* every rank knows every rank's count */
    CU_ASSERT(empty_batch);
    CU_ASSERT(own[1] < own[0] && own[1] < own[2] && own[1] < own[3]);

    float exact = (float)4 / (float)total, two = (1.0f / (float)total) * 4.0f, off = exact;
    for (int i = 0; i < 3; i++)
        off = nextafterf(off, 1.0f);
    CU_ASSERT(loss_windows_holds(&lw[0], LOSS_NORM_GLOBAL_TOKENS, 0, exact));
    CU_ASSERT(loss_windows_holds(&lw[0], LOSS_NORM_GLOBAL_TOKENS, 0, two));
    CU_ASSERT(!loss_windows_holds(&lw[0], LOSS_NORM_GLOBAL_TOKENS, 0, off));
    CU_ASSERT(!loss_windows_holds(&lw[0], LOSS_NORM_GLOBAL_TOKENS, 0, exact * 1.001f));
    CU_ASSERT(!loss_windows_holds(&lw[0], LOSS_NORM_GLOBAL_TOKENS, 0, INFINITY));
    CU_ASSERT(!loss_windows_holds(&lw[0], LOSS_NORM_GLOBAL_TOKENS, 0, NAN));
    for (size_t b = 0; b < lw[1].nbwd; b++)
        if (lw[1].bwd_tokens[b] == 0) /* nothing to weigh: even a mean over no tokens' inf leaves the zeros */
            CU_ASSERT(loss_windows_holds(&lw[1], LOSS_NORM_MICRO_BATCH_MEAN, b, INFINITY));
    float local = 1.0f / (float)own[0];
    unsigned mk = loss_windows_matches(&lw[0], LOSS_NORM_GLOBAL_TOKENS, 0, local);
    CU_ASSERT(mk & (1u << LOSS_CAND_RANK_WINDOW));
    CU_ASSERT(!(mk & (1u << LOSS_CAND_GLOBAL_TOKENS)));
    CU_ASSERT(!loss_windows_holds(&lw[0], LOSS_NORM_GLOBAL_TOKENS, 0, local));

    /* A replay's windows come from the recorded counts (loss_tokens): the same counts give the same windows, and a
     * count changed moves its window's totals (the counts are what the windows rest on, not the seed). */
    int counts[4 * 4 * 4];
    for (int r = 0; r < 4; r++)
        for (size_t b = 0; b < lw[r].nbwd; b++)
            memcpy(counts + ((size_t)r * 4 + b) * 4, lw[r].bwd_rows + b * 4, 4 * sizeof *counts);
    loss_tokens t = {.rows = 4, .nbwd = 4, .counts = counts};
    loss_windows c;
    CU_ASSERT_FATAL(loss_windows_build_counted(&c, &s, &t, 4, 2) == DDP_OK);
    CU_ASSERT_EQUAL(c.nbwd, lw[2].nbwd);
    CU_ASSERT_EQUAL(c.nwin, lw[2].nwin);
    CU_ASSERT_EQUAL(c.accumulation, lw[2].accumulation);
    for (size_t w = 0; w < c.nwin; w++) {
        CU_ASSERT_EQUAL(c.win_tokens[w], lw[2].win_tokens[w]);
        CU_ASSERT_EQUAL(c.win_empty[w], lw[2].win_empty[w]);
        CU_ASSERT_EQUAL(c.win_rank_tokens[w], lw[2].win_rank_tokens[w]);
    }
    CU_ASSERT(memcmp(c.bwd_rows, lw[2].bwd_rows, 4 * 4 * sizeof *c.bwd_rows) == 0);
    loss_windows_free(&c);
    counts[(0 * 4 + 1) * 4 + 2] += 7; /* rank 0's second micro-batch, third sequence */
    CU_ASSERT_FATAL(loss_windows_build_counted(&c, &s, &t, 4, 2) == DDP_OK);
    CU_ASSERT_EQUAL(c.win_tokens[0], lw[2].win_tokens[0] + 7);
    CU_ASSERT_EQUAL(c.win_rank_tokens[0], lw[2].win_rank_tokens[0]); /* rank 2's own are unchanged */
    CU_ASSERT(!loss_windows_holds(&c, LOSS_NORM_GLOBAL_TOKENS, 0, exact));
    loss_windows_free(&c);
    t.nbwd = 3; /* counts for another schedule */
    CU_ASSERT(loss_windows_build_counted(&c, &s, &t, 4, 2) == DDP_ERR_INVALID);
    loss_windows_free(&c);

    for (int r = 0; r < 4; r++)
        loss_windows_free(&lw[r]);
    model_destroy(m);
    sched_free(&s);
}

/*
 * Global-tokens' meaning, from its definition: on 4 ranks, a window of three micro-steps whose valid tokens T make
 * 4 / T a power of two (a seed is searched for), so that seeding each backward with the factor is exactly the
 * per-token-sum gradient times it. The reference's synced gradient (the factor in each backward, .grad's
 * accumulation, 1/4 before the ordered sum) must then be sum over ranks and micro-steps of the per-token-sum
 * gradients, over T, computed exactly in double, within the recursive sums' proven bound: five float additions per
 * element (two accumulations, three in the sum over ranks), gamma_5 times the sum of the terms' magnitudes, plus
 * 2^-45 of it for the double sums. The same bound tells it apart from a rank-local normalization (each rank's sum
 * over its own tokens), so the comparison can fail.
 */
static ddp_status token_semantics(world_rank *wr, results *res)
{
    const int N = 4, M = 3;
    int rank = world_rank_id(wr);
    sched s;
    DDP_CHECK(sched_parse(NORM_SCHEDULE, &s));
    model *m = NULL, *m1 = NULL;
    ddp_ref *d = NULL;
    model_batch b = {0};
    loss_windows lw = {0};
    double *acc = NULL;
    ddp_config cfg = cfg_default();
    ddp_status st = model_create(NORM_MODEL, 4, &m);
    if (st == DDP_OK)
        st = model_create(NORM_MODEL, 4, &m1);
    uint64_t seed = 0, T = 0;
    for (uint64_t cand = 1; st == DDP_OK && cand < 500 && !seed; cand++) {
        st = loss_windows_build(&lw, &s, m, cand, N, rank);
        T = st == DDP_OK ? lw.win_tokens[0] : 0;
        if (T >= 4 && (T & (T - 1)) == 0)
            seed = cand;
        else
            loss_windows_free(&lw);
    }
    size_t n = m ? model_size(m) : 0;
    if (st == DDP_OK && !seed)
        st = ddp_error(DDP_ERR_INVALID, "no seed below 500 gives a power-of-two token count");
    if (st == DDP_OK && !(acc = calloc(4 * n, sizeof *acc))) /* exact sum, its magnitudes, the local sum, scratch */
        st = ddp_error(DDP_ERR_NOMEM, "test");
    if (st == DDP_OK) {
        model_init(m, 3, rank);
        st = ddp_ref_create(&cfg, m, wr, &d);
    }
    if (st == DDP_OK)
        st = ddp_ref_broadcast_params(d);
    if (st == DDP_OK)
        st = model_batch_alloc(m, &b);
    float f = (float)N / (float)T; /* a power of two: exact */
    double *exact = acc, *mag = acc + n, *local = acc + 2 * n, *scratch = acc + 3 * n;
    for (int k = 0; k < M && st == DDP_OK; k++) {
        model_batch_fill(m, &b, seed, rank, (uint64_t)k);
        /* the per-token-sum gradient of this micro-batch, on a replica with the same parameters */
        memcpy(model_weights(m1), model_weights(m), n * sizeof(float));
        model_zero_grad(m1);
        model_set_token_factor(m1, 1.0f);
        st = model_forward(m1, &b, NULL);
        if (st != DDP_OK)
            break;
        model_backward(m1);
        for (size_t i = 0; i < n; i++) {
            float g = model_grads(m1)[i];
            exact[i] += (double)(f * g);
            mag[i] += fabs((double)(f * g));
            local[i] += (double)g;
        }
        /* the reference: the factor in the backward, no_sync for the first two */
        model_set_token_factor(m, f);
        if (k < M - 1)
            st = ddp_ref_no_sync_enter(d);
        if (st == DDP_OK)
            st = ddp_ref_forward(d, &b);
        if (st == DDP_OK)
            st = ddp_ref_backward(d);
        if (st == DDP_OK && k < M - 1)
            st = ddp_ref_no_sync_exit(d);
    }
    if (st == DDP_OK) {
        uint64_t own = lw.win_rank_tokens[0];
        for (size_t i = 0; i < n; i++) /* the rank-local normalization: this rank's sum over its own tokens */
            scratch[i] = own ? local[i] / (double)own : 0;
        st = coll_allreduce(wr, acc, 2 * n, COLL_DOUBLE, COLL_SUM, COLL_ORDERED);
    }
    if (st == DDP_OK)
        st = coll_allreduce(wr, scratch, n, COLL_DOUBLE, COLL_SUM, COLL_ORDERED);
    if (st == DDP_OK) {
        const double u = 0x1p-24, gamma5 = 5 * u / (1 - 5 * u);
        float outside = 0, informative = 0, tells_apart = 0;
        for (size_t i = 0; i < n; i++) {
            double want = exact[i] / N, bound = (gamma5 + 0x1p-45) * mag[i] / N, got = model_grads(m)[i];
            outside += fabs(got - want) > bound;
            informative += fabs(want) > bound;
            tells_apart += fabs(got - scratch[i] / N) > bound;
        }
        res->v[0][rank][0] = outside;
        res->v[0][rank][1] = informative;
        res->v[0][rank][2] = tells_apart;
        res->v[0][rank][3] = (float)n;
        res->v[0][rank][4] = (float)ddp_ref_last_synced(d);
    }
    free(acc);
    loss_windows_free(&lw);
    model_batch_free(&b);
    ddp_ref_destroy(d);
    model_destroy(m1);
    model_destroy(m);
    sched_free(&s);
    return st;
}

static void test_global_tokens_semantics(void)
{
    results *r = run_scenario(4, token_semantics);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    for (int rank = 0; rank < 4; rank++) {
        if (r->status[rank] != DDP_OK)
            fprintf(stderr, "  rank %d: %s\n", rank, r->error[rank]);
        CU_ASSERT_EQUAL(r->status[rank], DDP_OK);
        const float *v = r->v[0][rank];
        CU_ASSERT_EQUAL(v[0], 0);              /* every element within the bound of the exact gradient */
        CU_ASSERT(v[1] > v[3] / 2);            /* ... a bound smaller than most of the values themselves */
        CU_ASSERT(v[2] > v[3] / 2);            /* ... which the rank-local normalization falls outside of */
        CU_ASSERT_EQUAL(v[4], 1);              /* the window's last backward synced */
    }
}

int main(void)
{
    static const test_entry tests[] = {
        {"broadcast, decision at forward, accumulation, step, zero_grad (hand values)", test_decisions},
        {"arming: a forward outside no_sync arms the next backward, one inside leaves it; nested no_sync; fwd bwd bwd "
         "refused (hand values)",
         test_arming},
        {"1/N before the sum; gradient_as_bucket_view multiplies at the first sync, divides after, multiplies again "
         "after zero_grad(set_to_none)",
         test_scale_before_sum},
        {"find_unused before 2.4: a defined .grad no rank used is averaged with the bucket view, kept without",
         test_unused_with_bucket_view},
        {"find_unused: across ranks, across the window, unused everywhere; error without it",
         test_unused_parameters},
        {"communication hooks: float16 and bfloat16 roundings, the prelude, ordered and exact sums (hand values)",
         test_comm_hook_arithmetic},
        {"bucket assignment", test_bucket_assignment},
        {"bucket sizes change no value (ordered)", test_buckets_change_no_value},
        {"buckets are rebuilt after the first sync in ready order (hand layout of a 3.3 MiB model)",
         test_bucket_rebuild},
        {"a backend reducer gets every reduction; an averaging one gets unscaled buckets", test_backend_reducer},
        {"GradScaler's spec: dynamic[:INIT,GROWTH,BACKOFF,INTERVAL] or a static scale, powers of two; bad ones say why",
         test_scaler_parse},
        {"GradScaler's update, unscale and found_inf (hand values)", test_scaler_rules},
        {"the token loss's windows: ragged counts, the factors that hold and the mistakes they match",
         test_loss_windows},
        {"global-tokens: the synced gradient is every token's loss gradient over the window's tokens (proven bound), "
         "and not a rank-local mean's",
         test_global_tokens_semantics},
        TEST_END,
    };
    return test_run_suite("ddp reference", tests);
}
