/*
 * report_ci.c - the report for CI (report_ci.h).
 */
#include "config.h" /* first: _GNU_SOURCE (AC_USE_SYSTEM_EXTENSIONS) for asprintf */
#include "report_ci.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "annotate.h"
#include "cli.h"
#include "model.h"
#include "timeline.h"
#include "trace.h"

/* The run's facts every suite carries. */
static void suite_props(const ddpsim_options *opt, const char *extra_name, const char *extra, const char **props,
                        char *ranks, size_t rlen, char *tol, size_t tlen, char *math, size_t mlen)
{
    snprintf(ranks, rlen, "%d", opt->run.nranks);
    tol_format(&opt->run.tol, tol, tlen);
    model_math(math, mlen);
    int k = 0;
    props[k++] = "ddpsim_version";
    props[k++] = PACKAGE_VERSION;
    props[k++] = "impl";
    props[k++] = opt->run.impl ? opt->run.impl : "";
    props[k++] = "ranks";
    props[k++] = ranks;
    props[k++] = "tolerance";
    props[k++] = tol;
    props[k++] = "math";
    props[k++] = math;
    props[k++] = "command";
    props[k++] = opt->command ? opt->command : "";
    if (extra_name) {
        props[k++] = extra_name;
        props[k++] = extra;
    }
    props[k++] = NULL;
    props[k] = NULL;
}

/* Write suite s to --junit; -1 (said on stderr) on an error. */
static int write_suite(const ddpsim_options *opt, junit_suite *s, double wall_s, const char *verdict)
{
    const char *props[20];
    char ranks[16], tol[64], math[160];
    suite_props(opt, "verdict", verdict, props, ranks, sizeof ranks, tol, sizeof tol, math, sizeof math);
    if (junit_write(s, opt->junit_file, "ddpsim", wall_s, props) != 0) {
        fprintf(stderr, "ddpsim: cannot write --junit %s: %s\n", opt->junit_path, strerror(errno));
        return -1;
    }
    return 0;
}

void report_ci_check(report_stream *rs, const sched_check *ck, const verify_record *recs, int nranks)
{
    if (!rs->junit.cases)
        return;
    int bad = -1;
    for (int r = 0; r < nranks && bad < 0; r++)
        if (!judge_record_ok(&recs[r]))
            bad = r;
    char where[32], name[128], message[256];
    snprintf(name, sizeof name, "%s (%s)", sched_check_name(ck, where, sizeof where), ck->label);
    junit_case c = {.name = name, .time_s = -1, .outcome = JUNIT_PASS};
    judge_facts facts;
    if (bad >= 0) { /* this check's own first divergence, in the judge's words */
        judgement one = {.verdict = JUDGE_DIVERGES, .first = &recs[bad], .first_where = ck, .first_rank = bad};
        judge_summary(&one, rs->layout, message, sizeof message);
        judge_facts_of(&one, rs->layout, &facts);
        c.outcome = JUNIT_FAIL;
        c.message = message;
        c.facts = &facts;
        c.replay = rs->opt->command;
    }
    junit_add(&rs->junit, &c);
}

int report_ci_verdict(const ddpsim_options *opt, const verify_result *res, const judgement *j, const char *verdict,
                      report_stream *rs)
{
    char first[256], title[96];
    judge_summary(j, rs->layout, first, sizeof first);
    if (annotate_on((annotate_mode)opt->annotations)) {
        if (j->verdict != JUDGE_PASS && j->verdict != JUDGE_NOTHING) {
            judge_facts k;
            judge_facts_of(j, rs->layout, &k);
            snprintf(title, sizeof title, "ddpsim: FAIL%s%s", k.known ? " at " : "", k.known ? k.check : "");
            char *text = NULL;
            if (asprintf(&text, "%s\nreplay: %s", first, opt->command) >= 0)
                annotate(opt->out, "error", title, text);
            free(text);
        }
        annotate(opt->out, "notice", "ddpsim verdict", verdict);
    }
    int bad = 0;
    if (rs->html) {
        judge_facts k;
        judge_facts_of(j, rs->layout, &k);
        const char *word = j->verdict == JUDGE_PASS ? "PASS" : j->verdict == JUDGE_NOTHING ? "NOTHING VERIFIED" : "FAIL";
        html_run_end(rs->html, word, j->verdict == JUDGE_PASS ? NULL : first, &k);
        bad |= report_html_write(opt, rs->html, verdict);
    }
    if (!rs->junit.cases)
        return bad;
    /* The run's own checks, which no single check's records show: the implementation's ranks agree, the
     * reference passed its own, NCCL gave every rank the same bits; and whether anything was verified. */
    junit_case c = {.name = "the ranks agree, the reference's own checks", .time_s = -1, .outcome = JUNIT_PASS};
    if (j->verdict == JUDGE_REFERENCE_BAD || j->verdict == JUDGE_RANKS_DISAGREE || j->verdict == JUDGE_NCCL_DISAGREE) {
        c.outcome = JUNIT_FAIL;
        c.type = j->verdict == JUDGE_REFERENCE_BAD ? "reference" : "disagreement";
        c.message = first;
        c.replay = opt->command;
    } else if (j->verdict == JUDGE_NOTHING) {
        c.outcome = JUNIT_SKIP;
        c.message = verdict;
    }
    junit_add(&rs->junit, &c);
    return write_suite(opt, &rs->junit, res->wall_s, verdict) | bad;
}

