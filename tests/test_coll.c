/*
 * test_coll.c - the collectives: bitwise results for every algorithm, type,
 * op, rank count and awkward size; the exact association each algorithm
 * promises; invariance under seeded arrival delays; mismatched calls.
 *
 * Ranks never assert: each writes a record (wrong-element count, a hash of
 * its result bits, its status) into the world's shared area and the parent
 * asserts on the records.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "exactsum.h"
#include "hash.h"
#include "mesh.h"
#include "rng.h"
#include "testutil.h"
#include "world.h"

#define MAX_CASES 64

typedef struct record {
    int done;
    int status;
    uint64_t wrong;
    uint64_t hash;
    double first_bad_got, first_bad_want;
} record;

typedef enum input_kind { INPUT_EXACT, INPUT_RANDOM, INPUT_ASSOC, INPUT_HARD } input_kind;

typedef struct spec {
    coll_algo algo;
    coll_dtype type;
    coll_op op;
    size_t count;
    input_kind input;
    uint64_t seed;
} spec;

typedef struct job {
    const spec *specs;
    int nspecs;
} job;

/* Inputs whose sums are exact in float for up to 256 ranks: integers and quarters. */
static double exact_input(int r, size_t i)
{
    return (double)((long)((i * 5 + (size_t)r * 11) % 999) - 499) + 0.25 * (double)((i * 3 + (size_t)r) % 4);
}

/* Floats of varied magnitude whose sum depends on the order of addition. */
static float random_input(uint64_t seed, int r, size_t i)
{
    uint64_t key = rng_key(rng_key(seed, (uint64_t)r), 17);
    float u = rng_uniform_f(key, i) - 0.5f;
    return ldexpf(u, (int)rng_below(key, i + (1ull << 40), 30) - 15);
}

/* Rank 0 holds 2^24, the others 1 (see test_association). */
static double assoc_input(int r, size_t i)
{
    (void)i;
    return r == 0 ? 16777216.0 : 1.0;
}

/*
 * Inputs that make a correctly rounded sum work (float-representable, so
 * both types get them): rounding ties at 1 broken or not by far smaller
 * terms, big terms that cancel and leave small ones, magnitudes 2^-100 ..
 * 2^100 together, subnormals, and sums that are exactly zero (+0 from mixed
 * signs, -0 from -0s only).
 */
static double hard_input(int r, size_t i)
{
    uint64_t key = rng_key(99, (uint64_t)r);
    int sign = (i / 5) % 2 ? 1 : -1;
    switch (i % 5) {
    case 0: return r == 0 ? 1.0 : r == 1 ? sign * ldexp(1.0, -24) : ldexp(1.0, -60 - r) * (double)(((int)(i / 10) + r) % 3 - 1);
    case 1: return r == 0 ? 1e30 : r == 1 ? -1e30 : (double)ldexpf(rng_uniform_f(key, i) - 0.5f, -20);
    case 2: return (double)ldexpf(rng_uniform_f(key, i) - 0.5f, (int)rng_below(key, i, 200) - 100);
    case 3: return ldexp((double)((int)rng_below(key, i, 17) - 8), -149);
    default: return sign > 0 ? (r == 0 ? 3.0 : r == 1 ? -3.0 : 0.0) : -0.0;
    }
}

static double input_value(const spec *s, int r, size_t i)
{
    switch (s->input) {
    case INPUT_EXACT: return exact_input(r, i);
    case INPUT_RANDOM: return random_input(s->seed, r, i);
    case INPUT_ASSOC: return assoc_input(r, i);
    case INPUT_HARD: return hard_input(r, i);
    }
    return NAN;
}

/* The correctly rounded sum of element i over n ranks, from the long accumulator (checked in test_exact). */
static double exact_sum_of(const spec *s, int n, size_t i)
{
    float f[WORLD_MAX_RANKS];
    double d[WORLD_MAX_RANKS];
    const float *fp[WORLD_MAX_RANKS];
    const double *dp[WORLD_MAX_RANKS];
    for (int k = 0; k < n; k++) {
        d[k] = input_value(s, k, i);
        f[k] = (float)d[k];
        fp[k] = &f[k];
        dp[k] = &d[k];
    }
    return s->type == COLL_FLOAT ? (double)exactsum_f(fp, n, 0) : exactsum_d(dp, n, 0);
}

/*
 * What the algorithm must produce, computed from its definition in coll.h
 * (written here independently of coll.c). For exact inputs every order
 * gives the exact sum.
 */
static double expected(const spec *s, int n, size_t g)
{
    int first = 0;
    if (s->algo == COLL_RING) {
        int c = 0;
        while (!(g >= s->count * (size_t)c / (size_t)n && g < s->count * (size_t)(c + 1) / (size_t)n))
            c++;
        first = (c + 1) % n;
    }
    if (s->algo == COLL_EXACT && s->input == INPUT_HARD) {
        double sum = exact_sum_of(s, n, g);
        if (s->op == COLL_AVG)
            return s->type == COLL_FLOAT ? (double)((float)sum / (float)n) : sum / n;
        return sum;
    }
    if (s->type == COLL_FLOAT) {
        float acc;
        if (s->algo == COLL_EXACT) {
            double d = 0; /* only used with inputs whose double sum is exact */
            for (int k = 0; k < n; k++)
                d += (float)input_value(s, k, g);
            acc = (float)d;
        } else {
            acc = (float)input_value(s, first, g);
            for (int k = 1; k < n; k++)
                acc += (float)input_value(s, (first + k) % n, g);
        }
        if (s->op == COLL_AVG)
            acc /= (float)n;
        return acc;
    }
    double acc = input_value(s, first, g);
    for (int k = 1; k < n; k++)
        acc += input_value(s, (first + k) % n, g);
    if (s->op == COLL_AVG)
        acc /= n;
    return acc;
}

