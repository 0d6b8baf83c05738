/*
 * test_checks.c - what a run checks besides the gradients at a grab, each
 * shown firing on an implementation that only it can catch: the parameters
 * after every step and at the end, and the implementation's ranks holding
 * the same bits after every syncing backward whatever the tolerance.
 *
 * The implementations here are the built-in bucketed one with one thing
 * changed after its own callback ran (a wrapper), so that nothing but that
 * change can make them fail, and a DDP that syncs from one hook.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "impl.h"
#include "judge.h"
#include "testutil.h"
#include "verify.h"

typedef enum { BREAK_NOTHING, BREAK_STEP_WRITES_PARAM, BREAK_RANK1_ONE_ULP, BREAK_STEP_ONE_ULP } breakage;

typedef struct wrapped {
    const ddpsim_services *svc;
    void *inner;
} wrapped;

static breakage current; /* set before each run; the ranks are forked after */

static int w_create(const ddpsim_services *svc, void **state)
{
    wrapped *w = calloc(1, sizeof *w);
    if (!w)
        return svc->set_error(svc->env, "out of memory");
    w->svc = svc;
    *state = w;
    return impl_bucketed_ops.create(svc, &w->inner);
}

static void w_destroy(void *state)
{
    wrapped *w = state;
    impl_bucketed_ops.destroy(w->inner);
    free(w);
}

static int w_forward_begin(void *state, int no_sync) { return impl_bucketed_ops.forward_begin(((wrapped *)state)->inner, no_sync); }
static int w_enter(void *state) { return impl_bucketed_ops.no_sync_enter(((wrapped *)state)->inner); }
static int w_exit(void *state) { return impl_bucketed_ops.no_sync_exit(((wrapped *)state)->inner); }
static int w_ready(void *state, int p) { return impl_bucketed_ops.grad_ready(((wrapped *)state)->inner, p); }
static int w_zero(void *state) { return impl_bucketed_ops.zero_grad(((wrapped *)state)->inner); }

/* Rank 1's first gradient element one ulp up after every backward: within any tolerance but ulp 0. */
static int w_backward_end(void *state)
{
    wrapped *w = state;
    int rc = impl_bucketed_ops.backward_end(w->inner);
    if (current == BREAK_RANK1_ONE_ULP && w->svc->rank == 1)
        w->svc->all_grads[0] = nextafterf(w->svc->all_grads[0], INFINITY);
    return rc;
}

/* A step that also moves one parameter of rank 1: nothing but the parameters shows it. */
static int w_step(void *state)
{
    wrapped *w = state;
    int rc = impl_bucketed_ops.step(w->inner);
    if (current == BREAK_STEP_WRITES_PARAM && w->svc->rank == 1)
        w->svc->params[1].data[2] += 0.25f;
    if (current == BREAK_STEP_ONE_ULP)
        for (int p = 0; p < w->svc->nparams; p++)
            for (size_t i = 0; i < w->svc->params[p].count; i++)
                w->svc->params[p].data[i] = nextafterf(w->svc->params[p].data[i], INFINITY);
    return rc;
}

static const ddpsim_impl_ops wrapped_ops = {
    .api_version = DDPSIM_IMPL_API_VERSION,
    .name = "wrapped-bucketed",
    .description = "bucketed with one thing broken",
    .create = w_create,
    .destroy = w_destroy,
    .forward_begin = w_forward_begin,
    .no_sync_enter = w_enter,
    .no_sync_exit = w_exit,
    .grad_ready = w_ready,
    .backward_end = w_backward_end,
    .zero_grad = w_zero,
    .step = w_step,
};

/* Run the wrapped implementation with breakage b on schedule text and tolerance tol; judge it into j. */
static void run(breakage b, const char *schedule, const char *tol, int nranks, judgement *j, verify_result *res)
{
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse(schedule, &s), DDP_OK);
    verify_config c;
    test_verify_config(&c, &s, &wrapped_ops);
    c.nranks = nranks;
    CU_ASSERT_EQUAL_FATAL(tol_parse(tol, &c.tol), DDP_OK);
    current = b;
    CU_ASSERT_EQUAL_FATAL(verify_run(&c, res), DDP_OK);
    judge_run(res, j);
    sched_free(&s);
}

