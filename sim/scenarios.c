/*
 * scenarios.c - the default run: the scenario battery (battery.h) as one
 * table row per scenario and one verdict, and --scenarios (scenarios.h).
 */
#include "scenarios.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "battery_rows.h"
#include "cli.h"
#include "clock.h"
#include "config.h"
#include "jsonw.h"
#include "model.h"
#include "progress.h"
#include "report.h"
#include "report_ci.h"
#include "timeline.h"
#include "trace.h"

int scenarios_list(shard_mode mode)
{
    if (mode == SHARD_NONE)
        printf("# the scenario battery: what `ddpsim --ranks N` runs without --schedule, --model or --scenario\n");
    else
        printf("# the sharded battery: what `ddpsim --ranks N --shard %s` runs without --schedule, --model or "
               "--scenario\n", shard_mode_name(mode));
    for (int i = 0; i < battery_count_for(mode); i++) {
        const scenario *sc = battery_at_for(mode, i);
        printf("%-16s %s\n", sc->name, sc->exposes);
        printf("%-16s   model %s%s%s%s", "", sc->model ? sc->model : MODEL_DEFAULT_SPEC,
               sc->find_unused ? ", find_unused" : "", sc->bucket_view ? ", bucket_view" : "",
               sc->static_graph ? ", static_graph" : "");
        if (sc->bucket_cap)
            printf(", bucket caps %zu B (first %zu B)", sc->bucket_cap, sc->first_bucket_cap);
        printf("; schedule %s\n", sc->schedule);
        if (sc->divisor) /* its rows beyond the plain one (battery_rows.h) */
            printf("%-16s   also at N-1 ranks when N is a power of two\n", "");
        if (sc->chaos_seeds)
            printf("%-16s   also under chaos seeds 1-%d (the chaos pass)\n", "", sc->chaos_seeds);
    }
    return DDPSIM_EXIT_PASS;
}

/* The word of a row's verdict. */
static const char *row_word(const battery_outcome *o)
{
    if (o->status != DDP_OK)
        return o->refused ? "REFUSED" : "FAULT";
    switch (o->verdict) {
    case JUDGE_PASS: return "PASS";
    case JUDGE_NOTHING: return "NOTHING";
    case JUDGE_REFERENCE_BAD: return "REFERENCE";
    default: return "FAIL";
    }
}

/*
 * Every scenario's configuration through verify_check_config before any
 * rank starts. A configuration that is wrong whatever the scenario is a
 * usage error naming the option, found before (main.c check_run); one that
 * only a scenario's own schedule or options make impossible for this
 * implementation (a version-1 plugin and bucket_view with --zero-grad none;
 * --static-graph and a schedule whose first backward is in no_sync) is not
 * run, and its row says why.
 */
static int check_all(const ddpsim_options *opt, const battery_row *rows, int nrows, battery_outcome *out)
{
    for (int i = 0; i < nrows; i++) {
        verify_config c = battery_row_config(opt, &rows[i]);
        sched s;
        ddp_status st = battery_apply(rows[i].sc, &opt->given, &c, &s);
        if (st == DDP_OK) {
            st = verify_check_config(&c);
            sched_free(&s);
        }
        if (st == DDP_OK)
            continue;
        out[i].status = st;
        out[i].refused = 1;
        snprintf(out[i].first, sizeof out[i].first, "not possible here: %.980s", ddp_error_text());
    }
    return OPT_RUN;
}

/* A scenario's schedule and parameters, for --html's drawing: 1, or 0 when it has none (refused). */
static int scenario_layout(const ddpsim_options *opt, const scenario *sc, sched *s, model **layout)
{
    verify_config c = opt->run;
    if (battery_apply(sc, &opt->given, &c, s) != DDP_OK)
        return 0;
    if (model_create_layout(c.model_spec, c.batch, layout) != DDP_OK) {
        *layout = NULL;
        sched_free(s);
        return 0;
    }
    return 1;
}

