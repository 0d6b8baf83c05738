/*
 * report.c - the verification report (report.h): what the judge decided
 * (judge.h), as a table, a verdict line and JSON. Ranks holding identical
 * gradients under no_sync only draw a warning: the data could not reveal a
 * missing sync there.
 */
#include "report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "annotate.h"
#include "checker.h"
#include "cli.h"
#include "hash.h"
#include "config.h"
#include "jsonw.h"
#include "judge.h"
#include "model.h"
#include "nccl_env.h"
#include "pattern.h"
#include "report_ci.h"
#include "timeline.h"
#include "units.h"

/* The model whose parameter names the report uses: the run's layout, or the one a caller gave (a recorded run). */
static model *layout_get(const ddpsim_options *opt)
{
    if (opt->layout)
        return (model *)opt->layout;
    model *m = NULL;
    return model_create_layout(opt->run.model_spec, opt->run.batch, &m) == DDP_OK ? m : NULL;
}

static void layout_put(const ddpsim_options *opt, model *m)
{
    if (m != opt->layout)
        model_destroy(m);
}

static const char *synced_text(int synced)
{
    return synced == 1 ? "yes" : synced == 0 ? "no" : "-";
}

static void header_nccl(const ddpsim_options *opt)
{
    const gpu_info *g = &opt->gpu;
    const verify_config *run = &opt->run;
    char v[32], env[512];
    gpu_probe_nccl_version_text(g->nccl_version, v, sizeof v);
    fprintf(opt->out, "# backend nccl: the implementation reduces with NCCL %s (CUDA runtime %d.%d, driver %d.%d) on %d GPU%s "
           "(%s), rank r on GPU r %% %d; the reference reduces on the CPU\n",
           v, g->runtime_version / 1000, (g->runtime_version % 1000) / 10, g->driver_version / 1000,
           (g->driver_version % 1000) / 10, g->ngpus, g->ngpus == 1 ? "" : "s", g->name, g->ngpus);
    fprintf(opt->out, "#   nccl op: %s\n", run->nccl_avg ? "avg: buckets unscaled, ncclAvg (1/N applied by NCCL)"
                                              : "sum: buckets scaled by 1/N as DDP does, then ncclSum");
    nccl_env_plan plan;
    nccl_env_plan_make(0, run->nranks, g->ngpus, NULL, &plan);
    nccl_env_describe(&plan, env, sizeof env);
    fprintf(opt->out, "#   environment: %s\n", env);
    if (plan.separate_hosts && g->ngpus == 1)
        fprintf(opt->out, "#   %d ranks on 1 GPU: each rank is its own NCCL host (its own NCCL_HOSTID), so NCCL talks over "
                          "its socket transport on loopback; this works, but NVIDIA does not support it\n",
                run->nranks);
    else if (plan.separate_hosts)
        fprintf(opt->out, "#   %d ranks on %d GPUs: %d NCCL hosts (ranks 0-%d, %d-..., each its own NCCL_HOSTID), each rank on "
                          "its own GPU within its host, so only ranks that share a GPU talk over NCCL's socket transport on "
                          "loopback; this works, but NVIDIA does not support it\n",
                run->nranks, g->ngpus, plan.nhosts, g->ngpus - 1, g->ngpus);
    if (plan.nhosts > NCCL_ENV_CONTEXTS_WARN)
        fprintf(opt->out, "#   warning: %d ranks share a GPU: without MPS their CUDA contexts time-slice and every NCCL call "
                          "waits for the others' turns (about 95 ms a call with 8 ranks on one H200); up to %d per GPU "
                          "keeps it low\n",
               plan.nhosts, NCCL_ENV_CONTEXTS_WARN);
}

int report_header(const ddpsim_options *opt)
{
    if (opt->quiet)
        return 0;
    const verify_config *run = &opt->run;
    model *m = NULL;
    if (model_create_layout(run->model_spec, run->batch, &m) != DDP_OK)
        return 0;
    int members[MODEL_MAX_PARAMS], sizes[MODEL_MAX_PARAMS];
    int nb = ddp_bucket_layout(m, run->ddp.first_bucket_cap, run->ddp.bucket_cap, run->ddp.find_unused, NULL, 0,
                               members, sizes);
    char tol[64], cap[32], fcap[32], mom[96];
    fprintf(opt->out, "# ddpsim %s: %s under test against %s\n", PACKAGE_VERSION, run->impl,
            run->shard == SHARD_NONE ? "the reference DDP (PyTorch semantics)" : "the sharded reference");
    fprintf(opt->out, "# ranks %d, model %s (%zu parameters in %d tensors, %d bucket%s%s), batch %d, seed %llu%s\n",
           run->nranks, model_spec(m), model_size(m), model_nparams(m), nb, nb == 1 ? "" : "s",
           run->ddp.find_unused ? "" : " until the rebuild", run->batch,
           (unsigned long long)run->seed, run->inputs_dir ? ", inputs from a dump" : "");
    if (opt->clip_inserted)
        fprintf(opt->out, "# schedule: %s + --clip %g%s (before every step a training loop clips)\n",
                opt->schedule_text, opt->run.clip_max, opt->run.clip_inf ? ":inf" : "");
    else
        fprintf(opt->out, "# schedule: %s\n", opt->schedule_text);
    fprintf(opt->out, "#   %zu ops, %zu forwards, %zu grabs\n", run->schedule->nops, run->schedule->nfwd, run->schedule->ngrabs);
    fprintf(opt->out, "# algo %s, tolerance %s, bucket cap %s (first %s), find_unused %s%s%s%s, bucket_view %s, "
                      "zero_grad %s, lr %g%s%s%s\n",
           coll_algo_name(run->ddp.algo), tol_format(&run->tol, tol, sizeof tol),
           units_format_size(run->ddp.bucket_cap, cap, sizeof cap),
           units_format_size(run->ddp.first_bucket_cap, fcap, sizeof fcap), run->ddp.find_unused ? "yes" : "no",
           run->ddp.find_unused ? " (" : "", run->ddp.find_unused ? ddp_find_unused_rule_text(&run->ddp) : "",
           run->ddp.find_unused ? ")" : "", run->ddp.bucket_view ? "yes" : "no",
           run->ddp.set_to_none ? "set_to_none" : "fills zeros", (double)run->ddp.lr,
           ddp_optim_text(run->ddp.momentum, &run->ddp.adamw, mom, sizeof mom),
           run->ddp.comm_hook ? ", comm hook " : "", run->ddp.comm_hook ? ddp_comm_hook_name(run->ddp.comm_hook) : "");
    if (run->chaos)
        fprintf(opt->out, "# chaos seed %llu: seeded delays before collectives, a straggler, shuffled ready events and bucket "
               "launches (timing only)\n",
               (unsigned long long)run->chaos_seed);
    if (run->interleave.mode != INTERLEAVE_OFF) {
        char name[48];
        interleave_name(&run->interleave, name, sizeof name);
        fprintf(opt->out, "# sched %s, seed %llu: the plugin's threads run one at a time, in the seed's interleaving, "
                          "on virtual clocks\n", name, (unsigned long long)run->chaos_seed);
    }
    if (opt->replay_path)
        fprintf(opt->out, "# replaying the ready-event and arrival order of %s\n", opt->replay_path);
    if (opt->replay_path && opt->replay.stopped) { /* how its run ended, rank by rank, runs of the same word joined */
        fprintf(opt->out, "#   a run that did not finish, forced up to where it stopped, free after:");
        for (int r = 0; r < opt->replay.nranks; r++) {
            int last = r;
            while (last + 1 < opt->replay.nranks && strcmp(opt->replay.how[last + 1], opt->replay.how[r]) == 0)
                last++;
            const char *how = opt->replay.how[r][0] ? opt->replay.how[r] : "finished";
            if (last > r)
                fprintf(opt->out, "%s ranks %d-%d %s", r ? "," : "", r, last, how);
            else
                fprintf(opt->out, "%s rank %d %s", r ? "," : "", r, how);
            r = last;
        }
        fputc('\n', opt->out);
    }
    for (int f = 0; f < run->nfaults; f++) {
        const verify_fault *ft = &run->faults[f];
        if (ft->kind == FAULT_SLOW)
            fprintf(opt->out, "# fault: slow, rank %d sleeps %u ms before every op\n", ft->rank, ft->ms);
        else
            fprintf(opt->out, "# fault: %s, rank %d before op %ld (%s)%s\n", fault_kind_name(ft->kind), ft->rank, ft->op,
                   sched_op_name(run->schedule->ops[ft->op]),
                   ft->kind == FAULT_FLIP ? ": one bit of its contribution to the next allreduce" : "");
    }
    char math[160];
    report_shard_line(opt);
    fprintf(opt->out, "# math: %s\n", model_math(math, sizeof math));
    if (run->backend == VERIFY_BACKEND_NCCL)
        header_nccl(opt);
    fprintf(opt->out, "# replay: %s\n", opt->command);
    model_destroy(m);
    return fflush(opt->out) != 0 || ferror(opt->out) ? -1 : 0;
}

