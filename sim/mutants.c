/*
 * mutants.c - `ddpsim --mutants` (mutants.h): every built-in implementation
 * through the whole scenario battery (catalogue.h), one table row each with
 * the scenarios that caught it.
 */
#include "mutants.h"

#include <stdio.h>

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
    int mutants = 0, caught = 0, correct_failed = 0, labels_wrong = 0;
    for (int i = 0; i < impl_builtin_count(); i++) {
        const impl_entry *e = impl_builtin_at(i);
        catalogue_outcome o;
        catalogue_run(&opt->run, &opt->given, e->ops, &o);
        int failed = o.first >= 0;
        const char *result = e->is_mutant ? (failed ? "caught" : "MISSED") : (failed ? "FAILED" : "passes");
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
        if (e->is_mutant) {
            mutants++;
            caught += failed;
            labels_wrong += mislabelled;
        } else {
            correct_failed += failed;
        }
        fflush(stdout);
    }
    int pass = caught == mutants && correct_failed == 0 && labels_wrong == 0;
    printf("# mutation score: %d of %d caught; correct implementations: %s\n", caught, mutants,
           correct_failed ? "FAILED" : "all pass");
    if (opt->run.nranks > 1 && !(opt->run.nranks & (opt->run.nranks - 1)))
        printf("# note: %d ranks is a power of two; bitwise-only bugs in the order of scaling need 3 or 5 to show\n",
               opt->run.nranks);
    printf("# verdict: %s\n", pass ? "PASS" : "FAIL");
    return pass ? DDPSIM_EXIT_PASS : DDPSIM_EXIT_MISMATCH;
}