static ddp_status run_specs(world_rank *wr, void *arg)
{
    const job *j = arg;
    int n = world_size(wr), me = world_rank_id(wr);
    record *recs = world_rank_user_area(wr);
    for (int k = 0; k < j->nspecs; k++) {
        const spec *s = &j->specs[k];
        record *rec = &recs[k * WORLD_MAX_RANKS + me];
        size_t esz = coll_dtype_size(s->type);
        void *buf = malloc(s->count * esz);
        if (!buf)
            return ddp_error(DDP_ERR_NOMEM, "test buffer");
        for (size_t i = 0; i < s->count; i++) {
            if (s->type == COLL_FLOAT)
                ((float *)buf)[i] = (float)input_value(s, me, i);
            else
                ((double *)buf)[i] = input_value(s, me, i);
        }
        ddp_status st = coll_allreduce(wr, buf, s->count, s->type, s->op, s->algo);
        rec->status = st;
        rec->hash = hash_bytes(HASH_INIT, buf, s->count * esz);
        if (st == DDP_OK && s->input != INPUT_RANDOM) {
            for (size_t i = 0; i < s->count; i++) {
                double want = expected(s, n, i);
                double got = s->type == COLL_FLOAT ? ((float *)buf)[i] : ((double *)buf)[i];
                uint64_t wb = s->type == COLL_FLOAT ? test_bits_f((float)want) : test_bits_d(want);
                uint64_t gb = s->type == COLL_FLOAT ? test_bits_f((float)got) : test_bits_d(got);
                if (wb != gb) {
                    if (rec->wrong++ == 0) {
                        rec->first_bad_got = got;
                        rec->first_bad_want = want;
                    }
                }
            }
        } else if (st == DDP_OK && s->algo != COLL_EXACT) {
            /* Order-dependent inputs: every element against its definition. */
            for (size_t i = 0; i < s->count; i++) {
                double want = expected(s, n, i);
                double got = s->type == COLL_FLOAT ? ((float *)buf)[i] : ((double *)buf)[i];
                if (!(want == got))
                    rec->wrong++;
            }
        }
        rec->done = 1;
        free(buf);
        if (st != DDP_OK)
            return st;
    }
    return DDP_OK;
}

/* Run specs on a world of n ranks; the records stay in the returned world. */
static world *run_world(int n, size_t slot_bytes, uint64_t jitter_seed, unsigned jitter_us, const spec *specs,
                        int nspecs, ddp_status *status)
{
    world_config cfg = {
        .nranks = n,
        .timeout_s = 60,
        .slot_bytes = slot_bytes,
        .user_bytes = sizeof(record) * MAX_CASES * WORLD_MAX_RANKS,
        .jitter_seed = jitter_seed,
        .jitter_max_us = jitter_us,
    };
    world *w = NULL;
    if (world_create(&cfg, &w) != DDP_OK) {
        *status = DDP_ERR_SYSTEM;
        return NULL;
    }
    memset(world_user_area(w), 0, cfg.user_bytes);
    job j = {specs, nspecs};
    *status = world_run(w, run_specs, &j);
    return w;
}

static const record *rec_of(world *w, int k, int r)
{
    return &((const record *)world_user_area(w))[k * WORLD_MAX_RANKS + r];
}

/* Every algorithm, type and op on exact inputs, for several rank counts and sizes. */
static void test_exact_inputs_everywhere(void)
{
    static const int ranks[] = {1, 2, 3, 4, 5, 8};
    for (size_t ri = 0; ri < sizeof ranks / sizeof ranks[0]; ri++) {
        int n = ranks[ri];
        size_t sizes[] = {1, (size_t)(n > 1 ? n - 1 : 1), (size_t)n, (size_t)n * 3, 1000, 4099};
        spec specs[MAX_CASES];
        int ns = 0;
        for (int a = 0; a < COLL_NALGOS; a++)
            for (int t = 0; t < 2; t++)
                for (int op = 0; op < 2; op++) {
                    /* Cycle the sizes over the 12 combinations, plus one large case each. */
                    size_t cnt = sizes[(size_t)(a * 4 + t * 2 + op) % 6];
                    specs[ns++] = (spec){(coll_algo)a, (coll_dtype)t, (coll_op)op, cnt, INPUT_EXACT, 0};
                    specs[ns++] = (spec){(coll_algo)a, (coll_dtype)t, (coll_op)op, 4099, INPUT_EXACT, 0};
                }
        ddp_status st;
        /* A 256-byte slot forces 4099 elements through many pieces. */
        world *w = run_world(n, 256, 0, 0, specs, ns, &st);
        CU_ASSERT_PTR_NOT_NULL_FATAL(w);
        CU_ASSERT_EQUAL(st, DDP_OK);
        for (int k = 0; k < ns; k++)
            for (int r = 0; r < n; r++) {
                const record *rec = rec_of(w, k, r);
                CU_ASSERT_EQUAL(rec->done, 1);
                CU_ASSERT_EQUAL(rec->status, DDP_OK);
                CU_ASSERT_EQUAL(rec->wrong, 0);
                CU_ASSERT_EQUAL(rec->hash, rec_of(w, k, 0)->hash);
            }
        world_destroy(w);
    }
}

