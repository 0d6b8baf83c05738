/*
 * html.h - --html FILE: a run's report as one self-contained page (no
 * network, no external script, style or font: it opens from a CI
 * artifact). For each run (the single run, `ddpsim check`'s replay, or
 * every scenario of the battery):
 *   - the heatmap: a row per parameter, a column per check (every grab and
 *     parameter check), a table per rank (a selector shows one); a cell is
 *     coloured by how far the implementation was from the reference there
 *     (verify_record.param_*: identical bits; the ulp distance on a log
 *     scale; under the order tolerance the fraction of the proven bound
 *     used), red where the tolerance failed, the first divergence
 *     outlined; a cell's title (and a click) gives its figures;
 *   - the schedule as a strip of ops, the backwards that sync marked;
 *   - for a traced run, its timeline (timeline.h): per rank the ops as they
 *     ran, the ready events, the implementation's collectives and buckets;
 *   - its verdict and first divergence, in the report's words, and unless it
 *     passed the command that reruns it alone (its replay line).
 * The battery adds a table of the scenarios linking to their sections; the
 * header gives the command, the replay line, the versions, the BLAS kernel
 * and the tolerance. The figures are per tensor, never per element: a page
 * holds at most HTML_MAX_CELLS cells (checks x ranks x parameters), and a
 * run with more is refused before any rank starts.
 */
#ifndef DDPSIM_HTML_H
#define DDPSIM_HTML_H

#include <stdio.h>

#include "judge.h"
#include "model.h"
#include "schedule.h"
#include "tolerance.h"
#include "verify.h"

#define HTML_MAX_CELLS 200000

typedef struct html_page html_page;

/* A page for a run of nranks ranks under tol; NULL (msg says why) when its temporary file cannot be made. */
html_page *html_open(const tolerance *tol, int nranks, char *msg, size_t len);
void html_close(html_page *h);

/* A run begins: its name (a scenario's, or NULL for a single run), its parameters' names and its schedule. */
void html_run_begin(html_page *h, const char *name, const model *layout, const sched *s);
/* ... a run of another number of ranks than the page's (a battery's row at N-1, battery_rows.h). */
void html_run_begin_ranks(html_page *h, const char *name, const model *layout, const sched *s, int nranks);
/*
 * The run's trace (trace.h): its timeline is drawn below the strip of ops
 * (timeline.h) in at most share bytes (else a note says why not); NULL: none.
 */
void html_run_trace(html_page *h, const char *trace_path, size_t share);
/* The command that reruns the run under way alone, shown under its verdict unless it passed. */
void html_run_replay(html_page *h, const char *command);
/* One check's records (verify_sink.on_check, beside the table). */
void html_run_check(html_page *h, const sched_check *ck, const verify_record *recs, int nranks);
/* A sink that gives every check to h (a run whose records only the page takes: a scenario of the battery). */
verify_sink html_sink(html_page *h);
/*
 * The run ends with verdict (the table's word: PASS, FAIL, FAULT, ...) and
 * summary (its first divergence, or its fault, in the report's words;
 * NULL for a pass); first outlines the first divergence's cell.
 */
void html_run_end(html_page *h, const char *verdict, const char *summary, const judge_facts *first);

/*
 * --mutants' catch matrix, a table per section: a column per scenario
 * (names[ncols]), then a row per implementation: its result word (bad: a
 * missed bug or a failing correct implementation), each scenario's cell
 * (cells[k]: 0 not in its battery, 1 did not catch it, 2 caught it), its
 * first catch and first divergence.
 */
void html_matrix_begin(html_page *h, const char *title, int ncols, const char *const *names);
void html_matrix_row(html_page *h, const char *name, const char *result, int bad, const unsigned char *cells,
                     int ncols, const char *first, const char *where);
void html_matrix_end(html_page *h);

/*
 * The page onto out: the header's facts (name/value pairs, NULL-terminated),
 * the overall verdict, the scenarios' table when the page has several
 * runs, then every run's section. -1 on a write error.
 */
int html_write(html_page *h, FILE *out, const char *title, const char *verdict, const char *const *facts);

/* Text for HTML, escaped (also in an attribute's double quotes); a control byte becomes a space. */
void html_escape(FILE *f, const char *s);

#endif
