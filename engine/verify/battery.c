/*
 * battery.c - the scenarios and running one (battery.h).
 */
#include "battery.h"

#include <stdio.h>
#include <string.h>

/* loss-scale's overflow: the second window's first micro-step, the 4th backward (the first window has 3). Counted in
 * backwards, not ops, so that --clip's inserted ops leave it where it is. */
#define LOSS_SCALE_INF_BWD 4
/* ... its schedule and GradScaler, the same in the plain and the sharded battery */
#define LOSS_SCALE_SCHEDULE "2*( 2*( nosync{fwd bwd} grab ) fwd bwd grab step zero ) 3*( fwd bwd grab step grab zero )"
#define LOSS_SCALE_SPEC "dynamic:1024,2,0.5,2"

static const scenario scenarios[] = {
    {"classic", "accumulate-then-sync: windows of 3 and of 1 micro-step, steps and zero_grad (the former default run)",
     NULL, SCHED_DEFAULT, 0, 0, 0, 0, 1, 0, 0, 0, 0, NULL, 0, 0},
    {"window-1", "a sync every micro-step, ten syncs in a row: state that wears out after a few syncs", NULL,
     "10*( fwd bwd grab step zero )", 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"window-2", "windows of two micro-steps", NULL, "3*( nosync{fwd bwd} grab fwd bwd grab step zero )", 0, 0, 0, 0,
     0, 0, 0, 0, 0, NULL, 0, 0},
    {"window-5", "windows of five micro-steps: accumulation that assumes short windows", NULL,
     "2*( 4*( nosync{fwd bwd} grab ) fwd bwd grab step zero )", 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"nosync-edges",
     "a forward inside no_sync whose backward runs outside (it does not sync) and the reverse (it syncs): the sync is "
     "armed at forward",
     NULL,
     "enter fwd exit bwd grab fwd bwd grab step zero fwd enter bwd exit grab step zero enter fwd exit bwd grab fwd "
     "bwd grab",
     0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"arming",
     "PyTorch's arming: a forward outside no_sync arms the next backward even inside no_sync, a forward inside leaves "
     "it; forwards without a backward; nested no_sync; a step before any gradient",
     NULL,
     "step fwd nosync{fwd bwd} grab fwd bwd grab step zero nosync{fwd} fwd bwd grab fwd fwd bwd grab step zero "
     "nosync{ nosync{fwd bwd} grab fwd bwd } grab fwd bwd grab step zero",
     0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"sync-after-sync", "a sync right after a sync without zero_grad: PyTorch accumulates onto the synced values", NULL,
     "fwd bwd grab fwd bwd grab nosync{fwd bwd} grab fwd bwd grab step zero", 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"zero-and-step", "zero_grad without step, several steps without zero_grad, a step inside a window", NULL,
     "nosync{fwd bwd} grab fwd bwd grab zero fwd bwd grab step step zero fwd bwd grab step fwd bwd grab step zero "
     "nosync{fwd bwd} step grab fwd bwd grab step zero",
     0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"buckets", "one bucket in the first sync, then several (caps of 1 KiB and 4 KiB) rebuilt in ready order", NULL,
     "3*( nosync{fwd bwd} grab fwd bwd grab step zero )", 0, 0, 4096, 1024, 0, 0, 0, 0, 0, NULL, 0, BATTERY_CHAOS_SEEDS},
    {"odd-sizes", "tensors of 91, 7, 35 and 5 elements: the tails of vector loops", "mlp:13-7-5",
     "2*( 2*( nosync{fwd bwd} grab ) fwd bwd grab step zero )", 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"bucket-view",
     "gradient_as_bucket_view: the first sync multiplies by 1/N, later ones divide in place, and a sync after a sync "
     "scales the accumulated view",
     NULL, "2*( nosync{fwd bwd} grab fwd bwd grab fwd bwd grab step zero )", 0, 1, 0, 0, 1, 0, 0, 0, 0, NULL, 0, 0},
    {"find-unused", "find_unused_parameters: heads used on some ranks, in earlier micro-steps only, or nowhere",
     "branchy", "2*( nosync{fwd bwd} grab nosync{fwd bwd} grab fwd bwd grab step zero )", 1, 0, 0, 0, 0, 0, 0, 0, 0,
     NULL, 0, 0},
    {"attention", "the attention model: 21 tensors, and gradients that are rounding noise (k.bias)", "attn",
     SCHED_DEFAULT, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"tiny-tensor", "a tensor of a single element", "mlp:8-16-1", SCHED_DEFAULT, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"tail-window",
     "an epoch's tail: windows of four micro-steps, a window cut short to two, then four again; each window syncs "
     "at its last backward, whatever its length",
     NULL,
     "2*( 3*( nosync{fwd bwd} grab ) fwd bwd grab step zero ) nosync{fwd bwd} grab fwd bwd grab step zero "
     "3*( nosync{fwd bwd} grab ) fwd bwd grab step zero",
     0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"buffers",
     "BatchNorm's running statistics: rank 0's broadcast before a forward when the one before ran outside no_sync "
     "(the first inside no_sync too, not the next, nor the first after it)",
     "bn", "fwd bwd grab step zero nosync{fwd bwd fwd bwd} grab fwd bwd grab fwd bwd grab step zero", 0, 0, 0, 0, 0,
     0, 0, 0, 0, NULL, 0, 0},
    {"ends-in-window", "the run ends inside a window: its micro-steps are never synced, and a step uses them", NULL,
     "fwd bwd grab step zero nosync{fwd bwd} grab nosync{fwd bwd} grab step", 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"tied",
     "a tied weight used on both sides of a reentrant activation checkpoint: its gradient comes in two pieces "
     "(two AccumulateGrads, two hook calls) and DDP, with static_graph, reduces it once, after the last",
     "tied", "fwd bwd grab step zero fwd bwd grab step zero 2*( nosync{fwd bwd} grab fwd bwd grab step zero )", 0, 0,
     0, 0, 0, 1, 0, 0, 0, NULL, 0, 0},
    {"uneven",
     "uneven inputs under model.join(): the last rank runs out after one of three iterations and shadows its peers' "
     "forwards (their no_sync ones too) and syncs with zeros; buffers come from the highest rank running; at the end "
     "every rank takes the last joiner's parameters and buffers",
     "bn",
     "fwd bwd grab step zero join{ [3, -1:1]*( nosync{fwd bwd} grab fwd bwd grab step zero ) } fwd bwd grab step zero",
     0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"uneven-divide",
     "join(divide_by_initial_world_size=false): while a rank has run out, a sync divides by the ranks still running",
     NULL, "fwd bwd grab step zero join(divide_by_initial_world_size=false){ [3, -1:1]*( fwd bwd grab step zero ) } "
     "fwd bwd grab", 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"momentum",
     "SGD with momentum 0.9 (torch.optim.SGD(momentum=0.9)): windows of three and of one micro-step, each stepped "
     "once; a buffer advanced per micro-step or not kept across steps, or a wrong scale, moves the parameters",
     NULL, "2*( 2*( nosync{fwd bwd} grab ) fwd bwd grab step zero ) 2*( fwd bwd grab step zero )", 0, 0, 0, 0, 1, 0,
     0, DDP_DEFAULT_MOMENTUM, 0, NULL, 0, 0},
    {"adamw",
     "torch.optim.AdamW (betas 0.9, 0.999, eps 1e-8, weight decay 0.01): windows of three and of one micro-step, "
     "each stepped once; an optimizer of the implementation's own must keep each element's two moments and its "
     "count, decay the parameters, and step once per window",
     NULL, "2*( 2*( nosync{fwd bwd} grab ) fwd bwd grab step zero ) 2*( fwd bwd grab step zero )", 0, 0, 0, 0, 1, 0,
     0, 0, 1, NULL, 0, 0},
    {"loss-scale",
     "torch's GradScaler (scale 1024, times 2 after two steps taken, times 0.5 after a skip): an inf in the last "
     "rank's first micro-step of the second window survives the accumulation, reaches every rank through the sync "
     "and skips that step on all of them; the scale then grows back",
     NULL, LOSS_SCALE_SCHEDULE, 0, 0, 0, 0, 1, 0, 0, 0, 0, LOSS_SCALE_SPEC, LOSS_SCALE_INF_BWD, 0},
    {"ragged-tokens",
     "the trainer's loss normalization on ragged data (--model lm, --loss-norm, global-tokens unless given): "
     "windows of three, one and two micro-steps whose ranks and micro-batches hold different numbers of valid "
     "tokens, a sparse rank, fully padded sequences and a micro-batch without any; a factor of the local counts, "
     "the micro-step or a constant is caught at its first backward",
     "lm", "nosync{fwd bwd fwd bwd} grab fwd bwd grab step zero fwd bwd grab step zero nosync{fwd bwd} fwd bwd grab "
     "step zero", 0, 0, 0, 0, 1, 0, 0, 0, 0, NULL, 0, 0},
};
#define NSCENARIOS ((int)(sizeof scenarios / sizeof scenarios[0]))

