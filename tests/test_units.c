/*
 * test_units.c - the command-line number parsers: sizes with suffixes,
 * bounded integers, seconds, and every kind of bad input; and the small
 * base helpers behind messages: a failed write's reason, a failed
 * allocation's "out of memory".
 */
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "file.h"
#include "testutil.h"
#include "units.h"

static void test_sizes(void)
{
    static const struct {
        const char *s;
        uint64_t want;
    } ok[] = {{"0", 0}, {"4096", 4096}, {"64K", 65536}, {"64k", 65536}, {"16M", 16u << 20},
              {"1G", 1u << 30}, {"2KiB", 2048}, {"3MB", 3u << 20}, {"5B", 5}, {"1T", (uint64_t)1 << 40}};
    char msg[128];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 12345;
        CU_ASSERT_EQUAL(units_parse_size(ok[i].s, &v, msg, sizeof msg), 0);
        CU_ASSERT_EQUAL(v, ok[i].want);
    }
}

static void test_bad_sizes(void)
{
    static const char *const bad[] = {"", "K", "-1", "+4", " 4", "4 ", "4X", "4KK", "1.5M",
                                      "99999999999999999999", "20000000000000000G", "0x10"};
    char msg[128];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 7;
        msg[0] = '\0';
        CU_ASSERT_EQUAL(units_parse_size(bad[i], &v, msg, sizeof msg), -1);
        CU_ASSERT_EQUAL(v, 7); /* untouched on error */
        CU_ASSERT(strlen(msg) > 0);
    }
}

static void test_longs(void)
{
    char msg[128];
    long v = 0;
    CU_ASSERT_EQUAL(units_parse_long("4", 1, 256, &v, msg, sizeof msg), 0);
    CU_ASSERT_EQUAL(v, 4);
    CU_ASSERT_EQUAL(units_parse_long("256", 1, 256, &v, msg, sizeof msg), 0);
    CU_ASSERT_EQUAL(units_parse_long("0", 1, 256, &v, msg, sizeof msg), -1);
    CU_ASSERT(strstr(msg, "out of range 1..256") != NULL);
    CU_ASSERT_EQUAL(units_parse_long("257", 1, 256, &v, msg, sizeof msg), -1);
    CU_ASSERT_EQUAL(units_parse_long("4x", 1, 256, &v, msg, sizeof msg), -1);
    CU_ASSERT(strstr(msg, "not an integer") != NULL);
    CU_ASSERT_EQUAL(units_parse_long("", 1, 256, &v, msg, sizeof msg), -1);
    CU_ASSERT_EQUAL(units_parse_long("99999999999999999999999", 1, 256, &v, msg, sizeof msg), -1);
}

static void test_seconds(void)
{
    char msg[128];
    double v = -1;
    CU_ASSERT_EQUAL(units_parse_seconds("0.5", &v, msg, sizeof msg), 0);
    CU_ASSERT_EQUAL(v, 0.5);
    CU_ASSERT_EQUAL(units_parse_seconds("60", &v, msg, sizeof msg), 0);
    CU_ASSERT_EQUAL(v, 60.0);
    static const char *const bad[] = {"-1", "nan", "inf", "1e400", "abc", "1s", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CU_ASSERT_EQUAL(units_parse_seconds(bad[i], &v, msg, sizeof msg), -1);
}

static void test_format(void)
{
    char buf[32];
    CU_ASSERT_STRING_EQUAL(units_format_size(12, buf, sizeof buf), "12 B");
    CU_ASSERT_STRING_EQUAL(units_format_size(1 << 20, buf, sizeof buf), "1 MiB");
    CU_ASSERT_STRING_EQUAL(units_format_size(1536, buf, sizeof buf), "1.5 KiB");
}

/* A write that fails says why: ENOSPC from /dev/full (skipped where the machine has none). */
static void test_write_reason(void)
{
    struct stat st;
    if (stat("/dev/full", &st) != 0 || !S_ISCHR(st.st_mode))
        return;
    FILE *f = fopen("/dev/full", "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "[\"fc1.weight\"]\n");
    CU_ASSERT_EQUAL(file_close_written(f, "used.json"), DDP_ERR_SYSTEM);
    CU_ASSERT_STRING_EQUAL(ddp_error_text(), "cannot write used.json: No space left on device");
    f = tmpfile();
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "fine\n");
    CU_ASSERT_EQUAL(file_close_written(f, "tmp"), DDP_OK);
}

/* Whatever a failed allocation's message names, it says that memory ran out, once. */
static void test_nomem_text(void)
{
    ddp_error(DDP_ERR_NOMEM, "model '%s': %d parameters", "mlp:8-8", 72);
    CU_ASSERT_STRING_EQUAL(ddp_error_text(), "out of memory: model 'mlp:8-8': 72 parameters");
    ddp_error(DDP_ERR_NOMEM, "out of memory for %d floats", 5);
    CU_ASSERT_STRING_EQUAL(ddp_error_text(), "out of memory for 5 floats");
    ddp_error(DDP_ERR_INVALID, "model 'x'");
    CU_ASSERT_STRING_EQUAL(ddp_error_text(), "model 'x'");
}

/* A summary drops the source line a message was raised at, and only that: other colons are the message's own. */
static void test_error_without_location(void)
{
    static const char *const cases[][2] = {
        {"rank.c:66: implementation 'x' failed in backward_end", "implementation 'x' failed in backward_end"},
        {"coll.c:133: ranks disagree", "ranks disagree"},
        {"world_mpi.c:7: a", "a"},
        {"implementation 'x' failed: rank.c:66: no", "implementation 'x' failed: rank.c:66: no"},
        {"killed by signal 9", "killed by signal 9"},
        {"rank.c: not a line", "rank.c: not a line"},
        {"rank.c:66:no space", "rank.c:66:no space"},
        {":12: x", ":12: x"},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CU_ASSERT_STRING_EQUAL(ddp_error_without_location(cases[i][0]), cases[i][1]);
}

int main(void)
{
    static const test_entry tests[] = {
        {"sizes with suffixes", test_sizes},
        {"bad sizes are rejected", test_bad_sizes},
        {"bounded integers", test_longs},
        {"seconds", test_seconds},
        {"size formatting", test_format},
        {"a failed write says why", test_write_reason},
        {"a failed allocation says out of memory", test_nomem_text},
        {"a message without the source line it was raised at", test_error_without_location},
        TEST_END,
    };
    return test_run_suite("units", tests);
}
