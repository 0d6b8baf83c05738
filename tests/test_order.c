/*
 * test_order.c - the order tolerance (budget.h) both ways: every correct
 * reordering of DDP's sum (tests/plugin/reorder.c: reverse, pairwise tree,
 * double accumulation, NCCL's ring order) passes on every built-in model
 * at 2 to 16 ranks, while bitwise sees that they differ; and its bound is
 * arithmetic, checked here on hand values.
 *
 * That every catalogued bug which is not bitwise-only still fails under
 * order is test_impls' catalogue test (the catalogue's loose tolerance is
 * order).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "budget.h"
#include "clip.h"
#include "impl.h"
#include "judge.h"
#include "testutil.h"
#include "tolerance.h"
#include "verify.h"

#ifndef PLUGIN_DIR
#define PLUGIN_DIR "tests/plugin"
#endif

/* Windows of 1 to 3, a sync right after a sync, steps, and the no_sync edges. */
#define ORDER_SCHEDULE                                                                                     \
    "2*( 3*( nosync{fwd bwd} grab ) fwd bwd grab fwd bwd grab step zero fwd bwd grab step zero ) enter fwd " \
    "exit bwd grab fwd enter bwd exit grab"

static const char *const plugins[] = {"reverse", "pairwise", "double", "ring"};
static const struct {
    const char *spec;
    int find_unused;
} models[] = {{"mlp", 0}, {"mlp:13-7-5", 0}, {"attn", 0}, {"branchy", 1}};
static const int ranks[] = {2, 3, 5, 8, 16};

/* Run one configuration; the verdict, and the worst |impl - ref| over its bound seen at any check. */
static judge_verdict run_with(const ddpsim_impl_ops *ops, const char *spec, int find_unused, int n, const char *tol,
                              float momentum, int adamw, double *worst)
{
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse(ORDER_SCHEDULE, &s), DDP_OK);
    verify_config c;
    test_verify_config(&c, &s, ops);
    c.model_spec = spec;
    c.ddp.find_unused = find_unused;
    c.nranks = n;
    c.ddp.momentum = momentum;
    if (adamw)
        c.ddp.adamw = ddp_adamw_default();
    CU_ASSERT_EQUAL_FATAL(tol_parse(tol, &c.tol), DDP_OK);
    verify_result res;
    judge_verdict v = JUDGE_REFERENCE_BAD;
    if (verify_run(&c, &res) == DDP_OK) {
        judgement j;
        judge_run(&res, &j);
        v = j.verdict;
        *worst = 0;
        for (size_t k = 0; k < res.nchecks * (size_t)n; k++)
            if (res.records[k].bound_ratio > *worst)
                *worst = res.records[k].bound_ratio;
    } else {
        fprintf(stderr, "  %s, %s, %d ranks: %s\n", ops->name, spec, n, ddp_error_last());
    }
    verify_result_free(&res);
    sched_free(&s);
    return v;
}

static judge_verdict run(const ddpsim_impl_ops *ops, const char *spec, int find_unused, int n, const char *tol,
                         double *worst)
{
    return run_with(ops, spec, find_unused, n, tol, 0, 0, worst);
}

static void test_reorderings_pass(void)
{
    int runs = 0, failed = 0, bitwise_differs = 0, bitwise_runs = 0;
    double worst = 0;
    for (size_t p = 0; p < sizeof plugins / sizeof plugins[0]; p++) {
        char path[256];
        snprintf(path, sizeof path, PLUGIN_DIR "/libreorder_%s.so", plugins[p]);
        impl_handle h;
        CU_ASSERT_EQUAL_FATAL(impl_open(path, &h), DDP_OK);
        for (size_t m = 0; m < sizeof models / sizeof models[0]; m++)
            for (size_t r = 0; r < sizeof ranks / sizeof ranks[0]; r++) {
                double w = 0;
                judge_verdict v = run(h.ops, models[m].spec, models[m].find_unused, ranks[r], "order", &w);
                runs++;
                if (v != JUDGE_PASS) {
                    failed++;
                    fprintf(stderr, "  %s on %s at %d ranks: verdict %d under order\n", plugins[p], models[m].spec,
                            ranks[r], (int)v);
                }
                if (w > worst)
                    worst = w;
                if (ranks[r] >= 3 && strcmp(plugins[p], "pairwise") != 0) {
                    /* Orders differ from the reference's from 3 ranks on (a pairwise tree of 3 is (0+1)+2 too). */
                    double unused;
                    bitwise_runs++;
                    bitwise_differs +=
                        run(h.ops, models[m].spec, models[m].find_unused, ranks[r], "bitwise", &unused) == JUDGE_DIVERGES;
                }
            }
        impl_close(&h);
    }
    printf("\n  %d runs under order, worst |impl - ref| %.3g of its bound; bitwise differs in %d of %d\n", runs, worst,
           bitwise_differs, bitwise_runs);
    CU_ASSERT_EQUAL(runs, 80);
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT(worst > 0 && worst <= 1);
    CU_ASSERT(bitwise_differs >= bitwise_runs * 3 / 4); /* the reorderings really reorder */
}