/*
 * 3 ranks, rank 0 holds 2^24 and ranks 1, 2 hold 1, count 3 so each element
 * is its own ring chunk. In float, 2^24 + 1 rounds back to 2^24 (a tie, to
 * even), so the association shows:
 *   ordered: (2^24 + 1) + 1 = 2^24 everywhere
 *   ring:    chunk 0 starts at rank 1: (1 + 1) + 2^24 = 2^24 + 2; chunks 1, 2: 2^24
 *   exact:   2^24 + 2 everywhere
 */
static void test_association(void)
{
    spec specs[] = {
        {COLL_ORDERED, COLL_FLOAT, COLL_SUM, 3, INPUT_ASSOC, 0},
        {COLL_RING, COLL_FLOAT, COLL_SUM, 3, INPUT_ASSOC, 0},
        {COLL_EXACT, COLL_FLOAT, COLL_SUM, 3, INPUT_ASSOC, 0},
    };
    ddp_status st = DDP_OK;
    world *w = run_world(3, 0, 0, 0, specs, 3, &st);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    CU_ASSERT_EQUAL(st, DDP_OK);
    const float p24 = 16777216.0f;
    const float want[3][3] = {{p24, p24, p24}, {p24 + 2, p24, p24}, {p24 + 2, p24 + 2, p24 + 2}};
    for (int k = 0; k < 3; k++) {
        uint64_t h = hash_bytes(HASH_INIT, want[k], sizeof want[k]);
        for (int r = 0; r < 3; r++) {
            CU_ASSERT_EQUAL(rec_of(w, k, r)->hash, h);
            CU_ASSERT_EQUAL(rec_of(w, k, r)->wrong, 0);
        }
    }
    world_destroy(w);
}

/* Order-dependent inputs: ordered and ring against their definitions, pieces included. */
static void test_orders_on_random_inputs(void)
{
    static const int ranks[] = {2, 3, 4, 7};
    for (size_t ri = 0; ri < sizeof ranks / sizeof ranks[0]; ri++) {
        int n = ranks[ri];
        spec specs[] = {
            {COLL_ORDERED, COLL_FLOAT, COLL_SUM, 5003, INPUT_RANDOM, 11},
            {COLL_RING, COLL_FLOAT, COLL_SUM, 5003, INPUT_RANDOM, 12},
            {COLL_RING, COLL_FLOAT, COLL_AVG, 5003, INPUT_RANDOM, 13},
            {COLL_ORDERED, COLL_DOUBLE, COLL_AVG, 5003, INPUT_RANDOM, 14},
            {COLL_RING, COLL_DOUBLE, COLL_SUM, 5003, INPUT_RANDOM, 15},
        };
        int ns = (int)(sizeof specs / sizeof specs[0]);
        ddp_status st;
        world *w = run_world(n, 1000, 0, 0, specs, ns, &st);
        CU_ASSERT_PTR_NOT_NULL_FATAL(w);
        CU_ASSERT_EQUAL(st, DDP_OK);
        for (int k = 0; k < ns; k++)
            for (int r = 0; r < n; r++) {
                CU_ASSERT_EQUAL(rec_of(w, k, r)->wrong, 0);
                CU_ASSERT_EQUAL(rec_of(w, k, r)->hash, rec_of(w, k, 0)->hash);
            }
        world_destroy(w);
    }
}

/* The same inputs under many seeded arrival delays give the same bits, for every algorithm. */
static void test_arrival_order_invariance(void)
{
    spec specs[] = {
        {COLL_ORDERED, COLL_FLOAT, COLL_SUM, 3001, INPUT_RANDOM, 21},
        {COLL_RING, COLL_FLOAT, COLL_SUM, 3001, INPUT_RANDOM, 21},
        {COLL_EXACT, COLL_FLOAT, COLL_SUM, 3001, INPUT_RANDOM, 21},
        {COLL_EXACT, COLL_DOUBLE, COLL_AVG, 3001, INPUT_RANDOM, 22},
    };
    const int ns = 4, n = 4;
    uint64_t base[4];
    ddp_status st;
    world *w = run_world(n, 2048, 0, 0, specs, ns, &st);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    CU_ASSERT_EQUAL(st, DDP_OK);
    for (int k = 0; k < ns; k++)
        base[k] = rec_of(w, k, 0)->hash;
    world_destroy(w);
    /* The ordered and ring results must differ from the exact one somewhere, or this test shows nothing. */
    CU_ASSERT(base[0] != base[2] || base[1] != base[2]);
    int differing = 0;
    for (uint64_t seed = 1; seed <= 12; seed++) {
        w = run_world(n, 2048, seed, 300, specs, ns, &st);
        CU_ASSERT_PTR_NOT_NULL_FATAL(w);
        CU_ASSERT_EQUAL(st, DDP_OK);
        for (int k = 0; k < ns; k++)
            for (int r = 0; r < n; r++)
                differing += rec_of(w, k, r)->hash != base[k];
        world_destroy(w);
    }
    CU_ASSERT_EQUAL(differing, 0);
}