/* The clip ops' checks, every rank's figures folded (verify_rank_figures): the report's line and --json's object. */
typedef struct clip_totals {
    uint64_t clips, failed;
    double worst;
    float lo, hi; /* the reference's coefficients (lo 1, hi 0 while none) */
} clip_totals;

static clip_totals clip_totals_of(const verify_result *res)
{
    clip_totals t = {.lo = 1, .hi = 0};
    for (int r = 0; r < res->nranks; r++) {
        const verify_rank_figures *f = &res->figures[r];
        t.clips += f->clips;
        t.failed += f->clips_failed;
        t.worst = fmax(t.worst, f->clip_worst);
        if (f->clips) {
            t.lo = fminf(t.lo, f->clip_ref_min);
            t.hi = fmaxf(t.hi, f->clip_ref_max);
        }
    }
    return t;
}

/* --json's "clip": the clip ops' checks over all ranks, and the first failing one (null: none failed). */
static void json_clips(FILE *f, const verify_result *res, const judgement *s)
{
    clip_totals t = clip_totals_of(res);
    fprintf(f, ",\n \"clip\": {\"checked\": %llu, \"failed\": %llu, \"worst\": ", (unsigned long long)t.clips,
            (unsigned long long)t.failed);
    jsonw_number(f, t.worst);
    fprintf(f, ", \"first_failure\": ");
    const verify_clip_check *k = s->first ? &s->first->clip : NULL;
    if (k && k->failed) {
        fprintf(f, "{\"op\": %llu, \"rank\": %d, \"kind\": \"%s\", \"coef\": ", (unsigned long long)k->op,
                s->first_rank, k->failed == VERIFY_CLIP_RANKS ? "ranks_differ" : "outside_bound");
        jsonw_number(f, k->coef);
        fprintf(f, ", \"reference_coef\": ");
        jsonw_number(f, k->ref_coef);
        fprintf(f, ", \"reference_norm\": ");
        jsonw_number(f, k->ref_norm);
        fprintf(f, ", \"bound\": [");
        jsonw_number(f, k->lo);
        fprintf(f, ", ");
        jsonw_number(f, k->hi);
        fprintf(f, "], \"outside\": %s", k->outside ? "true" : "false");
        if (k->norm.kind == PATTERN_FACTOR) {
            char name[32];
            fprintf(f, ", \"norm_factor\": ");
            jsonw_number(f, k->norm.factor);
            fprintf(f, ", \"norm_factor_name\": ");
            jsonw_string(f, pattern_factor_name(&k->norm, name, sizeof name));
        }
        if (k->failed == VERIFY_CLIP_RANKS) {
            fprintf(f, ", \"other_rank\": %d, \"other_coef\": ", k->other_rank);
            jsonw_number(f, k->other_coef);
        }
        fprintf(f, "}");
    } else {
        fprintf(f, "null");
    }
    fprintf(f, "}");
}

/* --loss-scale's checks, every rank's figures folded: the report's line and --json's object. */
typedef struct scale_totals {
    uint64_t checks, unscales, skips, failed, planted;
    float lo, hi; /* the reference's scales */
} scale_totals;

static scale_totals scale_totals_of(const verify_result *res)
{
    scale_totals t = {0};
    for (int r = 0; r < res->nranks && res->figures; r++) {
        const verify_rank_figures *f = &res->figures[r];
        if (f->scale_checks) {
            t.lo = t.checks ? fminf(t.lo, f->scale_min) : f->scale_min;
            t.hi = t.checks ? fmaxf(t.hi, f->scale_max) : f->scale_max;
        }
        t.checks += f->scale_checks;
        t.unscales += f->unscales;
        t.skips += f->skips;
        t.failed += f->scales_failed;
        t.planted += f->planted;
    }
    return t;
}

/* --json's "loss_scale" (null without --loss-scale): the checks over all ranks, and the first failing one. */
static void json_scales(FILE *f, const ddpsim_options *opt, const verify_result *res, const judgement *s)
{
    fprintf(f, ",\n \"loss_scale\": ");
    if (!opt->run.ddp.scaler.on) {
        fprintf(f, "null");
        return;
    }
    char spec[96];
    scaler_format(&opt->run.ddp.scaler, spec, sizeof spec);
    scale_totals t = scale_totals_of(res);
    fprintf(f, "{\"spec\": ");
    jsonw_string(f, spec);
    fprintf(f, ", \"backwards_checked\": %llu, \"unscales_checked\": %llu, \"skipped\": %llu, \"failed\": %llu, "
               "\"planted_matched\": %llu, \"scale_min\": ",
            (unsigned long long)t.checks, (unsigned long long)t.unscales, (unsigned long long)t.skips,
            (unsigned long long)t.failed, (unsigned long long)t.planted);
    jsonw_number(f, t.lo);
    fprintf(f, ", \"scale_max\": ");
    jsonw_number(f, t.hi);
    fprintf(f, ", \"first_failure\": ");
    const verify_scale_check *k = s->first ? &s->first->scale : NULL;
    if (k && k->failed == VERIFY_SCALE_APPLIED) {
        fprintf(f, "{\"op\": %llu, \"rank\": %d, \"kind\": \"scale\", \"scale\": ", (unsigned long long)k->op,
                s->first_rank);
        jsonw_number(f, k->scale);
        fprintf(f, ", \"reference_scale\": ");
        jsonw_number(f, k->ref_scale);
        fprintf(f, "}");
    } else if (k && k->failed) {
        fprintf(f, "{\"op\": %llu, \"rank\": %d, \"kind\": \"skip\", \"found_inf\": %s, \"reference_found_inf\": %s, "
                   "\"fault_op\": %ld, \"fault_rank\": %d}",
                (unsigned long long)k->op, s->first_rank, k->found_inf ? "true" : "false",
                k->ref_found_inf ? "true" : "false", k->fault_op, k->fault_rank);
    } else {
        fprintf(f, "null");
    }
    fprintf(f, "}");
}

/* The token loss's normalization checks over all ranks: backwards checked, and how many failed. */
static uint64_t norm_totals(const verify_result *res, uint64_t *failed)
{
    uint64_t checks = 0;
    *failed = 0;
    for (int r = 0; r < res->nranks && res->figures; r++) {
        checks += res->figures[r].norm_checks;
        *failed += res->figures[r].norms_failed;
    }
    return checks;
}