/* The bound on hand values: a sync of two ranks, then an accumulation, then zero_grad. */
static void test_bound_arithmetic(void)
{
    order_budget b;
    CU_ASSERT_EQUAL_FATAL(budget_init(&b, 2, 2, DDP_HOOK_NONE), DDP_OK);
    const float g[2] = {3.0f, -1.0f};
    budget_before_sync(&b, g);
    double gm = tol_gamma(3, TOL_U_FLOAT);
    /* E = 0 before any sync: the contribution is 2 gamma(N+1) |g| */
    CU_ASSERT(fabs(b.v[0] - 2 * gm * 3) <= 2 * gm * 3 * 1e-6);
    CU_ASSERT(b.v[0] >= 2 * gm * 3 && b.v[1] >= 2 * gm * 1);
    budget_zero(&b);
    CU_ASSERT_EQUAL(b.any, 0);
    /* An accumulation with E = 0 keeps E = 0 (the same local gradient on both sides); with E > 0 it grows. */
    model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(model_create_layout("mlp:1-1", 1, &m), DDP_OK); /* 0.weight, 0.bias: one element each */
    const unsigned char used[2] = {1, 1};
    budget_accumulate(&b, m, g, used);
    CU_ASSERT_EQUAL(b.E[0], 0.0f);
    b.E[0] = 1e-6f;
    b.any = 1;
    budget_accumulate(&b, m, g, used);
    double want = 1e-6 * (1 + TOL_U_FLOAT) + 2 * TOL_U_FLOAT * 3 / (1 - TOL_U_FLOAT);
    CU_ASSERT(b.E[0] >= want && b.E[0] <= want * (1 + 1e-6));
    CU_ASSERT_EQUAL(b.E[1], 0.0f); /* E stayed 0 there */
    /* The parameters' bound covers the update's two roundings even with equal gradients. */
    float w[2] = {1.0f, 0.5f}, out[2];
    b.E[0] = 0;
    budget_step(0.1f, b.E, g, w, 2, out);
    CU_ASSERT(out[0] >= 2 * TOL_U_FLOAT * (1.0 + 0.1 * 3));
    CU_ASSERT(out[0] < 4 * TOL_U_FLOAT * (1.0 + 0.1 * 3));
    /* The gradients' bound goes through lr only when the gradients were judged by it. */
    float with[2], without[2];
    b.E[0] = 1e-3f;
    budget_step(0.1f, b.E, g, w, 2, with);
    budget_step(0.1f, NULL, g, w, 2, without);
    CU_ASSERT(with[0] >= out[0] + 0.1f * 1e-3f * 0.999f);
    CU_ASSERT_EQUAL(without[0], out[0]);
    model_destroy(m);
    budget_free(&b);
}

/*
 * A stateful step (SGD with momentum, or AdamW): three reorderings pass order through five steps of carried state
 * on three models at each of the ranks `at`, the worst element within its bound, and bitwise still sees them.
 */
