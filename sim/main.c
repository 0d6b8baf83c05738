/*
 * main.c - ddpsim: pick the subcommand, parse and validate everything, hand
 * the engine a complete run description, report, and turn the outcome into
 * an exit code. Results go to stdout, diagnostics to stderr.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "blas_pool.h"
#include "check_cmd.h"
#include "cli.h"
#include "dump.h"
#include "gpu_probe.h"
#include "jsonw.h"
#include "model.h"
#include "mutants.h"
#include "repeat.h"
#include "scenarios.h"
#include "trace.h"
#include "options.h"
#include "race.h"
#include "report.h"
#include "report_ci.h"
#include "selfcheck.h"
#include "verify.h"

/* --json, --junit and --html: created (and written to once) before the run, so a bad destination (or a page too
 * big) is refused before any rank starts. */
static int open_outputs(ddpsim_options *opt)
{
    char msg[512];
    if (opt->json_path && !(opt->json_file = cli_open_output(opt->json_path, msg, sizeof msg)))
        return cli_usage_error(NULL, "--json", msg);
    if (opt->junit_path && !(opt->junit_file = cli_open_output(opt->junit_path, msg, sizeof msg)))
        return cli_usage_error(NULL, "--junit", msg);
    int big = opt->mutants ? 0 : report_html_fits(opt, NULL); /* --mutants' page is its catch matrix */
    if (big)
        return big;
    if (opt->html_path && !(opt->html_file = cli_open_output(opt->html_path, msg, sizeof msg)))
        return cli_usage_error(NULL, "--html", msg);
    return 0;
}

/* --prepare DIR: the inputs alone; a front end runs them (python/ddpsim_torch) and ddpsim check judges. */
static int prepare_inputs(const ddpsim_options *opt)
{
    if (verify_prepare_inputs(&opt->run, opt->prepare_dir) != DDP_OK)
        return cli_usage_error(NULL, "--prepare", ddp_error_text());
    if (!opt->quiet)
        fprintf(opt->out, "# ddpsim: the inputs of %zu forwards on %d ranks (model %s, %zu ops) are in %s\n",
                opt->run.schedule->nfwd, opt->run.nranks, opt->run.model_spec, opt->run.schedule->nops,
                opt->prepare_dir);
    return DDPSIM_EXIT_PASS; /* nothing was verified, and nothing was meant to be */
}

/*
 * What of a failure's words a rerun must meet again: without "implementation
 * 'X' failed in CALLBACK: " (rank.c), since which rank notices a shared
 * failure first, in which of its callbacks, is the ranks' race.
 */
static const char *failure_cause(const char *words)
{
    const char *in = strncmp(words, "implementation '", 16) == 0 ? strstr(words, "' failed in ") : NULL;
    const char *colon = in ? strstr(in, ": ") : NULL;
    return colon ? colon + 2 : words;
}

/*
 * After replaying the trace of a run that did not finish: whether this run
 * ended as the recorded one did (world_failure_words, the trace's "failure",
 * compared by their failure_cause), on stderr beside the fault's own account.
 */
static void replay_outcome(const ddpsim_options *opt, ddp_status s, const world *w)
{
    const char *was = opt->replay.failure;
    if (was[0])
        fprintf(stderr, "ddpsim: replay: the recorded run ended: %s\n", was);
    if (s == DDP_OK) {
        fprintf(stderr, "ddpsim: replay: this run finished: the recorded failure did not happen again (it depends on "
                        "timing the trace does not hold)\n");
        return;
    }
    char now[WORLD_ERROR_LEN];
    world_failure_words(w, now, sizeof now);
    if (was[0] && strcmp(failure_cause(now), failure_cause(was)) == 0)
        fprintf(stderr, "ddpsim: replay: this run ended the same way\n");
    else
        fprintf(stderr, "ddpsim: replay: this run ended %s: %s\n", was[0] ? "otherwise" : "with", now[0] ? now : ddp_error_text());
}