/* --json's "loss_norm" (null without a token loss): the checks over all ranks, and the first failing one. */
static void json_norms(FILE *f, const verify_result *res, const judgement *s)
{
    fprintf(f, ",\n \"loss_norm\": ");
    if (!res->loss_norm) {
        fprintf(f, "null");
        return;
    }
    uint64_t failed, checks = norm_totals(res, &failed);
    fprintf(f, "{\"norm\": \"%s\", \"backwards_checked\": %llu, \"failed\": %llu, \"first_failure\": ",
            loss_norm_name(res->loss_norm), (unsigned long long)checks, (unsigned long long)failed);
    const verify_norm_check *k = s->first ? &s->first->norm : NULL;
    if (!k || !k->failed) {
        fprintf(f, "null}");
        return;
    }
    fprintf(f, "{\"op\": %llu, \"rank\": %d, \"micro_step\": %d, \"micro_steps\": %d, \"factor\": ",
            (unsigned long long)k->op, s->first_rank, k->micro, k->micro_steps);
    jsonw_number(f, k->factor);
    fprintf(f, ", \"intended\": ");
    jsonw_number(f, k->ref_factor);
    if (k->mixed_sequence >= 0) {
        fprintf(f, ", \"mixed\": {\"sequence\": %d, \"factor\": ", k->mixed_sequence);
        jsonw_number(f, k->mixed_factor);
        fprintf(f, "}");
    }
    fprintf(f, ", \"tokens\": %llu, \"rank_window_tokens\": %llu, \"window_tokens\": %llu, \"matches\": [",
            (unsigned long long)k->tokens, (unsigned long long)k->rank_window_tokens,
            (unsigned long long)k->window_tokens);
    int n = 0;
    for (int c = 0; c < LOSS_CAND_COUNT; c++)
        if (k->matches & (1u << c)) {
            fprintf(f, "%s", n++ ? ", " : "");
            jsonw_string(f, loss_cand_text(c));
        }
    fprintf(f, "]}}");
}

/* A clip that failed its check, in words. */
static void print_clip_failure(FILE *out, const char *where, const char *label, int rank, const verify_clip_check *k)
{
    char bound[160];
    if (isnan(k->ref_coef)) /* a NaN among the gradients: torch's norm and coefficient are NaN */
        snprintf(bound, sizeof bound, "the reference's global norm is NaN (a NaN among the gradients), so a correct "
                                      "clip's coefficient is NaN");
    else
        snprintf(bound, sizeof bound, "the bound of a correct clip is [%.9g, %.9g] around the reference's %.9g "
                                      "(exact global norm %.9g)",
                 k->lo, k->hi, (double)k->ref_coef, k->ref_norm);
    if (k->failed == VERIFY_CLIP_RANKS)
        fprintf(out, "# first divergence: the clip at op %llu, before %s (%s), rank %d: coefficient %.9g, rank %d's "
                     "%.9g: the ranks clipped by different norms (one rank's part of the norm, not reduced over the "
                     "others?) where every rank's reference is the same; %s%s\n",
                (unsigned long long)k->op, where, label, rank, (double)k->coef, k->other_rank, (double)k->other_coef,
                bound, k->outside ? ", and this rank's lies outside it" : "");
    else {
        char ratio[48] = "";
        if (!isnan(k->ref_coef))
            snprintf(ratio, sizeof ratio, "; %.6g x the reference's", (double)k->coef / (double)k->ref_coef);
        fprintf(out, "# first divergence: the clip at op %llu, before %s (%s), rank %d: coefficient %.9g, outside it: "
                     "%s%s\n",
                (unsigned long long)k->op, where, label, rank, (double)k->coef, bound, ratio);
    }
    if (k->norm.kind == PATTERN_FACTOR) {
        char name[32];
        pattern_factor_name(&k->norm, name, sizeof name);
        fprintf(out, "# pattern: the norm it clipped by is %.6g x the reference's%s%s%s\n", k->norm.factor,
                name[0] ? " (" : ": no constant of the run", name, name[0] ? ")" : "");
    }
}

/* A loss-scale check that failed (--loss-scale), in words. */
static void print_scale_failure(FILE *out, const char *where, const char *label, int rank,
                                const verify_scale_check *k)
{
    if (k->failed == VERIFY_SCALE_APPLIED) {
        fprintf(out, "# first divergence: the loss scale of the backward at op %llu, before %s (%s), rank %d: the "
                     "implementation multiplied its loss by %.9g, the reference by %.9g (%.6g x)\n",
                (unsigned long long)k->op, where, label, rank, (double)k->scale, (double)k->ref_scale,
                (double)k->scale / (double)k->ref_scale);
        return;
    }
    char cause[96] = "";
    if (k->ref_found_inf && k->fault_op >= 0)
        snprintf(cause, sizeof cause, " (the inf or NaN planted in rank %d's backward at op %ld)", k->fault_rank,
                 k->fault_op);
    fprintf(out, "# first divergence: the unscale at op %llu, before %s (%s), rank %d: the implementation %s an inf or "
                 "NaN and %s the step; the reference %s%s, so it %s the step on every rank%s\n",
            (unsigned long long)k->op, where, label, rank, k->found_inf ? "found" : "did not find",
            k->found_inf ? "skips" : "takes", k->ref_found_inf ? "found one" : "found none", cause,
            k->ref_found_inf ? "skips" : "takes",
            k->ref_found_inf ? " (a rank's own finding, not reduced over the ranks that hold the rest?)" : "");
}

/* A trainer's loss normalization that failed its check (the token model, --loss-norm), in words: the factor, what
 * it should have been from which counts, and the mistakes that give every factor the window saw. */
static void print_norm_failure(FILE *out, const char *where, const char *label, int rank,
                               const verify_norm_check *k)
{
    fprintf(out, "# first divergence: the loss normalization of the backward at op %llu, before %s (%s), rank %d, "
                 "micro-step %d of its window's %d: the implementation multiplied the summed token loss by %.9g",
            (unsigned long long)k->op, where, label, rank, k->micro + 1, k->micro_steps, (double)k->factor);
    if (k->mixed_sequence >= 0)
        fprintf(out, " for the first sequence with valid tokens and by %.9g for sequence %d's",
                (double)k->mixed_factor, k->mixed_sequence);
    fprintf(out, ", --loss-norm %s intends %.9g%s", loss_norm_name(k->norm), (double)k->ref_factor,
            k->mixed_sequence >= 0 ? " for every one" : "");
    if (k->ref_factor != 0 && k->mixed_sequence < 0)
        fprintf(out, " (%.6g x)", (double)k->factor / (double)k->ref_factor);
    fprintf(out, "; valid tokens: %llu in this micro-batch on this rank, %llu in the window on this rank, %llu on "
                 "every rank\n",
            (unsigned long long)k->tokens, (unsigned long long)k->rank_window_tokens,
            (unsigned long long)k->window_tokens);
    int named = 0;
    for (int c = 0; c < LOSS_CAND_COUNT; c++)
        if (k->matches & (1u << c))
            fprintf(out, "# pattern: %s%s, at each of the %d backward%s of its window checked from there\n",
                    named++ ? "or " : "the factor is ", loss_cand_text(c), k->backwards, k->backwards > 1 ? "s" : "");
    if (named)
        return;
    if (k->mixed_sequence >= 0)
        fprintf(out, "# pattern: no one factor for the micro-batch: its sequences' tokens weigh differently (each "
                     "sequence's own mean first is not a token average)\n");
    else if (k->constant && isfinite(k->ratio))
        fprintf(out, "# pattern: a constant factor, %.6g x the intended one at each of the %d backward%s of its window "
                     "checked from there (a normalizer of the wrong count, or a constant dropped or added)\n",
                k->ratio, k->backwards, k->backwards > 1 ? "s" : "");
    else
        fprintf(out, "# pattern: none of the mistakes ddpsim knows gives the window's factors, nor a constant multiple "
                     "of the intended ones\n");
}