void report_ci_no_verdict(const ddpsim_options *opt, const world *w, int code, const char *result,
                          const char *error)
{
    char title[64], why[WORLD_ERROR_LEN + 512];
    snprintf(title, sizeof title, "ddpsim: %s (exit %d)", result, code);
    snprintf(why, sizeof why, "%s", error);
    const char *own; /* the first failing rank's own words, as the battery's row */
    int r = world_first_failed_error(w, &own);
    if (r >= 0)
        snprintf(why, sizeof why, "%.400s: rank %d: %s", error, r, ddp_error_without_location(own));
    error = why;
    if (annotate_on((annotate_mode)opt->annotations))
        annotate(opt->out, "error", title, error);
    if (opt->html_file) { /* the header and the error: no run to draw */
        char msg[256];
        html_page *h = html_open(&opt->run.tol, opt->run.nranks, msg, sizeof msg);
        char *words = NULL;
        if (h && w && opt->run.trace_path) { /* the ranks ran: where each was when it stopped */
            html_run_begin(h, NULL, NULL, opt->run.schedule);
            html_run_replay(h, opt->command);
            html_run_trace(h, opt->run.trace_path, TIMELINE_PAGE_BYTES);
            html_run_end(h, result, error, NULL);
        }
        if (h && asprintf(&words, "%s: %s", title + strlen("ddpsim: "), error) >= 0)
            report_html_write(opt, h, words);
        else if (!h)
            fprintf(stderr, "ddpsim: --html: %s\n", msg);
        free(words);
        html_close(h);
    }
    if (!opt->junit_file)
        return;
    junit_suite s;
    char msg[512];
    if (junit_begin(&s, msg, sizeof msg) != 0) {
        fprintf(stderr, "ddpsim: --junit: %s\n", msg);
        return;
    }
    junit_case c = {.name = "run", .time_s = -1, .outcome = JUNIT_FAULT, .message = error, .replay = opt->command};
    junit_add(&s, &c);
    write_suite(opt, &s, 0, title + strlen("ddpsim: "));
    junit_end(&s);
}

int report_ci_battery(const ddpsim_options *opt, const battery_row *rows, const battery_outcome *out, int n,
                      const char *verdict, double wall_s)
{
    int on = annotate_on((annotate_mode)opt->annotations);
    junit_suite s;
    char msg[512];
    if (opt->junit_file && junit_begin(&s, msg, sizeof msg) != 0) {
        fprintf(stderr, "ddpsim: --junit: %s\n", msg);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const battery_outcome *o = &out[i];
        char *replay = NULL, tail[64];
        battery_row_replay(opt, &rows[i], tail, sizeof tail);
        if (asprintf(&replay, "%s%s", opt->command, tail) < 0)
            replay = NULL;
        if (on && battery_failed(o)) {
            char title[96], *text = NULL;
            snprintf(title, sizeof title, "ddpsim: scenario %s %s", rows[i].label,
                     o->status == DDP_OK ? "FAIL" : "FAULT");
            if (asprintf(&text, "%s\nreplay: %s", o->first, replay ? replay : opt->command) >= 0)
                annotate(opt->out, "error", title, text);
            free(text);
        }
        if (opt->junit_file) {
            junit_case c = {.name = rows[i].label, .time_s = o->refused ? -1 : o->wall_s, .message = o->first,
                            .replay = replay};
            if (o->refused) {
                c.outcome = JUNIT_SKIP;
            } else if (o->status != DDP_OK) {
                c.outcome = JUNIT_FAULT;
            } else if (o->verdict == JUDGE_NOTHING) {
                c.outcome = JUNIT_SKIP;
                c.message = "nothing verified: every grab compared only zeros";
            } else if (o->verdict != JUDGE_PASS) {
                c.outcome = JUNIT_FAIL;
                c.type = o->verdict == JUDGE_REFERENCE_BAD ? "reference" : "divergence";
                c.facts = &o->facts;
            }
            if (c.outcome == JUNIT_PASS)
                c.replay = NULL; /* the replay line belongs to what failed */
            junit_add(&s, &c);
        }
        free(replay);
    }
    if (on)
        annotate(opt->out, "notice", "ddpsim verdict", verdict);
    if (!opt->junit_file)
        return 0;
    int r = write_suite(opt, &s, wall_s, verdict);
    junit_end(&s);
    return r;
}