/* The sharded battery (battery_at_for): the same language, the sharded reference's rules (shard_ref.h). */
static const scenario sharded[] = {
    {"s-window-3",
     "windows of three micro-steps and a step between: each mode's accumulation (unsharded, per micro-step "
     "reduced, partial then replicated), copy into an empty shard then add",
     NULL, "2*( 2*( nosync{fwd bwd} grab ) fwd bwd grab step zero )", 0, 0, 0, 0, 1, 0, 0, 0, 0, NULL, 0, 0},
    {"s-window-1", "a sync every micro-step, six in a row, each with its step", NULL, "6*( fwd bwd grab step zero )", 0,
     0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"s-sync-after-sync", "a sync onto a synced shard without zero_grad: the shard adds, it is not replaced", NULL,
     "fwd bwd grab fwd bwd grab nosync{fwd bwd} grab fwd bwd grab step zero", 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"s-step-in-window",
     "a step inside a window: the optimizer steps with the sharded gradient as it stands (ZeRO-2's running sum, an "
     "empty shard elsewhere)",
     NULL, "nosync{fwd bwd} grab step nosync{fwd bwd} grab fwd bwd grab step zero fwd bwd grab step zero", 0, 0, 0, 0,
     0, 0, 0, 0, 0, NULL, 0, 0},
    {"s-padding",
     "tensors of 84, 7, 35 and 5 elements, 131 in all (a prime): a unit no shard group divides, padded; the padding "
     "stays zero",
     "mlp:12-7-5", "2*( 2*( nosync{fwd bwd} grab ) fwd bwd grab step zero )", 0, 0, 0, 0, 1, 0, 0, 0, 0, NULL, 0, 0},
    {"s-units", "units of at most 1 KiB: several, the last a remainder, reduced as the backward makes them",
     MODEL_DEFAULT_SPEC,
     "2*( nosync{fwd bwd} grab fwd bwd grab step zero )", 0, 0, 1024, 1024, 0, 0, 0, 0, 0, NULL, 0, BATTERY_CHAOS_SEEDS},
    {"s-exact-unit", "a parameter exactly the unit cap (16x16 floats, 1 KiB) in a unit of its own", "mlp:16-16-4",
     "2*( nosync{fwd bwd} grab fwd bwd grab step zero )", 0, 0, 1024, 1024, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"s-unused", "parameters some forwards do not use: their .grad goes into the reduction as it is", "branchy",
     "2*( nosync{fwd bwd} grab nosync{fwd bwd} grab fwd bwd grab step zero )", 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"s-buffers", "BatchNorm's running statistics beside sharded gradients (DDP's broadcast_buffers rule)", "bn",
     "fwd bwd grab step zero nosync{fwd bwd fwd bwd} grab fwd bwd grab step zero", 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0},
    {"s-attention", "the attention model: 21 tensors in one unit", "attn", SCHED_DEFAULT, 0, 0, 0, 0, 0, 0, 0, 0, 0,
     NULL, 0, 0},
    {"s-clip",
     "clip_grad_norm_ before each step, the L2 norm and the inf norm: the norm covers every shard once, over the "
     "shard group, and every rank clips by the same coefficient",
     NULL, "2*( nosync{fwd bwd} grab fwd bwd clip:0.01 grab step zero ) fwd bwd clip:0.005:inf grab step zero", 0, 0,
     0, 0, 1, 0, 0, 0, 0, NULL, 0, 0},
    {"s-loss-scale",
     "torch's GradScaler over sharded gradients (scale 1024, times 2 after two steps taken, times 0.5 after a skip): "
     "an inf in the last rank's first micro-step of the second window must be found by every rank, whichever holds "
     "its shard, and skip that step on all of them",
     NULL, LOSS_SCALE_SCHEDULE, 0, 0, 0, 0, 1, 0, 0, 0, 0, LOSS_SCALE_SPEC, LOSS_SCALE_INF_BWD, 0},
    {"s-one-rank-groups",
     "HSDP on an N x 1 mesh: every shard group is one rank, its reduce-scatter a copy, the replica all-reduce the "
     "whole world",
     NULL, "2*( 2*( nosync{fwd bwd} grab ) fwd bwd grab step zero )", 0, 0, 0, 0, 1, 0, 1, 0, 0, NULL, 0, 0},
};
#define NSHARDED ((int)(sizeof sharded / sizeof sharded[0]))

