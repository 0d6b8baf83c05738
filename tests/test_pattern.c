/*
 * test_pattern.c - the pattern a failing check's tensor is explained by
 * (engine/verify/pattern.h), on tensors made here: each kind found where its
 * values are, none where nothing fits, and the close calls decided as the
 * header says (a candidate before a factor, a factor named by the run's
 * constants in their priority, rounding apart from a factor).
 */
#include <math.h>
#include <string.h>

#include "pattern.h"
#include "testutil.h"

#define N 64

static float expected[N], actual[N], other[N];

static void fill(void)
{
    for (int i = 0; i < N; i++) {
        expected[i] = (float)sin(0.37 * i + 0.1) * 1e-3f;
        other[i] = (float)cos(0.11 * i) * 2e-3f; /* unrelated to expected */
    }
}

static verify_pattern explain(const pattern_candidate *c, int nc, pattern_constants k)
{
    verify_pattern p;
    pattern_explain(expected, actual, N, c, nc, &k, &p);
    return p;
}

static void scaled(double c)
{
    for (int i = 0; i < N; i++)
        actual[i] = (float)(c * expected[i]);
}

static void test_factors_named(void)
{
    fill();
    pattern_constants k = {.nranks = 3, .running = 3, .window = 4};
    scaled(3);
    verify_pattern p = explain(NULL, 0, k);
    CU_ASSERT_EQUAL(p.kind, PATTERN_FACTOR);
    CU_ASSERT_EQUAL(p.name, PNAME_N);
    CU_ASSERT_DOUBLE_EQUAL(p.factor, 3, 1e-6);
    scaled(1.0 / 3);
    CU_ASSERT_EQUAL(explain(NULL, 0, k).name, PNAME_INV_N);
    scaled(4);
    p = explain(NULL, 0, k);
    CU_ASSERT_EQUAL(p.name, PNAME_K);
    CU_ASSERT_EQUAL(p.window, 4);
    scaled(-1);
    CU_ASSERT_EQUAL(explain(NULL, 0, k).name, PNAME_NEG);
    scaled(0x1p-16); /* a loss scale never applied */
    CU_ASSERT_EQUAL(explain(NULL, 0, k).kind, PATTERN_FACTOR);
    CU_ASSERT_EQUAL(explain(NULL, 0, k).name, PNAME_POW2);
    CU_ASSERT_EQUAL(explain(NULL, 0, k).exponent, -16);
    scaled(1.7); /* no constant of the run */
    p = explain(NULL, 0, k);
    CU_ASSERT_EQUAL(p.kind, PATTERN_FACTOR);
    CU_ASSERT_EQUAL(p.name, PNAME_NONE);
    /* N = k = 2: N first, as the header says */
    k = (pattern_constants){.nranks = 2, .running = 2, .window = 2};
    scaled(2);
    CU_ASSERT_EQUAL(explain(NULL, 0, k).name, PNAME_N);
    /* under join: N over the ranks still running */
    k = (pattern_constants){.nranks = 3, .running = 2, .window = 1};
    scaled(1.5);
    CU_ASSERT_EQUAL(explain(NULL, 0, k).name, PNAME_N_OVER_RUNNING);
}

static void test_candidates_before_factors(void)
{
    fill();
    pattern_constants k = {.nranks = 2, .running = 2, .window = 3};
    memcpy(actual, other, sizeof actual);
    pattern_candidate c[] = {{PATTERN_LOCAL, other, 0}};
    CU_ASSERT_EQUAL(explain(c, 1, k).kind, PATTERN_LOCAL);
    /* a candidate that is itself 2 x expected: the candidate names it, not the factor */
    scaled(2);
    float twice[N];
    memcpy(twice, actual, sizeof twice);
    pattern_candidate d[] = {{PATTERN_LAST_REDUCED, twice, 0}};
    CU_ASSERT_EQUAL(explain(d, 1, k).kind, PATTERN_LAST_REDUCED);
    /* a NULL candidate is skipped */
    pattern_candidate e[] = {{PATTERN_LOCAL, NULL, 0}};
    CU_ASSERT_EQUAL(explain(e, 1, k).kind, PATTERN_FACTOR);
}