/* The row's trace for its timeline, merged from its ranks' parts: its path, or NULL when none was written. */
static const char *scenario_trace(const verify_config *run, const battery_row *row, const battery_outcome *o)
{
    if (!run->trace_path || o->refused)
        return NULL;
    if (trace_merge(run->trace_path, run->nranks, row->label, "", NULL) != DDP_OK) {
        fprintf(stderr, "ddpsim: --html: no timeline for %s: %s\n", row->label, ddp_error_text());
        return NULL;
    }
    return run->trace_path;
}

/*
 * A row's run: once, or a chaos row's seeds in turn until one fails (its
 * first divergence then names the seed). The page keeps the last run's
 * checks and trace; the grabs are every run's.
 */
static void run_row(const ddpsim_options *opt, battery_row *row, verify_config *run, html_page *page,
                    const model *layout, const sched *drawn, battery_outcome *o)
{
    if (!row->chaos_seeds) {
        battery_run_one(run, &opt->given, row->sc, o);
        return;
    }
    size_t grabs = 0;
    for (int seed = 1; seed <= row->chaos_seeds; seed++) {
        if (page && seed > 1) /* a fresh heatmap for this seed's checks */
            html_run_begin_ranks(page, row->label, layout, drawn, row->nranks);
        run->chaos = 1;
        run->chaos_seed = (uint64_t)seed;
        battery_run_one(run, &opt->given, row->sc, o);
        grabs += o->grabs;
        row->runs += !o->refused;
        if (battery_failed(o)) {
            row->failed_seed = seed;
            char first[sizeof o->first];
            snprintf(first, sizeof first, "chaos seed %d: %s", seed, o->first);
            memcpy(o->first, first, sizeof first);
        }
        if (battery_failed(o) || o->refused || o->interrupted)
            break;
    }
    o->grabs = grabs;
}

static void header(const ddpsim_options *opt, int width)
{
    const verify_config *run = &opt->run;
    char tol[64];
    fprintf(opt->out, "# ddpsim %s: %s under test against %s\n", PACKAGE_VERSION, run->impl,
            run->shard == SHARD_NONE ? "the reference DDP (PyTorch semantics)" : "the sharded reference");
    fprintf(opt->out, "# the scenario battery: %d scenarios at %d ranks, batch %d, seed %llu, algo %s, tolerance %s%s\n",
            battery_count_for(opt->run.shard), run->nranks, run->batch, (unsigned long long)run->seed, coll_algo_name(run->ddp.algo),
            tol_format(&run->tol, tol, sizeof tol), run->chaos ? ", under chaos" : "");
    int m = battery_rows_extra_ranks(opt);
    if (m)
        fprintf(opt->out, "#   %d is a power of two, so 1/%d is exact and a bug in the order of scaling and summing "
                          "gives the same bits: the scenarios that would show it run at %d ranks too, as the rows "
                          "\"NAME at %d\"\n",
                run->nranks, run->nranks, m, m);
    for (int i = 0; i < battery_count_for(run->shard) && !run->chaos; i++) {
        const scenario *sc = battery_at_for(run->shard, i);
        if (sc->chaos_seeds > 0)
            fprintf(opt->out, "#   the chaos pass: %s once more under chaos seeds 1-%d (ready events held back and "
                              "shuffled, buckets launched late, ranks delayed%s), until one fails\n",
                    sc->name, sc->chaos_seeds,
                    battery_rows_sched(opt) ? "; the plugin's threads one at a time, each seed an interleaving of "
                                              "--sched pct:2" : "");
    }
    fprintf(opt->out, "#   ddpsim --scenarios says what each exposes; --scenario NAME runs one with its full report\n");
    if (run->clip_max > 0)
        fprintf(opt->out, "# --clip %g%s: clip_grad_norm_ before every step a training loop clips, in every scenario\n",
                run->clip_max, run->clip_inf ? ":inf" : "");
    char math[160];
    report_shard_line(opt);
    fprintf(opt->out, "# math: %s\n", model_math(math, sizeof math));
    fprintf(opt->out, "# replay: %s\n", opt->command);
    fprintf(opt->out, "#%-*s %-18s %5s %5s  %-9s %s\n", width, "scenario", "model", "grabs", "syncs", "verdict",
            "first divergence");
}