/* The run, its trace merged (page_only: a trace for the page alone, whose loss is no fault), and its report. */
static int run_and_report(ddpsim_options *opt, int page_only)
{
    report_stream rs;
    if (report_stream_open(opt, &rs, &opt->run.sink) != 0)
        return DDPSIM_EXIT_FAULT;
    if (report_header(opt) != 0) {
        report_stream_close(&rs);
        return DDPSIM_EXIT_USAGE; /* nowhere to report to: refused before the run (cli_finish says why) */
    }
    verify_result res;
    ddp_status s = verify_run(&opt->run, &res), ms = DDP_OK;
    if (opt->run.trace_path && res.w) {
        /* Keep the log of a failed run too: that is the one to debug. */
        char *extra = NULL;
        size_t extra_len = 0;
        FILE *mem = open_memstream(&extra, &extra_len);
        if (mem) {
            fprintf(mem, "\"chaos\": %llu, \"command\": ", (unsigned long long)(opt->run.chaos ? opt->run.chaos_seed : 0));
            jsonw_string(mem, opt->command);
            if (s != DDP_OK) { /* what a replay of it should meet again */
                char words[WORLD_ERROR_LEN];
                world_failure_words(res.w, words, sizeof words);
                fputs(", \"failure\": ", mem);
                jsonw_string(mem, words);
            }
            fclose(mem);
        }
        ms = trace_merge(opt->run.trace_path, opt->run.nranks, opt->run_key, extra ? extra : "", res.w);
        free(extra);
        if (ms != DDP_OK)
            fprintf(stderr, "ddpsim: %s%s\n", page_only ? "--html: no timeline: " : "", ddp_error_text());
        if (page_only)
            ms = DDP_OK; /* the page says it has no timeline; nothing the user asked for is missing */
    }
    int code;
    if (s == DDP_ERR_INVALID && !res.w) {
        fprintf(stderr, "ddpsim: %s\n", ddp_error_last());
        code = DDPSIM_EXIT_USAGE;
        report_no_verdict(opt, NULL, code, ddp_error_text());
    } else if (s != DDP_OK) {
        char error[512];
        snprintf(error, sizeof error, "%s", ddp_error_text());
        code = cli_fault_exit(res.w, s);
        report_no_verdict(opt, res.w, code, error);
        if (s == DDP_ERR_TIMEOUT && opt->replay_path)
            fprintf(stderr, "ddpsim: the ranks were forced into the interleaving of --replay %s; a run that no longer "
                            "follows its trace (another build of the implementation) waits for arrivals that never come\n",
                    opt->replay_path);
    } else {
        code = report_verification(opt, &res, &rs);
    }
    if (ms != DDP_OK && code == DDPSIM_EXIT_PASS)
        code = DDPSIM_EXIT_FAULT; /* the trace asked for is missing; a verdict that is not a pass stays */
    if (opt->replay_path && opt->replay.stopped)
        replay_outcome(opt, s, res.w);
    verify_result_free(&res);
    report_stream_close(&rs);
    return code;
}

static int run_verification(ddpsim_options *opt)
{
    int bad = open_outputs(opt);
    if (bad)
        return bad;
    report_page_trace pt;
    const char *page_trace = report_page_trace_begin(opt, &pt);
    if (page_trace)
        opt->run.trace_path = page_trace;
    int code = run_and_report(opt, page_trace != NULL);
    if (page_trace)
        opt->run.trace_path = NULL;
    report_page_trace_end(&pt, opt->run.nranks);
    return code;
}

static int list_impls(void)
{
    printf("# built-in implementations (--impl NAME); a plugin is given by its path\n");
    printf("#%-30s %-8s %s\n", "name", "kind", "description [source]");
    for (int i = 0; i < impl_builtin_count(); i++) {
        const impl_entry *e = impl_builtin_at(i);
        printf(" %-30s %-8s %s", e->ops->name, e->is_mutant ? "bug" : "correct", e->ops->description);
        if (e->source[0])
            printf(" [%s]", e->source);
        if (e->shard_mode && e->is_mutant)
            printf(" (--shard %s)", shard_mode_name((shard_mode)e->shard_mode));
        printf("%s\n", e->bitwise_only ? " (visible only bitwise)" : "");
    }
    return DDPSIM_EXIT_PASS;
}

/*
 * --backend nccl: ask (from a child process) which GPUs there are before any
 * rank starts. No usable GPU is a runtime fault, exit 3, with CUDA's words.
 */
