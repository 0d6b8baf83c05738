/*
 * options.c - the option table of a verification run and what only the
 * command line can check (options.h).
 */
#include "options.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hash.h"
#include "model.h"
#include "scaler.h"
#include "units.h"
#include "world.h"

#define MIN_TIMEOUT_S 1.0
#define MAX_SCHEDULE_FILE ((size_t)1 << 20)
#define MAX_SEEDS 1000000

/* size_t fields take OPT_SIZE's uint64_t. */
_Static_assert(sizeof(size_t) == sizeof(uint64_t), "sizes are 64-bit");

static int parse_tolerance(void *o, const char *arg, char *msg, size_t len)
{
    ddpsim_options *opt = o;
    if (tol_parse(arg, &opt->run.tol) != DDP_OK) {
        snprintf(msg, len, "%s", ddp_error_text());
        return -1;
    }
    opt->tol_given = 1;
    return 0;
}

static int parse_lr(void *o, const char *arg, char *msg, size_t len)
{
    ddpsim_options *opt = o;
    char *end;
    double lr = strtod(arg, &end);
    if (end == arg || *end || !isfinite(lr) || fabs(lr) > 1e6) {
        snprintf(msg, len, "'%s': expected a finite number (|lr| <= 1e6)", arg);
        return -1;
    }
    opt->run.ddp.lr = (float)lr;
    opt->lr = lr;
    return 0;
}

/* adamw[:KEY=V,...]: beta1, beta2, eps, wd (torch.optim.AdamW's betas, eps, weight_decay), into *a. */
static int parse_adamw(const char *arg, ddp_adamw *a, char *msg, size_t len)
{
    *a = ddp_adamw_default();
    const char *at = arg + 5;
    if (*at == ':')
        at++;
    else if (*at) {
        snprintf(msg, len, "'%s': expected adamw[:beta1=B,beta2=B,eps=E,wd=W]", arg);
        return -1;
    }
    while (*at) {
        static const char *const keys[] = {"beta1=", "beta2=", "eps=", "wd="};
        double *fields[] = {&a->beta1, &a->beta2, &a->eps, &a->weight_decay};
        int k = 0;
        while (k < 4 && strncmp(at, keys[k], strlen(keys[k])) != 0)
            k++;
        char *end = NULL;
        if (k < 4)
            *fields[k] = strtod(at + strlen(keys[k]), &end);
        if (k == 4 || end == at + strlen(keys[k]) || (*end && *end != ',')) {
            snprintf(msg, len, "'%s': expected adamw[:beta1=B,beta2=B,eps=E,wd=W] (the learning rate is --lr's)",
                     arg);
            return -1;
        }
        at = *end ? end + 1 : end;
    }
    const char *bad = ddp_adamw_invalid(a);
    if (bad) {
        snprintf(msg, len, "'%s': %s", arg, bad);
        return -1;
    }
    return 0;
}

/*
 * --optimizer sgd | momentum[:M] (torch.optim.SGD's momentum; DDP_DEFAULT_MOMENTUM without M) | adamw[:...]
 * (torch.optim.AdamW, its defaults without values)
 */
static int parse_optimizer(void *o, const char *arg, char *msg, size_t len)
{
    ddpsim_options *opt = o;
    opt->run.ddp.adamw.on = 0;
    if (strcmp(arg, "sgd") == 0) {
        opt->run.ddp.momentum = 0;
        return 0;
    }
    if (strncmp(arg, "adamw", 5) == 0) {
        opt->run.ddp.momentum = 0;
        return parse_adamw(arg, &opt->run.ddp.adamw, msg, len);
    }
    if (strncmp(arg, "momentum", 8) == 0 && (arg[8] == '\0' || arg[8] == ':')) {
        char *end = NULL;
        double m = arg[8] ? strtod(arg + 9, &end) : DDP_DEFAULT_MOMENTUM;
        if (arg[8] && (end == arg + 9 || *end || !(m > 0 && m < 1))) {
            snprintf(msg, len, "'%s': the momentum must be a number in (0, 1)", arg);
            return -1;
        }
        opt->run.ddp.momentum = (float)m;
        return 0;
    }
    snprintf(msg, len, "'%s': expected sgd, momentum[:M] or adamw[:beta1=B,beta2=B,eps=E,wd=W]", arg);
    return -1;
}

/* --clip MAX[:inf|:2] (clip_grad_norm_'s max_norm and norm_type) */
static int parse_clip(void *o, const char *arg, char *msg, size_t len)
{
    ddpsim_options *opt = o;
    char *end = NULL;
    errno = 0;
    double max = strtod(arg, &end);
    if (end == arg || errno || !isfinite(max) || !(max > 0) || (*end && strcmp(end, ":inf") && strcmp(end, ":2"))) {
        snprintf(msg, len, "'%s': expected MAX or MAX:inf, a positive finite max_norm (clip_grad_norm_'s)", arg);
        return -1;
    }
    opt->run.clip_max = max;
    opt->run.clip_inf = strcmp(end, ":inf") == 0;
    return 0;
}