static void test_unbroken_passes(void)
{
    judgement j;
    verify_result res;
    run(BREAK_NOTHING, SCHED_DEFAULT, "bitwise", 3, &j, &res);
    CU_ASSERT_EQUAL(j.verdict, JUDGE_PASS);
    CU_ASSERT_EQUAL(j.params_checked, 5); /* four steps and the end */
    CU_ASSERT_EQUAL(j.agreement_syncs, 4);
    verify_result_free(&res);
}

/*
 * The step writes a parameter and no grab follows it: only the parameters
 * check sees it, at the step, on rank 1, in 0.bias element 2.
 */
static void test_step_is_checked(void)
{
    judgement j;
    verify_result res;
    run(BREAK_STEP_WRITES_PARAM, "fwd bwd grab step", "bitwise", 3, &j, &res);
    CU_ASSERT_EQUAL(j.verdict, JUDGE_DIVERGES);
    CU_ASSERT_EQUAL(j.grabs_failed, 0);
    CU_ASSERT_EQUAL(j.params_failed, 1); /* after the step; the end is judged from the parameters it wrote */
    CU_ASSERT_PTR_NOT_NULL_FATAL(j.first);
    CU_ASSERT_EQUAL(res.checks[j.first_check].kind, CHECK_PARAMS);
    CU_ASSERT_EQUAL(res.checks[j.first_check].index, 0);
    CU_ASSERT_EQUAL(j.first_rank, 1);
    CU_ASSERT_EQUAL(j.first->first_param, 1);
    CU_ASSERT_EQUAL(j.first->first_index, 2);
    char buf[128];
    CU_ASSERT_STRING_EQUAL(judge_summary(&j, NULL, buf, sizeof buf), "step 0, rank 1, #1[2]");
    verify_result_free(&res);
}

/*
 * Rank 1 is one ulp off after every backward. Against a loose tolerance
 * every grab matches; the ranks' disagreement still fails the run, named by
 * rank, parameter and element. Bitwise, the grab fails first.
 */
static void test_ranks_must_agree(void)
{
    judgement j;
    verify_result res;
    run(BREAK_RANK1_ONE_ULP, SCHED_DEFAULT, "ulp:4", 3, &j, &res);
    CU_ASSERT_EQUAL(j.checks_failed, 0);
    CU_ASSERT_EQUAL(j.verdict, JUDGE_RANKS_DISAGREE);
    CU_ASSERT_EQUAL(j.disagree_rank, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j.disagree);
    CU_ASSERT_EQUAL(j.disagree->param, 0);
    CU_ASSERT_EQUAL(j.disagree->index, 0);
    CU_ASSERT_EQUAL(test_bits_f(j.disagree->mine), test_bits_f(nextafterf(j.disagree->rank0, INFINITY)));
    CU_ASSERT_EQUAL(res.agreement[0].differs, 0);
    CU_ASSERT_EQUAL(res.agreement[2].differs, 0);
    CU_ASSERT_EQUAL(j.agreement_syncs, 4); /* every sync was still compared */
    verify_result_free(&res);
    run(BREAK_RANK1_ONE_ULP, SCHED_DEFAULT, "bitwise", 3, &j, &res);
    CU_ASSERT_EQUAL(j.verdict, JUDGE_DIVERGES);
    CU_ASSERT_EQUAL(j.first_rank, 1);
    CU_ASSERT_PTR_NOT_NULL(j.disagree);
    verify_result_free(&res);
}

/*
 * A step one ulp off on every parameter: bitwise that fails at every step,
 * and only there: after a failed check the reference takes the
 * implementation's parameters (doc/SEMANTICS.md "After a divergence"), so
 * each step is judged on its own and the gradients from them match. Within
 * ulp:1 each step passes, and because a passing check hands the
 * reference's parameters to the implementation, the drift never adds up
 * either. Without that, 8 steps would put the parameters 8 ulps off and
 * every later gradient would differ.
 */
static void test_params_rebased(void)
{
    judgement j;
    verify_result res;
    run(BREAK_STEP_ONE_ULP, "8*(fwd bwd grab step)", "bitwise", 2, &j, &res);
    CU_ASSERT_EQUAL(j.verdict, JUDGE_DIVERGES);
    CU_ASSERT_EQUAL(res.checks[j.first_check].kind, CHECK_PARAMS);
    CU_ASSERT_EQUAL(j.params_failed, 8); /* every step; not the end */
    CU_ASSERT_EQUAL(j.grabs_failed, 0);  /* each from the parameters the implementation stepped to */
    verify_result_free(&res);
    run(BREAK_STEP_ONE_ULP, "8*(fwd bwd grab step)", "ulp:1", 2, &j, &res);
    CU_ASSERT_EQUAL(j.verdict, JUDGE_PASS);
    CU_ASSERT_EQUAL(j.params_checked, 9);
    for (size_t k = 0; k < res.nchecks; k++)
        CU_ASSERT(verify_at(&res, k, 0)->max_ulp <= 1);
    verify_result_free(&res);
}