/* Rank 1 asks for a different count: every rank gets DDP_ERR_INVALID, nothing hangs. */
static ddp_status mismatched_rank(world_rank *wr, void *arg)
{
    (void)arg;
    float buf[16] = {0};
    size_t count = world_rank_id(wr) == 1 ? 10 : 12;
    int *statuses = world_rank_user_area(wr);
    ddp_status s = coll_allreduce(wr, buf, count, COLL_FLOAT, COLL_SUM, COLL_ORDERED);
    statuses[world_rank_id(wr)] = (int)s;
    return DDP_OK;
}

static void test_mismatch_detected(void)
{
    world_config cfg = {.nranks = 3, .timeout_s = 20, .user_bytes = 64};
    world *w = NULL;
    CU_ASSERT_EQUAL_FATAL(world_create(&cfg, &w), DDP_OK);
    int *statuses = world_user_area(w);
    for (int r = 0; r < 3; r++)
        statuses[r] = -1;
    CU_ASSERT_EQUAL(world_run(w, mismatched_rank, NULL), DDP_OK);
    for (int r = 0; r < 3; r++)
        CU_ASSERT_EQUAL(statuses[r], DDP_ERR_INVALID);
    world_destroy(w);
}

/* Bad arguments are errors with a message, on the calling rank, before any communication. */
static ddp_status bad_args_rank(world_rank *wr, void *arg)
{
    (void)arg;
    int *out = world_rank_user_area(wr);
    float f[4] = {0};
    if (world_rank_id(wr) != 0)
        return DDP_OK;
    out[0] = coll_allreduce(wr, f, 0, COLL_FLOAT, COLL_SUM, COLL_ORDERED);
    out[1] = coll_allreduce(wr, f, 4, COLL_FLOAT, COLL_SUM, (coll_algo)7);
    out[2] = coll_allreduce(wr, NULL, 4, COLL_FLOAT, COLL_SUM, COLL_ORDERED);
    out[3] = coll_broadcast(wr, f, sizeof f, 5);
    out[4] = coll_broadcast(wr, f, 0, 0);
    out[5] = coll_allgather(wr, f, NULL, 4);
    return DDP_OK;
}

static void test_bad_arguments(void)
{
    world_config cfg = {.nranks = 2, .timeout_s = 20, .user_bytes = 64};
    world *w = NULL;
    CU_ASSERT_EQUAL_FATAL(world_create(&cfg, &w), DDP_OK);
    int *out = world_user_area(w);
    CU_ASSERT_EQUAL(world_run(w, bad_args_rank, NULL), DDP_OK);
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(out[i], DDP_ERR_INVALID);
    world_destroy(w);

    coll_algo a;
    CU_ASSERT_EQUAL(coll_algo_parse("ring", &a), DDP_OK);
    CU_ASSERT_EQUAL(a, COLL_RING);
    CU_ASSERT_EQUAL(coll_algo_parse("tree", &a), DDP_ERR_INVALID);
    CU_ASSERT(strstr(ddp_error_last(), "ordered, ring or exact") != NULL);
}

/* Broadcast and allgather through several pieces, from every root. */
static ddp_status bcast_gather_rank(world_rank *wr, void *arg)
{
    (void)arg;
    int n = world_size(wr), me = world_rank_id(wr);
    int *wrong = world_rank_user_area(wr);
    enum { BYTES = 1000 };
    unsigned char buf[BYTES], *all = malloc((size_t)n * BYTES);
    if (!all)
        return ddp_error(DDP_ERR_NOMEM, "gather buffer");
    for (int root = 0; root < n; root++) {
        for (int i = 0; i < BYTES; i++)
            buf[i] = (unsigned char)(me == root ? (i * 7 + root) : 0xEE);
        DDP_CHECK(coll_broadcast(wr, buf, BYTES, root));
        for (int i = 0; i < BYTES; i++)
            wrong[me] += buf[i] != (unsigned char)(i * 7 + root);
    }
    for (int i = 0; i < BYTES; i++)
        buf[i] = (unsigned char)(i + me * 31);
    DDP_CHECK(coll_allgather(wr, buf, all, BYTES));
    for (int r = 0; r < n; r++)
        for (int i = 0; i < BYTES; i++)
            wrong[me] += all[(size_t)r * BYTES + (size_t)i] != (unsigned char)(i + r * 31);
    free(all);
    DDP_CHECK(coll_barrier(wr));
    return DDP_OK;
}