static void stateful_reorderings_pass(const char *what, float momentum, int adamw, const int *at, size_t nat)
{
    static const char *const which[] = {"reverse", "double", "ring"};
    int runs = 0, failed = 0, differs = 0;
    double worst = 0;
    for (size_t p = 0; p < sizeof which / sizeof which[0]; p++) {
        char path[256];
        snprintf(path, sizeof path, PLUGIN_DIR "/libreorder_%s.so", which[p]);
        impl_handle h;
        CU_ASSERT_EQUAL_FATAL(impl_open(path, &h), DDP_OK);
        for (size_t m = 0; m < 3; m++)
            for (size_t r = 0; r < nat; r++) {
                double w = 0, unused;
                runs++;
                if (run_with(h.ops, models[m].spec, models[m].find_unused, at[r], "order", momentum, adamw, &w) !=
                    JUDGE_PASS) {
                    failed++;
                    fprintf(stderr, "  %s on %s at %d ranks, %s: not a pass under order\n", which[p], models[m].spec,
                            at[r], what);
                }
                worst = w > worst ? w : worst;
                differs += run_with(h.ops, models[m].spec, models[m].find_unused, at[r], "bitwise", momentum, adamw,
                                    &unused) == JUDGE_DIVERGES;
            }
        impl_close(&h);
    }
    printf("\n  %d runs with %s under order, worst |impl - ref| %.3g of its bound; bitwise differs in %d\n", runs, what,
           worst, differs);
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT(worst > 0 && worst <= 1);
    CU_ASSERT(differs >= runs * 3 / 4);
}

static void test_momentum_reorderings_pass(void)
{
    static const int at[] = {3, 8};
    stateful_reorderings_pass("momentum 0.9", 0.9f, 0, at, 2);
}

static void test_adamw_reorderings_pass(void)
{
    static const int at[] = {5};
    stateful_reorderings_pass("AdamW", 0, 1, at, 1);
}

/* A deterministic generator for the trials below (xorshift64*), uniform in [-1, 1). */
static double uniform(uint64_t *x)
{
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return (double)((*x * 0x2545F4914F6CDD1DULL) >> 11) * 0x1p-52 - 1.0;
}

/*
 * The momentum step as torch.optim.SGD takes it (the buffer a copy at the first step, then two roundings; a None
 * .grad skipped), and budget_momentum's bound: it holds for buffers and gradients anywhere within their bounds
 * (random trials, subnormal magnitudes among them), and is not loose: the worst trial uses a good part of it,
 * and with exact inputs it is a few units in the last place.
 */
static void test_momentum_step_and_bound(void)
{
    model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(model_create_layout("mlp:1-1", 1, &m), DDP_OK); /* 0.weight, 0.bias: one element each */
    ddp_optim o;
    CU_ASSERT_EQUAL_FATAL(ddp_optim_init(&o, 0.1f, 0.9f, NULL, 2), DDP_OK);
    float w[2] = {1.0f, 2.0f}, g[2] = {-0.0f, 0.3f};
    const unsigned char both[2] = {1, 1}, bias_none[2] = {1, 0};
    ddp_optim_step(&o, m, both, w, g);
    CU_ASSERT(o.buf[0] == 0 && signbit(o.buf[0])); /* a copy: -0 stays -0 */
    CU_ASSERT_EQUAL(o.last[1], OPTIM_STARTED);
    volatile float b1 = 0.3f, p1 = 2.0f + -0.1f * b1;
    CU_ASSERT_EQUAL(w[1], p1);
    g[1] = 0.7f;
    ddp_optim_step(&o, m, both, w, g);
    volatile float decayed = 0.9f * b1, b2 = decayed + 0.7f, p2 = p1 + -0.1f * b2;
    CU_ASSERT_EQUAL(o.buf[1], b2);
    CU_ASSERT_EQUAL(w[1], p2);
    CU_ASSERT_EQUAL(o.prev[1], b1);
    CU_ASSERT_EQUAL(o.last[1], OPTIM_ADVANCED);
    ddp_optim_step(&o, m, bias_none, w, g); /* the bias's .grad is None: nothing moves */
    CU_ASSERT_EQUAL(o.buf[1], b2);
    CU_ASSERT_EQUAL(w[1], p2);
    CU_ASSERT_EQUAL(o.last[1], OPTIM_SKIPPED);
    CU_ASSERT_EQUAL(ddp_optim_direction(&o, g), o.buf);
    ddp_optim_free(&o);
    model_destroy(m);

    /* The bound, on one element advanced many times over. */
    enum { TRIALS = 200000 };
    const float mom = 0.9f;
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    int covered = 0, ran = 0;
    double worst = 0;
    for (int t = 0; t < TRIALS; t++) {
        double scale = ldexp(1.0, (int)(uniform(&x) * 140)); /* 2^-140 .. 2^140: subnormal products too */
        if (scale > 0x1p100)
            scale = 0x1p100; /* finite sums */
        float b_ref = (float)(uniform(&x) * scale), g_ref = (float)(uniform(&x) * scale);
        float B = (float)(fabs(uniform(&x)) * 1e-6 * fabs(b_ref)), E = (float)(fabs(uniform(&x)) * 1e-6 * fabs(g_ref));
        float b_impl = (float)(b_ref + uniform(&x) * B), g_impl = (float)(g_ref + uniform(&x) * E);
        if (fabs((double)b_impl - b_ref) > B || fabs((double)g_impl - g_ref) > E)
            continue; /* rounded out of its bound: not a trial of it */
        ddp_optim one = {.momentum = mom, .n = 1, .prev = &b_ref, .last = (unsigned char[]){OPTIM_ADVANCED}};
        float out = B;
        budget_momentum(&one, &g_ref, &E, &out);
        volatile float dr = mom * b_ref, di = mom * b_impl;
        float r = dr + g_ref, i = di + g_impl;
        double d = fabs((double)r - (double)i);
        ran++;
        covered += d <= out;
        if (out > 0 && d / out > worst)
            worst = d / out;
    }
    printf("\n  momentum bound: %d trials, worst |impl - ref| %.3g of it\n", ran, worst);
    CU_ASSERT(ran > TRIALS / 2);
    CU_ASSERT_EQUAL(covered, ran);
    CU_ASSERT(worst <= 1);
    CU_ASSERT(worst > 0.25); /* tight enough to matter */
    /* Exact inputs: the two sides' roundings alone, a few ulps of the result; the bound is not a blanket. */
    ddp_optim one = {.momentum = mom, .n = 1, .prev = (float[]){1.0f}, .last = (unsigned char[]){OPTIM_ADVANCED}};
    float out = 0;
    budget_momentum(&one, (const float[]){1.0f}, NULL, &out);
    CU_ASSERT(out > 0 && out < 16 * TOL_U_FLOAT * 1.9);
    /* A fresh buffer is a copy of the gradient: its bound is the gradient's. */
    one.last[0] = OPTIM_STARTED;
    budget_momentum(&one, (const float[]){1.0f}, (const float[]){3e-7f}, &out);
    CU_ASSERT_EQUAL(out, 3e-7f);
}