/* When 1/N is exact, which scenarios cannot show a bug in the order of scaling and summing, and where they ran. */
static void power_of_two_note(const ddpsim_options *opt)
{
    int m = battery_rows_extra_ranks(opt);
    int n = opt->run.nranks;
    if (n < 2) {
        fprintf(opt->out, "# 1 rank: nothing is reduced across ranks, so no synchronization bug can show; use 2 or more\n");
        return;
    }
    if (n & (n - 1))
        return;
    char names[256] = "";
    for (int i = 0; i < battery_count_for(opt->run.shard); i++)
        if (battery_at_for(opt->run.shard, i)->divisor)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? ", " : "",
                     battery_at_for(opt->run.shard, i)->name);
    if (!m) /* --mesh fixes the ranks; else the rows "NAME at M" ran them, as the header said */
        fprintf(opt->out, "# note: N = %d is a power of two, so 1/N is exact and a bug in the order of scaling and "
                          "summing gives the same bits; run --ranks %d or %d too (scenarios %s)\n",
                n, n - 1, n + 1, names);
}

static int write_json(const ddpsim_options *opt, const battery_row *rows, int nrows, const battery_outcome *out,
                      const char *result, double wall_s)
{
    FILE *f = opt->json_file;
    char tol[64];
    fprintf(f, "{\"result\": \"%s\", \"ranks\": %d, \"impl\": ", result, opt->run.nranks);
    jsonw_string(f, opt->run.impl);
    fprintf(f, ", \"tolerance\": ");
    jsonw_string(f, tol_format(&opt->run.tol, tol, sizeof tol));
    char math[160];
    fprintf(f, ", \"math\": ");
    jsonw_string(f, model_math(math, sizeof math));
    fprintf(f, ", ");
    report_json_shard(f, opt);
    fprintf(f, "\"command\": ");
    jsonw_string(f, opt->command);
    fprintf(f, ",\n \"scenarios\": [");
    for (int i = 0; i < nrows; i++) {
        const scenario *sc = rows[i].sc;
        const battery_outcome *o = &out[i];
        fprintf(f, "%s\n  {\"scenario\": \"%s\", \"ranks\": %d, ", i ? "," : "", sc->name, rows[i].nranks);
        if (rows[i].chaos_seeds) /* a row of the chaos pass: its seeds, the runs made, the one that failed */
            fprintf(f, "\"chaos_seeds\": %d, \"chaos_runs\": %d, \"chaos_failed_seed\": %d, ", rows[i].chaos_seeds,
                    rows[i].runs, rows[i].failed_seed);
        fprintf(f, "\"model\": ");
        jsonw_string(f, sc->model ? sc->model : opt->run.model_spec);
        fprintf(f, ", \"schedule\": ");
        jsonw_string(f, sc->schedule);
        fprintf(f, ", \"grabs\": %zu, \"syncs\": %zu, \"verdict\": \"%s\", \"first_divergence\": ", o->grabs, o->syncs,
                row_word(o));
        if (strcmp(o->first, "-") == 0)
            fprintf(f, "null");
        else
            jsonw_string(f, o->first);
        fprintf(f, "}");
    }
    fprintf(f, "\n ],\n \"wall_s\": ");
    jsonw_number(f, wall_s);
    fprintf(f, "}\n");
    if (fflush(f) != 0 || ferror(f)) {
        fprintf(stderr, "ddpsim: cannot write --json %s: %s\n", opt->json_path, strerror(errno));
        return -1;
    }
    return 0;
}