static int in_battery(shard_mode mode, const scenario *sc)
{
    return !sc->one_rank_groups || mode == SHARD_HSDP;
}

int battery_count_for(shard_mode mode)
{
    if (mode == SHARD_NONE)
        return NSCENARIOS;
    int n = 0;
    for (int i = 0; i < NSHARDED; i++)
        n += in_battery(mode, &sharded[i]);
    return n;
}

const scenario *battery_at_for(shard_mode mode, int i)
{
    if (mode == SHARD_NONE)
        return battery_at(i);
    for (int k = 0; k < NSHARDED; k++)
        if (in_battery(mode, &sharded[k]) && i-- == 0)
            return &sharded[k];
    return NULL;
}

const scenario *battery_find_for(shard_mode mode, const char *name)
{
    for (int i = 0; i < battery_count_for(mode); i++)
        if (strcmp(battery_at_for(mode, i)->name, name) == 0)
            return battery_at_for(mode, i);
    return NULL;
}

int battery_count(void) { return NSCENARIOS; }
const scenario *battery_at(int i) { return i >= 0 && i < NSCENARIOS ? &scenarios[i] : NULL; }

const scenario *battery_find(const char *name)
{
    for (int i = 0; i < NSCENARIOS; i++)
        if (strcmp(scenarios[i].name, name) == 0)
            return &scenarios[i];
    return NULL;
}

