/*
 * test_timeline.c - the HTML page's timeline (sim/timeline.c) from traces
 * written by hand: a shape per event where the times put it, a rank that
 * stopped said, names escaped, and every trace it cannot draw refused with
 * the reason (an older version without times, a bad line, too many events,
 * a drawing over its share of the page).
 */
#include "config.h" /* first: _GNU_SOURCE for open_memstream */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"
#include "testutil.h"
#include "timeline.h"

static char dir[4096];

/* text into a new trace file; its path (static) */
static const char *trace_file(const char *text)
{
    static char path[4200];
    static int n;
    snprintf(path, sizeof path, "%s/trace%d", dir, n++);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* The SVG of path (4 ranks, schedule text), max_bytes; rc into *rc, msg into msg. Free the result. */
static char *draw(const char *path, const char *schedule, size_t max_bytes, int *rc, char *msg, size_t len)
{
    sched s;
    CU_ASSERT_EQUAL_FATAL(sched_parse(schedule, &s), DDP_OK);
    char *out = NULL;
    size_t n = 0;
    FILE *mem = open_memstream(&out, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mem);
    msg[0] = '\0';
    *rc = timeline_svg(mem, path, 4, &s, max_bytes, msg, len);
    fclose(mem);
    sched_free(&s);
    return out;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

#define HEADER "{\"ddpsim_trace\": 3, \"run\": \"test\"}\n"
/* Rank 0: setup 0..100 us (a broadcast), fwd 100..600, bwd 600..1100 (syncs) with two ready events and a bucket
 * launched and reduced on thread 1, end at 1100. Rank 1 likewise but without an end: it stopped in its backward.
 * Rank 2 failed in its forward (its supervisor's end says so, at its last event's time); rank 3 never started (the
 * supervisor's end, without a time, is all it has). */
static const char TRACE[] =
    HEADER
    "{\"t\": 0, \"rank\": 0, \"op\": 0, \"ev\": \"coll\", \"us\": 100.0, \"kind\": \"broadcast\", \"group\": \"world\", "
    "\"bytes\": 4096, \"dur_us\": 100.0}\n"
    "{\"t\": 1, \"rank\": 0, \"op\": 0, \"ev\": \"fwd\", \"us\": 100.0}\n"
    "{\"t\": 2, \"rank\": 0, \"op\": 1, \"ev\": \"bwd\", \"us\": 600.0}\n"
    "{\"t\": 3, \"rank\": 0, \"op\": 1, \"ev\": \"ready\", \"us\": 700.0, \"param\": 1, \"name\": \"fc<b>.bias\"}\n"
    "{\"t\": 4, \"rank\": 0, \"op\": 1, \"ev\": \"ready\", \"us\": 800.0, \"param\": 0, \"name\": \"fc.weight\"}\n"
    "{\"t\": 5, \"rank\": 0, \"op\": 1, \"ev\": \"launch\", \"us\": 800.0, \"what\": \"bucket\", \"item\": 0}\n"
    "{\"t\": 6, \"rank\": 0, \"op\": 1, \"ev\": \"arrive\", \"us\": 850.0, \"pos\": 0}\n"
    "{\"t\": 7, \"rank\": 0, \"op\": 1, \"ev\": \"coll\", \"us\": 1000.0, \"kind\": \"allreduce\", \"group\": "
    "\"world\", \"bytes\": 2048, \"dur_us\": 150.0, \"thread\": 1}\n"
    "{\"t\": 8, \"rank\": 0, \"op\": 1, \"ev\": \"reduced\", \"us\": 1000.0, \"what\": \"bucket\", \"item\": 0, "
    "\"dur_us\": 160.0, \"thread\": 1}\n"
    "{\"t\": 9, \"rank\": 0, \"op\": 2, \"ev\": \"end\", \"us\": 1100.0, \"ready\": 2, \"arrivals\": 1}\n"
    "{\"t\": 0, \"rank\": 1, \"op\": 0, \"ev\": \"fwd\", \"us\": 100.0}\n"
    "{\"t\": 1, \"rank\": 1, \"op\": 1, \"ev\": \"bwd\", \"us\": 600.0}\n"
    "{\"t\": 2, \"rank\": 1, \"op\": 1, \"ev\": \"coll\", \"us\": 900.0, \"kind\": \"allreduce\", \"group\": "
    "\"world\", \"bytes\": 2048, \"dur_us\": 100.0, \"ok\": false}\n"
    "{\"t\": 0, \"rank\": 2, \"op\": 0, \"ev\": \"fwd\", \"us\": 100.0}\n"
    "{\"t\": 1, \"rank\": 2, \"op\": 0, \"ev\": \"end\", \"us\": 300.0, \"ready\": 0, \"arrivals\": 0, \"how\": "
    "\"failed\"}\n"
    "{\"t\": 0, \"rank\": 3, \"op\": 0, \"ev\": \"end\", \"ready\": 0, \"arrivals\": 0, \"how\": \"not-started\"}\n";

static void test_shapes(void)
{
    int rc;
    char msg[256];
    char *svg = draw(trace_file(TRACE), "fwd bwd", TIMELINE_PAGE_BYTES, &rc, msg, sizeof msg);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(count(svg, "<g class=\"rank\""), 4);
    CU_ASSERT_EQUAL(count(svg, "<rect class=\"op fwd stopped\""), 1); /* rank 2's */
    CU_ASSERT_EQUAL(count(svg, "rank 2 (stopped: failed)"), 1);
    CU_ASSERT_EQUAL(count(svg, "rank 3 (stopped)"), 1);
    CU_ASSERT_EQUAL(count(svg, "where the rank stopped (failed): its last event 200.0 us after the op began"), 1);
    CU_ASSERT_EQUAL(count(svg, "<rect class=\"op setup\""), 1);      /* rank 0's constructor */
    CU_ASSERT_EQUAL(count(svg, "<rect class=\"op fwd\""), 2);
    CU_ASSERT_EQUAL(count(svg, "<rect class=\"op bwd sync\""), 1);   /* rank 0's, ended */
    CU_ASSERT_EQUAL(count(svg, "<rect class=\"op bwd stopped\""), 1); /* rank 1's: no end */
    CU_ASSERT_EQUAL(count(svg, "rank 1 (stopped)"), 1);
    CU_ASSERT_EQUAL(count(svg, "rank 0 (stopped)"), 0);
    CU_ASSERT_EQUAL(count(svg, "<path class=\"ready\""), 1);         /* one op's ready events, one path */
    CU_ASSERT_EQUAL(count(svg, "2 gradients ready, in this order: fc&lt;b&gt;.bias, fc.weight"), 1);
    CU_ASSERT_EQUAL(count(svg, "<b>"), 0);                           /* a name never becomes markup */
    CU_ASSERT_EQUAL(count(svg, "<rect class=\"coll k-broadcast\""), 1);
    CU_ASSERT_EQUAL(count(svg, "<rect class=\"coll k-allreduce\""), 1);
    CU_ASSERT_EQUAL(count(svg, "<rect class=\"coll k-allreduce failed\""), 1);
    CU_ASSERT_EQUAL(count(svg, "<rect class=\"item\""), 1);
    CU_ASSERT_EQUAL(count(svg, "<path class=\"launch\""), 1);
    CU_ASSERT_EQUAL(count(svg, "thread 1</text>"), 1);               /* rank 0's second thread has a lane */
    CU_ASSERT_EQUAL(count(svg, "arrive"), 0);                        /* ddpsim's own barriers are not drawn */
    /* The span is 0..1100 us over 1100 px from x = 96: rank 0's fwd (100..600 us) at x 196, 500 px wide; its
     * backward (600..1100) at 696, 500 wide; the thread's allreduce ends at 1000 after 150 us: 946, 150 wide. */
    CU_ASSERT_EQUAL(count(svg, "<rect class=\"op fwd\" x=\"196.0\" y=\"22\" width=\"500.0\""), 1);
    CU_ASSERT_EQUAL(count(svg, "<rect class=\"op bwd sync\" x=\"696.0\" y=\"22\" width=\"500.0\""), 1);
    CU_ASSERT_EQUAL(count(svg, "<rect class=\"coll k-allreduce\" x=\"946.0\""), 1);
    CU_ASSERT_EQUAL(count(svg, "width=\"150.0\" height=\"8\"><title>op 1: allreduce over the world group, 2.0 KiB, "
                               "150.0 us, thread 1</title>"),
                    1);
    free(svg);
}

static void test_refused(void)
{
    int rc;
    char msg[256];
    char *svg = draw(trace_file("{\"ddpsim_trace\": 2, \"run\": \"test\"}\n"
                                "{\"t\": 0, \"rank\": 0, \"op\": 0, \"ev\": \"fwd\"}\n"),
                     "fwd", TIMELINE_PAGE_BYTES, &rc, msg, sizeof msg);
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "not a trace with times"));
    CU_ASSERT(svg == NULL || svg[0] == '\0'); /* nothing written */
    free(svg);
    svg = draw(trace_file(HEADER "{\"t\": 0, \"rank\": 0, \"op\": 0, \"ev\": \"fwd\", \"us\": 1.0}\nnot json\n"), "fwd",
               TIMELINE_PAGE_BYTES, &rc, msg, sizeof msg);
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "line 3"));
    free(svg);
    svg = draw(trace_file(HEADER "{\"t\": 0, \"rank\": 5, \"op\": 0, \"ev\": \"fwd\", \"us\": 1.0}\n"), "fwd",
               TIMELINE_PAGE_BYTES, &rc, msg, sizeof msg);
    CU_ASSERT_EQUAL(rc, -1); /* a rank the run does not have */
    free(svg);
    svg = draw(trace_file(HEADER), "fwd", TIMELINE_PAGE_BYTES, &rc, msg, sizeof msg);
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "no event"));
    free(svg);
    svg = draw(dir, "fwd", TIMELINE_PAGE_BYTES, &rc, msg, sizeof msg); /* a directory */
    CU_ASSERT_EQUAL(rc, -1);
    free(svg);
    /* over its share of the page: the same trace that draws above */
    svg = draw(trace_file(TRACE), "fwd bwd", 1000, &rc, msg, sizeof msg);
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "more than this run's share"));
    CU_ASSERT(svg == NULL || svg[0] == '\0');
    free(svg);
}

static void test_too_many(void)
{
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    fputs(HEADER, f);
    for (int i = 0; i <= TIMELINE_MAX_EVENTS; i++)
        fprintf(f, "{\"t\": %d, \"rank\": 0, \"op\": 0, \"ev\": \"ready\", \"us\": %d.0, \"param\": 0, \"name\": "
                   "\"w\"}\n", i, i);
    fclose(f);
    int rc;
    char msg[256];
    char *svg = draw(trace_file(text), "fwd bwd", TIMELINE_PAGE_BYTES, &rc, msg, sizeof msg);
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "more than 20000 events"));
    free(svg);
    free(text);
}

int main(void)
{
    if (!test_mkdtemp(dir, sizeof dir, "timeline"))
        return 99;
    static const test_entry tests[] = {
        {"a shape per event, where its times put it", test_shapes},
        {"a trace it cannot draw is refused with the reason", test_refused},
        {"more events than a page draws", test_too_many},
        TEST_END,
    };
    int rc = test_run_suite("timeline", tests);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        rc = 1;
    return rc;
}
