/*
 * progress.c - the rewritten progress line (progress.h).
 */
#include "progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "clock.h"

void progress_begin(progress *p, int quiet)
{
    p->on = !quiet && isatty(STDERR_FILENO);
    p->shown = 0;
    p->t0 = clock_now_s();
}

void progress_show(progress *p, const char *fmt, ...)
{
    if (!p->on)
        return;
    fputs("\r", stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (%.1f s)\033[K", clock_now_s() - p->t0); /* ESC [ K: erase what a longer line left */
    fflush(stderr);
    p->shown = 1;
}

void progress_clear(progress *p)
{
    if (!p->on || !p->shown)
        return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    p->shown = 0;
}
