/*
 * report.h - judging a verification run's records and reporting them: the
 * human-readable table and verdict on stdout, the JSON report, and the
 * exit code.
 */
#ifndef DDPSIM_REPORT_H
#define DDPSIM_REPORT_H

#include "judge.h"
#include "html.h"
#include "junit.h"
#include "options.h"
#include "verify.h"

/*
 * The report's per-check lines (the table, JSON's "checks"), written as the
 * parent takes the records during the run into temporary files, so that a
 * run of a million grabs holds none of them in memory.
 */
typedef struct report_stream {
    const ddpsim_options *opt;
    FILE *table;       /* the table's rows (NULL with --quiet) */
    FILE *checks;      /* JSON's "checks" entries (NULL without --json) */
    int nchecks_json;  /* entries written so far */
    junit_suite junit; /* --junit: a testcase per check (junit.cases NULL without --junit) */
    html_page *html;   /* --html's page, or NULL */
    model *layout;     /* the parameters' names for the testcases */
} report_stream;

/* Open rs for opt and point sink at it; -1 (said on stderr) when a temporary file cannot be made. */
int report_stream_open(const ddpsim_options *opt, report_stream *rs, verify_sink *sink);
void report_stream_close(report_stream *rs);

/*
 * Print the report on opt->out (and write --json) from the run's tally and
 * rs's lines; return the exit code: the verdict's (report_exit_code), or 3
 * when a pass could not be written.
 */
int report_verification(const ddpsim_options *opt, const verify_result *res, report_stream *rs);

/*
 * A run that ended without a verdict: a fault (exit 3), an interrupt (130, 143) or input found bad once the
 * files were open (2). --json gets a valid document all the same: "result" (fault, interrupted, bad_input),
 * "verdict": null, the exit code, the error, the rank that failed first and what every rank had completed
 * (w NULL: no rank ran); --junit one failing testcase of that type; annotations an error.
 */
void report_no_verdict(const ddpsim_options *opt, const world *w, int code, const char *error);

/* The exit code of a verdict: 0 pass, 1 a failure of any kind, 4 nothing verified. */
int report_exit_code(judge_verdict v);

/* The header lines, printed before the run starts: -1 when they could not be written. */
int report_header(const ddpsim_options *opt);
/* --shard: the mode, the mesh and what is compared, in one header line (nothing without --shard). */
void report_shard_line(const ddpsim_options *opt);
/* ... and as JSON members ("shard": MODE, "mesh": [R, S], each followed by a comma), nothing without --shard. */
void report_json_shard(FILE *f, const ddpsim_options *opt);

#endif