static void print_first(const ddpsim_options *opt, const judgement *s)
{
    const verify_record *f = s->first;
    const sched_check *ck = s->first_where;
    char where[32];
    sched_check_name(ck, where, sizeof where);
    if (!f->done) {
        fprintf(opt->out, "# first divergence: %s (%s), rank %d: never reached\n", where, ck->label, s->first_rank);
        return;
    }
    model *m = layout_get(opt);
    const char *first = "first divergence";
    if (f->norm.failed) { /* the factor came before the gradients it made */
        print_norm_failure(opt->out, where, ck->label, s->first_rank, &f->norm);
        first = "after it";
    } else if (f->scale.failed) { /* the scale or the skip came before the values they made */
        print_scale_failure(opt->out, where, ck->label, s->first_rank, &f->scale);
        first = "after it";
    } else if (f->clip.failed) { /* the clip came before the values it made */
        print_clip_failure(opt->out, where, ck->label, s->first_rank, &f->clip);
        first = "after it";
    }
    if (f->has_first && f->first_padding)
        fprintf(opt->out, "# %s: %s (%s), rank %d, the padding of flat unit %d, element %llu of the "
                          "padded unit: %.9g, where padding is exactly 0\n",
                first, where, ck->label, s->first_rank, f->first_param, (unsigned long long)f->first_index,
                (double)f->first_actual);
    else if (f->has_first && f->first_none)
        fprintf(opt->out, "# %s: %s (%s), rank %d, parameter %s: %s\n", first, where, ck->label,
                s->first_rank, checker_first_name(m, f), verify_none_text(f->first_none));
    else if (f->has_first)
        fprintf(opt->out, "# %s: %s (%s), rank %d, %s %s, element %llu: expected %.9g, actual %.9g, "
               "%u ulp\n",
               first, where, ck->label, s->first_rank, f->first_buffer ? "buffer" : "parameter", checker_first_name(m, f), (unsigned long long)f->first_index,
               (double)f->first_expected, (double)f->first_actual, f->first_ulp);
    if (f->has_first && f->pattern.kind != PATTERN_NONE) {
        char pat[256];
        fprintf(opt->out, "# pattern: %s\n", pattern_text(&f->pattern, pat, sizeof pat));
    }
    if (f->unsynced_reductions)
    {
        char bytes[48] = "";
        if (f->unsynced_bytes != VERIFY_BYTES_UNCOUNTED)
            snprintf(bytes, sizeof bytes, " (%llu bytes)", (unsigned long long)f->unsynced_bytes);
        char rule[96];
        if (opt->run.shard == SHARD_NONE)
            snprintf(rule, sizeof rule, "PyTorch's DDP reduces nothing");
        else
            snprintf(rule, sizeof rule, "--shard %s makes no all-reduce%s", shard_mode_name(opt->run.shard),
                     shard_mode_scatters_unsynced(opt->run.shard) ? "" : " nor reduce-scatter");
        fprintf(opt->out, "# %s: %s (%s), rank %d: %llu reduction%s%s in a backward that does not sync (op %llu), "
                          "where %s (--allow-unsynced-comm if that is meant)\n",
                f->has_first ? "communication" : "first divergence", where, ck->label, s->first_rank,
                (unsigned long long)f->unsynced_reductions, f->unsynced_reductions == 1 ? "" : "s", bytes,
                (unsigned long long)f->unsynced_op, rule);
    }
    layout_put(opt, m);
}

/* The implementation's first disagreement between its own ranks. */
static void print_disagreement(const ddpsim_options *opt, const judgement *s)
{
    const verify_agreement *a = s->disagree;
    model *m = layout_get(opt);
    const char *pname = "?";
    if (m)
        pname = model_param_at(m, a->param)->name;
    fprintf(opt->out, "# ranks disagree: after the syncing backward at op %zu, parameter %s, element %llu: rank %d has "
                      "%.9g, rank %d has %.9g (%u ulp)\n",
            a->op, pname, (unsigned long long)a->index, a->base, (double)a->rank0, s->disagree_rank, (double)a->mine,
            tol_ulp_distance(a->rank0, a->mine));
    layout_put(opt, m);
}

/* Where the comparison is not bitwise, how far off the elements were. */
static void print_ulp_histogram(const ddpsim_options *opt, const verify_result *res, const judgement *s)
{
    if (opt->run.tol.kind == TOL_BITWISE && !res->nccl)
        return;
    if (opt->run.tol.kind == TOL_ORDER)
        fprintf(opt->out, "# order: the largest |implementation - reference| was %.3g of its element's proven bound\n",
                s->bound_worst);
    const uint64_t *hist = res->tally.ulp_hist;
    fprintf(opt->out, "# ulp distance to the reference, all grabs and ranks: max %u; elements at", res->tally.max_ulp);
    for (int b = 0; b < TOL_ULP_BINS; b++)
        fprintf(opt->out, " %s: %llu%s", tol_ulp_bin_label(b), (unsigned long long)hist[b], b + 1 < TOL_ULP_BINS ? "," : "\n");
}

/* --sched: what the busiest rank's scheduler did, and what PCT promises for it. */
static void print_sched(const ddpsim_options *opt, const verify_result *res)
{
    const interleave_config *cfg = &opt->run.interleave;
    const interleave_figures *most = NULL;
    int at = 0;
    uint64_t digest = HASH_INIT;
    for (int r = 0; r < res->nranks; r++) {
        digest = hash_word(digest, res->figures[r].sched.digest);
        if (!most || res->figures[r].sched.points > most->points)
            most = &res->figures[at = r].sched;
    }
    if (cfg->mode == INTERLEAVE_OFF || !most)
        return;
    fprintf(opt->out, "# sched: the interleaving's digest %016llx (every rank's every decision: the same digest, the "
                      "same interleaving)\n", (unsigned long long)digest);
    fprintf(opt->out, "# sched: rank %d ran %u thread%s through %llu scheduling points (%llu switches, %.3f ms of "
                      "virtual time), the most of any rank\n",
            at, most->threads, most->threads == 1 ? "" : "s", (unsigned long long)most->points,
            (unsigned long long)most->switches, most->virtual_ns / 1e6);
    if (cfg->mode != INTERLEAVE_PCT)
        return;
    fprintf(opt->out, "#   PCT finds a bug of depth d <= %d in a rank like it with probability >= 1/(n K^(d-1)) per seed "
                      "(n = %u threads, K = %llu points%s):", cfg->depth, most->threads,
            (unsigned long long)most->horizon, cfg->horizon ? "" : ", 4 per callback after create");
    for (int d = 1; d <= cfg->depth; d++)
        fprintf(opt->out, "%s d=%d %.3g", d > 1 ? "," : "", d,
                interleave_pct_bound(cfg, d, most->threads, most->horizon));
    fputc('\n', opt->out);
    if (most->points > most->horizon)
        fprintf(opt->out, "#   its change points fell in the first %llu of its %llu points: for the bound over all of "
                          "them give --sched pct:%d:%llu\n",
                (unsigned long long)most->horizon, (unsigned long long)most->points, cfg->depth,
                (unsigned long long)most->points);
}

static void print_nccl(const ddpsim_options *opt, const verify_result *res)
{
    judge_nccl_total t = judge_nccl_sum(res);
    double per_call = t.calls ? t.device_ms / (double)t.calls : 0, per_rt = t.calls ? t.roundtrip_ms / (double)t.calls : 0;
    size_t steps = opt->run.schedule->nfwd;
    fprintf(opt->out, "# nccl: %llu allreduces per rank (%llu floats); per allreduce %.3f ms on the GPU (events), %.3f ms round "
           "trip with copies (slowest %.3f ms); %.3f ms per micro-step (fwd+bwd, whole run / %zu)\n",
           (unsigned long long)res->nccl[0].nallreduce, (unsigned long long)res->nccl[0].elements, per_call, per_rt,
           t.max_ms, steps ? res->wall_s * 1e3 / (double)steps : 0.0, steps);
    fprintf(opt->out, "# nccl: result digest %016llx: %s (run again: the same digest means bitwise the same results)\n",
           (unsigned long long)res->nccl[0].digest,
           t.digests_agree ? "identical on every rank" : "RANKS DIFFER (an allreduce gave ranks different bits)");
    if (!opt->run.nccl_ring_check)
        fprintf(opt->out, "# nccl: the CPU ring emulation did not run (--nccl-ring-check runs it on every call)\n");
    else
        fprintf(opt->out, "# nccl: the CPU ring emulation (--algo ring) reproduces %.2f%% of NCCL's result elements bit "
                          "for bit (%llu of %llu)\n",
                t.elements ? 100.0 * (double)t.ring_same / (double)t.elements : 100.0, (unsigned long long)t.ring_same,
                (unsigned long long)t.elements);
}