/* Other ways of rounding AdamW's rule (budget_adamw says which it covers), and a wrong rule. */
enum { ADAM_FMA, ADAM_LERP, ADAM_DOUBLE, ADAM_NVARIANTS, ADAM_STEP_BEHIND = ADAM_NVARIANTS };

/* One element's AdamW step by variant k, with t its count (the scalars as torch computes them). */
static void adamw_variant(int k, const ddp_adamw *a, float lr, uint32_t t, float *w, float *m, float *v, float g)
{
    ddp_adamw_scalars s = ddp_adamw_scalars_at(a, lr, k == ADAM_STEP_BEHIND && t > 1 ? t - 1 : t);
    switch (k) {
    case ADAM_FMA: { /* a CPU kernel's fused multiply-adds: one rounding where two were */
        float p = *w * s.decay;
        *m = fmaf(s.a1, g, s.b1 * *m);
        *v = fmaf(s.a2 * g, g, s.b2 * *v);
        float d = sqrtf(*v) / s.c2 + s.eps;
        *w = fmaf(s.neg_step, *m / d, p);
        return;
    }
    case ADAM_LERP: { /* torch 2.x: exp_avg.lerp_(g, 1 - b1), its kernel's two branches; addcdiv as value * (m / d) */
        float p = *w * s.decay;
        *m = s.a1 < 0.5f ? *m + s.a1 * (g - *m) : g - (g - *m) * (1.0f - s.a1);
        float vb = s.b2 * *v;
        *v = vb + s.a2 * (g * g);
        float d = sqrtf(*v) / s.c2 + s.eps;
        *w = p + s.neg_step * (*m / d);
        return;
    }
    case ADAM_DOUBLE: { /* each tensor op in double, rounded once to float */
        double bc1 = 1 - pow(a->beta1, t), bc2 = 1 - pow(a->beta2, t);
        double p = (double)*w * (1 - (double)lr * a->weight_decay);
        *m = (float)(a->beta1 * *m + (1 - a->beta1) * g);
        *v = (float)(a->beta2 * *v + (1 - a->beta2) * (double)g * g);
        double d = sqrt((double)*v) / sqrt(bc2) + a->eps;
        *w = (float)(p - (double)lr / bc1 * *m / d);
        return;
    }
    default: ddp_adamw_element(&s, w, m, v, g); /* ADAM_STEP_BEHIND: the bias corrections of the step before */
    }
}

