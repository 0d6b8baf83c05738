/*
 * annotate.h - CI annotations: on GitHub Actions (GITHUB_ACTIONS=true, or
 * --annotations github) a failing run or scenario prints a workflow command
 * "::error title=...::..." and every run a "::notice" with its verdict, so
 * the job's summary shows them without opening the log (GitHub's "Workflow
 * commands for GitHub Actions": the runner reads them from the job's output,
 * with %, CR and LF escaped, and in a property : and , too).
 */
#ifndef DDPSIM_ANNOTATE_H
#define DDPSIM_ANNOTATE_H

#include <stdio.h>

/* --annotations, in its option's order. */
typedef enum annotate_mode { ANNOTATE_AUTO, ANNOTATE_GITHUB, ANNOTATE_NONE } annotate_mode;

/* Whether a run prints annotations: github, or auto with GITHUB_ACTIONS=true in the environment. */
int annotate_on(annotate_mode mode);
/* "::error title=TITLE::TEXT" (kind "error") or "::notice ..." (kind "notice") on out. */
void annotate(FILE *out, const char *kind, const char *title, const char *text);

#endif
