/*
 * test_nccl_env.c - the NCCL environment a rank of --backend nccl gets
 * (nccl_env.h): the determinism pins always, separate host ids over
 * loopback only when ranks outnumber GPUs and then one per block of ngpus
 * ranks (only ranks that share a GPU are apart), rank r on GPU r % ngpus, a
 * user's NCCL_HOSTID made distinct per block (it cannot go to every rank),
 * and the user's other variables left alone. Pure bookkeeping: runs
 * without NCCL.
 */
#include <stdlib.h>
#include <string.h>

#include "nccl_env.h"
#include "testutil.h"

static const char *const VARS[] = {"NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
                                   "NCCL_HOSTID", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE"};

static void clear_env(void)
{
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++)
        unsetenv(VARS[i]);
}

static const nccl_env_var *find(const nccl_env_plan *p, const char *name)
{
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->vars[i].name, name) == 0)
            return &p->vars[i];
    return NULL;
}

static void test_enough_gpus(void)
{
    clear_env();
    nccl_env_plan p;
    nccl_env_plan_make(3, 4, 4, NULL, &p);
    CU_ASSERT_EQUAL(p.device, 3);
    CU_ASSERT_FALSE(p.separate_hosts);
    CU_ASSERT_PTR_NULL(find(&p, "NCCL_HOSTID"));
    CU_ASSERT_PTR_NULL(find(&p, "NCCL_SOCKET_IFNAME"));
    CU_ASSERT_STRING_EQUAL(find(&p, "NCCL_ALGO")->value, "Ring");
    CU_ASSERT_STRING_EQUAL(find(&p, "NCCL_PROTO")->value, "Simple");
    CU_ASSERT_STRING_EQUAL(find(&p, "NCCL_MAX_NCHANNELS")->value, "1");
}

