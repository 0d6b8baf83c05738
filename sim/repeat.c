/*
 * repeat.c - running many chaos seeds (repeat.h).
 *
 * Every seed is a complete run with the same data and a different timing.
 * Two fingerprints per run (a hash over every check's and rank's gradient
 * and parameter bits) say what changed with the seed: the reference's, up
 * to a run's first failing check, must never change (a ddpsim bug
 * otherwise); an implementation's that changes is reported as
 * order-dependent. Progress goes to stderr: a bar on a terminal (none with
 * --quiet), a line per seed otherwise. The summary lists each failing seed
 * with the command that replays it.
 */
#include "repeat.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"
#include "hash.h"
#include "judge.h"
#include "progress.h"

typedef struct seed_result {
    uint64_t seed;
    int code; /* 0 pass, 1 divergence, 3 fault */
    char why[200];
} seed_result;

/*
 * The reference's fingerprints of the runs so far, one per length: a fingerprint covers the checks up to a run's
 * first failing one (verify_tally.ref_checks), after which the reference goes on from the implementation's
 * parameters, so only runs that failed first at the same check (or passed) have the same reference to compare.
 */
#define REF_LENGTHS 16
typedef struct ref_prints {
    size_t checks[REF_LENGTHS];
    uint64_t fp[REF_LENGTHS];
    int n;
    uint64_t compared; /* runs compared with an earlier one of their length */
    int changed;
} ref_prints;

static void ref_prints_take(ref_prints *p, const verify_tally *t)
{
    for (int i = 0; i < p->n; i++)
        if (p->checks[i] == t->ref_checks) {
            p->compared++;
            p->changed |= p->fp[i] != t->ref_fingerprint;
            return;
        }
    if (p->n < REF_LENGTHS) {
        p->checks[p->n] = t->ref_checks;
        p->fp[p->n++] = t->ref_fingerprint;
    }
}

/* A bar on a terminal (progress.h; none with --quiet), a line per seed in a log. */
static void show(progress *pg, int tty, uint64_t done, uint64_t total, size_t failing, const seed_result *last)
{
    if (tty) {
        int width = 30, filled = (int)(width * done / total);
        progress_show(pg, "[%.*s%*s] %llu/%llu seeds, %zu failing", filled, "##############################",
                      width - filled, "", (unsigned long long)done, (unsigned long long)total, failing);
        if (done == total && pg->shown)
            fputc('\n', stderr);
    } else {
        fprintf(stderr, "chaos %llu: %s%s%s\n", (unsigned long long)last->seed,
                last->code == 0 ? "pass" : last->code == 1 ? "FAIL" : "FAULT", last->why[0] ? ": " : "", last->why);
    }
}

