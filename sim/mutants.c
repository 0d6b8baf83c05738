/*
 * mutants.c - `ddpsim --mutants` (mutants.h): every built-in implementation
 * through the whole scenario battery (catalogue.h), one table row each with
 * the scenarios that caught it.
 */
#include "mutants.h"

#include <stdio.h>
#include <string.h>

#include "catalogue.h"
#include "cli.h"
#include "progress.h"
#include "report_ci.h"

/* The tally of the rows so far. */
typedef struct tally {
    int mutants, caught, correct_failed, labels_wrong, only_bitwise;
    char only_names[512];
} tally;

/* The column of a scenario in a section's header (the sharded section lists HSDP's battery, the largest). */
static int column_of(shard_mode section, const scenario *sc)
{
    for (int i = 0; i < battery_count_for(section); i++)
        if (battery_at_for(section, i) == sc)
            return i;
    return -1;
}

static void section_header(shard_mode section)
{
    printf("# %s scenarios:", section == SHARD_NONE ? "DDP" : "sharded");
    for (int i = 0; i < battery_count_for(section); i++)
        printf(" %d %s%s", i + 1, battery_at_for(section, i)->name, i + 1 < battery_count_for(section) ? "," : "\n");
    printf("#%-30s %-7s ", "implementation", "result");
    for (int i = 0; i < battery_count_for(section); i++)
        printf("%-3d", i + 1);
    printf(" %-16s %-44s %s\n", section == SHARD_NONE ? "first catch" : "mode, first catch", "first divergence",
           "bitwise only");
}

/* An implementation's run configuration: the command line's, in its own sharded mode. */
static verify_config entry_config(const ddpsim_options *opt, const impl_entry *e)
{
    verify_config run = opt->run;
    run.shard = (shard_mode)e->shard_mode;
    if (run.shard != SHARD_NONE)
        run.mesh = shard_default_mesh(run.shard, run.nranks);
    return run;
}

static void catalogue_run_entry(const ddpsim_options *opt, const impl_entry *e, catalogue_outcome *o)
{
    verify_config run = entry_config(opt, e);
    catalogue_run(&run, &opt->given, e->ops, o);
}

/* One implementation's row from its outcome: 0, or the signal that stopped it. */
static int entry_row(const ddpsim_options *opt, const impl_entry *e, const catalogue_outcome *oc, shard_mode section,
                     tally *t, html_page *page)
{
    verify_config run = entry_config(opt, e);
    catalogue_outcome o = *oc;
    if (o.interrupted) {
        printf("# interrupted by signal %d at %s: the rest was not run\n", o.interrupted, e->ops->name);
        return o.interrupted;
    }
    int loose = opt->run.tol.kind != TOL_BITWISE; /* under a tolerance, a bug of the bits alone cannot show */
    int failed = o.first >= 0;
    int expected_miss = e->is_mutant && !failed && loose && e->bitwise_only;
    const char *result = e->is_mutant ? (failed ? "caught" : expected_miss ? "bitwise" : "MISSED")
                                      : (failed ? "FAILED" : "passes");
    printf(" %-30s %-7s ", e->ops->name, result);
    unsigned char col[CATALOGUE_MAX_SCENARIOS] = {0}, have[CATALOGUE_MAX_SCENARIOS] = {0};
    for (int k = 0; k < battery_count_for(run.shard) && k < CATALOGUE_MAX_SCENARIOS; k++) {
        int c = column_of(section, battery_at_for(run.shard, k));
        if (c >= 0 && c < CATALOGUE_MAX_SCENARIOS) {
            have[c] = 1;
            col[c] = o.caught[k];
        }
    }
    for (int k = 0; k < battery_count_for(section); k++)
        printf("%-3s", !have[k] ? " " : col[k] ? "x" : ".");
    const char *only = "-";
    int mislabelled = 0;
    if (e->is_mutant && failed && !o.fault && run.shard == SHARD_NONE && o.loose_known) {
        only = o.bitwise_only ? "yes" : "no";
        mislabelled = o.bitwise_only != e->bitwise_only;
    }
    char first[64] = "-";
    if (failed)
        snprintf(first, sizeof first, "%s%s%s", run.shard != SHARD_NONE ? shard_mode_name(run.shard) : "",
                 run.shard != SHARD_NONE ? ", " : "", battery_at_for(run.shard, o.first)->name);
    printf(" %-16s %-44.60s %s%s\n", first, failed ? o.where : "-", only,
           mislabelled ? " (the catalogue says otherwise)" : "");
    if (page) {
        unsigned char cells[CATALOGUE_MAX_SCENARIOS];
        for (int k = 0; k < battery_count_for(section) && k < CATALOGUE_MAX_SCENARIOS; k++)
            cells[k] = !have[k] ? 0 : col[k] ? 2 : 1;
        html_matrix_row(page, e->ops->name, result, strcmp(result, "MISSED") == 0 || strcmp(result, "FAILED") == 0,
                        cells, battery_count_for(section), first, failed ? o.where : "-");
    }
    if (expected_miss) {
        t->only_bitwise++;
        size_t at = strlen(t->only_names);
        snprintf(t->only_names + at, sizeof t->only_names - at, "%s%s", at ? ", " : "", e->ops->name);
    }
    if (e->is_mutant) {
        t->mutants++;
        t->caught += failed;
        t->labels_wrong += mislabelled;
    } else {
        t->correct_failed += failed;
    }
    fflush(stdout);
    return 0;
}