static void test_broadcast_allgather(void)
{
    static const int ranks[] = {1, 2, 3, 5};
    for (size_t ri = 0; ri < 4; ri++) {
        world_config cfg = {.nranks = ranks[ri], .timeout_s = 20, .slot_bytes = 128,
                            .user_bytes = sizeof(int) * WORLD_MAX_RANKS};
        world *w = NULL;
        CU_ASSERT_EQUAL_FATAL(world_create(&cfg, &w), DDP_OK);
        memset(world_user_area(w), 0, cfg.user_bytes);
        CU_ASSERT_EQUAL(world_run(w, bcast_gather_rank, NULL), DDP_OK);
        int *wrong = world_user_area(w);
        for (int r = 0; r < ranks[ri]; r++)
            CU_ASSERT_EQUAL(wrong[r], 0);
        world_destroy(w);
    }
}

/* The in-place allreduce gives the same bits as the two-copy one, for every algorithm and type. */
static ddp_status inplace_rank(world_rank *wr, void *arg)
{
    (void)arg;
    int me = world_rank_id(wr);
    int *out = world_rank_user_area(wr); /* [case]: 1 when equal, per rank */
    static const size_t counts[] = {1, 5, 1001, 6007}; /* the last ones past the small-message path */
    int k = 0;
    for (int in = 0; in < 2; in++)
    for (int a = 0; a < COLL_NALGOS; a++)
        for (int t = 0; t < 2; t++)
            for (size_t ci = 0; ci < 4; ci++, k++) {
                size_t count = counts[ci], esz = t ? sizeof(double) : sizeof(float);
                static unsigned char want[6007 * 8];
                unsigned char *slot = world_slot(wr, me);
                spec sp = {(coll_algo)a, (coll_dtype)t, COLL_AVG, count, in ? INPUT_HARD : INPUT_RANDOM, 31};
                for (size_t i = 0; i < count; i++) {
                    double v = input_value(&sp, me, i);
                    if (t) {
                        ((double *)want)[i] = v;
                    } else {
                        ((float *)want)[i] = (float)v;
                    }
                }
                DDP_CHECK(coll_allreduce(wr, want, count, (coll_dtype)t, COLL_AVG, (coll_algo)a));
                DDP_CHECK(coll_barrier(wr)); /* the slots are free again */
                for (size_t i = 0; i < count; i++) {
                    double v = input_value(&sp, me, i);
                    if (t) {
                        ((double *)slot)[i] = v;
                    } else {
                        ((float *)slot)[i] = (float)v;
                    }
                }
                DDP_CHECK(coll_allreduce_inplace(wr, count, (coll_dtype)t, COLL_AVG, (coll_algo)a));
                out[k * WORLD_MAX_RANKS + me] = memcmp(slot, want, count * esz) == 0;
                DDP_CHECK(coll_barrier(wr));
            }
    /* More than a slot holds is an error, on every rank alike. */
    out[k * WORLD_MAX_RANKS + me] =
        coll_allreduce_inplace(wr, world_slot_bytes(wr) / 4 + 1, COLL_FLOAT, COLL_SUM, COLL_ORDERED) ==
        DDP_ERR_INVALID;
    return DDP_OK;
}

static void test_inplace_same_bits(void)
{
    static const int ranks[] = {1, 3, 4};
    for (int ri = 0; ri < 3; ri++) {
        world_config cfg = {.nranks = ranks[ri], .timeout_s = 30, .slot_bytes = 6007 * 8,
                            .user_bytes = sizeof(int) * 50 * WORLD_MAX_RANKS};
        world *w = NULL;
        CU_ASSERT_EQUAL_FATAL(world_create(&cfg, &w), DDP_OK);
        memset(world_user_area(w), 0, cfg.user_bytes);
        CU_ASSERT_EQUAL(world_run(w, inplace_rank, NULL), DDP_OK);
        const int *out = world_user_area(w);
        for (int k = 0; k < 49; k++) /* 2 inputs x 3 algorithms x 2 types x 4 sizes, and the error */
            for (int r = 0; r < ranks[ri]; r++)
                CU_ASSERT_EQUAL(out[k * WORLD_MAX_RANKS + r], 1);
        world_destroy(w);
    }
}

/*
 * The reduce-scatter's slice has the bits of the allreduce's there, for
 * every algorithm and type, a size that fits a mailbox and sizes of many
 * slot pieces (the slot holds 1 KiB here, so a slice starts and ends inside
 * pieces); a rank's slice is all it promises, so only the slice is compared.
 */
static ddp_status reduce_scatter_rank(world_rank *wr, void *arg)
{
    (void)arg;
    int me = world_rank_id(wr), n = world_size(wr);
    int *out = world_rank_user_area(wr); /* [case]: 1 when the slice matched, per rank */
    static const size_t counts[] = {3, 5000, 9001};
    static unsigned char want[9001 * 8], got[9001 * 8];
    int k = 0;
    for (int a = 0; a < COLL_NALGOS; a++)
        for (int t = 0; t < 2; t++)
            for (size_t ci = 0; ci < 3; ci++, k++) {
                size_t count = counts[ci], esz = t ? sizeof(double) : sizeof(float), lo, hi;
                spec sp = {(coll_algo)a, (coll_dtype)t, COLL_SUM, count, INPUT_RANDOM, 77};
                for (size_t i = 0; i < count; i++) {
                    double v = input_value(&sp, me, i);
                    if (t)
                        ((double *)want)[i] = ((double *)got)[i] = v;
                    else
                        ((float *)want)[i] = ((float *)got)[i] = (float)v;
                }
                DDP_CHECK(coll_allreduce(wr, want, count, (coll_dtype)t, COLL_SUM, (coll_algo)a));
                DDP_CHECK(coll_reduce_scatter(wr, got, count, (coll_dtype)t, (coll_algo)a));
                coll_split(count, n, me, &lo, &hi);
                out[k * WORLD_MAX_RANKS + me] = memcmp(got + lo * esz, want + lo * esz, (hi - lo) * esz) == 0;
            }
    out[k * WORLD_MAX_RANKS + me] = coll_reduce_scatter(wr, got, 0, COLL_FLOAT, COLL_ORDERED) == DDP_ERR_INVALID;
    return DDP_OK;
}