int repeat_main(const ddpsim_options *opt)
{
    /* A count, not a seed loop: the last seed may be UINT64_MAX (options.c keeps the range under a million). */
    uint64_t total = opt->chaos_last - opt->chaos_first + 1;
    int tty = isatty(fileno(stderr));
    progress pg;
    progress_begin(&pg, opt->quiet);
    printf("# ddpsim %s: repeating under chaos seeds %llu..%llu (same data, different timing)\n", opt->run.impl,
           (unsigned long long)opt->chaos_first, (unsigned long long)opt->chaos_last);
    printf("# base command: %s\n", opt->replay_base);
    fflush(stdout);
    seed_result *failed = calloc(total < 100000 ? total : 100000, sizeof *failed);
    if (!failed) {
        fprintf(stderr, "ddpsim: out of memory\n");
        return DDPSIM_EXIT_FAULT;
    }
    model *layout = NULL; /* to name parameters */
    if (model_create_layout(opt->run.model_spec, opt->run.batch, &layout) != DDP_OK)
        layout = NULL;
    size_t nfailed = 0;
    uint64_t impl_fp = 0, runs = 0, attempted = 0, informative = 0;
    int impl_changed = 0, interrupted = 0;
    ref_prints ref = {0};
    for (uint64_t i = 0; i < total; i++) {
        uint64_t seed = opt->chaos_first + i;
        verify_config c = opt->run;
        c.chaos = 1;
        c.chaos_seed = seed;
        verify_result res;
        ddp_status s = verify_run(&c, &res);
        seed_result sr = {seed, 0, ""};
        attempted++;
        if (s == DDP_ERR_INTERRUPTED) {
            interrupted = world_interrupt_signal(res.w);
            verify_result_free(&res);
            break;
        }
        if (s != DDP_OK) {
            sr.code = DDPSIM_EXIT_FAULT;
            snprintf(sr.why, sizeof sr.why, "%s", ddp_error_text());
        } else {
            judgement j;
            judge_run(&res, &j);
            informative += j.verdict != JUDGE_NOTHING;
            if (j.verdict != JUDGE_PASS && j.verdict != JUDGE_NOTHING) {
                sr.code = DDPSIM_EXIT_MISMATCH;
                judge_summary(&j, layout, sr.why, sizeof sr.why);
            }
            uint64_t imf = res.tally.impl_fingerprint;
            if (runs++ == 0)
                impl_fp = imf;
            impl_changed |= imf != impl_fp;
            ref_prints_take(&ref, &res.tally);
        }
        verify_result_free(&res);
        if (sr.code && nfailed < 100000)
            failed[nfailed++] = sr;
        show(&pg, tty, i + 1, total, nfailed, &sr);
        if (sr.code && opt->fail_fast)
            break;
    }
    int worst = 0;
    printf("# %llu runs, %zu failing\n", (unsigned long long)attempted, nfailed);
    for (size_t i = 0; i < nfailed; i++) {
        printf("# chaos %llu: %s (%s)\n#   replay: %s --chaos %llu\n", (unsigned long long)failed[i].seed,
               failed[i].code == 1 ? "FAIL" : "FAULT", failed[i].why, opt->replay_base,
               (unsigned long long)failed[i].seed);
        if (failed[i].code == 1 || worst == 0)
            worst = failed[i].code == 1 ? 1 : (worst ? worst : 3);
    }
    /* Whether bits depend on the seed can only be said after two runs that completed. */
    if (runs < 2 || ref.compared == 0)
        printf("# reference under every chaos seed: not checked (%llu completed run%s%s)\n", (unsigned long long)runs,
               runs == 1 ? "" : "s", runs < 2 ? "" : ", no two of them failing first at the same check");
    else
        printf("# reference under every chaos seed: %s\n",
               ref.changed ? "CHANGED: its gradients depend on timing (a bug in ddpsim)" : "bitwise identical");
    if (runs < 2)
        printf("# implementation under every chaos seed: not checked (%llu completed run%s)\n",
               (unsigned long long)runs, runs == 1 ? "" : "s");
    else
        printf("# implementation under every chaos seed: %s\n",
               impl_changed ? "changes: ORDER-DEPENDENT (its results depend on timing)" : "bitwise identical");
    free(failed);
    model_destroy(layout);
    if (interrupted) {
        printf("# interrupted by signal %d\n", interrupted);
        fprintf(stderr, "ddpsim: interrupted by signal %d\n", interrupted);
        cli_verdict_printed(); /* what was said instead */
        return 128 + interrupted;
    }
    int late = cli_signal_before_verdict(stdout);
    if (late)
        return late;
    cli_verdict_printed(); /* each way out below prints its verdict line first */
    if (ref.changed && worst == 0)
        worst = DDPSIM_EXIT_MISMATCH;
    if (worst) {
        printf("# verdict: FAIL\n");
        return worst;
    }
    if (informative == 0) {
        printf("# verdict: NOTHING VERIFIED (no run compared anything but zeros)\n");
        return DDPSIM_EXIT_NOTHING;
    }
    printf("# verdict: PASS\n");
    return DDPSIM_EXIT_PASS;
}
