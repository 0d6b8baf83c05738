/*
 * timeline.h - the HTML page's timeline of a traced run: what each rank
 * did, when, drawn from its trace (trace.h, version 3) as inline SVG.
 *
 * Per rank, one lane each:
 *   ops     the schedule's ops as they ran, from an op's start to the next
 *           one's (the setup before op 0 apart); a backward that syncs is
 *           marked; a rank without an end event is said to have stopped;
 *   ready   a tick per gradient-ready event the implementation received;
 *   main    the collectives the implementation called from the rank's
 *           main thread, as bars as long as they took, with their sizes;
 *   thread k  each other thread of the implementation: its collectives,
 *           and a built-in's communication thread's buckets (or units):
 *           a mark where the main thread launched one, an outlined bar
 *           while the thread worked it, so overlap with the backward shows.
 * Every shape has a title with its figures. Arrivals at ddpsim's own
 * barriers are not drawn. Times are one clock for all ranks (the
 * machine's monotonic clock), from the first event drawn.
 */
#ifndef DDPSIM_TIMELINE_H
#define DDPSIM_TIMELINE_H

#include <stddef.h>
#include <stdio.h>

#include "schedule.h"

#define TIMELINE_MAX_EVENTS 20000 /* events a run's timeline draws at most (ops, ready, collectives, buckets) */
#define TIMELINE_PAGE_BYTES (2u << 20) /* a page's timelines together; the battery's scenarios share it evenly */

/*
 * The timeline of the trace at path (nranks ranks, schedule s) onto out as
 * a <div class="timeline-svg">, at most max_bytes of it; 0, or -1 with why
 * in msg when nothing can be drawn (the file is unreadable, not a trace
 * with times, too long, or its drawing bigger than max_bytes).
 */
int timeline_svg(FILE *out, const char *path, int nranks, const sched *s, size_t max_bytes, char *msg, size_t len);
/* The timeline's CSS, for the page's style element. */
const char *timeline_style(void);

#endif