/*
 * AdamW as torch.optim.AdamW takes it, and budget_adamw's bound: through runs of carried steps, every other rounding
 * of the rule (fused, lerp, double) stays within the bound of the parameters and of both moments, with gradients
 * anywhere within their own bound; with exact inputs it is a few units in the last place; and a wrong rule (the
 * bias corrections one step behind) breaks it.
 */
static void test_adamw_step_and_bound(void)
{
    model *mdl = NULL;
    CU_ASSERT_EQUAL_FATAL(model_create_layout("mlp:1-1", 1, &mdl), DDP_OK);
    ddp_adamw a = ddp_adamw_default();
    ddp_optim o;
    CU_ASSERT_EQUAL_FATAL(ddp_optim_init(&o, 0.1f, 0.9f, &a, 2), DDP_OK);
    CU_ASSERT_EQUAL(o.momentum, 0); /* AdamW has no SGD momentum */
    float w[2] = {1.0f, 2.0f}, g[2] = {0.5f, -0.25f};
    const unsigned char both[2] = {1, 1}, bias_none[2] = {1, 0};
    ddp_optim_step(&o, mdl, both, w, g);
    /* step 1 by hand: m = 0.1 g, v = 0.001 g^2, bias corrections 0.1 and 0.001 */
    volatile float p = 2.0f * (float)(1 - 0.1 * 0.01), mm = 0.1f * -0.25f, vv = ((float)(1 - 0.999) * -0.25f) * -0.25f;
    volatile float d = sqrtf(vv) / (float)sqrt(1 - 0.999) + 1e-8f, want = p + ((float)(-0.1 / (1 - 0.9)) * mm) / d;
    CU_ASSERT_EQUAL(o.buf[1], mm);
    CU_ASSERT_EQUAL(o.sq[1], vv);
    CU_ASSERT_EQUAL(w[1], want);
    CU_ASSERT(fabs(w[1] - (2.0 * 0.999 + 0.1)) < 1e-5); /* the first step moves by lr * sign(g) */
    float before = w[1];
    ddp_optim_step(&o, mdl, bias_none, w, g); /* the bias's .grad is None: skipped, count and all */
    CU_ASSERT_EQUAL(w[1], before);
    CU_ASSERT_EQUAL(o.t[1], 1);
    CU_ASSERT_EQUAL(o.t[0], 2);
    CU_ASSERT_EQUAL(o.last[1], OPTIM_SKIPPED);
    ddp_optim_free(&o);
    model_destroy(mdl);

    enum { RUNS = 3000, STEPS = 24 };
    uint64_t x = 0x2545F4914F6CDD1DULL;
    int ran = 0, covered = 0, wrong_caught = 0, wrong_runs = 0;
    double worst = 0, worst_exact = 0;
    for (int r = 0; r < RUNS; r++) {
        int k = r % (ADAM_NVARIANTS + 1);
        ddp_adamw h = ddp_adamw_default();
        if (r % 3 == 1) { /* other hyperparameters too */
            h.beta1 = 0.5 + 0.45 * fabs(uniform(&x));
            h.beta2 = 0.9 + 0.0999 * fabs(uniform(&x));
            h.eps = ldexp(1.0, -10 - (int)(30 * fabs(uniform(&x))));
            h.weight_decay = 0.1 * fabs(uniform(&x));
        }
        float lr = (float)ldexp(1.0, -(int)(12 * fabs(uniform(&x))));
        double scale = ldexp(1.0, (int)(uniform(&x) * 60)), rel = r % 2 ? 1e-6 * fabs(uniform(&x)) : 0;
        ddp_optim ref;
        CU_ASSERT_EQUAL_FATAL(ddp_optim_init(&ref, lr, 0, &h, 1), DDP_OK);
        float wr = (float)uniform(&x), mi = 0, vi = 0, Dm = 0, Dv = 0;
        for (int t = 1; t <= STEPS; t++) {
            float gr = (float)(uniform(&x) * scale), E = (float)(rel * fabs(gr)), gi = (float)(gr + uniform(&x) * E);
            if (fabs((double)gi - gr) > E)
                gi = gr;
            float wi = wr, w0 = wr, out; /* both sides start from the same parameters: the checker rebases them */
            ddp_optim_step(&ref, NULL, NULL, &wr, &gr);
            adamw_variant(k, &h, lr, (uint32_t)t, &wi, &mi, &vi, gi);
            budget_adamw(&ref, &gr, E > 0 ? &E : NULL, &wr, &Dm, &Dv, &out);
            double dw = fabs((double)wi - wr), dm = fabs((double)mi - ref.buf[0]), dv = fabs((double)vi - ref.sq[0]);
            if (k == ADAM_STEP_BEHIND) {
                int visible = t == 2 && fabs((double)wr - w0) > 0x1p-10 * fabs((double)w0); /* above p's ulps */
                wrong_runs += visible;
                wrong_caught += visible && dw > out;
                mi = ref.buf[0]; /* judged one step at a time */
                vi = ref.sq[0];
                continue;
            }
            ran++;
            covered += dw <= out && dm <= Dm && dv <= Dv;
            if (dw > out || dm > Dm || dv > Dv)
                fprintf(stderr, "  variant %d step %d: |dw| %g of %g, |dm| %g of %g, |dv| %g of %g\n", k, t, dw,
                        (double)out, dm, (double)Dm, dv, (double)Dv);
            if (out > 0 && dw / out > worst)
                worst = dw / out;
            /* exact inputs: in units of rounding of |p| and of lr (an Adam update's scale: |m^ / sqrt(v^)| <= ~1) */
            double units = out / (TOL_U_FLOAT * (fabs((double)w0) + lr));
            if (rel == 0 && units > worst_exact)
                worst_exact = units;
        }
        ddp_optim_free(&ref);
    }
    printf("\n  AdamW bound: %d steps of %d runs, worst |impl - ref| %.3g of it; a step behind caught in %d of %d;"
           " exact inputs: at most %.3g u (|p| + lr)\n", ran, RUNS, worst, wrong_caught, wrong_runs, worst_exact);
    CU_ASSERT_EQUAL(covered, ran);
    CU_ASSERT(worst <= 1);
    CU_ASSERT(worst > 0.01); /* not a blanket */
    CU_ASSERT(wrong_caught >= wrong_runs * 9 / 10);
    CU_ASSERT(worst_exact < 256); /* exact inputs: a bound of roundings, not of the update's size */
}