static const char *verdict_word(judge_verdict v)
{
    switch (v) {
    case JUDGE_PASS: return "pass";
    case JUDGE_DIVERGES: return "diverges";
    case JUDGE_REFERENCE_BAD: return "reference_bad";
    case JUDGE_NCCL_DISAGREE: return "nccl_disagree";
    case JUDGE_NOTHING: return "nothing_verified";
    case JUDGE_RANKS_DISAGREE: return "ranks_disagree";
    }
    return "?";
}

int report_exit_code(judge_verdict v)
{
    switch (v) {
    case JUDGE_PASS: return DDPSIM_EXIT_PASS;
    case JUDGE_NOTHING: return DDPSIM_EXIT_NOTHING;
    default: return DDPSIM_EXIT_MISMATCH;
    }
}

static const char *fate_word(world_fate f)
{
    switch (f) {
    case WORLD_FATE_NOT_STARTED: return "not_finished";
    case WORLD_FATE_OK: return "finished";
    case WORLD_FATE_FAILED: return "failed";
    case WORLD_FATE_SIGNALED: return "killed";
    case WORLD_FATE_STOPPED: return "stopped";
    }
    return "?";
}

void report_no_verdict(const ddpsim_options *opt, const world *w, int code, const char *error)
{
    const char *result = code == DDPSIM_EXIT_USAGE ? "bad_input" : code > 128 ? "interrupted" : "fault";
    report_ci_no_verdict(opt, w, code, result, error);
    FILE *f = opt->json_file;
    if (!f)
        return;
    fprintf(f, "{\"result\": \"%s\", \"verdict\": null, \"exit_code\": %d, \"error\": ", result, code);
    jsonw_string(f, error);
    fprintf(f, ", \"ranks\": %d, \"impl\": ", opt->run.nranks);
    jsonw_string(f, opt->run.impl);
    fprintf(f, ", \"command\": ");
    jsonw_string(f, opt->command);
    int first = -1;
    for (int r = 0; w && r < world_nranks(w) && first < 0; r++) {
        world_fate fate = world_outcome(w, r)->fate;
        if (fate == WORLD_FATE_FAILED || fate == WORLD_FATE_SIGNALED)
            first = r;
    }
    fprintf(f, ",\n \"failed_rank\": ");
    if (first >= 0)
        fprintf(f, "%d", first);
    else
        fprintf(f, "null");
    fprintf(f, ", \"rank_states\": [");
    for (int r = 0; w && r < world_nranks(w); r++) {
        const world_rank_outcome *o = world_outcome(w, r);
        fprintf(f, "%s\n  {\"rank\": %d, \"fate\": \"%s\", \"op\": %d, \"op_label\": ", r ? "," : "", r,
                fate_word(o->fate), o->op_index);
        jsonw_string(f, o->op_index >= 0 ? o->op_label : "");
        fprintf(f, ", \"in_collective\": ");
        if (o->coll[0])
            jsonw_string(f, o->coll);
        else
            fprintf(f, "null");
        fprintf(f, ", \"signal\": %d, \"exit_code\": %d, \"error\": ",
                o->fate == WORLD_FATE_SIGNALED || o->fate == WORLD_FATE_STOPPED ? o->signal : 0,
                o->fate == WORLD_FATE_FAILED ? o->exit_code : 0);
        jsonw_string(f, o->error);
        fprintf(f, "}");
    }
    fprintf(f, "%s]}\n", w ? "\n " : "");
    if (fflush(f) != 0 || ferror(f))
        fprintf(stderr, "ddpsim: cannot write --json %s: %s\n", opt->json_path, strerror(errno));
}

/* A check's line in the table: the worst over ranks. */
static void table_row(FILE *out, const sched_check *ck, const verify_record *recs, int nranks)
{
    double max_abs = 0;
    uint32_t max_ulp = 0;
    int ok = 1;
    uint64_t nonfinite = 0;
    char where[32];
    for (int r = 0; r < nranks; r++) {
        const verify_record *rec = &recs[r];
        if (rec->max_abs > max_abs)
            max_abs = rec->max_abs;
        if (rec->max_ulp > max_ulp)
            max_ulp = rec->max_ulp;
        ok &= judge_record_ok(rec);
        nonfinite += rec->nonfinite;
    }
    fprintf(out, "%8s  %-34s %6s %14.6g %9u  %s\n", sched_check_name(ck, where, sizeof where), ck->label,
            synced_text(recs[0].synced), max_abs, max_ulp, ok ? "ok" : nonfinite ? "NONFINITE" : "DIFF");
}

/* ", \"pattern\": {...}" of a record whose first diverging tensor was explained (pattern.h), else nothing. */
static void json_pattern(FILE *f, const verify_pattern *pt)
{
    if (pt->kind == PATTERN_NONE)
        return;
    char name[32];
    fprintf(f, ", \"pattern\": {\"kind\": \"%s\", \"of\": \"%s\"", pattern_kind_name(pt->kind),
            pt->on_update ? "update" : "gradient");
    if (pt->kind == PATTERN_FACTOR) {
        fprintf(f, ", \"factor\": %.6g", pt->factor); /* an estimate (least squares): its first digits */
        fprintf(f, ", \"name\": ");
        jsonw_string(f, pattern_factor_name(pt, name, sizeof name));
    }
    if (pt->kind == PATTERN_STALE || pt->kind == PATTERN_UNCHANGED)
        fprintf(f, ", \"grab\": %llu", (unsigned long long)pt->check);
    fprintf(f, "}");
}

/* A check's entries in JSON's "checks", one per rank. */
static void json_entries(report_stream *rs, const sched_check *ck, const verify_record *recs, int nranks)
{
    FILE *f = rs->checks;
    char where[32];
    for (int r = 0; r < nranks; r++) {
        const verify_record *rec = &recs[r];
        fprintf(f, "%s\n  {\"check\": \"%s\", \"kind\": \"%s\", \"label\": ", rs->nchecks_json++ ? "," : "",
                sched_check_name(ck, where, sizeof where), ck->kind == CHECK_GRADS ? "gradients" : "parameters");
        jsonw_string(f, ck->label);
        fprintf(f, ", \"synced\": %s, \"rank\": %d, \"max_abs_diff\": ", rec->synced == 1 ? "true" : "false", r);
        jsonw_number(f, rec->max_abs);
        fprintf(f, ", \"max_ulp\": %u, \"nonfinite\": %llu, \"match\": %s, \"ran_out\": %s, \"ref_digest\": \"%016llx\", "
                   "\"impl_digest\": \"%016llx\"",
                rec->max_ulp, (unsigned long long)rec->nonfinite, judge_record_ok(rec) ? "true" : "false",
                rec->joined ? "true" : "false", (unsigned long long)rec->ref_hash, (unsigned long long)rec->impl_hash);
        json_pattern(f, &rec->pattern);
        fprintf(f, "}");
    }
}

/* verify_sink.on_check: the run's parent hands over each check's records as every rank has written them. */
static void take_check(void *arg, const sched_check *ck, const verify_record *recs, int nranks)
{
    report_stream *rs = arg;
    if (rs->table)
        table_row(rs->table, ck, recs, nranks);
    if (rs->checks)
        json_entries(rs, ck, recs, nranks);
    report_ci_check(rs, ck, recs, nranks);
    if (rs->html)
        html_run_check(rs->html, ck, recs, nranks);
}

