/*
 * mutants.c - `ddpsim --mutants` (mutants.h): every built-in implementation
 * through the catalogue's configurations (catalogue.h), one table row each.
 */
#include "mutants.h"

#include <stdio.h>

#include "catalogue.h"
#include "cli.h"

int mutants_main(const ddpsim_options *opt)
{
    printf("# ddpsim --mutants: every built-in implementation against the reference, bitwise, algo %s\n",
           coll_algo_name(opt->run.ddp.algo));
    for (int i = 0; i < catalogue_nconfigs(); i++) {
        const catalogue_config *cc = catalogue_config_at(i);
        printf("# config %d (%s): %s, %d ranks%s, schedule %s\n", i + 1, cc->what, cc->model, cc->ranks,
               cc->find_unused ? ", find_unused" : "", cc->schedule);
    }
    printf("# bitwise only: caught bitwise but not with %s\n", CATALOGUE_LOOSE_TOLERANCE);
    printf("#%-25s %-8s %-7s %-58s %s\n", "implementation", "result", "config", "first divergence", "bitwise only");
    fflush(stdout);
    int mutants = 0, caught = 0, correct_failed = 0, labels_wrong = 0;
    for (int i = 0; i < impl_builtin_count(); i++) {
        const impl_entry *e = impl_builtin_at(i);
        catalogue_outcome o;
        catalogue_run(&opt->run, e->ops, &o);
        char cfg[16];
        snprintf(cfg, sizeof cfg, "%d", o.config + 1);
        if (!e->is_mutant) {
            correct_failed += o.failed;
            printf(" %-25s %-8s %-7s %-58s -\n", e->ops->name, o.failed ? "FAILED" : "passes", o.failed ? cfg : "all",
                   o.failed ? o.where : "-");
        } else {
            mutants++;
            caught += o.failed;
            const char *only = !o.failed || o.fault ? "-" : o.bitwise_only ? "yes" : "no";
            int mislabelled = o.failed && !o.fault && o.bitwise_only != e->bitwise_only;
            labels_wrong += mislabelled;
            printf(" %-25s %-8s %-7s %-58s %s%s\n", e->ops->name, o.failed ? "caught" : "MISSED",
                   o.failed ? cfg : "-", o.failed ? o.where : "-", only,
                   mislabelled ? " (the catalogue says otherwise)" : "");
        }
        fflush(stdout);
    }
    int pass = caught == mutants && correct_failed == 0 && labels_wrong == 0;
    printf("# mutation score: %d of %d caught; correct implementations: %s\n", caught, mutants,
           correct_failed ? "FAILED" : "all pass");
    printf("# verdict: %s\n", pass ? "PASS" : "FAIL");
    return pass ? DDPSIM_EXIT_PASS : DDPSIM_EXIT_MISMATCH;
}
