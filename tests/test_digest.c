/*
 * test_digest.c - the fingerprints a run compares between runs, ranks and
 * sides (hash.h), and the checker computing them while it compares
 * (checker_compare): the value does not depend on how a run of floats is cut
 * into pieces, every single bit changes it, and the fused pass gives what
 * hashing each side on its own gives. And which non-finite pairs it matches:
 * none, unless a fault planted them (--fault inf|nan).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "checker.h"
#include "hash.h"
#include "model.h"
#include "testutil.h"

enum { N = 53 }; /* six blocks of 8 and a tail of 5 */

static void fill(float *x, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((int32_t)seed) * 0x1p-31f;
    }
}

/* Two cuts anywhere (the pieces may be empty): the same value as one piece. */
static void test_pieces(void)
{
    float x[N];
    fill(x, N, 7);
    for (size_t n = 0; n <= N; n++) {
        uint64_t whole = hash_floats(HASH_INIT, x, n);
        for (size_t a = 0; a <= n; a++)
            for (size_t b = a; b <= n; b++) {
                hash_stream s;
                hash_stream_begin(&s, HASH_INIT);
                hash_stream_add(&s, x, a);
                hash_stream_add(&s, x + a, b - a);
                hash_stream_add(&s, x + b, n - b);
                CU_ASSERT_EQUAL(hash_stream_end(&s), whole);
            }
    }
    /* The length counts: a run and the same run with a zero after it differ. */
    float z[N + 1];
    memcpy(z, x, sizeof x);
    z[N] = 0;
    CU_ASSERT_NOT_EQUAL(hash_floats(HASH_INIT, z, N + 1), hash_floats(HASH_INIT, x, N));
}

/* Every bit of every element, in the lanes and in the tail, and pairs of sign bits, which must not cancel. */
static void test_every_bit(void)
{
    float x[N], y[N];
    fill(x, N, 11);
    uint64_t h = hash_floats(HASH_INIT, x, N);
    int unchanged = 0;
    for (size_t i = 0; i < N; i++)
        for (int bit = 0; bit < 32; bit++) {
            memcpy(y, x, sizeof x);
            uint32_t u;
            memcpy(&u, &y[i], sizeof u);
            u ^= (uint32_t)1 << bit;
            memcpy(&y[i], &u, sizeof u);
            unchanged += hash_floats(HASH_INIT, y, N) == h;
        }
    for (size_t i = 0; i < N; i++)
        for (size_t j = i + 1; j < N; j++) {
            memcpy(y, x, sizeof x);
            y[i] = -y[i];
            y[j] = -y[j];
            unchanged += hash_floats(HASH_INIT, y, N) == h;
        }
    CU_ASSERT_EQUAL(unchanged, 0);
    y[0] = 0.0f, x[0] = -0.0f; /* -0 and +0 differ */
    memcpy(y + 1, x + 1, (N - 1) * sizeof *x);
    CU_ASSERT_NOT_EQUAL(hash_floats(HASH_INIT, x, N), hash_floats(HASH_INIT, y, N));
}