/* --loss-scale S | dynamic[:INIT,GROWTH,BACKOFF,INTERVAL] (GradScaler's, scaler.h) */
static int parse_loss_scale(void *o, const char *arg, char *msg, size_t len)
{
    ddpsim_options *opt = o;
    return scaler_parse(arg, &opt->run.ddp.scaler, msg, len);
}

/* --loss-norm global-tokens | micro-batch-mean | sum (loss_norm.h) */
static int parse_loss_norm(void *o, const char *arg, char *msg, size_t len)
{
    ddpsim_options *opt = o;
    if (loss_norm_parse(arg, &opt->run.loss_norm) == DDP_OK)
        return 0;
    snprintf(msg, len, "'%s': expected global-tokens, micro-batch-mean or sum", arg);
    return -1;
}

/* --shard MODE, or hsdp:RxS (the mesh, as --mesh gives it) */
static int parse_shard(void *o, const char *arg, char *msg, size_t len)
{
    ddpsim_options *opt = o;
    char mode[16];
    const char *colon = strchr(arg, ':');
    size_t n = colon ? (size_t)(colon - arg) : strlen(arg);
    snprintf(mode, sizeof mode, "%.*s", (int)(n < sizeof mode ? n : sizeof mode - 1), arg);
    if (n >= sizeof mode || shard_mode_parse(mode, &opt->run.shard) != DDP_OK) {
        snprintf(msg, len, "'%s': expected zero1, zero2, fsdp or hsdp[:RxS]", arg);
        return -1;
    }
    if (colon && opt->run.shard != SHARD_HSDP) {
        snprintf(msg, len, "'%s': only hsdp takes a mesh (RxS)", arg);
        return -1;
    }
    if (colon)
        opt->mesh_text = colon + 1;
    return 0;
}

static int parse_mesh(void *o, const char *arg, char *msg, size_t len)
{
    ddpsim_options *opt = o;
    (void)msg;
    (void)len;
    opt->mesh_text = arg;
    return 0;
}

/*
 * The mesh once the ranks are known: --mesh (or hsdp:RxS) as given; HSDP
 * without one replicates twice when the ranks split evenly (2 x N/2), as the
 * smallest mesh with both groups; the other modes shard over the world.
 */
static int choose_mesh(ddpsim_options *opt, char *msg, size_t len)
{
    verify_config *run = &opt->run;
    if (opt->mesh_text) {
        if (mesh_parse(opt->mesh_text, run->nranks, "--mesh", &run->mesh) != DDP_OK) {
            snprintf(msg, len, "%s", ddp_error_text() + (strncmp(ddp_error_text(), "--mesh: ", 8) ? 0 : 8));
            return -1;
        }
    } else if (run->shard != SHARD_NONE && run->mesh.shards == 0) {
        run->mesh = shard_default_mesh(run->shard, run->nranks);
    }
    return 0;
}

/* "C" or "A..B" (A <= B, at most MAX_SEEDS seeds). */
static int parse_chaos(void *o, const char *text, char *msg, size_t len)
{
    ddpsim_options *opt = o;
    char first[32];
    const char *dots = strstr(text, "..");
    if (!dots) {
        if (units_parse_u64(text, &opt->chaos_first, msg, len))
            return -1;
        opt->chaos_last = opt->chaos_first;
    } else {
        size_t n = (size_t)(dots - text);
        if (n == 0 || n >= sizeof first) {
            snprintf(msg, len, "'%s' is not a seed or a range A..B", text);
            return -1;
        }
        memcpy(first, text, n);
        first[n] = '\0';
        if (units_parse_u64(first, &opt->chaos_first, msg, len) || units_parse_u64(dots + 2, &opt->chaos_last, msg, len))
            return -1;
        if (opt->chaos_last < opt->chaos_first || opt->chaos_last - opt->chaos_first >= MAX_SEEDS) {
            snprintf(msg, len, "the range %s must run upward over at most %d seeds", text, MAX_SEEDS);
            return -1;
        }
    }
    opt->chaos_given = 1;
    return 0;
}

static int parse_sched(void *o, const char *text, char *msg, size_t len)
{
    return interleave_parse(text, &((ddpsim_options *)o)->run.interleave, msg, len);
}

static int parse_fault(void *o, const char *arg, char *msg, size_t len)
{
    verify_config *run = &((ddpsim_options *)o)->run;
    if (run->nfaults == VERIFY_MAX_FAULTS) {
        snprintf(msg, len, "at most %d faults", VERIFY_MAX_FAULTS);
        return -1;
    }
    if (fault_parse(arg, &run->faults[run->nfaults]) != DDP_OK) {
        snprintf(msg, len, "%s", ddp_error_text());
        return -1;
    }
    run->nfaults++;
    return 0;
}

static void init(void *o)
{
    ddpsim_options *opt = o;
    verify_config *run = &opt->run;
    verify_config_defaults(run);
    opt->lr = run->ddp.lr;
    opt->schedule_arg = SCHED_DEFAULT;
    opt->nccl_op = -1; /* not given: sum */
    opt->out = stdout;
}

