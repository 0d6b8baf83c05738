/*
 * report_ci.h - the report where CI and people read it beside the table:
 * --junit's testcases (junit.h), the annotations (annotate.h) and --html's
 * page (html.h) of a single run, of `ddpsim check` and of the battery. The
 * verdicts are the judge's (judge.h), word for word the table's: nothing
 * here decides pass or fail.
 */
#ifndef DDPSIM_REPORT_CI_H
#define DDPSIM_REPORT_CI_H

#include <limits.h>

#include "battery.h"
#include "battery_rows.h"
#include "html.h"
#include "options.h"
#include "report.h"

/* A check's testcase (verify_sink.on_check, beside the table's row): failing when some rank's record did. */
void report_ci_check(report_stream *rs, const sched_check *ck, const verify_record *recs, int nranks);

/*
 * A judged run: --junit's document (the checks' testcases and one for the
 * run's own checks: the ranks' agreement, the reference's, NCCL's), the
 * annotations (the first divergence, the verdict). verdict is the verdict's
 * words. -1 when --junit could not be written (said on stderr).
 */
int report_ci_verdict(const ddpsim_options *opt, const verify_result *res, const judgement *j, const char *verdict,
                      report_stream *rs);

/* A run without a verdict (report_no_verdict): result is "fault", "interrupted" or "bad_input". */
void report_ci_no_verdict(const ddpsim_options *opt, const world *w, int code, const char *result,
                          const char *error);

/*
 * --html's size, before any rank starts: 0, or DDPSIM_EXIT_USAGE (said on
 * stderr) when the page of this run (every scenario's, for the battery)
 * would hold more than HTML_MAX_CELLS cells. layout: the parameters (NULL:
 * from opt's model).
 */
int report_html_fits(const ddpsim_options *opt, const model *layout);
/* --html's page, its header's facts from opt: -1 (said on stderr) on a write error. */
int report_html_write(const ddpsim_options *opt, html_page *h, const char *verdict);

/*
 * --html without --trace: a single run, or each scenario of the battery, is
 * traced all the same for the page's timeline (timeline.h), into a private
 * directory removed by report_page_trace_end. The trace's path, or NULL
 * (said on stderr) when there is none to take: --trace was given (the
 * page draws that one), under MPI (ranks on other hosts), or no directory
 * could be made.
 */
typedef struct report_page_trace {
    char dir[PATH_MAX], path[PATH_MAX + 16];
} report_page_trace;
const char *report_page_trace_begin(const ddpsim_options *opt, report_page_trace *pt);
void report_page_trace_end(report_page_trace *pt, int nranks);

/* The battery: a testcase per row (battery_rows.h), an annotation per failing one, the verdict's. -1 as above. */
int report_ci_battery(const ddpsim_options *opt, const battery_row *rows, const battery_outcome *out, int n,
                      const char *verdict, double wall_s);

#endif