/* checker_compare's digests against checker_hash of each side, equal and not, every parameter reduced and not. */
static void test_compare_digests(void)
{
    model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(model_create_layout("mlp:37-300-3", 2, &m), DDP_OK);
    size_t n = model_size(m);
    static float e[37 * 300 + 300 + 300 * 3 + 3], a[sizeof e / sizeof e[0]];
    CU_ASSERT_EQUAL_FATAL(n, sizeof e / sizeof e[0]);
    fill(e, n, 3);
    memcpy(a, e, n * sizeof *e);
    unsigned char all[MODEL_MAX_PARAMS], some[MODEL_MAX_PARAMS];
    memset(all, 1, sizeof all);
    memset(some, 1, sizeof some);
    some[1] = 0;
    tolerance tol = {.kind = TOL_BITWISE};
    verify_record rec;
    memset(&rec, 0, sizeof rec);
    CU_ASSERT_EQUAL(checker_compare(&tol, m, e, a, NULL, all, &rec), 1);
    CU_ASSERT_EQUAL(rec.ref_hash, checker_hash(m, e, NULL));
    CU_ASSERT_EQUAL(rec.impl_hash, rec.ref_hash);
    CU_ASSERT_EQUAL(rec.ref_sync_hash, rec.ref_hash);
    CU_ASSERT_EQUAL(rec.ndiff, 0);

    a[37 * 300 + 7] = nextafterf(a[37 * 300 + 7], INFINITY); /* one ulp in the second parameter */
    memset(&rec, 0, sizeof rec);
    CU_ASSERT_EQUAL(checker_compare(&tol, m, e, a, NULL, some, &rec), 0);
    CU_ASSERT_EQUAL(rec.ref_hash, checker_hash(m, e, NULL));
    CU_ASSERT_EQUAL(rec.impl_hash, checker_hash(m, a, NULL));
    CU_ASSERT_NOT_EQUAL(rec.impl_hash, rec.ref_hash);
    CU_ASSERT_EQUAL(rec.ref_sync_hash, checker_hash(m, e, some));
    CU_ASSERT_NOT_EQUAL(rec.ref_sync_hash, rec.ref_hash);
    CU_ASSERT_EQUAL(rec.ndiff, 1);
    CU_ASSERT_EQUAL(rec.first_param, 1);
    CU_ASSERT_EQUAL(rec.first_index, 7);

    /* The same NaN on both sides: the same bits, yet not a match. */
    memcpy(a, e, n * sizeof *e);
    e[5] = a[5] = NAN;
    memset(&rec, 0, sizeof rec);
    CU_ASSERT_EQUAL(checker_compare(&tol, m, e, a, NULL, NULL, &rec), 0);
    CU_ASSERT_EQUAL(rec.nonfinite, 1);
    CU_ASSERT_EQUAL(rec.impl_hash, rec.ref_hash);
    model_destroy(m);
}

/*
 * A planted inf or NaN (tolerance.match_planted): where the reference's element is inf, -inf or NaN the
 * implementation's must be the same kind (counted in planted); a finite one against it, another kind, or a
 * non-finite one where the reference is finite fails. Without match_planted every non-finite pair fails.
 */
static void test_planted_nonfinite(void)
{
    model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(model_create_layout("mlp:4-3", 2, &m), DDP_OK);
    size_t n = model_size(m);
    float e[15], a[15];
    CU_ASSERT_EQUAL_FATAL(n, 15);
    fill(e, n, 9);
    static const struct {
        float ref, impl;
        int matches;
    } cases[] = {
        {INFINITY, INFINITY, 1}, {-INFINITY, -INFINITY, 1}, {NAN, NAN, 1}, {NAN, -NAN, 1},
        {INFINITY, -INFINITY, 0}, {INFINITY, NAN, 0}, {NAN, INFINITY, 0}, {INFINITY, 1.0f, 0}, {NAN, 0.0f, 0},
        {1.0f, INFINITY, 0}, {1.0f, NAN, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int planted = 0; planted < 2; planted++) {
            memcpy(a, e, sizeof a);
            float keep = e[4];
            e[4] = cases[i].ref;
            a[4] = cases[i].impl;
            tolerance tol = {.kind = TOL_BITWISE, .match_planted = planted};
            verify_record rec;
            memset(&rec, 0, sizeof rec);
            checker_compare(&tol, m, e, a, NULL, NULL, &rec);
            int ok = rec.ndiff == 0 && rec.nonfinite == 0;
            CU_ASSERT_EQUAL(ok, planted && cases[i].matches);
            CU_ASSERT_EQUAL(rec.planted, (uint64_t)(planted && cases[i].matches));
            e[4] = keep;
        }
    model_destroy(m);
}

int main(void)
{
    static const test_entry tests[] = {
        {"a digest does not depend on how the floats are cut into pieces", test_pieces},
        {"every bit changes a digest; two sign flips do not cancel", test_every_bit},
        {"the checker's digests, computed while it compares, are each side's own", test_compare_digests},
        {"a planted inf or NaN matches its own kind where the reference has it, nothing else does",
         test_planted_nonfinite},
        TEST_END,
    };
    return test_run_suite("digests", tests);
}