ddp_status battery_apply(const scenario *sc, const battery_given *given, verify_config *run, sched *s)
{
    if (sched_parse(sc->schedule, s) != DDP_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", ddp_error_text());
        return ddp_error(DDP_ERR_INVALID, "scenario %s: %s", sc->name, why);
    }
    /* --clip: before every step a loop clips; a scenario that clips already keeps its own */
    if (run->clip_max > 0 && s->nclips == 0 && sched_clip_steps(s, run->clip_max, run->clip_inf) != DDP_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", ddp_error_text());
        sched_free(s);
        return ddp_error(DDP_ERR_INVALID, "scenario %s: %s", sc->name, why);
    }
    if (sc->model)
        run->model_spec = sc->model;
    run->loss_norm = verify_loss_norm(run); /* --loss-norm is the token model's: the other scenarios run without */
    run->schedule = s;
    run->schedule_text = sc->schedule;
    if (!given->find_unused)
        run->ddp.find_unused = sc->find_unused;
    if (!given->bucket_view)
        run->ddp.bucket_view = sc->bucket_view;
    if (!given->bucket_cap && sc->bucket_cap)
        run->ddp.bucket_cap = sc->bucket_cap;
    if (!given->first_bucket_cap && sc->first_bucket_cap)
        run->ddp.first_bucket_cap = sc->first_bucket_cap;
    if (!given->optimizer) {
        run->ddp.momentum = sc->momentum;
        run->ddp.adamw = sc->adamw ? ddp_adamw_default() : (ddp_adamw){0};
    }
    if (sc->loss_scale && !given->loss_scale) {
        char why[160];
        if (scaler_parse(sc->loss_scale, &run->ddp.scaler, why, sizeof why) != 0) {
            sched_free(s);
            return ddp_error(DDP_ERR_INVALID, "scenario %s: %s", sc->name, why);
        }
    }
    long op = -1;
    for (size_t i = 0, k = 0; sc->inf_bwd && op < 0 && i < s->nops; i++)
        if (s->ops[i] == OP_BWD && ++k == (size_t)sc->inf_bwd)
            op = (long)i;
    if (op >= 0 && run->nfaults < VERIFY_MAX_FAULTS) /* the last rank: not rank 0, whose finding alone is wrong */
        run->faults[run->nfaults++] = (verify_fault){.kind = FAULT_INF, .rank = run->nranks - 1, .op = op};
    run->ddp.static_graph |= sc->static_graph;
    if (sc->one_rank_groups)
        run->mesh = (mesh){run->nranks, 1};
    return DDP_OK;
}