int report_stream_open(const ddpsim_options *opt, report_stream *rs, verify_sink *sink)
{
    memset(rs, 0, sizeof *rs);
    rs->opt = opt;
    char msg[512];
    if ((!opt->quiet && !(rs->table = cli_temp_file(msg, sizeof msg))) ||
        (opt->json_file && !(rs->checks = cli_temp_file(msg, sizeof msg))) ||
        (opt->junit_file && junit_begin(&rs->junit, msg, sizeof msg) != 0) ||
        (opt->html_file && !(rs->html = html_open(&opt->run.tol, opt->run.nranks, msg, sizeof msg)))) {
        fprintf(stderr, "ddpsim: the report's lines wait in temporary files: %s (set TMPDIR)\n", msg);
        report_stream_close(rs);
        return -1;
    }
    if (opt->junit_file || opt->html_file || annotate_on((annotate_mode)opt->annotations)) /* they name parameters */
        rs->layout = layout_get(opt);
    if (rs->html) {
        html_run_begin(rs->html, NULL, rs->layout, opt->run.schedule);
        html_run_replay(rs->html, opt->command);
        html_run_trace(rs->html, opt->run.trace_path, TIMELINE_PAGE_BYTES); /* merged by the time the run's section is drawn */
    }
    *sink = (verify_sink){.on_check = take_check, .arg = rs};
    return 0;
}

void report_stream_close(report_stream *rs)
{
    if (rs->table)
        fclose(rs->table);
    if (rs->checks)
        fclose(rs->checks);
    rs->table = rs->checks = NULL;
    junit_end(&rs->junit);
    html_close(rs->html);
    rs->html = NULL;
    if (rs->layout)
        layout_put(rs->opt, rs->layout);
    rs->layout = NULL;
}

static int write_json(const ddpsim_options *opt, const verify_result *res, const judgement *s, report_stream *rs)
{
    FILE *f = opt->json_file;
    char tol[64];
    fprintf(f, "{\"result\": \"%s\", \"verdict\": \"%s\", \"ranks\": %d, \"impl\": ",
            s->verdict == JUDGE_PASS ? "pass" : s->verdict == JUDGE_NOTHING ? "nothing_verified" : "fail",
            verdict_word(s->verdict), res->nranks);
    jsonw_string(f, opt->run.impl);
    fprintf(f, ", \"reference\": \"%s\", \"seed\": %llu, \"tolerance\": ",
            opt->run.shard == SHARD_NONE ? "reference" : "sharded", (unsigned long long)opt->run.seed);
    jsonw_string(f, tol_format(&opt->run.tol, tol, sizeof tol));
    fprintf(f, ", \"model\": ");
    jsonw_string(f, opt->run.model_spec);
    char math[160];
    fprintf(f, ", \"math\": ");
    jsonw_string(f, model_math(math, sizeof math));
    fprintf(f, ", \"algo\": \"%s\", ", coll_algo_name(opt->run.ddp.algo));
    report_json_shard(f, opt);
    fprintf(f, "\"command\": ");
    jsonw_string(f, opt->command);
    fprintf(f, ",\n \"checks\": [");
    if (cli_copy_temp(rs->checks, f) != 0) {
        fprintf(stderr, "ddpsim: cannot write --json %s: %s\n", opt->json_path, strerror(errno));
        return -1;
    }
    fprintf(f, "\n ],\n \"first_divergence\": ");
    char where[32];
    model *m = NULL;
    if (s->first && !s->first->has_first && s->first->unsynced_reductions) {
        const verify_record *fr = s->first;
        fprintf(f, "{\"check\": \"%s\", \"kind\": \"communication\", \"rank\": %d, \"unsynced_reductions\": %llu, "
                   "\"unsynced_bytes\": %lld, \"op\": %llu}",
                sched_check_name(s->first_where, where, sizeof where), s->first_rank,
                (unsigned long long)fr->unsynced_reductions,
                fr->unsynced_bytes == VERIFY_BYTES_UNCOUNTED ? -1LL : (long long)fr->unsynced_bytes,
                (unsigned long long)fr->unsynced_op);
    } else if (s->first && s->first->has_first && (m = layout_get(opt)) != NULL) {
        const verify_record *fr = s->first;
        const sched_check *ck = s->first_where;
        fprintf(f, "{\"check\": \"%s\", \"kind\": \"%s\", \"rank\": %d, \"param\": ",
                sched_check_name(ck, where, sizeof where), ck->kind == CHECK_GRADS ? "gradients" : "parameters",
                s->first_rank);
        if (fr->first_padding)
            fprintf(f, "null, \"padding_unit\": %d", fr->first_param);
        else
            jsonw_string(f, checker_first_name(m, fr));
        fprintf(f, ", \"buffer\": %s", fr->first_buffer ? "true" : "false");
        if (fr->first_none)
            fprintf(f, ", \"grad_none\": \"%s\"", fr->first_none == VERIFY_NONE_ACTUAL ? "actual" : "expected");
        fprintf(f, ", \"index\": %llu, \"expected\": ", (unsigned long long)fr->first_index);
        jsonw_number(f, fr->first_expected);
        fprintf(f, ", \"actual\": ");
        jsonw_number(f, fr->first_actual);
        fprintf(f, ", \"ulp\": %u", fr->first_ulp);
        json_pattern(f, &fr->pattern);
        fprintf(f, "}");
        layout_put(opt, m);
    } else {
        fprintf(f, "null");
    }
    fprintf(f, ",\n \"ranks_disagree\": ");
    if (s->disagree && (m = layout_get(opt)) != NULL) {
        const verify_agreement *a = s->disagree;
        fprintf(f, "{\"op\": %zu, \"rank\": %d, \"param\": ", a->op, s->disagree_rank);
        jsonw_string(f, model_param_at(m, a->param)->name);
        fprintf(f, ", \"index\": %llu, \"base_rank\": %d, \"rank0\": ", (unsigned long long)a->index, a->base);
        jsonw_number(f, a->rank0);
        fprintf(f, ", \"value\": ");
        jsonw_number(f, a->mine);
        fprintf(f, "}");
        layout_put(opt, m);
    } else {
        fprintf(f, "null");
    }
    json_clips(f, res, s);
    json_scales(f, opt, res, s);
    json_norms(f, res, s);
    fprintf(f, ",\n \"sanity\": {\"synced_grabs\": %zu, \"synced_disagree\": %zu, \"local_grabs\": %zu, "
               "\"local_identical\": %zu, \"global_checked\": %zu, \"global_failed\": %zu, \"agreement_syncs\": %llu, \"global_worst\": ",
            s->synced_grabs, s->synced_disagree, s->local_grabs, s->local_identical, s->global_checked,
            s->global_failed, (unsigned long long)s->agreement_syncs);
    jsonw_number(f, s->global_worst);
    const uint64_t *hist = res->tally.ulp_hist;
    fprintf(f, "},\n \"backend\": \"%s\", \"bound_worst\": ", res->nccl ? "nccl" : "cpu");
    jsonw_number(f, s->bound_worst);
    fprintf(f, ", \"max_ulp\": %u, \"ulp_histogram\": {", res->tally.max_ulp);
    for (int b = 0; b < TOL_ULP_BINS; b++)
        fprintf(f, "%s\"%s\": %llu", b ? ", " : "", tol_ulp_bin_label(b), (unsigned long long)hist[b]);
    fprintf(f, "}");
    if (res->nccl) {
        judge_nccl_total t = judge_nccl_sum(res);
        fprintf(f, ",\n \"nccl\": {\"allreduces_per_rank\": %llu, \"device_ms\": ",
                (unsigned long long)res->nccl[0].nallreduce);
        jsonw_number(f, t.device_ms / res->nranks);
        fprintf(f, ", \"roundtrip_ms\": ");
        jsonw_number(f, t.roundtrip_ms / res->nranks);
        fprintf(f, ", \"digest\": \"%016llx\", \"ranks_agree\": %s, \"ring_checked\": %s, \"ring_identical\": %llu, "
                   "\"elements\": %llu, \"separate_hosts\": %s}",
                (unsigned long long)res->nccl[0].digest, t.digests_agree ? "true" : "false",
                opt->run.nccl_ring_check ? "true" : "false", (unsigned long long)t.ring_same,
                (unsigned long long)t.elements, res->nccl[0].separate_hosts ? "true" : "false");
    }
    if (opt->run.interleave.mode != INTERLEAVE_OFF) { /* --sched: each rank's scheduler */
        char name[48];
        interleave_name(&opt->run.interleave, name, sizeof name);
        fprintf(f, ",\n \"sched\": {\"strategy\": \"%s\", \"seed\": %llu, \"ranks\": [", name,
                (unsigned long long)opt->run.chaos_seed);
        for (int r = 0; r < res->nranks; r++) {
            const interleave_figures *g = &res->figures[r].sched;
            fprintf(f, "%s{\"threads\": %u, \"points\": %llu, \"switches\": %llu, \"virtual_ns\": %llu, "
                       "\"horizon\": %llu, \"digest\": \"%016llx\"}", r ? ", " : "", g->threads,
                    (unsigned long long)g->points, (unsigned long long)g->switches, (unsigned long long)g->virtual_ns,
                    (unsigned long long)g->horizon, (unsigned long long)g->digest);
        }
        fprintf(f, "]}");
    }
    fprintf(f, ",\n \"wall_s\": ");
    jsonw_number(f, res->wall_s);
    fprintf(f, ", \"rank_peak_kib\": %ld, \"ranks_total_kib\": %ld, \"ranks_pss_kib\": %ld, \"ranks_private_kib\": %ld, "
               "\"parent_peak_kib\": %ld}\n",
            res->rank_peak_kib, res->rank_total_kib, res->ranks_pss_kib, res->ranks_private_kib, res->parent_peak_kib);
    if (fflush(f) != 0 || ferror(f)) {
        fprintf(stderr, "ddpsim: cannot write --json %s: %s\n", opt->json_path, strerror(errno));
        return -1;
    }
    return 0;
}