/* Schedule text: the argument itself, or the contents of @FILE. */
static int load_schedule(ddpsim_options *opt, char *msg, size_t len)
{
    if (opt->schedule_arg[0] == '@') {
        opt->schedule_text = cli_read_file(opt->schedule_arg + 1, MAX_SCHEDULE_FILE, msg, len);
        if (!opt->schedule_text)
            return -1;
    } else {
        opt->schedule_text = strdup(opt->schedule_arg);
        if (!opt->schedule_text) {
            snprintf(msg, len, "out of memory");
            return -1;
        }
    }
    /* --clip: before every step a loop clips (a scenario that clips already keeps its own, as in the battery) */
    if (sched_parse(opt->schedule_text, &opt->schedule) != DDP_OK) {
        snprintf(msg, len, "%s", ddp_error_text());
        return -1;
    }
    opt->clip_inserted = opt->run.clip_max > 0 && !(opt->scenario_name && opt->schedule.nclips);
    if (opt->clip_inserted && sched_clip_steps(&opt->schedule, opt->run.clip_max, opt->run.clip_inf) != DDP_OK) {
        snprintf(msg, len, "%s", ddp_error_text());
        return -1;
    }
    opt->run.schedule = &opt->schedule;
    opt->run.schedule_text = opt->schedule_text;
    return 0;
}

static uint64_t schedule_hash(const sched *s)
{
    uint64_t h = HASH_INIT;
    for (size_t i = 0; i < s->nops; i++)
        h = hash_word(h, (uint64_t)s->ops[i]);
    return h;
}

#define FAIL(opt_name, ...)                                                                                   \
    do {                                                                                                      \
        *which = (opt_name);                                                                                  \
        snprintf(msg, len, __VA_ARGS__);                                                                      \
        return -1;                                                                                            \
    } while (0)

static int given(const ddpsim_options *opt, const char *name)
{
    return opt_was_given(&options_command, opt, name);
}

/*
 * Which run: the battery when nothing chooses a single one; --scenario
 * NAME as that scenario's single run (its model, schedule and DDP options,
 * except the ones given); else --schedule and --model as given. --mutants
 * runs at 3 ranks unless --ranks says otherwise: 1/N must not be exact for
 * every catalogued bug to show.
 */
static int choose_run(ddpsim_options *opt, const char **which, char *msg, size_t len)
{
    verify_config *run = &opt->run;
    opt->given = (battery_given){given(opt, "find-unused"), given(opt, "bucket-view"), given(opt, "bucket-cap"),
                                 given(opt, "first-bucket-cap"), given(opt, "optimizer"), given(opt, "loss-scale")};
    int chosen = given(opt, "schedule") || given(opt, "model");
    if (opt->mutants) {
        if (!given(opt, "ranks"))
            run->nranks = 3;
        if (chosen || opt->scenario_name)
            FAIL("mutants", "runs the scenario battery itself: --schedule, --model and --scenario choose single runs");
        return 0;
    }
    if (opt->scenario_name) {
        const scenario *sc = battery_find_for(opt->run.shard, opt->scenario_name);
        if (!sc) {
            char names[1024] = "";
            for (int i = 0; i < battery_count_for(run->shard); i++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                         battery_at_for(run->shard, i)->name);
            FAIL("scenario", "no scenario '%s' (there are: %s; ddpsim --scenarios says what each exposes)",
                 opt->scenario_name, names);
        }
        if (chosen)
            FAIL("scenario", "chooses the model and the schedule itself: give it without --schedule and --model");
        sched unused;
        loss_norm asked = run->loss_norm;
        if (battery_apply(sc, &opt->given, run, &unused) != DDP_OK)
            FAIL("scenario", "%s", ddp_error_text());
        sched_free(&unused);
        if (asked && !run->loss_norm)
            FAIL("loss-norm", "scenario %s runs %s, which has no token loss: the trainer's normalization is checked on "
                              "the token model (--scenario ragged-tokens, or --model lm)", sc->name, run->model_spec);
        opt->schedule_arg = sc->schedule;
        return 0;
    }
    opt->battery = !chosen;
    if (!opt->battery)
        return 0;
    if (opt->repeat || (opt->chaos_given && opt->chaos_first != opt->chaos_last))
        FAIL("repeat", "repeats a single run: add --scenario NAME (ddpsim --scenarios lists them)");
    if (run->inputs_dir || run->dump_dir || run->record_dir || opt->prepare_dir || run->trace_path ||
        opt->replay_path || run->nfaults) {
        *which = run->inputs_dir ? "inputs" : run->dump_dir ? "dump" : run->record_dir ? "record"
                 : opt->prepare_dir ? "prepare" : run->trace_path ? "trace" : opt->replay_path ? "replay" : "fault";
        snprintf(msg, len, "belongs to a single run, and without --schedule, --model or --scenario ddpsim runs the "
                           "whole scenario battery: add --scenario NAME (ddpsim --scenarios lists them)");
        return -1;
    }
    return 0;
}