int battery_main(const ddpsim_options *opt)
{
    battery_row *rows = NULL;
    int n = battery_rows(opt, &rows);
    battery_outcome *out = n > 0 ? calloc((size_t)n, sizeof *out) : NULL;
    if (!out) {
        fprintf(stderr, "ddpsim: out of memory\n");
        free(rows);
        return DDPSIM_EXIT_FAULT;
    }
    int most = opt->run.nranks, width = 16; /* the most ranks of a row (the page's trace parts to clean), the
                                             * widest label (the table's first column) */
    for (int i = 0; i < n; i++) {
        most = rows[i].nranks > most ? rows[i].nranks : most;
        width = (int)strlen(rows[i].label) > width ? (int)strlen(rows[i].label) : width;
    }
    int r = check_all(opt, rows, n, out);
    if (r != OPT_RUN) {
        free(out);
        free(rows);
        return r;
    }
    if (!opt->quiet)
        header(opt, width);
    double t0 = clock_now_s();
    int failed = 0, faults = 0, nothing = 0, refused = 0;
    size_t grabs = 0;
    sigset_t saved;
    cli_hold_signals(&saved); /* a SIGTERM between two scenarios waits for the next one's supervisor */
    progress pg;
    progress_begin(&pg, opt->quiet);
    char msg[256];
    html_page *page = opt->html_file ? html_open(&opt->run.tol, opt->run.nranks, msg, sizeof msg) : NULL;
    if (opt->html_file && !page) {
        fprintf(stderr, "ddpsim: --html: %s\n", msg);
        free(out);
        free(rows);
        return DDPSIM_EXIT_FAULT;
    }
    verify_config base = opt->run;
    if (page) /* each scenario's checks go to the page as they come */
        base.sink = html_sink(page);
    report_page_trace pt = {.dir = ""}; /* each scenario traced in turn, for its timeline */
    base.trace_path = page ? report_page_trace_begin(opt, &pt) : NULL;
    for (int i = 0; i < n; i++) {
        const scenario *sc = rows[i].sc;
        verify_config row = battery_row_config(opt, &rows[i]);
        row.sink = base.sink;
        row.trace_path = base.trace_path;
        model *layout = NULL;
        sched drawn;
        int have = page && scenario_layout(opt, sc, &drawn, &layout);
        if (page)
            html_run_begin_ranks(page, rows[i].label, layout, have ? &drawn : NULL, rows[i].nranks);
        if (!out[i].refused) { /* not refused up front by check_all */
            progress_show(&pg, "scenario %d of %d: %s", i + 1, n, rows[i].label);
            double t = clock_now_s();
            run_row(opt, &rows[i], &row, page, layout, have ? &drawn : NULL, &out[i]);
            out[i].wall_s = clock_now_s() - t;
            progress_clear(&pg); /* the row takes its place */
        }
        if (page) {
            if (battery_failed(&out[i])) { /* the report's replay line of the row */
                char again[64], line[2048];
                battery_row_replay(opt, &rows[i], again, sizeof again);
                snprintf(line, sizeof line, "%s%s", opt->command, again);
                html_run_replay(page, line);
            }
            html_run_trace(page, scenario_trace(&row, &rows[i], &out[i]), TIMELINE_PAGE_BYTES / (size_t)n);
            html_run_end(page, row_word(&out[i]), out[i].first, &out[i].facts);
        }
        model_destroy(layout);
        if (have)
            sched_free(&drawn);
        const battery_outcome *o = &out[i];
        if (o->interrupted) {
            fprintf(opt->out, "# interrupted by signal %d in scenario %s: the rest was not run\n", o->interrupted,
                    rows[i].label);
            if (opt->out != stderr)
                fprintf(stderr, "ddpsim: interrupted by signal %d in scenario %s: the rest was not run\n",
                        o->interrupted, rows[i].label);
            cli_verdict_printed(); /* what was said instead */
            int code = 128 + o->interrupted;
            char why[160];
            snprintf(why, sizeof why, "interrupted by signal %d in scenario %s: the rest was not run", o->interrupted,
                     rows[i].label);
            report_no_verdict(opt, NULL, code, why);
            cli_release_signals(&saved);
            html_close(page);
            report_page_trace_end(&pt, most);
            free(out);
            free(rows);
            return code;
        }
        int bad = battery_failed(o);
        failed += bad && o->status == DDP_OK;
        faults += o->status != DDP_OK && !o->refused;
        refused += o->refused;
        nothing += o->status == DDP_OK && o->verdict == JUDGE_NOTHING;
        grabs += o->refused ? 0 : o->grabs;
        if (!opt->quiet || bad)
            fprintf(opt->out, " %-*s %-18s %5zu %5zu  %-9s %s\n", width, rows[i].label,
                    sc->model ? sc->model : opt->run.model_spec, o->grabs, o->syncs, row_word(o), o->first);
        fflush(opt->out);
    }
    cli_release_signals(&saved); /* the held signals stay held (main's rule); one that came is taken next */
    int late = cli_signal_before_verdict(opt->out);
    if (late) {
        report_no_verdict(opt, NULL, late, "interrupted before the verdict");
        html_close(page);
        report_page_trace_end(&pt, most);
        free(out);
        free(rows);
        return late;
    }
    double wall_s = clock_now_s() - t0;
    if (!opt->quiet) {
        power_of_two_note(opt);
        fprintf(opt->out, "# time %.3f s for %d scenarios\n", wall_s, n);
    }
    char tol[64], verdict[1024], where[96];
    tol_format(&opt->run.tol, tol, sizeof tol);
    int chaos_rows, chaos_runs, at_m = 0;
    battery_rows_chaos_pass(rows, n, &chaos_rows, &chaos_runs);
    for (int i = 0; i < n; i++)
        at_m += rows[i].nranks != opt->run.nranks;
    size_t w = (size_t)snprintf(where, sizeof where, ": %d at %d rank%s", n - at_m - chaos_rows, opt->run.nranks,
                                opt->run.nranks == 1 ? "" : "s");
    if (at_m && w < sizeof where)
        w += (size_t)snprintf(where + w, sizeof where - w, ", %d at %d", at_m, battery_rows_extra_ranks(opt));
    if (chaos_rows && w < sizeof where)
        w += (size_t)snprintf(where + w, sizeof where - w, ", %d under chaos (%d run%s)", chaos_rows, chaos_runs,
                              chaos_runs == 1 ? "" : "s");
    if (at_m || chaos_rows) /* the grabs are counted over rows of other rank counts, or several runs */
        snprintf(where + w, w < sizeof where ? sizeof where - w : 0, "; %zu grabs", grabs);
    else
        snprintf(where, sizeof where, ", %zu grabs x %d ranks", grabs, opt->run.nranks);
    const char *result;
    int code;
    if (failed + faults) {
        snprintf(verdict, sizeof verdict, "FAIL (%d of %d scenarios: %d diverge, %d fault%s)", failed + faults, n,
                 failed, faults, faults == 1 ? "" : "s");
        result = "fail";
        code = failed ? DDPSIM_EXIT_MISMATCH : DDPSIM_EXIT_FAULT;
    } else if (nothing || refused == n) {
        snprintf(verdict, sizeof verdict, "NOTHING VERIFIED (%d of %d scenarios compared only zeros, %d refused by the "
                                          "implementation)",
                 nothing, n, refused);
        result = "nothing_verified";
        code = DDPSIM_EXIT_NOTHING;
    } else {
        char which[512] = "";
        for (int i = 0; i < n; i++)
            if (out[i].refused)
                snprintf(which + strlen(which), sizeof which - strlen(which), "%s%s", which[0] ? ", " : "",
                         rows[i].label);
        snprintf(verdict, sizeof verdict, "PASS (%d of %d scenarios%s, %s%s%s)", n - refused, n, where, tol,
                 refused ? "; not run here, each row says why: " : "", which);
        result = "pass";
        code = DDPSIM_EXIT_PASS;
    }
    fprintf(opt->out, "# verdict: %s\n", verdict);
    for (int i = 0; i < n && failed + faults; i++)
        if (battery_failed(&out[i])) {
            char replay[64];
            battery_row_replay(opt, &rows[i], replay, sizeof replay);
            fprintf(opt->out, "# replay: %s%s\n", opt->command, replay);
        }
    cli_verdict_printed();
    if (opt->json_file && write_json(opt, rows, n, out, result, wall_s) != 0 && code == DDPSIM_EXIT_PASS)
        code = DDPSIM_EXIT_FAULT;
    if (report_ci_battery(opt, rows, out, n, verdict, wall_s) != 0 && code == DDPSIM_EXIT_PASS)
        code = DDPSIM_EXIT_FAULT;
    if (page && report_html_write(opt, page, verdict) != 0 && code == DDPSIM_EXIT_PASS)
        code = DDPSIM_EXIT_FAULT;
    html_close(page);
    report_page_trace_end(&pt, most);
    free(out);
    free(rows);
    return code;
}
