/*
 * testutil.c - shared test helpers (testutil.h).
 */
#include "testutil.h"

#include "impl.h"
#include "model.h"
#include "verify.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int test_run_suite(const char *suite, const test_entry *tests)
{
    model_runtime_init(); /* the tests compute gradients in this process and in its forked ranks */
    if (CU_initialize_registry() != CUE_SUCCESS) {
        fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
        return 1;
    }
    CU_pSuite s = CU_add_suite(suite, NULL, NULL);
    if (!s) {
        fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
        CU_cleanup_registry();
        return 1;
    }
    int ntests = 0;
    for (const test_entry *t = tests; t->name; t++, ntests++)
        if (!CU_add_test(s, t->name, t->fn)) {
            fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
            CU_cleanup_registry();
            return 1;
        }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failures = CU_get_number_of_failures();
    unsigned ran = CU_get_number_of_tests_run();
    CU_cleanup_registry();
    if (ran != (unsigned)ntests) {
        fprintf(stderr, "%s: ran %u of %d tests\n", suite, ran, ntests);
        return 1;
    }
    return failures ? 1 : 0;
}

int test_count_ddpsim_segments(pid_t creator)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return -1;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "ddpsim-%ld-", (long)creator);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            n++;
    closedir(d);
    return n;
}

char *test_mkdtemp(char *buf, size_t len, const char *stem)
{
    const char *tmp = getenv("TMPDIR");
    if ((size_t)snprintf(buf, len, "%s/ddpsim-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", stem) >= len)
        return NULL;
    return mkdtemp(buf);
}

int test_pid_gone(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 1;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* "pid (comm) S ...": the state follows the last ')'. */
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

uint32_t test_bits_f(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

uint64_t test_bits_d(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

void test_verify_config(struct verify_config *c, const struct sched *s, const struct ddpsim_impl_ops *ops)
{
    if (!ops)
        ops = &impl_reference_ops;
    memset(c, 0, sizeof *c);
    c->nranks = 2;
    c->model_spec = "mlp:6-5-4";
    c->batch = 3;
    c->seed = 1;
    c->schedule = s;
    c->ddp = (ddp_config){.algo = COLL_ORDERED, .bucket_cap = DDP_DEFAULT_BUCKET_CAP,
                          .first_bucket_cap = DDP_DEFAULT_FIRST_BUCKET_CAP, .lr = 0.1f};
    c->tol.kind = TOL_BITWISE;
    c->impl = ops->name;
    c->impl_ops = ops;
    c->timeout_s = 60;
    c->sink.keep_records = 1; /* the tests read records back (verify_at) */
}