/* The cells of a run of s on nranks ranks with layout's parameters. */
static size_t cells_of(int nranks, const sched *s, const model *layout)
{
    return sched_nchecks(s) * (size_t)nranks * (size_t)model_nparams(layout);
}

int report_html_fits(const ddpsim_options *opt, const model *layout)
{
    if (!opt->html_path)
        return 0;
    size_t cells = 0;
    if (!opt->battery) {
        model *own = NULL;
        if (!layout && model_create_layout(opt->run.model_spec, opt->run.batch, &own) == DDP_OK)
            layout = own;
        cells = layout ? cells_of(opt->run.nranks, opt->run.schedule, layout) : 0;
        model_destroy(own);
    } else {
        battery_row *rows = NULL;
        int n = battery_rows(opt, &rows);
        for (int i = 0; i < n; i++) {
            verify_config c = battery_row_config(opt, &rows[i]);
            sched s;
            model *m = NULL;
            if (battery_apply(rows[i].sc, &opt->given, &c, &s) != DDP_OK)
                continue; /* refused: its row says why, and it draws nothing */
            if (model_create_layout(c.model_spec, c.batch, &m) == DDP_OK)
                cells += cells_of(c.nranks, &s, m);
            model_destroy(m);
            sched_free(&s);
        }
        free(rows);
    }
    if (cells <= HTML_MAX_CELLS)
        return 0;
    char msg[256];
    snprintf(msg, sizeof msg, "the page would hold %zu cells (checks x ranks x parameters), more than %d: a run this "
                              "long belongs in --json (or draw a shorter schedule)",
             cells, HTML_MAX_CELLS);
    return cli_usage_error(NULL, "--html", msg);
}

int report_html_write(const ddpsim_options *opt, html_page *h, const char *verdict)
{
    const char *props[20];
    char ranks[16], tol[64], math[160];
    suite_props(opt, NULL, NULL, props, ranks, sizeof ranks, tol, sizeof tol, math, sizeof math);
    char title[160];
    snprintf(title, sizeof title, "ddpsim %s: %.100s", opt->run.impl ? opt->run.impl : "", verdict);
    if (html_write(h, opt->html_file, title, verdict, props) != 0) {
        fprintf(stderr, "ddpsim: cannot write --html %s: %s\n", opt->html_path, strerror(errno));
        return -1;
    }
    return 0;
}

const char *report_page_trace_begin(const ddpsim_options *opt, report_page_trace *pt)
{
    pt->dir[0] = '\0';
    if (!opt->html_file || opt->run.trace_path || opt->world == CLI_WORLD_MPI)
        return NULL;
    if (cli_temp_dir("page", pt->dir, sizeof pt->dir) != 0) {
        fprintf(stderr, "ddpsim: --html: no timeline: cannot create a directory for the run's trace: %s\n",
                strerror(errno));
        pt->dir[0] = '\0';
        return NULL;
    }
    snprintf(pt->path, sizeof pt->path, "%s/trace", pt->dir);
    return pt->path;
}

void report_page_trace_end(report_page_trace *pt, int nranks)
{
    if (!pt->dir[0])
        return;
    trace_discard(pt->path, nranks);
    remove(pt->path);
    rmdir(pt->dir);
    pt->dir[0] = '\0';
}