static void test_zero_rounding_and_none(void)
{
    fill();
    pattern_constants k = {.nranks = 3, .running = 3, .window = 1};
    memset(actual, 0, sizeof actual);
    CU_ASSERT_EQUAL(explain(NULL, 0, k).kind, PATTERN_ZERO);
    /* below the reference's last bits but no factor (an update lost in the parameters' rounding): as zero */
    for (int i = 0; i < N; i++)
        actual[i] = (float)(expected[i] * 0x1p-16 + (i % 2 ? 1e-11 : -1e-11));
    CU_ASSERT_EQUAL(explain(NULL, 0, k).kind, PATTERN_ZERO);
    /* a few ulps away everywhere: another order, not a factor */
    for (int i = 0; i < N; i++)
        actual[i] = nextafterf(nextafterf(expected[i], 1), 1);
    CU_ASSERT_EQUAL(explain(NULL, 0, k).kind, PATTERN_ROUNDING);
    /* one element off by a whole term: nothing fits */
    memcpy(actual, expected, sizeof actual);
    actual[7] += 5e-4f;
    CU_ASSERT_EQUAL(explain(NULL, 0, k).kind, PATTERN_NOT_FOUND);
    /* unrelated values, no candidate: nothing fits */
    memcpy(actual, other, sizeof actual);
    CU_ASSERT_EQUAL(explain(NULL, 0, k).kind, PATTERN_NOT_FOUND);
    /* a NaN never matches anything */
    scaled(3);
    actual[3] = NAN;
    CU_ASSERT_EQUAL(explain(NULL, 0, k).kind, PATTERN_NOT_FOUND);
    /* expected all zero: a factor cannot explain it, a candidate can */
    memset(expected, 0, sizeof expected);
    memcpy(actual, other, sizeof actual);
    CU_ASSERT_EQUAL(explain(NULL, 0, k).kind, PATTERN_NOT_FOUND);
    pattern_candidate c[] = {{PATTERN_ONTO_STEPPED, other, 0}};
    CU_ASSERT_EQUAL(explain(c, 1, k).kind, PATTERN_ONTO_STEPPED);
}

static void test_words(void)
{
    char buf[256];
    verify_pattern p = {.kind = PATTERN_FACTOR, .factor = 3, .name = PNAME_N};
    CU_ASSERT_PTR_NOT_NULL(strstr(pattern_text(&p, buf, sizeof buf), "3 x the reference's (N: summed, not averaged)"));
    CU_ASSERT_STRING_EQUAL(pattern_short(&p, buf, sizeof buf), "3 x the reference's (N)");
    CU_ASSERT_STRING_EQUAL(pattern_kind_name(PATTERN_LAST_REDUCED), "last_micro_step_reduced");
    p = (verify_pattern){.kind = PATTERN_FACTOR, .factor = 0x1p-16, .name = PNAME_POW2, .exponent = -16, .on_update = 1};
    CU_ASSERT_STRING_EQUAL(pattern_factor_name(&p, buf, sizeof buf), "2^-16");
    p = (verify_pattern){.kind = PATTERN_NOT_FOUND};
    CU_ASSERT_STRING_EQUAL(pattern_short(&p, buf, sizeof buf), "");
    CU_ASSERT_PTR_NOT_NULL(strstr(pattern_text(&p, buf, sizeof buf), "none found"));
}

int main(void)
{
    static const test_entry tests[] = {
        {"a constant factor, named by the run's constants in their priority", test_factors_named},
        {"a candidate explains before a factor does", test_candidates_before_factors},
        {"zero, rounding and nothing found, NaN included", test_zero_rounding_and_none},
        {"the pattern in words", test_words},
        TEST_END,
    };
    return test_run_suite("the pattern of a diverging tensor", tests);
}
