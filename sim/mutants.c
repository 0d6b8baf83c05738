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

int mutants_main(const ddpsim_options *opt)
{
    char tol[64];
    printf("# ddpsim --mutants: the scenario battery on every built-in implementation, %d ranks, algo %s, %s\n",
           opt->run.nranks, coll_algo_name(opt->run.ddp.algo), tol_format(&opt->run.tol, tol, sizeof tol));
    printf("# scenarios:");
    for (int i = 0; i < battery_count(); i++)
        printf(" %d %s%s", i + 1, battery_at(i)->name, i + 1 < battery_count() ? "," : "\n");
    printf("# x: the scenario caught it; bitwise only: its first divergence passes --tolerance %s\n",
           CATALOGUE_LOOSE_TOLERANCE);
    printf("#%-30s %-7s ", "implementation", "result");
    for (int i = 0; i < battery_count(); i++)
        printf("%-3d", i + 1);
    printf(" %-16s %-44s %s\n", "first catch", "first divergence", "bitwise only");
    fflush(stdout);
    int mutants = 0, caught = 0, correct_failed = 0, labels_wrong = 0, only_bitwise = 0;
    int loose = opt->run.tol.kind != TOL_BITWISE; /* under a tolerance, a bug of the bits alone cannot show */
    sigset_t saved;
    cli_hold_signals(&saved); /* a SIGTERM between two runs waits for the next one's supervisor */
    char only_names[512] = "";
    for (int i = 0; i < impl_builtin_count(); i++) {
        const impl_entry *e = impl_builtin_at(i);
        catalogue_outcome o;
        catalogue_run(&opt->run, &opt->given, e->ops, &o);
        if (o.interrupted) {
            printf("# interrupted by signal %d at %s: the rest was not run\n", o.interrupted, e->ops->name);
            cli_release_signals(&saved);
            return 128 + o.interrupted;
        }
        int failed = o.first >= 0;
        int expected_miss = e->is_mutant && !failed && loose && e->bitwise_only;
        const char *result = e->is_mutant ? (failed ? "caught" : expected_miss ? "bitwise" : "MISSED")
                                          : (failed ? "FAILED" : "passes");
        printf(" %-30s %-7s ", e->ops->name, result);
        for (int k = 0; k < battery_count(); k++)
            printf("%-3s", o.caught[k] ? "x" : ".");
        const char *only = "-";
        int mislabelled = 0;
        if (e->is_mutant && failed && !o.fault) {
            only = o.bitwise_only ? "yes" : "no";
            mislabelled = o.bitwise_only != e->bitwise_only;
        }
        printf(" %-16s %-44.60s %s%s\n", failed ? battery_at(o.first)->name : "-", failed ? o.where : "-", only,
               mislabelled ? " (the catalogue says otherwise)" : "");
        if (expected_miss) {
            only_bitwise++;
            size_t at = strlen(only_names);
            snprintf(only_names + at, sizeof only_names - at, "%s%s", at ? ", " : "", e->ops->name);
        }
        if (e->is_mutant) {
            mutants++;
            caught += failed;
            labels_wrong += mislabelled;
        } else {
            correct_failed += failed;
        }
        fflush(stdout);
    }
    cli_release_signals(&saved); /* the held signals stay held (main's rule); one that came is taken next */
    int late = cli_signal_before_verdict(stdout);
    if (late)
        return late;
    int pass = caught + only_bitwise == mutants && correct_failed == 0 && labels_wrong == 0;
    printf("# mutation score: %d of %d caught; correct implementations: %s\n", caught, mutants,
           correct_failed ? "FAILED" : "all pass");
    if (only_bitwise)
        printf("# under --tolerance %s, %d bug%s only a bitwise comparison catches pass%s, as the catalogue says: %s "
               "(same math, other bits; the backend's own summation order needs the tolerance)\n",
               tol, only_bitwise, only_bitwise == 1 ? "" : "s", only_bitwise == 1 ? "es" : "", only_names);
    if (opt->run.nranks > 1 && !(opt->run.nranks & (opt->run.nranks - 1)))
        printf("# note: %d ranks is a power of two; bitwise-only bugs in the order of scaling need 3 or 5 to show\n",
               opt->run.nranks);
    printf("# verdict: %s\n", pass ? "PASS" : "FAIL");
    cli_verdict_printed();
    return pass ? DDPSIM_EXIT_PASS : DDPSIM_EXIT_MISMATCH;
}
