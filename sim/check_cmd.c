/*
 * check_cmd.c - `ddpsim check DIR` (check_cmd.h): the reference DDP replayed on a
 * recorded run (engine/io/record.h), with a live run's report, JSON and
 * exit codes. The directory is checked whole before any rank starts.
 */
#include "config.h" /* first: _GNU_SOURCE (AC_USE_SYSTEM_EXTENSIONS) for asprintf */
#include "check_cmd.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli.h"
#include "optable.h"
#include "options.h"
#include "record.h"
#include "report.h"
#include "report_ci.h"

typedef struct check_options {
    const char *dir;
    const char *tolerance;  /* NULL: bitwise for 2 ranks or fewer, order above */
    const char *json_path;
    const char *junit_path;
    const char *html_path;
    int annotations;        /* annotate_mode */
    double timeout_s;
    int quiet;
    int world; /* --world: CLI_WORLD_FORK or CLI_WORLD_MPI */
    int allow_unsynced_comm;
} check_options;

static void check_init(void *o)
{
    *(check_options *)o = (check_options){.timeout_s = 60};
}

#define FC(field) offsetof(check_options, field)
static const opt_spec check_specs[] = {
    {"tolerance", 'T', "TOL", "bitwise | order | ulp:N | ulp-of-max:N | rtol=X,atol=Y", OPT_STRING, FC(tolerance), 0, 0,
     NULL, "bitwise with 2 ranks, order above"},
    {"json", 0, "FILE", "write the report as JSON (- for standard output)", OPT_STRING, FC(json_path), 0, 0, NULL, NULL},
    {"junit", 0, "FILE", "write the verdicts as JUnit XML (xunit2): a testcase per check", OPT_STRING, FC(junit_path),
     0, 0, NULL, NULL},
    {"html", 0, "FILE", "write the report as one self-contained HTML page (a heatmap per rank)", OPT_STRING,
     FC(html_path), 0, 0, NULL, NULL},
    {"annotations", 0, "auto|github|none", "CI annotations for a failure and the verdict; auto: when\nGITHUB_ACTIONS=true",
     OPT_CHOICE, FC(annotations), 0, 0, NULL, NULL},
    {"timeout", 't', "SEC", "watchdog: stop when no rank progresses for SEC s; 0 off", OPT_SECONDS, FC(timeout_s), 0,
     1e7, NULL, NULL},
    {"quiet", 'q', NULL, "print only the verdict (and the first divergence)", OPT_FLAG, FC(quiet), 0, 0, NULL, NULL},
    {"allow-unsynced-comm", 0, NULL, "reductions the recording counted in a backward that does not sync\nare "
     "allowed (PyTorch's DDP makes none there)", OPT_FLAG, FC(allow_unsynced_comm), 0, 0, NULL, NULL},
    {"world", 0, CLI_WORLD_CHOICES, "fork: the ranks on this machine; mpi: one per process of an MPI\njob of as many "
     "processes as the run had ranks (DIR on every host)", OPT_CHOICE, FC(world), 0, 0, NULL, NULL},
    {"help", 'h', NULL, "this help", OPT_HELP, 0, 0, 0, NULL, NULL},
    {NULL, 0, NULL, NULL, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

static const opt_command check_command = {
    .name = "check",
    .usage = "DIR [OPTIONS]",
    .about = "Replays the reference DDP on a recorded run: the local gradients every rank's micro-steps\n"
             "produced, and the implementation's .grad at every grab and parameters after every step\n"
             "(the layout is in doc/REFERENCE.md; python3 -m ddpsim_torch writes it). Every file is\n"
             "checked before any rank starts.",
    .opts = check_specs,
    .opts_size = sizeof(check_options),
    .init = check_init,
    .positional = "DIR",
    .positional_offset = offsetof(check_options, dir),
    .epilog = "The tolerance: a recorded run's local gradients are the implementation's own, so what is left is\n"
              "the order in which its allreduce adds the ranks. With 2 ranks that is one addition, the same\n"
              "bits either way: bitwise. With more, gloo's ring or NCCL adds in other orders than ddpsim: order,\n"
              "the proven bound of that (see --tolerance in ddpsim --help).\n\n"
              "Exit status: as ddpsim's (0 pass, 1 divergence, 2 bad input, 3 fault, 4 nothing verified).\n",
};

static void header(const ddpsim_options *opt, const record_run *rec, const model *m)
{
    char tol[64];
    const ddp_config *d = &rec->ddp;
    fprintf(opt->out, "# ddpsim %s check %s: %s, recorded by %s, against %s\n", PACKAGE_VERSION, rec->dir, rec->impl,
            rec->recorded_by[0] ? rec->recorded_by : "(not said)",
            rec->shard == SHARD_NONE ? "the reference DDP (PyTorch semantics)" : "the sharded reference");
    if (rec->shard != SHARD_NONE)
        fprintf(opt->out, "# sharded: %s on a %dx%d mesh (replicas x shards), the recording's \"shard\": its rule "
                          "decides what each rank holds (DDP's decides which backward syncs)\n",
                shard_mode_name(rec->shard), rec->mesh.replicas, rec->mesh.shards);
    fprintf(opt->out, "# ranks %d, model %s (%zu parameters in %d tensors)\n", rec->nranks,
            rec->model[0] ? rec->model : "(not said)", model_size(m), model_nparams(m));
    fprintf(opt->out, "#   %zu ops, %zu forwards, %zu grabs, %zu steps\n", rec->schedule.nops, rec->schedule.nfwd,
            rec->schedule.ngrabs, rec->schedule.nsteps);
    char mom[96];
    fprintf(opt->out, "# find_unused %s%s%s%s, bucket_view %s, zero_grad %s, lr %g%s%s%s, tolerance %s\n",
            d->find_unused ? "yes" : "no", d->find_unused ? " (" : "", d->find_unused ? ddp_find_unused_rule_text(d) : "",
            d->find_unused ? ")" : "", d->bucket_view ? "yes" : "no", d->set_to_none ? "set_to_none" : "fills zeros", (double)d->lr,
            ddp_optim_text(d->momentum, &d->adamw, mom, sizeof mom), d->comm_hook ? ", comm hook " : "",
            d->comm_hook ? ddp_comm_hook_name(d->comm_hook) : "",
            tol_format(&opt->run.tol, tol, sizeof tol));
    if (rec->params_averaged)
        fprintf(opt->out, "# parameters only (the recording's optimizer.averages): every rank steps with its own "
                          "gradients and the ranks average the parameters; each step's parameters are checked against "
                          "DDP's step within the bound of that averaging, no .grad is compared\n");
    if (rec->held_at) {
        fprintf(opt->out, "# gradients sharded (grad_shards): each rank's own elements are checked, of %zu:",
                model_size(m));
        for (int r = 0; r < rec->nranks; r++) {
            size_t held = 0;
            for (size_t i = rec->held_at[r]; i < rec->held_at[r + 1]; i++)
                held += rec->held[i].count;
            fprintf(opt->out, "%s rank %d %zu", r ? "," : "", r, held);
        }
        fprintf(opt->out, "\n");
    }
    if (rec->held_by_grab)
        fprintf(opt->out, "# gradients sharded (held.json): at each grab each rank's own elements are checked, as "
                          "it said there\n");
    fprintf(opt->out, "# replay: %s\n", opt->command);
}

/* The first failing rank's message (a rank that found a bad file says which), into buf. */
static const char *rank_error(const world *w, int nranks, char *buf, size_t len)
{
    snprintf(buf, len, "%s", ddp_error_last());
    for (int r = 0; r < nranks; r++)
        if (world_outcome(w, r)->error[0]) {
            snprintf(buf, len, "rank %d: %s", r, world_outcome(w, r)->error);
            break;
        }
    return buf;
}

int check_main(int argc, char **argv)
{
    check_options co;
    int r = opt_parse(&check_command, argc, argv, &co);
    if (r != OPT_RUN)
        return r;
    if (co.timeout_s > 0 && co.timeout_s < 1)
        return cli_usage_error("check", "--timeout", "shorter than the shortest watchdog, 1 s (0 turns it off)");
    static record_run rec; /* large: not on the stack */
    if (record_open(co.dir, &rec) != DDP_OK)
        return cli_usage_error("check", NULL, ddp_error_text());
    char wmsg[256];
    int n = rec.nranks;
    if (cli_world_ranks(co.world, 1, &n, wmsg, sizeof wmsg)) {
        record_close(&rec);
        return cli_usage_error("check", "--world", wmsg);
    }
    ddpsim_options opt;
    memset(&opt, 0, sizeof opt);
    opt.out = stdout;
    opt.quiet = co.quiet;
    opt.json_path = co.json_path;
    opt.junit_path = co.junit_path;
    opt.html_path = co.html_path;
    opt.annotations = co.annotations;
    opt.run.nranks = rec.nranks;
    opt.run.impl = rec.impl;
    opt.run.model_spec = rec.model[0] ? rec.model : "recorded";
    opt.run.schedule = &rec.schedule;
    opt.run.ddp = rec.ddp;
    opt.sharded = rec.held_at != NULL || rec.held_by_grab;
    opt.run.shard = rec.shard; /* the recording's "shard": the report says the mode and its mesh */
    opt.run.mesh = rec.mesh;
    /* Bitwise at 2 ranks (one sum, one order) except for averaged parameters: an average of the ranks' stepped
     * parameters rounds otherwise than DDP's step at any N, so only the averaging's proven bound holds for a
     * correct averager (doc/SEMANTICS.md "Model averaging: parameters only"). */
    const char *default_tol = rec.nranks <= 2 && !rec.params_averaged ? "bitwise" : "order";
    if (tol_parse(co.tolerance ? co.tolerance : default_tol, &opt.run.tol) != DDP_OK) {
        record_close(&rec);
        return cli_usage_error("check", "--tolerance", ddp_error_text());
    }
    char *args = cli_join_command(argc, argv, NULL); /* argv[0] is "check": "ddpsim DIR ..." */
    if (args && asprintf(&opt.command, "ddpsim check%s", args + strlen("ddpsim")) < 0)
        opt.command = NULL;
    free(args);
    char msg[WORLD_ERROR_LEN + 32];
    int code = DDPSIM_EXIT_USAGE;
    model *layout = NULL;
    model_grad_source none = {0};
    if (!opt.command || model_create_recorded(rec.decls, rec.nparams, &none, &layout) != DDP_OK ||
        model_recorded_add_buffers(layout, rec.decls + rec.nparams, rec.nbuffers) != DDP_OK) {
        fprintf(stderr, "ddpsim: check: %s\n", opt.command ? ddp_error_text() : "out of memory");
        goto out;
    }
    opt.layout = layout;
    if (co.json_path) {
        opt.json_file = cli_open_output(co.json_path, msg, sizeof msg);
        if (!opt.json_file) {
            code = cli_usage_error("check", "--json", msg);
            goto out;
        }
        if (opt.json_file == stdout)
            opt.out = stderr;
    }
    if (co.junit_path && strcmp(co.junit_path, "-") == 0) {
        code = cli_usage_error("check", "--junit", "give a file: the XML is for a CI system to collect");
        goto out;
    }
    if (co.junit_path && !(opt.junit_file = cli_open_output(co.junit_path, msg, sizeof msg))) {
        code = cli_usage_error("check", "--junit", msg);
        goto out;
    }
    if (co.html_path && strcmp(co.html_path, "-") == 0) {
        code = cli_usage_error("check", "--html", "give a file: the page is for a browser to open");
        goto out;
    }
    if (co.html_path && (code = report_html_fits(&opt, layout)) != 0)
        goto out;
    code = DDPSIM_EXIT_USAGE;
    if (co.html_path && !(opt.html_file = cli_open_output(co.html_path, msg, sizeof msg))) {
        code = cli_usage_error("check", "--html", msg);
        goto out;
    }
    check_config cfg = {.rec = &rec, .tol = opt.run.tol, .timeout_s = co.timeout_s,
                        .allow_unsynced_comm = co.allow_unsynced_comm};
    report_stream rs;
    if (report_stream_open(&opt, &rs, &cfg.sink) != 0) {
        code = DDPSIM_EXIT_FAULT;
        goto out;
    }
    if (!opt.quiet)
        header(&opt, &rec, layout);
    verify_result res;
    ddp_status s = check_run(&cfg, &res);
    if (s != DDP_OK && res.bad_record) {
        code = cli_usage_error("check", NULL, rank_error(res.w, rec.nranks, msg, sizeof msg)); /* found by a rank: in its words */
        report_no_verdict(&opt, res.w, code, msg);
    } else if (s != DDP_OK) {
        char error[512];
        snprintf(error, sizeof error, "%s", ddp_error_text());
        code = cli_fault_exit(res.w, s);
        report_no_verdict(&opt, res.w, code, error);
    } else {
        code = report_verification(&opt, &res, &rs);
    }
    verify_result_free(&res);
    report_stream_close(&rs);
out:
    cli_close_output(opt.json_file);
    cli_close_output(opt.junit_file);
    cli_close_output(opt.html_file);
    model_destroy(layout);
    free(opt.command);
    record_close(&rec);
    return code;
}