static void test_more_ranks_than_gpus(void)
{
    clear_env();
    nccl_env_plan a, b;
    nccl_env_plan_make(1, 4, 1, NULL, &a);
    nccl_env_plan_make(2, 4, 1, NULL, &b);
    CU_ASSERT_TRUE(a.separate_hosts);
    CU_ASSERT_EQUAL(a.device, 0);
    CU_ASSERT_EQUAL(b.device, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(find(&a, "NCCL_HOSTID"));
    CU_ASSERT_STRING_NOT_EQUAL(find(&a, "NCCL_HOSTID")->value, find(&b, "NCCL_HOSTID")->value);
    CU_ASSERT_STRING_EQUAL(find(&a, "NCCL_SOCKET_IFNAME")->value, "lo");
    CU_ASSERT_STRING_EQUAL(find(&a, "NCCL_IB_DISABLE")->value, "1");
    CU_ASSERT_EQUAL(a.nhosts, 4);
    /* 6 ranks on 4 GPUs: two blocks, ranks 0-3 on GPUs 0-3 and 4-5 on GPUs 0-1; only ranks sharing a GPU apart */
    nccl_env_plan r[6];
    for (int k = 0; k < 6; k++)
        nccl_env_plan_make(k, 6, 4, NULL, &r[k]);
    CU_ASSERT_EQUAL(r[5].device, 1);
    CU_ASSERT_TRUE(r[5].separate_hosts);
    CU_ASSERT_EQUAL(r[5].nhosts, 2);
    CU_ASSERT_EQUAL(r[3].host, 0);
    CU_ASSERT_EQUAL(r[4].host, 1);
    for (int x = 0; x < 6; x++)
        for (int y = x + 1; y < 6; y++) {
            int same_gpu = r[x].device == r[y].device;
            int same_host = strcmp(find(&r[x], "NCCL_HOSTID")->value, find(&r[y], "NCCL_HOSTID")->value) == 0;
            CU_ASSERT(!(same_gpu && same_host));   /* NCCL's "Duplicate GPU detected" */
            CU_ASSERT(same_host == (x / 4 == y / 4)); /* and no more hosts than that needs */
        }
}

/* A NCCL_HOSTID the user set: every rank given it would be one host again; each block gets it made distinct. */
/* An MPI job over hosts: each host plans its own ranks; its blocks carry its name; sockets are NCCL's choice. */
static void test_several_hosts(void)
{
    clear_env();
    nccl_env_plan a0, a1, b0, one;
    nccl_env_plan_make(0, 2, 1, "alpha", &a0); /* host alpha: 2 ranks on 1 GPU */
    nccl_env_plan_make(1, 2, 1, "alpha", &a1);
    nccl_env_plan_make(0, 2, 1, "beta", &b0);  /* host beta: the same places */
    nccl_env_plan_make(1, 2, 2, "alpha", &one); /* a GPU per rank on its host */
    CU_ASSERT_EQUAL(a1.device, 0);
    CU_ASSERT_EQUAL(one.device, 1);
    CU_ASSERT_FALSE(one.separate_hosts);
    CU_ASSERT_PTR_NULL(find(&one, "NCCL_HOSTID"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(find(&a0, "NCCL_HOSTID"));
    CU_ASSERT_STRING_EQUAL(find(&a0, "NCCL_HOSTID")->value, "ddpsim-alpha-0");
    CU_ASSERT_STRING_EQUAL(find(&a1, "NCCL_HOSTID")->value, "ddpsim-alpha-1");
    CU_ASSERT_STRING_EQUAL(find(&b0, "NCCL_HOSTID")->value, "ddpsim-beta-0"); /* not alpha's block 0 */
    CU_ASSERT_PTR_NULL(find(&a0, "NCCL_SOCKET_IFNAME")); /* loopback would not reach beta */
    CU_ASSERT_PTR_NULL(find(&a0, "NCCL_IB_DISABLE"));
}

static void test_user_host_id(void)
{
    clear_env();
    setenv("NCCL_HOSTID", "myhost", 1);
    nccl_env_plan a, b;
    nccl_env_plan_make(0, 2, 1, NULL, &a);
    nccl_env_plan_make(1, 2, 1, NULL, &b);
    const nccl_env_var *ha = find(&a, "NCCL_HOSTID"), *hb = find(&b, "NCCL_HOSTID");
    CU_ASSERT_PTR_NOT_NULL_FATAL(ha);
    CU_ASSERT_PTR_NOT_NULL_FATAL(hb);
    CU_ASSERT_STRING_EQUAL(ha->value, "myhost-0");
    CU_ASSERT_STRING_EQUAL(hb->value, "myhost-1");
    CU_ASSERT_TRUE(ha->derived);
    CU_ASSERT_EQUAL(nccl_env_apply(&b), DDP_OK);
    CU_ASSERT_STRING_EQUAL(getenv("NCCL_HOSTID"), "myhost-1"); /* set, though the user had set it */
    char line[512];
    nccl_env_describe(&a, line, sizeof line);
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "NCCL_HOSTID=myhost-0 (per host block, derived from yours: myhost)"));
    /* enough GPUs: the user's value stays as it is, untouched */
    setenv("NCCL_HOSTID", "myhost", 1);
    nccl_env_plan c;
    nccl_env_plan_make(1, 2, 2, NULL, &c);
    CU_ASSERT_PTR_NULL(find(&c, "NCCL_HOSTID"));
    CU_ASSERT_EQUAL(nccl_env_apply(&c), DDP_OK);
    CU_ASSERT_STRING_EQUAL(getenv("NCCL_HOSTID"), "myhost");
    clear_env();
}

static void test_user_wins_and_apply(void)
{
    clear_env();
    setenv("NCCL_PROTO", "LL128", 1);
    nccl_env_plan p;
    nccl_env_plan_make(0, 2, 1, NULL, &p);
    const nccl_env_var *proto = find(&p, "NCCL_PROTO");
    CU_ASSERT_TRUE(proto->user_set);
    CU_ASSERT_STRING_EQUAL(proto->value, "LL128");
    CU_ASSERT_EQUAL(nccl_env_apply(&p), DDP_OK);
    CU_ASSERT_STRING_EQUAL(getenv("NCCL_PROTO"), "LL128");
    CU_ASSERT_STRING_EQUAL(getenv("NCCL_ALGO"), "Ring");
    CU_ASSERT_STRING_EQUAL(getenv("NCCL_HOSTID"), "ddpsim-host0");
    char line[512];
    nccl_env_describe(&p, line, sizeof line);
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "NCCL_PROTO=LL128 (yours)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "NCCL_HOSTID=ddpsim-host0 (per host block)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "NCCL_ALGO=Ring "));
    clear_env();
}

int main(void)
{
    static const test_entry tests[] = {
        {"enough GPUs: one each, pins only", test_enough_gpus},
        {"more ranks than GPUs: a host id per rank, loopback sockets", test_more_ranks_than_gpus},
        {"the user's variables win; apply and describe", test_user_wins_and_apply},
        {"a user's NCCL_HOSTID: one per host block, derived, said", test_user_host_id},
        {"an MPI job over hosts: each host plans its own ranks and names its blocks", test_several_hosts},
        TEST_END,
    };
    return test_run_suite("nccl environment", tests);
}
