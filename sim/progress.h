/*
 * progress.h - progress of a long command (the battery, --mutants, a range
 * of chaos seeds) on one line of standard error that each step rewrites:
 * "scenario 3 of 23: window-5 (1.2 s)". Only on a terminal and never with
 * --quiet: in a pipe or a CI log nothing is written, so the output a
 * program reads is the same whether or not a person watches.
 */
#ifndef DDPSIM_PROGRESS_H
#define DDPSIM_PROGRESS_H

typedef struct progress {
    int on;    /* standard error is a terminal and the command was not told to be quiet */
    int shown; /* a line is on the screen */
    double t0; /* when the command began: the elapsed time shown */
} progress;

void progress_begin(progress *p, int quiet);
/* The line, rewritten: printf's format, then the elapsed seconds. */
void progress_show(progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The line erased (before the command writes a line of its own to the same terminal). */
void progress_clear(progress *p);

#endif