/* --sched: what it can schedule, and what it cannot run beside. */
static int check_sched(const ddpsim_options *opt, char *msg, size_t len)
{
    const verify_config *run = &opt->run;
    const char *clash = opt->race ? "--race (ThreadSanitizer's runtime catches the same calls)"
                        : opt->world == CLI_WORLD_MPI ? "--world mpi (its ranks wait in MPI, not on the futexes --sched "
                                                        "watches)"
                        : run->backend == VERIFY_BACKEND_NCCL ? "--backend nccl (a GPU's streams are not scheduled)"
                        : opt->mutants ? "--mutants (the catalogue's bugs are built-ins)"
                                       : NULL;
    if (clash) {
        snprintf(msg, len, "cannot run beside %s", clash);
        return -1;
    }
    if (!strchr(run->impl, '/')) {
        snprintf(msg, len, "schedules the threads of a plugin's own code: give --impl ./libmine.so (the built-in "
                           "'%s' runs ddpsim's own threads)", run->impl);
        return -1;
    }
    if (opt->battery) {
        snprintf(msg, len, "schedules a single run: add --scenario NAME (ddpsim --scenarios lists them)");
        return -1;
    }
    return 0;
}

/*
 * What only the command line knows. Everything about the run itself (the
 * model, the faults against the schedule, the backend's combinations) is
 * verify_check_config's, called by main before anything runs.
 */
static int validate(void *o, const char **which, char *msg, size_t len)
{
    ddpsim_options *opt = o;
    verify_config *run = &opt->run;
    if (opt->list || opt->list_scenarios)
        return 0;
    if (run->shard != SHARD_NONE && !given(opt, "impl") && !opt->mutants)
        run->impl = impl_sharded_default((int)run->shard)->name; /* the mode's correct built-in */
    if (impl_open(run->impl, &opt->impl) != DDP_OK)
        FAIL("impl", "%s", ddp_error_text());
    run->impl_ops = opt->impl.ops;
    if (choose_run(opt, which, msg, len))
        return -1;
    if (cli_world_ranks(opt->world, given(opt, "ranks"), &run->nranks, msg, len)) {
        *which = "ranks";
        return -1;
    }
    if (choose_mesh(opt, msg, len)) {
        *which = "mesh";
        return -1;
    }
    if (opt->world == CLI_WORLD_MPI && opt->mutants)
        FAIL("world", "mpi: --mutants provokes faults on purpose, and a fault ends an MPI job: run the catalogue with "
                      "--world fork");
    if (opt->world == CLI_WORLD_MPI && (run->trace_path || opt->replay_path || run->dump_dir || run->record_dir ||
                                        opt->prepare_dir))
        FAIL("world", "mpi: --trace, --replay, --dump, --record and --prepare write or read files per rank and order "
                      "arrivals in one shared segment: they belong to --world fork");
    if (load_schedule(opt, msg, len)) {
        *which = "schedule";
        return -1;
    }
    if (run->timeout_s > 0 && run->timeout_s < MIN_TIMEOUT_S)
        FAIL("timeout", "%g s is shorter than the shortest watchdog, %g s (0 turns it off): a healthy rank can spend "
             "longer than that in one op", run->timeout_s, MIN_TIMEOUT_S);
    if (opt->nccl_op >= 0 && run->backend != VERIFY_BACKEND_NCCL)
        FAIL("nccl-op", "goes with --backend nccl");
    run->nccl_avg = opt->nccl_op == 1;
    if (run->nccl_ring_check && run->backend != VERIFY_BACKEND_NCCL)
        FAIL("nccl-ring-check", "goes with --backend nccl");
    if (run->backend == VERIFY_BACKEND_NCCL && !opt->tol_given)
        run->tol = (tolerance){.kind = TOL_ORDER}; /* NCCL sums in its own order: the proven bound (budget.h) */
    /* Chaos and repetition. */
    if (opt->repeat) {
        if (opt->chaos_given && opt->chaos_first != opt->chaos_last)
            FAIL("repeat", "give either --repeat K or a --chaos A..B range, not both");
        if (!opt->chaos_given)
            opt->chaos_first = 1;
        if (opt->chaos_first > UINT64_MAX - (uint64_t)(opt->repeat - 1))
            FAIL("repeat", "%d seeds from --chaos %llu run past the largest seed", opt->repeat,
                 (unsigned long long)opt->chaos_first);
        opt->chaos_last = opt->chaos_first + (uint64_t)opt->repeat - 1;
        opt->chaos_given = 1;
    }
    opt->repeat_mode = opt->chaos_given && opt->chaos_last != opt->chaos_first;
    run->chaos = opt->chaos_given;
    run->chaos_seed = opt->chaos_given ? opt->chaos_first : run->interleave.mode != INTERLEAVE_OFF;
    if (run->interleave.mode != INTERLEAVE_OFF && check_sched(opt, msg, len)) {
        *which = "sched";
        return -1;
    }
    if (opt->fail_fast && !opt->repeat_mode)
        FAIL("fail-fast", "goes with --repeat K or --chaos A..B");
    if (opt->repeat_mode && (run->trace_path || opt->replay_path || run->dump_dir || run->record_dir || opt->json_path ||
                             opt->junit_path || opt->html_path))
        FAIL("repeat", "--trace, --replay, --dump, --record, --json, --junit and --html belong to single runs: replay "
                       "one seed");
    if (opt->mutants && run->ddp.comm_hook != DDP_HOOK_NONE)
        FAIL("mutants", "the catalogue's bugs are modelled on DDP without a communication hook: drop --comm-hook");
    if (opt->mutants && (run->trace_path || opt->replay_path || run->dump_dir || run->record_dir || opt->json_path ||
                         opt->junit_path || opt->chaos_given || run->nfaults || run->inputs_dir))
        FAIL("mutants", "runs its own configurations: --trace, --replay, --dump, --record, --json, --junit, --chaos, "
                        "--repeat, --fault and --inputs belong to single runs");
    if (opt->prepare_dir && (opt->repeat_mode || opt->mutants || run->dump_dir || run->record_dir || opt->json_path ||
                             opt->junit_path || opt->html_path || run->trace_path || opt->replay_path))
        FAIL("prepare", "writes a run's inputs and runs nothing: --repeat, --chaos ranges, --mutants, --dump, --record, "
                        "--json, --junit, --html, --trace and --replay belong to runs");
    if (opt->junit_path && strcmp(opt->junit_path, "-") == 0)
        FAIL("junit", "give a file: the XML is for a CI system to collect (--json - writes to standard output)");
    if (opt->html_path && strcmp(opt->html_path, "-") == 0)
        FAIL("html", "give a file: the page is for a browser to open (--json - writes to standard output)");
    if (opt->json_path && strcmp(opt->json_path, "-") == 0)
        opt->out = stderr; /* the JSON owns standard output; the table goes to stderr */
    char *key = NULL;
    size_t key_len = 0;
    FILE *k = open_memstream(&key, &key_len);
    if (!k)
        FAIL(NULL, "out of memory");
    fprintf(k, "ranks=%d seed=%llu model=%s batch=%d impl=%s ops=%zu hash=%016llx", run->nranks,
            (unsigned long long)run->seed, run->model_spec, run->batch, run->impl, run->schedule->nops,
            (unsigned long long)schedule_hash(run->schedule));
    if (run->interleave.mode != INTERLEAVE_OFF) { /* a scheduled run's trace replays under the same interleaving */
        char name[48];
        interleave_name(&run->interleave, name, sizeof name);
        fprintf(k, " sched=%s sched_seed=%llu", name, (unsigned long long)run->chaos_seed);
    }
    fclose(k);
    opt->run_key = key;
    if (!opt->run_key)
        FAIL(NULL, "out of memory");
    if (opt->replay_path) {
        if (trace_load(opt->replay_path, opt->run_key, run->nranks, &opt->replay) != DDP_OK)
            FAIL("replay", "%s", ddp_error_text());
        run->replay = &opt->replay;
    }
    return 0;
}

