/*
 * report.h - judging a verification run's records and reporting them: the
 * human-readable table and verdict on stdout, the JSON report, and the
 * exit code.
 */
#ifndef DDPSIM_REPORT_H
#define DDPSIM_REPORT_H

#include "options.h"
#include "verify.h"

/* Print the report (and write --json); return the exit code (0 pass, 1 divergence or failed sanity, 2 JSON unwritable). */
int report_verification(const ddpsim_options *opt, const verify_result *res);

/* The header lines, printed before the run starts. */
void report_header(const ddpsim_options *opt);

#endif