static void test_reduce_scatter(void)
{
    static const int ranks[] = {1, 3, 4, 7};
    for (int ri = 0; ri < 4; ri++) {
        world_config cfg = {.nranks = ranks[ri], .timeout_s = 30, .slot_bytes = 1024,
                            .user_bytes = sizeof(int) * 20 * WORLD_MAX_RANKS};
        world *w = NULL;
        CU_ASSERT_EQUAL_FATAL(world_create(&cfg, &w), DDP_OK);
        memset(world_user_area(w), 0, cfg.user_bytes);
        CU_ASSERT_EQUAL(world_run(w, reduce_scatter_rank, NULL), DDP_OK);
        const int *out = world_user_area(w);
        for (int k = 0; k < 19; k++) /* 3 algorithms x 2 types x 3 sizes, and the error */
            for (int r = 0; r < ranks[ri]; r++)
                CU_ASSERT_EQUAL(out[k * WORLD_MAX_RANKS + r], 1);
        world_destroy(w);
    }
}

/*
 * Back-to-back small allreduces (the mailbox path: no barrier at the end),
 * two-copy and in-place alternating with a broadcast now and then, under
 * seeded delays so fast ranks run ahead: every value depends on the call,
 * so a mailbox overwritten while a slow rank still reads it gives a wrong sum.
 */
#define BACK_TO_BACK_CALLS 400
static ddp_status back_to_back(world_rank *wr, void *arg)
{
    (void)arg;
    int n = world_size(wr), me = world_rank_id(wr);
    int *wrong = world_rank_user_area(wr);
    float buf[64];
    for (int call = 0; call < BACK_TO_BACK_CALLS; call++) {
        size_t count = 1 + (size_t)(call * 7) % 64;
        int inplace = call % 3 == 1;
        float *io = inplace ? world_slot(wr, me) : buf;
        if (inplace)
            DDP_CHECK(coll_barrier(wr)); /* the in-place contract: a broadcast's readers are done with the slot */
        for (size_t i = 0; i < count; i++)
            io[i] = (float)(call * 1000 + me * 10 + (int)i);
        ddp_status st = inplace ? coll_allreduce_inplace(wr, count, COLL_FLOAT, COLL_SUM, COLL_ORDERED)
                                : coll_allreduce(wr, io, count, COLL_FLOAT, COLL_SUM, COLL_ORDERED);
        DDP_CHECK(st);
        for (size_t i = 0; i < count; i++)
            wrong[me] += io[i] != (float)(n * (call * 1000 + (int)i) + 10 * (n * (n - 1) / 2));
        if (call % 50 == 49) {
            int root = call % n, v = me == root ? call : -1;
            DDP_CHECK(coll_broadcast(wr, &v, sizeof v, root));
            wrong[me] += v != call;
        }
    }
    return DDP_OK;
}

static void test_back_to_back_small(void)
{
    for (uint64_t seed = 1; seed <= 3; seed++) {
        world_config cfg = {.nranks = 4, .timeout_s = 30, .user_bytes = sizeof(int) * WORLD_MAX_RANKS,
                            .jitter_seed = seed, .jitter_max_us = 200};
        world *w = NULL;
        CU_ASSERT_EQUAL_FATAL(world_create(&cfg, &w), DDP_OK);
        memset(world_user_area(w), 0, cfg.user_bytes);
        CU_ASSERT_EQUAL(world_run(w, back_to_back, NULL), DDP_OK);
        const int *wrong = world_user_area(w);
        for (int r = 0; r < 4; r++)
            CU_ASSERT_EQUAL(wrong[r], 0);
        world_destroy(w);
    }
}