/* The reference's own checks, each with how often it could be checked at all. */
/* What the implementation reduced, over every rank, when its reductions were counted. */
static void print_comm(FILE *out, const verify_result *res, shard_mode shard)
{
    uint64_t calls = 0, bytes = 0, unsynced = 0, ref_calls = 0, ref_bytes = 0;
    int known = 0, bytes_known = 1, ref_known = 1;
    for (int r = 0; r < res->nranks; r++) {
        const verify_rank_figures *f = &res->figures[r];
        known |= f->comm_known;
        calls += f->impl_reductions;
        bytes_known &= f->impl_reduced_bytes != VERIFY_BYTES_UNCOUNTED;
        bytes += bytes_known ? f->impl_reduced_bytes : 0;
        unsynced += f->impl_unsynced_reductions;
        ref_known &= f->ref_comm_known;
        ref_calls += f->ref_reductions;
        ref_bytes += f->ref_reduced_bytes;
    }
    /* What PyTorch's DDP moves for the same schedule, beside it: a DDP that syncs too often (cosmos-framework
     * #161: four times the traffic, the numbers right) shows at once. */
    char ref[160] = "";
    if (ref_known && res->nranks > 0 && shard != SHARD_NONE)
        snprintf(ref, sizeof ref, "; --shard %s's own (every element once where the mode reduces, no padding): "
                                  "%.3f MiB", shard_mode_name(shard), (double)ref_bytes / (1 << 20));
    else if (ref_known && res->nranks > 0)
        snprintf(ref, sizeof ref, "; PyTorch's DDP (the reference): %llu (%.3f MiB)", (unsigned long long)ref_calls,
                 (double)ref_bytes / (1 << 20));
    char mib[48] = "";
    if (bytes_known)
        snprintf(mib, sizeof mib, " (%.3f MiB)", (double)bytes / (1 << 20));
    char rule[80] = "PyTorch's DDP: none";
    if (shard != SHARD_NONE)
        snprintf(rule, sizeof rule, "--shard %s: %s", shard_mode_name(shard),
                 shard_mode_scatters_unsynced(shard) ? "its reduce-scatters there allowed, not counted in these"
                                                     : "none");
    if (known)
        fprintf(out, "# communication: the implementation's reductions, all ranks: %llu%s, %llu of them in backwards "
                     "that do not sync (%s)%s\n",
                (unsigned long long)calls, mib, (unsigned long long)unsynced, rule, ref);
}

void report_json_shard(FILE *f, const ddpsim_options *opt)
{
    if (opt->run.shard == SHARD_NONE)
        return;
    mesh me = mesh_or_flat(&opt->run.mesh, opt->run.nranks);
    fprintf(f, "\"shard\": \"%s\", \"mesh\": [%d, %d], ", shard_mode_name(opt->run.shard), me.replicas,
            me.shards);
}

void report_shard_line(const ddpsim_options *opt)
{
    const verify_config *run = &opt->run;
    if (run->shard == SHARD_NONE)
        return;
    mesh me = mesh_or_flat(&run->mesh, run->nranks);
    fprintf(opt->out, "# sharded: --shard %s on a %dx%d mesh (replicas x shards), against the sharded reference: each "
                      "rank's slices of its declared flat units, the padding exactly zero\n",
            shard_mode_name(run->shard), me.replicas, me.shards);
}

/* --loss-scale's checks, every rank's together (verify_scale_check): the report's line. */
static void print_scales(FILE *out, const verify_result *res)
{
    scale_totals t = scale_totals_of(res);
    if (t.checks + t.unscales == 0)
        return;
    char inf[128] = "";
    if (t.planted)
        snprintf(inf, sizeof inf, "; %llu inf or NaN elements where the reference's planted ones went",
                 (unsigned long long)t.planted);
    if (t.failed)
        fprintf(out, "# loss scale: FAIL at %llu of %llu checks over all ranks (the first divergence says which)\n",
                (unsigned long long)t.failed, (unsigned long long)(t.checks + t.unscales));
    else
        fprintf(out, "# loss scale: every rank's scale at %llu backwards and its finding at %llu unscales were the "
                     "reference's; %llu of the unscales found an inf or NaN and skipped the step; the scale %.9g to "
                     "%.9g%s\n",
                (unsigned long long)t.checks, (unsigned long long)t.unscales, (unsigned long long)t.skips,
                (double)t.lo, (double)t.hi, inf);
}

/* The token loss's normalization checks, every rank's together (verify_norm_check). */
static void print_norms(FILE *out, const verify_result *res)
{
    uint64_t failed, checks = norm_totals(res, &failed);
    if (!checks)
        return;
    const char *norm = loss_norm_name(res->loss_norm);
    if (failed)
        fprintf(out, "# loss normalization (%s): FAIL at %llu of %llu backwards over all ranks (the first divergence "
                     "says which)\n",
                norm, (unsigned long long)failed, (unsigned long long)checks);
    else
        fprintf(out, "# loss normalization (%s): every rank's factor at %llu backwards was the intended one on ragged "
                     "token counts\n",
                norm, (unsigned long long)checks);
}

/* The clip ops' checks, every rank's together (verify_clip_check). */
static void print_clips(FILE *out, const verify_result *res)
{
    clip_totals t = clip_totals_of(res);
    if (t.clips == 0)
        return;
    char range[96];
    if (t.lo == 1 && t.hi == 1)
        snprintf(range, sizeof range, "every coefficient 1: nothing was clipped, lower MAX to check the clipping");
    else
        snprintf(range, sizeof range, "the reference's coefficients %.3g to %.3g", (double)t.lo, (double)t.hi);
    if (t.failed)
        fprintf(out, "# clip: FAIL at %llu of %llu clips over all ranks (the first divergence says which; %s)\n",
                (unsigned long long)t.failed, (unsigned long long)t.clips, range);
    else
        fprintf(out, "# clip: %llu clips over all ranks: every rank's coefficient the same bits, within the bound of "
                     "the reference's exact norm (worst %.2g of it); %s\n",
                (unsigned long long)t.clips, t.worst, range);
}