/* ---- clip_grad_norm_ (clip.h): ways a correct implementation sums the squares ---- */

/* The squares in float, element order (or reversed), in chunks of n / chunks whose norms (sqrt_each) or sums are
 * combined: per-tensor norms, per-rank shards, a reduction over ranks. */
static float norm_chunked(const float *g, size_t n, int chunks, int sqrt_each, int reverse)
{
    float total = 0;
    for (int c = 0; c < chunks; c++) {
        size_t lo = n * (size_t)c / (size_t)chunks, hi = n * (size_t)(c + 1) / (size_t)chunks;
        float sum = 0;
        for (size_t i = lo; i < hi; i++) {
            float x = g[reverse ? n - 1 - i : i];
            sum += x * x;
        }
        if (sqrt_each) {
            float r = sqrtf(sum);
            sum = r * r;
        }
        total += sum;
    }
    return sqrtf(total);
}

static float norm_pairwise_sq(const float *g, size_t n)
{
    if (n == 1)
        return g[0] * g[0];
    return norm_pairwise_sq(g, n / 2) + norm_pairwise_sq(g + n / 2, n - n / 2);
}

static float norm_double(const float *g, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)g[i] * g[i];
    return (float)sqrt(s);
}

/*
 * clip_reference's interval: torch's coefficient from every correct way of summing the squares (in float, in any
 * order and grouping, or in double) of gradients anywhere within their bound lies in it, with torch's reciprocal
 * or a plain division; a norm 2^-10 off, a shard's own norm, or sqrt(2) times it (a group counted twice) does not.
 * The inf norm is exact: a max 2^-10 off is outside. The bound after clipping holds for the products.
 */