/*
 * Gradients appear when backward produces them, each with its ready event
 * at once. An implementation that syncs every gradient from the hook of
 * one parameter is right only if that parameter's gradient is the last one
 * backward produces (registered first: 0.weight), and wrong from the hook
 * of the first produced (registered last), where the others are still
 * incomplete: the mistake of hooking the "last" parameter.
 */
typedef struct hooked {
    const ddpsim_services *svc;
    int sync, trigger;
} hooked;

static int hook_trigger; /* set before each run */

static int h_create(const ddpsim_services *svc, void **state)
{
    hooked *h = calloc(1, sizeof *h);
    if (!h)
        return svc->set_error(svc->env, "out of memory");
    h->svc = svc;
    h->trigger = hook_trigger < 0 ? svc->nparams - 1 : hook_trigger;
    *state = h;
    for (int p = 0; p < svc->nparams; p++)
        if (svc->broadcast(svc->env, svc->params[p].data, svc->params[p].count * sizeof(float), 0))
            return -1;
    return 0;
}

static void h_destroy(void *state) { free(state); }
static int h_forward_begin(void *state, int no_sync)
{
    ((hooked *)state)->sync = !no_sync;
    return 0;
}
static int h_nothing(void *state)
{
    (void)state;
    return 0;
}

static int h_ready(void *state, int p)
{
    hooked *h = state;
    const ddpsim_services *svc = h->svc;
    if (!h->sync || p != h->trigger)
        return 0;
    float inv = (float)(1.0 / svc->world_size);
    for (size_t i = 0; i < svc->total_count; i++)
        svc->all_grads[i] *= inv;
    return svc->allreduce_sum(svc->env, svc->all_grads, svc->total_count);
}

static const ddpsim_impl_ops hooked_ops = {
    .api_version = DDPSIM_IMPL_API_VERSION,
    .name = "hooked",
    .description = "syncs every gradient from one parameter's hook",
    .create = h_create,
    .destroy = h_destroy,
    .forward_begin = h_forward_begin,
    .no_sync_enter = h_nothing,
    .no_sync_exit = h_nothing,
    .grad_ready = h_ready,
    .backward_end = h_nothing,
    .zero_grad = h_nothing,
    .step = h_nothing,
};

static judge_verdict run_hooked(int trigger, uint64_t chaos)
{
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse(SCHED_DEFAULT, &s), DDP_OK);
    verify_config c;
    test_verify_config(&c, &s, &hooked_ops);
    c.nranks = 3;
    c.chaos = chaos != 0;
    c.chaos_seed = chaos;
    hook_trigger = trigger;
    verify_result res;
    judge_verdict v = JUDGE_REFERENCE_BAD;
    if (verify_run(&c, &res) == DDP_OK) {
        judgement j;
        judge_run(&res, &j);
        v = j.verdict;
    }
    verify_result_free(&res);
    sched_free(&s);
    return v;
}

static void test_gradients_appear_in_backward(void)
{
    CU_ASSERT_EQUAL(run_hooked(0, 0), JUDGE_PASS);      /* the last gradient produced: all are complete */
    CU_ASSERT_EQUAL(run_hooked(0, 5), JUDGE_PASS);      /* under chaos too: events never come early */
    CU_ASSERT_EQUAL(run_hooked(-1, 0), JUDGE_DIVERGES); /* the first produced: the rest are not there yet */
}

int main(void)
{
    static const test_entry tests[] = {
        {"the unbroken wrapper passes, with every step and every sync checked", test_unbroken_passes},
        {"a step that writes a parameter is caught at the step", test_step_is_checked},
        {"the implementation's ranks must hold the same bits after a sync, whatever the tolerance",
         test_ranks_must_agree},
        {"within a tolerance, parameters are rebased on the reference's after each checked step", test_params_rebased},
        {"gradients appear as backward produces them: syncing from the first one's hook is caught",
         test_gradients_appear_in_backward},
        TEST_END,
    };
    return test_run_suite("checks beyond the grabs", tests);
}