static void print_sanity(const ddpsim_options *opt, const verify_result *res, const judgement *s)
{
    FILE *out = opt->out;
    if (s->synced_grabs == 0)
        fprintf(out, "# sanity: ranks agree after every syncing backward: not checked (no grab after a syncing "
                     "backward)\n");
    else if (s->synced_disagree)
        fprintf(out, "# sanity: ranks agree after every syncing backward: NO (%zu of %zu grabs)\n", s->synced_disagree,
                s->synced_grabs);
    else
        fprintf(out, "# sanity: ranks agree after every syncing backward: yes (%zu grabs)\n", s->synced_grabs);
    if (res->nranks > 1 && shard_mode_scatters_unsynced(opt->run.shard)) {
        fprintf(out, "# sanity: ranks differ under no_sync: not applicable (--shard %s reduces in every backward)\n",
                shard_mode_name(opt->run.shard));
    } else if (res->nranks > 1) {
        if (s->local_grabs == 0)
            fprintf(out, "# sanity: ranks differ under no_sync: not checked (no grab after a backward that did not "
                         "sync)\n");
        else if (s->local_identical)
            fprintf(out, "# sanity: ranks differ under no_sync: NOT ALWAYS (identical at %zu of %zu grabs) -- the "
                         "data cannot reveal a missing sync there\n",
                    s->local_identical, s->local_grabs);
        else
            fprintf(out, "# sanity: ranks differ under no_sync: yes (%zu grabs)\n", s->local_grabs);
    }
    if (opt->run.shard != SHARD_NONE)
        fprintf(out, "# sanity: reference equals the exact average of every rank's local gradients: DDP's check, not "
                     "run beside the sharded reference\n");
    else if (s->global_checked == 0)
        fprintf(out, "# sanity: reference equals the exact average of every rank's local gradients: not checked (%s)\n",
                s->synced_grabs == 0 ? "no grab after a syncing backward"
                                     : "no grab after a syncing backward whose gradients are the sums it checks: "
                                       "they were clipped, unscaled, or uneven");
    else
        fprintf(out, "# sanity: reference equals the exact average of every rank's local gradients: %s (%zu grabs, "
                     "worst %.2g of the proven rounding bound)\n",
                s->global_failed ? "FAIL" : "ok", s->global_checked, s->global_worst);
    if (res->nranks > 1) {
        if (opt->sharded || opt->run.shard != SHARD_NONE)
            fprintf(out, "# agreement: not checked: the ranks hold shards of the gradients, each compared with DDP's "
                         "same elements\n");
        else if (s->agreement_syncs == 0)
            fprintf(out, "# agreement: the implementation's ranks hold the same bits after every syncing backward: not "
                         "checked (no syncing backward)\n");
        else
            fprintf(out, "# agreement: the implementation's ranks hold the same bits after every syncing backward: %s "
                         "(%llu syncs)\n",
                    s->disagree ? "NO" : "yes", (unsigned long long)s->agreement_syncs);
    }
    print_comm(out, res, opt->run.shard);
    print_clips(out, res);
    print_scales(out, res);
    print_norms(out, res);
}

/* The verdict's words (after "# verdict: "): the word, then what was checked or what failed. */
static void verdict_text(const ddpsim_options *opt, const verify_result *res, const judgement *j, char *buf,
                         size_t len)
{
    char tol[64];
    tol_format(&opt->run.tol, tol, sizeof tol);
    switch (j->verdict) {
    case JUDGE_PASS:
        if (res->params_only)
            snprintf(buf, len, "PASS (%zu parameter checks x %d ranks match, %s; parameters only: the ranks average "
                               "their parameters, no .grad compared)",
                     j->params_checked, res->nranks, tol);
        else if (j->joined_records)
            snprintf(buf, len, "PASS (%zu grabs and %zu parameter checks x %d ranks match, %s; %zu of them a rank did "
                               "not reach, having run out of inputs)",
                     res->ngrabs, j->params_checked, res->nranks, tol, j->joined_records);
        else
            snprintf(buf, len, "PASS (%zu grabs and %zu parameter checks x %d ranks match, %s)", res->ngrabs,
                     j->params_checked, res->nranks, tol);
        break;
    case JUDGE_REFERENCE_BAD:
        snprintf(buf, len, "FAIL (the reference failed its own sanity checks: a bug in ddpsim; nothing else this run "
                           "says can be trusted)");
        break;
    case JUDGE_DIVERGES:
        if (res->params_only)
            snprintf(buf, len, "FAIL (%zu of %zu parameter checks diverge, %s; parameters only: the ranks average "
                               "their parameters)",
                     j->params_failed, j->params_checked, tol);
        else
            snprintf(buf, len, "FAIL (%zu of %zu grabs and %zu of %zu parameter checks diverge, %s)", j->grabs_failed,
                     res->ngrabs, j->params_failed, j->params_checked, tol);
        break;
    case JUDGE_NCCL_DISAGREE:
        snprintf(buf, len, "FAIL (NCCL's allreduce gave the ranks different bits)");
        break;
    case JUDGE_RANKS_DISAGREE:
        snprintf(buf, len, "FAIL (the implementation's ranks hold different gradients after a syncing backward; DDP "
                           "gives every rank the same bits, whatever the tolerance)");
        break;
    case JUDGE_NOTHING:
        snprintf(buf, len, "NOTHING VERIFIED (%s)",
                 res->ngrabs == 0 ? "the schedule has no grab" : "every grab compared only zeros");
        break;
    }
}

int report_verification(const ddpsim_options *opt, const verify_result *res, report_stream *rs)
{
    judgement s;
    judge_run(res, &s);
    if (!opt->quiet) {
        fprintf(opt->out, "#%-7s  %-34s %6s %14s %9s  %s\n", "check", "label", "synced", "max_abs_diff", "max_ulp",
                "status");
        if (cli_copy_temp(rs->table, opt->out) != 0)
            fprintf(stderr, "ddpsim: the report's table could not be read back: %s\n", strerror(errno));
        print_sanity(opt, res, &s);
        print_ulp_histogram(opt, res, &s);
        if (res->nccl)
            print_nccl(opt, res);
        print_sched(opt, res);
        if (res->ranks_pss_kib >= 0)
            fprintf(opt->out, "# time %.3f s; memory: %.1f MiB peak in the largest rank; at their end the %d ranks held "
                              "%.1f MiB together, every shared page counted once (PSS; %.1f MiB of it private); %.1f "
                              "MiB peak in the parent\n",
                    res->wall_s, (double)res->rank_peak_kib / 1024, res->nranks, (double)res->ranks_pss_kib / 1024,
                    (double)res->ranks_private_kib / 1024, (double)res->parent_peak_kib / 1024);
        else
            fprintf(opt->out, "# time %.3f s; peak memory: %.1f MiB in the largest rank, %.1f MiB over all %d ranks (each "
                              "rank's peak RSS added: shared pages counted once per rank), %.1f MiB in the parent\n",
                    res->wall_s, (double)res->rank_peak_kib / 1024, (double)res->rank_total_kib / 1024, res->nranks,
                    (double)res->parent_peak_kib / 1024);
    }
    int late = cli_signal_before_verdict(opt->out);
    if (late) {
        report_no_verdict(opt, res->w, late, "interrupted before the verdict");
        return late;
    }
    cli_verdict_printed(); /* printed next */
    int pass = s.verdict == JUDGE_PASS;
    char verdict[512];
    verdict_text(opt, res, &s, verdict, sizeof verdict);
    fprintf(opt->out, "# verdict: %s\n", verdict);
    if (s.first)
        print_first(opt, &s);
    if (s.disagree)
        print_disagreement(opt, &s);
    if (!pass)
        fprintf(opt->out, "# replay: %s\n", opt->command);
    int code = report_exit_code(s.verdict);
    if (opt->json_file && write_json(opt, res, &s, rs) != 0 && code == DDPSIM_EXIT_PASS)
        code = DDPSIM_EXIT_FAULT; /* a failed write never hides a verdict that is not a pass */
    if (report_ci_verdict(opt, res, &s, verdict, rs) != 0 && code == DDPSIM_EXIT_PASS)
        code = DDPSIM_EXIT_FAULT;
    return code;
}