int battery_failed(const battery_outcome *o)
{
    if (o->status != DDP_OK)
        return !o->refused;
    return o->verdict != JUDGE_PASS && o->verdict != JUDGE_NOTHING;
}

void battery_run_one(const verify_config *base, const battery_given *given, const scenario *sc, battery_outcome *out)
{
    memset(out, 0, sizeof *out);
    verify_config c = *base;
    sched s;
    out->status = battery_apply(sc, given, &c, &s);
    if (out->status != DDP_OK) {
        snprintf(out->first, sizeof out->first, "%s", ddp_error_text());
        return;
    }
    out->grabs = s.ngrabs;
    out->syncs = s.nsyncs;
    /* What this configuration cannot run (an implementation without join, say) is refused with the reason,
     * as the default run's table says it, not counted as a fault. */
    if ((out->status = verify_check_config(&c)) != DDP_OK) {
        out->refused = 1;
        snprintf(out->first, sizeof out->first, "not possible here: %.980s", ddp_error_text());
        sched_free(&s);
        return;
    }
    verify_result res;
    out->status = verify_run(&c, &res);
    if (out->status == DDP_ERR_INTERRUPTED && res.w)
        out->interrupted = world_interrupt_signal(res.w);
    if (out->status != DDP_OK) {
        /* A fault (or a refusal): the world's words, and the first failing rank's own when it left some, without
         * the source line it was raised at (a summary's words; the rank's own report keeps it). */
        out->refused = res.w && res.impl_refused;
        const char *why = ddp_error_text();
        snprintf(out->first, sizeof out->first, "%s: %.980s", out->refused ? "refused" : "fault", why);
        const char *words;
        int r = world_first_failed_error(res.w, &words);
        if (r >= 0)
            snprintf(out->first, sizeof out->first, "%s: rank %d: %.960s", out->refused ? "refused" : "fault", r,
                     ddp_error_without_location(words));
    } else {
        for (int r = 0; r < res.nranks && res.figures; r++) {
            out->rank_cpu_s[r] = verify_rank_cpu_ops_s(&res, r);
            out->rank_setup_cpu_s[r] = verify_rank_cpu_setup_s(&res, r);
        }
        judgement j;
        judge_run(&res, &j);
        out->verdict = j.verdict;
        model *m = NULL;
        if (model_create_layout(c.model_spec, c.batch, &m) != DDP_OK)
            m = NULL;
        judge_summary(&j, m, out->first, sizeof out->first);
        judge_facts_of(&j, m, &out->facts);
        model_destroy(m);
    }
    verify_result_free(&res);
    sched_free(&s);
}