/* Every algorithm on inputs that make rounding hard; exact must give the correctly rounded sum. */
static void test_hard_inputs(void)
{
    static const int ranks[] = {2, 3, 4, 5};
    for (size_t ri = 0; ri < sizeof ranks / sizeof ranks[0]; ri++) {
        spec specs[MAX_CASES];
        int ns = 0;
        for (int a = 0; a < COLL_NALGOS; a++)
            for (int t = 0; t < 2; t++)
                specs[ns++] = (spec){(coll_algo)a, (coll_dtype)t, COLL_SUM, 4099, INPUT_HARD, 0};
        specs[ns++] = (spec){COLL_EXACT, COLL_FLOAT, COLL_AVG, 4099, INPUT_HARD, 0};
        for (size_t slot = 256; slot <= 65536; slot *= 256) { /* many pieces, then one */
            ddp_status st;
            world *w = run_world(ranks[ri], slot, 0, 0, specs, ns, &st);
            CU_ASSERT_PTR_NOT_NULL_FATAL(w);
            CU_ASSERT_EQUAL(st, DDP_OK);
            for (int k = 0; k < ns; k++)
                for (int r = 0; r < ranks[ri]; r++) {
                    const record *rec = rec_of(w, k, r);
                    CU_ASSERT_EQUAL(rec->done, 1);
                    CU_ASSERT_EQUAL(rec->wrong, 0);
                    if (rec->wrong)
                        fprintf(stderr, "  %d ranks, case %d: %llu wrong, e.g. %.17g for %.17g\n", ranks[ri], k,
                                (unsigned long long)rec->wrong, rec->first_bad_got, rec->first_bad_want);
                }
            world_destroy(w);
        }
    }
}

/* ---- the replicate x shard mesh (mesh.h) ---- */