static int probe_backend(ddpsim_options *opt)
{
    if (opt->run.backend != VERIFY_BACKEND_NCCL)
        return OPT_RUN;
    if (gpu_probe_query(&opt->gpu) != DDP_OK) {
        fprintf(stderr, "ddpsim: --backend nccl: %s\n", ddp_error_text());
        return DDPSIM_EXIT_FAULT;
    }
    if (opt->gpu.ngpus < 1) {
        fprintf(stderr, "ddpsim: --backend nccl: no usable GPU: %s\n", opt->gpu.error);
        return DDPSIM_EXIT_FAULT;
    }
    opt->run.ngpus = opt->gpu.ngpus;
    return OPT_RUN;
}

static const opt_subcommand subcommands[] = {
    {"selfcheck", "the collectives self-check", selfcheck_main},
    {"bench", "benchmarks: allreduce, model, run, battery", bench_main},
    {"check", "replay the reference on a recorded run (DIR)", check_main},
    {NULL, NULL, NULL},
};

/*
 * A run's description checked before anything runs. For the battery the
 * description is the classic scenario's, and battery_main checks every
 * scenario, classic too, giving each refused one's reason in its row: an
 * option that refuses classic's own schedule (--static-graph under PyTorch
 * 2.1's rule) refuses a row, and the options themselves are checked on a
 * schedule no option refuses.
 */
static ddp_status check_run(const ddpsim_options *opt)
{
    verify_config c = opt->run;
    if (opt->battery) /* --loss-norm is for the battery's token scenario (ragged-tokens) whatever the run's model */
        c.loss_norm = verify_loss_norm(&c);
    ddp_status st = verify_check_config(&c);
    if (st == DDP_OK || !opt->battery)
        return st;
    sched plain;
    DDP_CHECK(sched_parse("fwd bwd grab", &plain));
    c.schedule = &plain;
    st = verify_check_config(&c);
    sched_free(&plain);
    return st;
}

int main(int argc, char **argv)
{
    blas_pool_restart_without(argv); /* before anything forks or exits: a stuck pool hangs both */
    /* A reader that goes away (a pipe, a FIFO given to --json) is a write error to report with the verdict
     * kept, not a death by SIGPIPE that loses it. Rank processes restore the default (world.c). */
    signal(SIGPIPE, SIG_IGN);
    /* A file over `ulimit -f` is a write error (EFBIG) to report naming the file, not a silent death. */
    signal(SIGXFSZ, SIG_IGN);
    int r = cli_world_start(argc, argv);
    if (r != 0)
        return r;
    if (!world_mpi_active()) { /* under MPI, mpirun's signals end the job as Open MPI does (README) */
        sigset_t unheld;
        cli_hold_signals(&unheld); /* held for good: cli.h's rule for a signal before the verdict */
    }
    r = opt_dispatch("", subcommands, argc, argv, 1);
    if (r != OPT_RUN)
        return world_mpi_finish(cli_finish(r));
    r = race_restart(argc, argv);
    if (r != OPT_RUN)
        return world_mpi_finish(cli_finish(r));
    ddpsim_options opt;
    r = options_parse(argc, argv, &opt);
    if (r == OPT_RUN)
        model_set_portable_math(opt.portable_math); /* before any forward: forked ranks inherit it */
    if (r == OPT_RUN && opt.list) {
        r = list_impls();
    } else if (r == OPT_RUN && opt.list_scenarios) {
        r = scenarios_list(opt.run.shard);
    } else if (r == OPT_RUN && !opt.mutants && check_run(&opt) != DDP_OK) {
        /* The one validation of a run description, before anything runs: it names the option. */
        r = cli_usage_error(NULL, NULL, ddp_error_text());
    } else if (r == OPT_RUN && opt.prepare_dir) {
        r = prepare_inputs(&opt);
    } else if (r == OPT_RUN && (r = race_check(&opt)) != OPT_RUN) {
        /* --race cannot check this run: said */
    } else if (r == OPT_RUN) {
        r = probe_backend(&opt);
        if (r == OPT_RUN && opt.mutants)
            r = open_outputs(&opt) ? DDPSIM_EXIT_USAGE : mutants_main(&opt);
        else if (r == OPT_RUN && opt.battery)
            r = open_outputs(&opt) ? DDPSIM_EXIT_USAGE : battery_main(&opt);
        else if (r == OPT_RUN && opt.repeat_mode)
            r = repeat_main(&opt);
        else if (r == OPT_RUN)
            r = run_verification(&opt);
        r = race_finish(&opt, r);
    }
    options_free(&opt);
    return world_mpi_finish(cli_finish(r));
}