static void test_clip_bound(void)
{
    enum { N = 6000 };
    static float g[N], gp[N], E[N], after[N];
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    double widest = 0, used[2] = {0, 0}; /* L2, inf */
    int active = 0;
    for (int trial = 0; trial < 300; trial++) {
        size_t n = 1 + (size_t)((uniform(&x) + 1) / 2 * (N - 1));
        int bounded = trial % 2, inf_norm = trial % 5 == 4;
        for (size_t i = 0; i < n; i++) {
            g[i] = (float)(uniform(&x) * ldexp(1, (int)(uniform(&x) * 12) - 6));
            E[i] = bounded ? (float)(fabs(g[i]) * 1e-5 * (uniform(&x) + 1)) : 0;
            gp[i] = (float)(g[i] + E[i] * uniform(&x));
            if (fabsf(gp[i] - g[i]) > E[i])
                E[i] = fabsf(gp[i] - g[i]);
        }
        double norm = clip_norm_of(g, n, inf_norm);
        double max_norm = norm * (trial % 7 == 6 ? 2.0 : 0.01 + 0.9 * (uniform(&x) + 1) / 2);
        clip_ref ref;
        clip_reference(g, bounded ? E : NULL, n, max_norm, inf_norm, &ref);
        CU_ASSERT(ref.lo <= ref.coef && ref.coef <= ref.hi);
        float t[6];
        int nt = 0;
        if (inf_norm) {
            float m = 0;
            for (size_t i = 0; i < n; i++)
                m = fmaxf(m, fabsf(gp[i]));
            t[nt++] = m;
        } else {
            t[nt++] = norm_chunked(gp, n, 1, 0, 0);
            t[nt++] = norm_chunked(gp, n, 1, 0, 1);
            t[nt++] = norm_chunked(gp, n, 1 + trial % 8, 1, 0);
            t[nt++] = norm_chunked(gp, n, 1 + trial % 8, 0, 1);
            t[nt++] = sqrtf(norm_pairwise_sq(gp, n));
            t[nt++] = norm_double(gp, n);
        }
        for (int k = 0; k < nt; k++) {
            float c1 = clip_coef_torch(t[k], max_norm), c2 = (float)(max_norm / ((double)t[k] + CLIP_EPS));
            c2 = c2 < 1 ? c2 : 1;
            CU_ASSERT(ref.lo <= c1 && c1 <= ref.hi);
            CU_ASSERT(ref.lo <= c2 && c2 <= ref.hi);
            double room = c1 >= ref.coef ? ref.hi - ref.coef : ref.coef - ref.lo;
            if (room > 0)
                used[inf_norm] = fmax(used[inf_norm], fabs((double)c1 - ref.coef) / room);
        }
        widest = fmax(widest, (ref.hi - ref.lo) / ref.coef);
        if (ref.coef < 0.999f) {
            active++;
            float wrong[3] = {t[0] * (1 + 0x1p-10f), norm_chunked(gp, n / 2 + 1, 1, 0, 0), t[0] * sqrtf(2)};
            for (int k = 0; k < (inf_norm ? 1 : 3); k++) {
                float c = clip_coef_torch(wrong[k], max_norm);
                CU_ASSERT(!(ref.lo <= c && c <= ref.hi) || (k == 1 && n < 4));
            }
        } else {
            CU_ASSERT(ref.lo == 1 && ref.hi == 1); /* nothing clips: the coefficient must be exactly 1 */
        }
        clip_bound_after(g, bounded ? E : NULL, n, ref.coef, after);
        for (size_t i = 0; i < n; i++)
            CU_ASSERT(fabsf(gp[i] * ref.coef - g[i] * ref.coef) <= after[i]);
    }
    CU_ASSERT(active > 200);
    fprintf(stderr, "  clip: %d clipping trials; the interval at most %.3g of the coefficient wide; the worst "
                    "correct coefficient used %.3g of it with the L2 norm, %.3g with the inf norm\n",
            active, widest, used[0], used[1]);
    CU_ASSERT(clip_coef_torch(NAN, 1) != clip_coef_torch(NAN, 1)); /* a NaN norm is never a coefficient */
}

int main(void)
{
    static const test_entry tests[] = {
        {"the bound on hand values", test_bound_arithmetic},
        {"momentum: torch's step, and its buffer's bound holds and is tight", test_momentum_step_and_bound},
        {"momentum: every correct reordering passes order through carried buffers", test_momentum_reorderings_pass},
        {"AdamW: torch's step, and its bound holds for other roundings and catches a wrong rule",
         test_adamw_step_and_bound},
        {"AdamW: every correct reordering passes order through carried moments", test_adamw_reorderings_pass},
        {"clip: every correct norm's coefficient lies in the reference's interval, wrong ones do not",
         test_clip_bound},
        {"every correct reordering passes order on every model at 2-16 ranks; bitwise sees them",
         test_reorderings_pass},
        TEST_END,
    };
    return test_run_suite("order tolerance", tests);
}