/* --html: a section's catch matrix begins (nothing without a page). */
static void matrix_begin(html_page *page, shard_mode section)
{
    if (!page)
        return;
    const char *names[CATALOGUE_MAX_SCENARIOS];
    int n = battery_count_for(section) < CATALOGUE_MAX_SCENARIOS ? battery_count_for(section) : CATALOGUE_MAX_SCENARIOS;
    for (int k = 0; k < n; k++)
        names[k] = battery_at_for(section, k)->name;
    html_matrix_begin(page, section == SHARD_NONE ? "DDP implementations over the scenario battery"
                                                  : "sharded implementations over their mode's battery",
                      n, names);
}

/* Whether the table of DDP's (sharded 0) or the sharded implementations (1) has a row for e. */
static int entry_selected(const ddpsim_options *opt, const impl_entry *e, int sharded)
{
    int mine = sharded ? e->shard_mode != SHARD_NONE : e->shard_mode == SHARD_NONE;
    if (!mine || (opt->run.shard != SHARD_NONE && e->shard_mode != (int)opt->run.shard))
        return 0;
    return !sharded || opt->run.tol.kind == TOL_BITWISE; /* the sharded reference is bitwise only */
}

/*
 * Two tables: DDP's implementations over the plain battery, then the sharded
 * ones, each over its mode's battery (--shard MODE: that mode's alone).
 */
int mutants_main(const ddpsim_options *opt)
{
    char tol[64];
    printf("# ddpsim --mutants: the scenario battery on every built-in implementation, %d ranks, algo %s, %s\n",
           opt->run.nranks, coll_algo_name(opt->run.ddp.algo), tol_format(&opt->run.tol, tol, sizeof tol));
    printf("# x: the scenario caught it; bitwise only: its first divergence passes --tolerance %s (sharded runs are "
           "bitwise)\n",
           CATALOGUE_LOOSE_TOLERANCE);
    tally t;
    memset(&t, 0, sizeof t);
    char msg[256];
    html_page *page = opt->html_file ? html_open(&opt->run.tol, opt->run.nranks, msg, sizeof msg) : NULL;
    if (opt->html_file && !page) {
        fprintf(stderr, "ddpsim: --html: %s\n", msg);
        return DDPSIM_EXIT_FAULT;
    }
    progress pg;
    progress_begin(&pg, opt->quiet);
    int nimpls = 0, done = 0;
    for (int sharded = 0; sharded < 2; sharded++)
        for (int i = 0; i < impl_builtin_count(); i++)
            nimpls += entry_selected(opt, impl_builtin_at(i), sharded);
    sigset_t saved;
    cli_hold_signals(&saved); /* a SIGTERM between two runs waits for the next one's supervisor */
    for (int sharded = 0; sharded < 2; sharded++) {
        shard_mode section = sharded ? SHARD_HSDP : SHARD_NONE;
        int any = 0;
        for (int i = 0; i < impl_builtin_count(); i++) {
            const impl_entry *e = impl_builtin_at(i);
            if (!entry_selected(opt, e, sharded))
                continue;
            if (!any++) {
                section_header(section);
                matrix_begin(page, section);
            }
            fflush(stdout);
            progress_show(&pg, "implementation %d of %d: %s", ++done, nimpls, e->ops->name);
            catalogue_outcome o;
            catalogue_run_entry(opt, e, &o);
            progress_clear(&pg); /* the row takes its place */
            int sig = entry_row(opt, e, &o, section, &t, page);
            if (sig) {
                cli_release_signals(&saved);
                html_close(page);
                return 128 + sig;
            }
        }
        if (any && page)
            html_matrix_end(page);
    }
    cli_release_signals(&saved); /* the held signals stay held (main's rule); one that came is taken next */
    int late = cli_signal_before_verdict(stdout);
    if (late) {
        html_close(page);
        return late;
    }
    int pass = t.caught + t.only_bitwise == t.mutants && t.correct_failed == 0 && t.labels_wrong == 0;
    printf("# mutation score: %d of %d caught; correct implementations: %s\n", t.caught, t.mutants,
           t.correct_failed ? "FAILED" : "all pass");
    if (t.only_bitwise)
        printf("# under --tolerance %s, %d bug%s only a bitwise comparison catches pass%s, as the catalogue says: %s "
               "(same math, other bits; the backend's own summation order needs the tolerance)\n",
               tol, t.only_bitwise, t.only_bitwise == 1 ? "" : "s", t.only_bitwise == 1 ? "es" : "", t.only_names);
    if (opt->run.nranks > 1 && !(opt->run.nranks & (opt->run.nranks - 1)))
        printf("# note: %d ranks is a power of two; bitwise-only bugs in the order of scaling need 3 or 5 to show\n",
               opt->run.nranks);
    printf("# verdict: %s\n", pass ? "PASS" : "FAIL");
    cli_verdict_printed();
    int code = pass ? DDPSIM_EXIT_PASS : DDPSIM_EXIT_MISMATCH;
    if (page) {
        char verdict[128];
        snprintf(verdict, sizeof verdict, "%s (mutation score: %d of %d caught; correct implementations: %s)",
                 pass ? "PASS" : "FAIL", t.caught, t.mutants, t.correct_failed ? "FAILED" : "all pass");
        ddpsim_options shown = *opt; /* the header's impl: not --impl's, which --mutants does not run */
        shown.run.impl = "every built-in implementation (--mutants)";
        if (report_html_write(&shown, page, verdict) != 0 && code == DDPSIM_EXIT_PASS)
            code = DDPSIM_EXIT_FAULT;
        html_close(page);
    }
    return code;
}