#define F(field) offsetof(ddpsim_options, field)

static const opt_spec specs[] = {
    {"ranks", 'n', "N", "rank processes", OPT_INT, F(run.nranks), 1, WORLD_MAX_RANKS, NULL, NULL},
    {"impl", 'I', "NAME|PATH", "implementation under test: a built-in (see --list) or a\nplugin's path, e.g. ./libmine.so",
     OPT_STRING, F(run.impl), 0, 0, NULL, NULL},
    {"list", 0, NULL, "list the built-in implementations and the bug catalogue", OPT_FLAG, F(list), 0, 0, NULL, NULL},
    {"mutants", 0, NULL, "run the scenario battery on every catalogued bug and report\nwhich scenario caught each (3 ranks unless --ranks)",
     OPT_FLAG, F(mutants), 0, 0, NULL, NULL},
    {"scenario", 0, "NAME", "run one scenario of the battery, with its full report", OPT_STRING, F(scenario_name), 0,
     0, NULL, NULL},
    {"scenarios", 0, NULL, "list the scenarios of the battery and what each exposes", OPT_FLAG, F(list_scenarios), 0,
     0, NULL, NULL},
    {"model", 'm', "SPEC", "mlp:IN-H-...-OUT | branchy[:IN-H-OUT] | attn[:V-T-C] |\nlm[:V-T-C] | lm-equal[:V-T-C] | bn[:IN-H-OUT] | tied[:IN-H]", OPT_STRING, F(run.model_spec), 0, 0,
     NULL, NULL},
    {"schedule", 's', "SPEC", "ops: fwd bwd grab zero step enter exit, nosync{...},\nN*(...), [N, RANK:N ...]*(...), join{...}; or @FILE to\nread it from a file",
     OPT_STRING, F(schedule_arg), 0, 0, NULL, NULL},
    {"batch", 'b', "B", "rows per micro-batch (sequences for attn)", OPT_INT, F(run.batch), 1, MODEL_MAX_DIM, NULL,
     NULL},
    {"seed", 'S', "S", "seed of init, data and every random choice", OPT_U64, F(run.seed), 0, 0, NULL, NULL},
    {"tolerance", 'T', "TOL", "bitwise | order | ulp:N | ulp-of-max:N | rtol=X,atol=Y", OPT_CUSTOM, 0, 0, 0, parse_tolerance,
     "bitwise; order with --backend nccl"},
    {"algo", 'a', "ordered|ring|exact", "reduction order of every allreduce", OPT_CHOICE, F(run.ddp.algo), 0, 0, NULL,
     NULL},
    {"backend", 0, "cpu|nccl",
     "where the implementation under test reduces: the CPU\ncollectives or NCCL on GPU rank % ngpus (the reference\n"
     "always reduces on the CPU)",
     OPT_CHOICE, F(run.backend), 0, 0, NULL, NULL},
    {"nccl-op", 0, "sum|avg",
     "NCCL: 1/N then ncclSum, or unscaled buckets and ncclAvg\n(reference and bucketed only)", OPT_CHOICE, F(nccl_op),
     0, 0, NULL, "sum"},
    {"nccl-ring-check", 0, NULL,
     "NCCL: also reduce every call's input on the CPU in ring\norder and report the share NCCL matched bit for bit",
     OPT_FLAG, F(run.nccl_ring_check), 0, 0, NULL, NULL},
    {"bucket-cap", 0, "SIZE", "DDP bucket size limit in bytes, K/M/G", OPT_SIZE, F(run.ddp.bucket_cap), 1,
     1099511627776.0, NULL, NULL},
    {"first-bucket-cap", 0, "SIZE", "limit of the first-filled bucket", OPT_SIZE, F(run.ddp.first_bucket_cap), 1,
     1099511627776.0, NULL, NULL},
    {"find-unused", 0, NULL, "find_unused_parameters=True (needed by branchy)", OPT_FLAG, F(run.ddp.find_unused), 0, 0,
     NULL, NULL},
    {"find-unused-rule", 0, "window|syncing-backward",
     "with --find-unused, what counts as used: by any micro-step of the window\n(PyTorch >= 2.4, PR #124193) or "
     "by the syncing backward's own forward\n(PyTorch < 2.4)", OPT_CHOICE, F(run.ddp.find_unused_syncing_backward), 0, 0,
     NULL, "window"},
    {"portable-math", 0, NULL, "the models' matrix products in ddpsim's own fixed-order kernels, not\n"
     "OpenBLAS's: the reference's bits no longer depend on the CPU (slower)", OPT_FLAG, F(portable_math), 0, 0, NULL,
     NULL},
    {"bucket-view", 0, NULL, "gradient_as_bucket_view=True: divide by N in place", OPT_FLAG, F(run.ddp.bucket_view), 0,
     0, NULL, NULL},
    {"shard", 0, "MODE", "sharded data parallelism against the sharded reference:\nzero1 | zero2 | fsdp | hsdp[:RxS] "
     "(see man ddpsim); without\n--impl the mode's built-in, without --schedule its battery", OPT_CUSTOM, 0, 0, 0,
     parse_shard, NULL},
    {"mesh", 0, "RxS", "replicas x shards (--shard hsdp; R*S = ranks)", OPT_CUSTOM, 0, 0, 0, parse_mesh, NULL},
    {"allow-unsynced-comm", 0, NULL, "reductions in a backward that does not sync are allowed (PyTorch's DDP\n"
     "makes none there, and a run fails on them: see man ddpsim)", OPT_FLAG, F(run.allow_unsynced_comm), 0, 0, NULL,
     NULL},
    {"static-graph", 0, NULL, "static_graph=True: the same gradients; what PyTorch cannot run with it\nis refused "
     "(see man ddpsim)", OPT_FLAG, F(run.ddp.static_graph), 0, 0, NULL, NULL},
    {"static-graph-rule", 0, "first-backward|first-iteration",
     "with --static-graph, which backwards must be armed: the first one\n(PyTorch >= 2.1, PR #103487) or every one "
     "through a forward of\nthe first iteration (PyTorch < 2.1)", OPT_CHOICE, F(run.ddp.static_graph_first_iteration),
     0, 0, NULL, "first-backward"},
    {"comm-hook", 0, "none|allreduce|fp16|bf16",
     "DDP's built-in communication hook (register_comm_hook): allreduce_hook\n(divide by N, then sum), "
     "fp16_compress_hook or bf16_compress_hook\n(compress, divide, sum in the format, decompress)",
     OPT_CHOICE, F(run.ddp.comm_hook), 0, 0, NULL, "none"},
    {"broadcast-buffers", 0, "on|off",
     "broadcast_buffers: rank 0's buffers (--model bn's running statistics)\nbefore a forward, PyTorch 1.13's rule "
     "(see man ddpsim)", OPT_CHOICE, F(run.ddp.no_broadcast_buffers), 0, 0, NULL, "on"},
    {"zero-grad", 0, "zeros|none",
     "what zero does to .grad: fill zeros (set_to_none=False,\nPyTorch < 2.0) or None (set_to_none=True, PyTorch >= 2.0)",
     OPT_CHOICE, F(run.ddp.set_to_none), 0, 0, NULL, "zeros"},
    {"lr", 0, "X", "SGD learning rate of step", OPT_CUSTOM, 0, 0, 0, parse_lr, "0.1"},
    {"optimizer", 0, "sgd|momentum[:M]|adamw[:K=V,..]", "what step does: torch.optim.SGD plain, or with momentum M\n(0.9 "
     "when not given; dampening 0, no Nesterov), or\ntorch.optim.AdamW with --lr and beta1, beta2, eps, wd\n(defaults "
     "0.9, 0.999, 1e-8, 0.01)", OPT_CUSTOM, 0, 0, 0, parse_optimizer, "sgd"},
    {"clip", 0, "MAX[:inf]", "clip_grad_norm_(max_norm=MAX, norm_type 2 or inf) before every\nstep that follows a "
     "window's syncing backward (clip:MAX in a schedule)", OPT_CUSTOM, 0, 0, 0, parse_clip, NULL},
    {"loss-scale", 0, "S|dynamic[:I,G,B,N]", "torch's GradScaler around the step: the loss times the scale, unscale\n"
     "at the first clip or step of a window, the step skipped when any rank's\ngradient has an inf or NaN; dynamic: "
     "scale I (65536), times G (2)\nafter N (2000) steps taken, times B (0.5) after a skip; S: static.\nPowers of two",
     OPT_CUSTOM, 0, 0, 0, parse_loss_scale, NULL},
    {"loss-norm", 0, "global-tokens|micro-batch-mean|sum", "the loss normalization the trainer intends on the token "
     "model (--model lm:\nragged sequences, a summed token loss times the trainer's factor):\nevery token's loss over "
     "the window's valid tokens on every rank, the\nmean of micro-batch means, or the plain sum; checked at every "
     "backward", OPT_CUSTOM, 0, 0, 0, parse_loss_norm, "global-tokens"},
    {"inputs", 0, "DIR", "initial parameters and batches from a dump directory\n(DIR/init, DIR/rank<r>/batch<b>.{x,y}.npy)",
     OPT_STRING, F(run.inputs_dir), 0, 0, NULL, NULL},
    {"dump", 0, "DIR", "write parameters, batches and every grab's gradients", OPT_STRING, F(run.dump_dir), 0, 0, NULL,
     NULL},
    {"prepare", 0, "DIR", "write the run's inputs (manifest with the ops, initial parameters, every\nrank's batches) "
     "to DIR and run nothing: for a front end in another language", OPT_STRING, F(prepare_dir), 0, 0, NULL, NULL},
    {"record", 0, "DIR", "write the run as a recorded run (local gradients, the implementation's\n.grad and "
     "parameters) for ddpsim check DIR", OPT_STRING, F(run.record_dir), 0, 0, NULL, NULL},
    {"force", 0, NULL, "with --dump, --record or --prepare: replace an earlier one in DIR", OPT_FLAG, F(run.dump_force), 0, 0,
     NULL, NULL},
    {"json", 0, "FILE", "write the report as JSON (- for standard output; the table then goes\nto standard error)",
     OPT_STRING, F(json_path), 0, 0, NULL, NULL},
    {"junit", 0, "FILE", "write the verdicts as JUnit XML (xunit2): a testcase per scenario of\nthe battery, or per check of one run",
     OPT_STRING, F(junit_path), 0, 0, NULL, NULL},
    {"html", 0, "FILE", "write the report as one self-contained HTML page: a heatmap per run\n(parameters x checks, a "
     "table per rank), the schedule, the battery's table", OPT_STRING, F(html_path), 0, 0, NULL, NULL},
    {"annotations", 0, "auto|github|none", "CI annotations (::error, ::notice) for failures and the verdict;\nauto: when GITHUB_ACTIONS=true",
     OPT_CHOICE, F(annotations), 0, 0, NULL, NULL},
    {"chaos", 0, "C|A..B",
     "shake timing with chaos seed C (delays before collectives, a\nstraggler, ready-event and bucket orders); a range repeats",
     OPT_CUSTOM, 0, 0, 0, parse_chaos, ""},
    {"repeat", 0, "K", "K runs with consecutive chaos seeds (from --chaos or 1)", OPT_INT, F(repeat), 1, MAX_SEEDS,
     NULL, ""},
    {"fail-fast", 0, NULL, "stop repeating at the first failing seed", OPT_FLAG, F(fail_fast), 0, 0, NULL, NULL},
    {"sched", 0, "off|random|pct:D[:K]",
     "run a plugin's threads one at a time, in the interleaving of the chaos\nseed (--chaos; 1 without it): random "
     "choices, or PCT of depth D\nover K points (default: 4 per callback); their clocks are virtual",
     OPT_CUSTOM, 0, 0, 0, parse_sched, "off"},
    {"race", 0, NULL, "run a plugin built with -fsanitize=thread under ThreadSanitizer: its data races fail the run",
     OPT_FLAG, F(race), 0, 0, NULL, NULL},
    {"trace", 0, "FILE", "write a JSON-lines event log (ops, ready events, arrivals, collectives, with times)", OPT_STRING, F(run.trace_path), 0, 0,
     NULL, NULL},
    {"replay", 0, "FILE", "force the ready-event and arrival order a trace recorded", OPT_STRING, F(replay_path), 0, 0,
     NULL, NULL},
    {"fault", 0, "SPEC",
     "inject a fault, repeatable: crash:rank=R,op=K  abort:rank=R,op=K\nhang:rank=R,op=K  slow:rank=R,ms=M  flip:rank=R,op=K\n"
     "inf:rank=R,op=K  nan:rank=R,op=K (an overflow in backward op K's gradient)",
     OPT_CUSTOM, 0, 0, 0, parse_fault, ""},
    {"world", 0, CLI_WORLD_CHOICES,
     "fork: N processes of this machine over shared memory;\nmpi: each process of an MPI job one rank (mpirun -np N)",
     OPT_CHOICE, F(world), 0, 0, NULL, NULL},
    {"timeout", 't', "SEC", "watchdog: stop when no rank progresses for SEC s; 0 off, else\nat least 1",
     OPT_SECONDS, F(run.timeout_s), 0, 1e7, NULL, NULL},
    {"quiet", 'q', NULL, "print only the verdict (and the first divergence)", OPT_FLAG, F(quiet), 0, 0, NULL, NULL},
    {"help", 'h', NULL, "this help", OPT_HELP, 0, 0, 0, NULL, NULL},
    {"version", 'V', NULL, "version and build configuration", OPT_VERSION, 0, 0, 0, NULL, NULL},
    {NULL, 0, NULL, NULL, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

const opt_command options_command = {
    .name = "",
    .usage = "[OPTIONS]\n       ddpsim selfcheck [OPTIONS]   the collectives self-check\n"
             "       ddpsim check DIR [OPTIONS]   replay the reference on a recorded run (see ddpsim check --help)\n"
             "       ddpsim bench allreduce|model|run|battery [OPTIONS]   benchmarks (see ddpsim bench --help)",
    .about = "\nRuns N rank processes over shared memory. Each trains the model through the\n"
             "schedule with a reference DDP (PyTorch's semantics) and with the implementation\n"
             "under test, and compares their gradients at every grab and their parameters after\n"
             "every step, on every rank.",
    .opts = specs,
    .opts_size = sizeof(ddpsim_options),
    .init = init,
    .validate = validate,
    .tracks_given = 1,
    .given_offset = offsetof(ddpsim_options, seen),
    .epilog = "Without --schedule, --model or --scenario, ddpsim runs its scenario battery:\n"
              "every scenario at N ranks, one table row each (ddpsim --scenarios).\n\n"
              "Exit status:\n"
              "  0  every check held on every rank (the battery: in every scenario run)\n"
              "  1  a divergence, the implementation's ranks disagreeing, or the reference\n"
              "     failing its own sanity checks\n"
              "  2  bad usage or input\n"
              "  3  runtime fault: a rank died, a deadlock, the watchdog fired, a backend failed\n"
              "  4  nothing verified: no grab, or every grab compared only zeros\n"
              "  130/143  interrupted by SIGINT/SIGTERM before the verdict (all ranks are stopped first)\n",
};

/* The command without --chaos, --repeat and --fail-fast: a failing seed's replay line appends "--chaos S". */
static int keep_for_replay(const char *arg, int *skip_next)
{
    if (strcmp(arg, "--fail-fast") == 0)
        return 0;
    if (strcmp(arg, "--chaos") == 0 || strcmp(arg, "--repeat") == 0) {
        *skip_next = 1;
        return 0;
    }
    return strncmp(arg, "--chaos=", 8) != 0 && strncmp(arg, "--repeat=", 9) != 0;
}

int options_parse(int argc, char **argv, ddpsim_options *opt)
{
    int r = opt_parse(&options_command, argc, argv, opt);
    if (r != OPT_RUN)
        return r;
    opt->command = cli_join_command(argc, argv, NULL);
    opt->replay_base = cli_join_command(argc, argv, keep_for_replay);
    if (!opt->command || !opt->replay_base)
        return cli_usage_error(NULL, NULL, "out of memory");
    return OPT_RUN;
}

void options_free(ddpsim_options *opt)
{
    cli_close_output(opt->json_file); /* main opened them */
    cli_close_output(opt->junit_file);
    cli_close_output(opt->html_file);
    impl_close(&opt->impl);
    trace_free(&opt->replay);
    sched_free(&opt->schedule);
    free(opt->schedule_text);
    free(opt->run_key);
    free(opt->replay_base);
    free(opt->command);
    memset(opt, 0, sizeof *opt);
}
