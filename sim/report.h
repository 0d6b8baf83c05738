/*
 * report.h - judging a verification run's records and reporting them: the
 * human-readable table and verdict on stdout, the JSON report, and the
 * exit code.
 */
#ifndef DDPSIM_REPORT_H
#define DDPSIM_REPORT_H

#include "judge.h"
#include "options.h"
#include "verify.h"

/*
 * Print the report on opt->out (and write --json); return the exit code:
 * the verdict's (report_exit_code), or 3 when a pass could not be written.
 */
int report_verification(const ddpsim_options *opt, const verify_result *res);

/* The exit code of a verdict: 0 pass, 1 a failure of any kind, 4 nothing verified. */
int report_exit_code(judge_verdict v);

/* The header lines, printed before the run starts: -1 when they could not be written. */
int report_header(const ddpsim_options *opt);

#endif