static void test_mesh_groups(void)
{
    mesh m;
    CU_ASSERT_EQUAL(mesh_parse("2x3", 6, "--mesh", &m), DDP_OK);
    CU_ASSERT(m.replicas == 2 && m.shards == 3);
    CU_ASSERT_EQUAL(mesh_parse("2x3", 4, "--mesh", &m), DDP_ERR_INVALID);
    CU_ASSERT(strstr(ddp_error_last(), "2x3 is 6 ranks, the run has 4") != NULL);
    static const char *const bad[] = {"", "2", "2x", "x3", "0x4", "2x-2", "2x2x1", "2x2 "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CU_ASSERT_EQUAL(mesh_parse(bad[i], 4, "--mesh", &m), DDP_ERR_INVALID);
    m = (mesh){2, 3}; /* torch's DeviceMesh (2, 3): rank = i * 3 + j */
    CU_ASSERT_EQUAL(mesh_group_size(&m, MESH_SHARD), 3);
    CU_ASSERT_EQUAL(mesh_group_size(&m, MESH_REPLICA), 2);
    CU_ASSERT_EQUAL(mesh_group_size(&m, MESH_WORLD), 6);
    CU_ASSERT_EQUAL(mesh_group_index(&m, MESH_SHARD, 4), 1);
    CU_ASSERT_EQUAL(mesh_group_index(&m, MESH_REPLICA, 4), 1);
    CU_ASSERT_EQUAL(mesh_group_member(&m, MESH_SHARD, 4, 0), 3);   /* {3, 4, 5} */
    CU_ASSERT_EQUAL(mesh_group_member(&m, MESH_SHARD, 4, 2), 5);
    CU_ASSERT_EQUAL(mesh_group_member(&m, MESH_REPLICA, 4, 0), 1); /* {1, 4} */
    CU_ASSERT_EQUAL(mesh_group_member(&m, MESH_REPLICA, 2, 1), 5); /* {2, 5} */
    CU_ASSERT_EQUAL(mesh_group_member(&m, MESH_WORLD, 2, 4), 4);
}

/* rank r contributes r * 10 + e + 1 (exact in float: every sum below is exact too) */
static float contribution(int r, size_t e)
{
    return (float)(r * 10) + (float)e + 1.0f;
}

static ddp_status mesh_rank(world_rank *wr, void *arg)
{
    const mesh *m = arg;
    int me = world_rank_id(wr);
    int *wrong = world_rank_user_area(wr);
    enum { COUNT = 6 };
    for (int g = MESH_WORLD; g <= MESH_REPLICA; g++) {
        int size = mesh_group_size(m, (mesh_group)g);
        float buf[COUNT], want[COUNT] = {0}, got[COUNT], send[COUNT * 8];
        for (size_t e = 0; e < COUNT; e++) {
            buf[e] = contribution(me, e);
            for (int k = 0; k < size; k++)
                want[e] += contribution(mesh_group_member(m, (mesh_group)g, me, k), e);
        }
        DDP_CHECK(mesh_allreduce_sum(wr, m, (mesh_group)g, buf, COUNT, COLL_ORDERED));
        for (size_t e = 0; e < COUNT; e++)
            wrong[me] += buf[e] != want[e];
        /* reduce-scatter: per_rank 2 of size * 2, this rank's slice of the same sums */
        float full[16] = {0};
        for (size_t e = 0; e < (size_t)size * 2; e++) {
            send[e] = contribution(me, e);
            for (int k = 0; k < size; k++)
                full[e] += contribution(mesh_group_member(m, (mesh_group)g, me, k), e);
        }
        DDP_CHECK(mesh_reduce_scatter_sum(wr, m, (mesh_group)g, send, got, 2, COLL_ORDERED));
        int idx = mesh_group_index(m, (mesh_group)g, me);
        wrong[me] += got[0] != full[idx * 2] || got[1] != full[idx * 2 + 1];
        /* allgather: every member's rank, in group order */
        int32_t mine = me, every[8];
        DDP_CHECK(mesh_allgather(wr, m, (mesh_group)g, &mine, every, sizeof mine));
        for (int k = 0; k < size; k++)
            wrong[me] += every[k] != mesh_group_member(m, (mesh_group)g, me, k);
    }
    return coll_barrier(wr);
}

/* A group sum longer than the pieces the gather goes in (mesh.c MESH_PIECE, 65536 floats): every piece right. */
static ddp_status mesh_long_rank(world_rank *wr, void *arg)
{
    const mesh *m = arg;
    int me = world_rank_id(wr);
    int *wrong = world_rank_user_area(wr);
    size_t count = ((size_t)1 << 17) + 3;
    float *buf = malloc(count * sizeof *buf);
    int32_t *every = malloc(count * sizeof *every * 2);
    if (!buf || !every) {
        free(buf);
        free(every);
        return ddp_error(DDP_ERR_NOMEM, "a long group sum");
    }
    for (size_t e = 0; e < count; e++)
        buf[e] = contribution(me, e); /* below 2^24: every sum exact */
    ddp_status s = mesh_allreduce_sum(wr, m, MESH_SHARD, buf, count, COLL_ORDERED);
    for (size_t e = 0; s == DDP_OK && e < count; e++) {
        float want = 0;
        for (int k = 0; k < m->shards; k++)
            want += contribution(mesh_group_member(m, MESH_SHARD, me, k), e);
        wrong[me] += buf[e] != want;
    }
    int32_t *mine = (int32_t *)buf; /* reused: an allgather of count int32s of this rank's number, per replica */
    for (size_t e = 0; e < count; e++)
        mine[e] = me * 1000003 + (int32_t)e;
    if (s == DDP_OK)
        s = mesh_allgather(wr, m, MESH_REPLICA, mine, every, count * sizeof *mine);
    for (int k = 0; s == DDP_OK && k < m->replicas; k++)
        for (size_t e = 0; e < count; e += 4099)
            wrong[me] += every[(size_t)k * count + e] != mesh_group_member(m, MESH_REPLICA, me, k) * 1000003 + (int32_t)e;
    free(buf);
    free(every);
    return s == DDP_OK ? coll_barrier(wr) : s;
}

static void test_mesh_long(void)
{
    mesh m = {2, 2};
    world_config cfg = {.nranks = 4, .timeout_s = 20, .slot_bytes = 4096, .user_bytes = sizeof(int) * WORLD_MAX_RANKS};
    world *w = NULL;
    CU_ASSERT_EQUAL_FATAL(world_create(&cfg, &w), DDP_OK);
    memset(world_user_area(w), 0, cfg.user_bytes);
    CU_ASSERT_EQUAL(world_run(w, mesh_long_rank, &m), DDP_OK);
    int *wrong = world_user_area(w);
    for (int r = 0; r < 4; r++)
        CU_ASSERT_EQUAL(wrong[r], 0);
    world_destroy(w);
}

static void test_mesh_collectives(void)
{
    static const mesh meshes[] = {{1, 1}, {1, 4}, {4, 1}, {2, 2}, {2, 3}, {3, 2}, {2, 4}};
    for (size_t i = 0; i < sizeof meshes / sizeof meshes[0]; i++) {
        mesh m = meshes[i];
        int n = m.replicas * m.shards;
        world_config cfg = {.nranks = n, .timeout_s = 20, .slot_bytes = 128, .user_bytes = sizeof(int) * WORLD_MAX_RANKS};
        world *w = NULL;
        CU_ASSERT_EQUAL_FATAL(world_create(&cfg, &w), DDP_OK);
        memset(world_user_area(w), 0, cfg.user_bytes);
        CU_ASSERT_EQUAL(world_run(w, mesh_rank, &m), DDP_OK);
        int *wrong = world_user_area(w);
        for (int r = 0; r < n; r++) {
            if (wrong[r])
                fprintf(stderr, "  mesh %dx%d, rank %d: %d wrong\n", m.replicas, m.shards, r, wrong[r]);
            CU_ASSERT_EQUAL(wrong[r], 0);
        }
        world_destroy(w);
    }
}

int main(void)
{
    static const test_entry tests[] = {
        {"exact inputs: every algorithm, type, op, rank count and size", test_exact_inputs_everywhere},
        {"each algorithm's association, hand-computed", test_association},
        {"hard inputs: ties, cancellation, wide exponents, subnormals, zeros; exact correctly rounded",
         test_hard_inputs},
        {"ordered and ring follow their definitions on random inputs", test_orders_on_random_inputs},
        {"arrival-order invariance under seeded delays", test_arrival_order_invariance},
        {"mismatched calls fail on every rank", test_mismatch_detected},
        {"bad arguments are errors", test_bad_arguments},
        {"broadcast and allgather", test_broadcast_allgather},
        {"in-place allreduce: the same bits as the two-copy one", test_inplace_same_bits},
        {"reduce-scatter: each rank's slice has the allreduce's bits", test_reduce_scatter},
        {"back-to-back small allreduces under delays: no mailbox overwritten too early", test_back_to_back_small},
        {"the replicate x shard mesh: parsing, groups, members", test_mesh_groups},
        {"group collectives on every mesh: sums, reduce-scatter slices, allgather order, hand-computed",
         test_mesh_collectives},
        {"group collectives longer than their gather pieces", test_mesh_long},
        TEST_END,
    };
    return test_run_suite("collectives", tests);
}
