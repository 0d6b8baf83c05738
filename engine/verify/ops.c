/*
 * ops.c - the semantics of every op of a verification, for live runs and
 * replays alike (ops.h).
 */
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checker.h"
#include "clip.h"
#include "coll.h"
#include "stream.h"

ddp_status verify_ops_init(verify_ops *v, const verify_ops_config *cfg, world_rank *wr, void *user)
{
    memset(v, 0, sizeof *v);
    v->tol = cfg->tol;
    v->schedule = cfg->schedule;
    v->lr = cfg->lr;
    v->momentum = cfg->momentum;
    v->adamw = cfg->adamw;
    v->comm_hook = cfg->comm_hook;
    v->params_rule = cfg->params_rule;
    v->sabotage = cfg->sabotage;
    v->allow_unsynced_comm = cfg->allow_unsynced_comm;
    v->set_to_none = cfg->set_to_none;
    v->params_averaged = cfg->params_averaged;
    v->fig = cfg->fig;
    v->explain_across_ranks = cfg->explain_across_ranks;
    v->cost_ns = cfg->fig ? cfg->fig->cost_ns : NULL;
    v->scaler_cfg = cfg->scaler;
    scaler_start(&v->scaler_cfg, &v->scaler);
    v->faults = cfg->faults;
    v->nfaults = cfg->nfaults;
    v->plants_recorded = cfg->plants_recorded;
    v->shard_unscale = 1;
    v->loss_norm = cfg->loss_norm;
    v->seed = cfg->seed;
    v->tokens = cfg->tokens;
    v->norm_window = -1;
    v->fault_op = -1;
    v->fault_rank = -1;
    if (faults_plant_any(cfg->faults, cfg->nfaults)) {
        v->tol_planted = *cfg->tol;
        v->tol_planted.match_planted = 1;
        v->tol = &v->tol_planted;
    }
    v->bounded = cfg->tol->kind == TOL_ORDER;
    v->wr = wr;
    v->rank = world_rank_id(wr);
    v->n = world_size(wr);
    v->user = user;
    const sched *sc = cfg->schedule;
    v->counts = malloc((sc->nuneven ? sc->nuneven : 1) * (size_t)v->n * sizeof *v->counts);
    v->active = malloc((size_t)v->n);
    if (!v->counts || !v->active)
        return ddp_error(DDP_ERR_NOMEM, "the uneven counts of %d ranks", v->n);
    DDP_CHECK(sched_resolve(sc, v->n, v->counts)); /* checked before any rank started: cannot fail here */
    return agreement_init(&v->agreement, cfg->agree, v->n);
}

ddp_status verify_ops_attach(verify_ops *v, model *m, ddp_ref *ddp)
{
    v->m = m;
    v->ddp = ddp;
    size_t n = model_size(m);
    DDP_CHECK(model_batch_alloc(m, &v->batch));
    DDP_CHECK(refcheck_init(&v->refcheck, n, v->comm_hook));
    DDP_CHECK(explain_init(&v->explain, m));
    DDP_CHECK(ddp_optim_init(&v->optim, v->lr, v->momentum, &v->adamw, n));
    if (v->loss_norm)
        DDP_CHECK(v->tokens ? loss_windows_build_counted(&v->lw, v->schedule, v->tokens, v->n, v->rank)
                            : loss_windows_build(&v->lw, v->schedule, m, v->seed, v->n, v->rank));
    /* The parameters' bound after a step: the order tolerance's, and a replay's every step (PARAMS_REPLAY). */
    if (v->bounded || v->params_rule == PARAMS_REPLAY) {
        DDP_CHECK(budget_init(&v->budget, n, v->n, v->comm_hook));
        size_t k = n ? n : 1;
        if (!(v->param_allow = malloc(k * sizeof *v->param_allow)) ||
            (ddp_optim_stateful(&v->optim) && !(v->momentum_allow = calloc(k, sizeof *v->momentum_allow))) ||
            (v->adamw.on && !(v->second_allow = calloc(k, sizeof *v->second_allow))))
            return ddp_error(DDP_ERR_NOMEM, "the bound on the parameters: %zu floats", n);
    }
    if (v->params_averaged && (!(v->abs_local = calloc(2 * (n + 1), sizeof *v->abs_local)) ||
                               (!v->param_allow && !(v->param_allow = malloc(n * sizeof *v->param_allow)))))
        return ddp_error(DDP_ERR_NOMEM, "the bound of averaged parameters: %zu elements", n);
    return DDP_OK;
}

void verify_ops_free(verify_ops *v)
{
    model_batch_free(&v->batch);
    refcheck_free(&v->refcheck);
    explain_free(&v->explain);
    agreement_free(&v->agreement);
    budget_free(&v->budget);
    ddp_optim_free(&v->optim);
    free(v->param_allow);
    free(v->momentum_allow);
    free(v->second_allow);
    v->momentum_allow = v->second_allow = NULL;
    free(v->abs_local);
    free(v->clip_allow);
    free(v->clip_gather);
    v->clip_allow = v->clip_gather = NULL;
    free(v->shard_allow);
    free(v->shard_abs);
    v->shard_allow = NULL;
    v->shard_abs = NULL;
    free(v->counts);
    free(v->active);
    loss_windows_free(&v->lw);
    v->param_allow = NULL;
    v->counts = NULL;
    v->active = NULL;
}

ddp_status verify_checks_returned(ddp_status s)
{
    coll_set_caller(COLL_CALLER_REFERENCE);
    return s;
}

/* This rank's record of the next check, cleared (in the records' ring: stream.h). */
static verify_record *next_record(verify_ops *v)
{
    verify_record *rec = stream_next(v->wr, v->user, v->next_check++);
    rec->uneven = v->uneven_window;
    rec->unsynced_reductions = v->unsynced_reductions;
    rec->unsynced_bytes = v->unsynced_bytes;
    rec->unsynced_op = v->unsynced_op;
    v->unsynced_reductions = v->unsynced_bytes = 0;
    rec->clip = v->clip_failure;
    v->clip_failure.failed = VERIFY_CLIP_OK;
    rec->scale = v->scale_failure;
    v->scale_failure.failed = VERIFY_SCALE_OK;
    rec->norm = v->norm_failure;
    v->norm_failure.failed = 0;
    v->norm_window = -1;
    return rec;
}

/* The implementation's buffers against the reference's; where they differ the reference takes them, as it takes
 * a failed check's parameters (do_params). */
static void compare_buffers(verify_ops *v, const float *actual, verify_record *rec)
{
    uint64_t bad = rec->ndiff + rec->nonfinite;
    checker_compare_buffers(v->m, model_buffers(v->m), actual, rec);
    if (!v->shard && rec->ndiff + rec->nonfinite != bad)
        memcpy(model_buffers(v->m), actual, model_buffers_size(v->m) * sizeof *actual);
}

void verify_ops_forward_buffers(verify_ops *v, const float *seen)
{
    compare_buffers(v, seen, &v->buffers);
}

/* The buffer divergences of the forwards since the last check into this check's record (after its own). */
static void merge_buffers(verify_ops *v, verify_record *rec)
{
    const verify_record *b = &v->buffers;
    rec->ndiff += b->ndiff;
    rec->nonfinite += b->nonfinite;
    if (b->has_first && !rec->has_first) {
        rec->has_first = 1;
        rec->first_buffer = 1;
        rec->first_param = b->first_param;
        rec->first_index = b->first_index;
        rec->first_expected = b->first_expected;
        rec->first_actual = b->first_actual;
        rec->first_ulp = b->first_ulp;
    }
    memset(&v->buffers, 0, sizeof v->buffers);
}

/* The buffers of a check: the implementation's as they are now, or those compared as the forwards went. */
static void check_buffers(verify_ops *v, const float *actual, verify_record *rec)
{
    if (actual)
        compare_buffers(v, actual, rec);
    merge_buffers(v, rec);
}

static ddp_status do_forward(verify_ops *v, const verify_side *s, void *ctx)
{
    if (s->batch)
        DDP_CHECK(s->batch(ctx, &v->batch));
    DDP_CHECK(ddp_ref_forward_begin(v->ddp));
    if (s->forward_begin)
        DDP_CHECK(s->forward_begin(ctx));
    DDP_CHECK(model_forward(v->m, &v->batch, NULL));
    ddp_ref_forward_end(v->ddp);
    return s->forward_end ? s->forward_end(ctx) : DDP_OK;
}

/* The deliberately wrong references of ddpsim's own tests (verify_sabotage), before and after the sync. */
static void sabotage_before_backward(verify_ops *v)
{
    if (v->sabotage == SABOTAGE_DROPS_MICROSTEPS && ddp_ref_pending_sync(v->ddp))
        model_zero_grad(v->m);
}

static void sabotage_after_backward(verify_ops *v)
{
    if (v->sabotage == SABOTAGE_RANK_DISAGREES && v->rank == 1 && ddp_ref_last_synced(v->ddp)) {
        uint32_t u;
        memcpy(&u, model_grads(v->m), sizeof u);
        u ^= 1;
        memcpy(model_grads(v->m), &u, sizeof u);
    }
}

/*
 * Communication conformance: in a backward that does not sync, PyTorch's DDP
 * reduces nothing (the reducer only accumulates; reducer.cpp
 * mark_variable_ready launches no bucket unless the backward syncs). An
 * implementation that reduces there anyway is wrong even when its numbers
 * are right (NVIDIA/cosmos-framework #161: a no_sync that did nothing for
 * the communication, accumulation of 4 at 4x the traffic): the next check
 * says so, unless the run allows it.
 */
_Static_assert(VERIFY_BYTES_UNCOUNTED == RECORD_UNCOUNTED, "a recording's uncounted bytes are verify's");

/*
 * What counts against a backward of a sharded run (shard_ref.h): every
 * reduction, but where the mode reduce-scatters in a backward that does not
 * sync (ZeRO-2, HSDP) its reduce-scatters there. Uncounted reduce-scatters
 * (a recording's comm.json without "scatters") leave that backward unknown.
 */
static void comm_held(const verify_ops *v, int syncs, record_comm_counts *c)
{
    if (!c->known || syncs || !v->shard || !shard_mode_scatters_unsynced(shard_ref_mode(v->shard)))
        return;
    if (c->scatters == RECORD_UNCOUNTED) {
        c->known = 0;
        return;
    }
    c->reductions -= c->scatters;
    c->bytes = c->bytes == RECORD_UNCOUNTED || c->scatter_bytes == RECORD_UNCOUNTED ? RECORD_UNCOUNTED
                                                                                     : c->bytes - c->scatter_bytes;
}

static ddp_status check_comm(verify_ops *v, const verify_side *s, void *ctx, int syncs)
{
    record_comm_counts c = {0};
    if (s->backward_comm)
        DDP_CHECK(s->backward_comm(ctx, v->micro, &c));
    v->micro++;
    record_comm_counts all = c; /* the totals count every reduction; what a mode allows is not held against it */
    comm_held(v, syncs, &c);
    if (all.known && v->fig)
        verify_count_comm(v->fig, all.reductions, all.bytes, !syncs && c.known ? c.reductions : 0);
    if (!c.known || syncs || c.reductions == 0 || v->allow_unsynced_comm)
        return DDP_OK;
    if (v->unsynced_reductions == 0)
        v->unsynced_op = v->op;
    v->unsynced_reductions += c.reductions;
    v->unsynced_bytes = c.bytes == VERIFY_BYTES_UNCOUNTED || v->unsynced_bytes == VERIFY_BYTES_UNCOUNTED
                            ? VERIFY_BYTES_UNCOUNTED : v->unsynced_bytes + c.bytes;
    return DDP_OK;
}

/*
 * What a sharded mode must move in one backward of a rank, counted as an implementation's reductions are (a
 * reduction's bytes are its input's): every element of the gradient reduced once where the mode reduces, without
 * the padding of flat units (doc/SEMANTICS.md, "Sharded data parallelism"). ZeRO-1 and FSDP reduce-scatter the
 * model at a syncing backward; ZeRO-2 at every backward; HSDP reduce-scatters in its shard group at every backward,
 * and at a syncing one all-reduces its shard (1/S of the model) in the replica group when there are replicas.
 */
static uint64_t shard_required_bytes(const verify_ops *v, int syncs)
{
    uint64_t whole = (uint64_t)model_size(v->m) * sizeof(float);
    mesh me = shard_ref_mesh(v->shard);
    switch (shard_ref_mode(v->shard)) {
    case SHARD_ZERO1:
    case SHARD_FSDP: return syncs ? whole : 0;
    case SHARD_ZERO2: return whole;
    case SHARD_HSDP: return whole + (syncs && me.replicas > 1 ? whole / (uint64_t)me.shards : 0);
    case SHARD_NONE: break;
    }
    return 0;
}

/*
 * The reference's traffic in one of this rank's own backwards into the figures (since: the DDP reference's counts
 * before it), as the implementation's are counted (not those of a backward it shadows after running out): the DDP
 * reference's own reductions, or what a sharded run's mode must move (its reference reduces otherwise). None under
 * a compressing hook (the services have no 16-bit allreduce: both sides' buckets travel as gathers).
 */
static void count_ref_comm(verify_ops *v, int syncs, uint64_t since_reductions, uint64_t since_bytes)
{
    if (!v->fig || ddp_comm_hook_compresses(v->comm_hook))
        return;
    if (v->shard) {
        v->fig->ref_comm_known = 1;
        v->fig->ref_reduced_bytes += shard_required_bytes(v, syncs);
        return;
    }
    uint64_t reductions, bytes;
    ddp_ref_comm_counts(v->ddp, &reductions, &bytes);
    v->fig->ref_comm_known = 1;
    v->fig->ref_reductions += reductions - since_reductions;
    v->fig->ref_reduced_bytes += bytes - since_bytes;
}

/* Model averaging's bound (budget_averaged_params): this micro-step's |local gradient| into the window's sums. */
static void add_abs_local(verify_ops *v)
{
    const float *g = model_local_grads(v->m);
    const unsigned char *used = model_used(v->m);
    for (int p = 0; p < model_nparams(v->m); p++) {
        const model_param *par = model_param_at(v->m, p);
        for (size_t j = par->offset; used[p] && j < par->offset + par->count; j++)
            v->abs_local[j] += fabs((double)g[j]);
    }
    v->abs_local[model_size(v->m)] += 1;
}

/*
 * --loss-scale and --fault inf|nan before a backward: the reference's loss times its scale, the implementation's
 * scale checked against it, and a planted inf or NaN on the rank a fault names (doc/SEMANTICS.md "Loss scaling").
 * Every rank notes that some rank's fault reached the window: its sync spreads the inf to all of them.
 */
static ddp_status scale_and_plant(verify_ops *v, const verify_side *s, void *ctx)
{
    if (v->scaler_cfg.on) {
        model_set_loss_scale(v->m, v->scaler.scale);
        float impl = v->scaler.scale;
        if (s->loss_scale)
            DDP_CHECK(s->loss_scale(ctx, v->scaler.scale, &impl));
        int differs = memcmp(&impl, &v->scaler.scale, sizeof impl) != 0;
        if (differs && !v->scale_failure.failed)
            v->scale_failure = (verify_scale_check){.failed = VERIFY_SCALE_APPLIED, .op = v->op, .scale = impl,
                                                    .ref_scale = v->scaler.scale, .fault_op = -1, .fault_rank = -1};
        if (v->fig) {
            v->fig->scale_min = v->fig->scale_checks ? fminf(v->fig->scale_min, v->scaler.scale) : v->scaler.scale;
            v->fig->scale_max = v->fig->scale_checks ? fmaxf(v->fig->scale_max, v->scaler.scale) : v->scaler.scale;
            v->fig->scale_checks++;
            v->fig->scales_failed += differs;
        }
    }
    v->planted = faults_planted(v->faults, v->nfaults, v->rank, v->op, &v->plant_value);
    if (v->planted && !v->plants_recorded)
        model_plant_fault(v->m, v->plant_value);
    float value;
    for (int r = 0; r < v->n && !v->fault_window; r++)
        if (faults_planted(v->faults, v->nfaults, r, v->op, &value)) {
            v->fault_window = 1;
            v->fault_op = (long)v->op;
            v->fault_rank = r;
        }
    return DDP_OK;
}

int verify_ops_planted(const verify_ops *v, float *value)
{
    *value = v->plant_value;
    return v->planted;
}

int verify_ops_impl_skips_step(const verify_ops *v)
{
    /* The reference's decision: an implementation whose own finding is not it has failed the unscale's check, and
     * following its own would leave the ranks' collectives unpaired at a sharded step (a rank-local skip hangs:
     * fairscale #180). */
    return v->scaler_cfg.on && v->unscaled && v->found_inf;
}

/*
 * GradScaler.unscale_, at the first clip or step since the last step: the reference's gradients (a sharded run's
 * sharded ones, which every rank holds alike) times 1/scale, an inf or NaN among them found; the implementation
 * unscales its own and says what it found, which must be the reference's finding on every rank.
 */
static ddp_status do_unscale(verify_ops *v, const verify_side *s, void *ctx)
{
    if (!v->scaler_cfg.on || v->unscaled)
        return DDP_OK;
    v->unscaled = v->unscaled_since_zero = 1;
    float *g = v->shard ? shard_ref_sharded_mut(v->shard) : model_grads(v->m), inv = scaler_inv_scale(v->scaler.scale);
    v->found_inf = scaler_unscale(g, model_size(v->m), inv);
    if (v->bounded && !v->shard) /* the order tolerance's bound of |impl - ref| scales with both */
        budget_scale(&v->budget, inv);
    v->shard_unscale *= inv; /* the sharded bound is recomputed from the local sums, which stay scaled */
    int impl = v->found_inf;
    if (s->unscale)
        DDP_CHECK(s->unscale(ctx, &impl));
    v->impl_found_inf = impl;
    if (impl != v->found_inf && !v->scale_failure.failed)
        v->scale_failure = (verify_scale_check){.failed = VERIFY_SCALE_SKIP, .op = v->op, .found_inf = impl,
                                                .ref_found_inf = v->found_inf, .scale = v->scaler.scale,
                                                .ref_scale = v->scaler.scale,
                                                .fault_op = v->found_inf ? v->fault_op : -1,
                                                .fault_rank = v->found_inf ? v->fault_rank : -1};
    if (v->fig) {
        v->fig->unscales++;
        v->fig->skips += v->found_inf;
        v->fig->scales_failed += impl != v->found_inf;
    }
    return DDP_OK;
}

/*
 * The token loss before a backward (doc/SEMANTICS.md "Loss normalization"): the factor --loss-norm intends for it,
 * the implementation's (its trainer's), checked. A factor that holds (the intended one within its roundings) is
 * the reference's too, so what follows compares the same normalization bit for bit; one that does not is a
 * failure of its own, matched against the mistakes trainers make for the window's later factors to narrow, while
 * the reference keeps the intended one and the implementation's own backward takes its own.
 */
static ddp_status normalize_loss(verify_ops *v, const verify_side *s, void *ctx)
{
    if (!v->loss_norm)
        return DDP_OK;
    const loss_windows *lw = &v->lw;
    size_t b = v->bwd_index++;
    if (b >= lw->nbwd)
        return ddp_error(DDP_ERR_INVALID, "op %zu: a backward the token windows did not count", v->op);
    uint32_t w = lw->bwd_window[b], first = lw->win_first[w];
    float ref = loss_ratio_float(loss_windows_intended(lw, v->loss_norm, b)), impl = ref;
    if (lw->bwd_tokens[b] == 0)
        ref = 0; /* a micro-batch without a valid token: nothing to weigh, whatever a trainer divides by */
    v->mixed_sequence = -1;
    if (s->loss_factor) {
        ddpsim_loss_window view = {.norm = (int)v->loss_norm, .micro_steps = (int)lw->win_micro_steps[w],
                                   .micro = (int)lw->bwd_micro[b], .rows = lw->rows,
                                   .tokens = lw->bwd_rows + (size_t)first * (size_t)lw->rows,
                                   .accumulation = (int)lw->accumulation};
        DDP_CHECK(s->loss_factor(ctx, &view, ref, &impl));
    }
    int mixed = v->mixed_sequence >= 0 && lw->bwd_tokens[b]; /* no one factor: not a scaled token sum */
    int holds = !mixed && loss_windows_holds(lw, v->loss_norm, b, impl);
    model_set_token_factor(v->m, holds ? impl : ref);
    if (v->fig) {
        v->fig->norm_checks++;
        v->fig->norms_failed += !holds;
    }
    verify_norm_check *k = &v->norm_failure;
    if (!holds && !k->failed) {
        *k = (verify_norm_check){.failed = 1, .norm = v->loss_norm, .op = v->op, .micro = (int)lw->bwd_micro[b],
                                 .micro_steps = (int)lw->win_micro_steps[w], .factor = impl, .ref_factor = ref,
                                 .tokens = lw->bwd_tokens[b], .window_tokens = lw->win_tokens[w],
                                 .rank_window_tokens = lw->win_rank_tokens[w],
                                 .mixed_sequence = mixed ? v->mixed_sequence : -1, .mixed_factor = v->mixed_factor};
        v->norm_window = (long)w;
    }
    /* What the window's factors match, from its first failure on (a micro-batch without a valid token, whose
     * factor can be anything, tells nothing). */
    if (k->failed && v->norm_window == (long)w && lw->bwd_tokens[b]) {
        unsigned m = mixed ? 0 : loss_windows_matches(lw, v->loss_norm, b, impl);
        loss_ratio q = loss_windows_intended(lw, v->loss_norm, b);
        double ratio = (double)impl * q.den / q.num, slack = 4 * 0x1p-24; /* a few roundings of either factor */
        if (!k->backwards) {
            k->matches = m;
            k->ratio = ratio;
            k->constant = 1;
        } else {
            k->matches &= m;
            k->constant &= fabs(ratio - k->ratio) <= slack * fabs(k->ratio);
        }
        k->constant &= !mixed; /* a micro-batch without one factor has no ratio to keep constant */
        k->backwards++;
    }
    return DDP_OK;
}

/*
 * A backward: the reference's local backward (the implementation's side
 * hears of each gradient as it completes), the implementation ends its
 * backward (draining its own reductions) before the reference syncs, so the
 * two never interleave their collectives; the order tolerance's bound
 * follows the accumulation and the sync (budget.h).
 */
static ddp_status do_backward(verify_ops *v, const verify_side *s, void *ctx)
{
    uint64_t ref_reductions, ref_bytes;
    ddp_ref_comm_counts(v->ddp, &ref_reductions, &ref_bytes);
    DDP_CHECK(scale_and_plant(v, s, ctx));
    DDP_CHECK(normalize_loss(v, s, ctx));
    v->shard_unscale = fmax(v->shard_unscale, 1); /* this backward's terms are at their scale */
    sabotage_before_backward(v);
    if (s->backward_begin)
        s->backward_begin(ctx);
    ddp_ref_backward_local(v->ddp, s->grad_ready, ctx);
    if (s->backward_end)
        DDP_CHECK(s->backward_end(ctx));
    int syncs = ddp_ref_pending_sync(v->ddp);
    DDP_CHECK(check_comm(v, s, ctx, syncs));
    if (v->bounded)
        VERIFY_COSTED(v, COST_BOUND, {
            budget_accumulate(&v->budget, v->m, model_grads(v->m), model_used(v->m));
            if (syncs)
                budget_before_sync(&v->budget, model_grads(v->m));
        });
    if (v->abs_local)
        VERIFY_COSTED(v, COST_BOUND, add_abs_local(v));
    explain_backward(&v->explain, v->m, syncs);
    DDP_CHECK(ddp_ref_backward_end(v->ddp));
    if (v->shard)
        DDP_CHECK(shard_ref_backward(v->shard, syncs));
    ddp_status st = DDP_OK;
    if (v->bounded && syncs)
        VERIFY_COSTED(v, COST_BOUND, st = AS_CHECKS(budget_after_sync(&v->budget, v->wr, v->m,
                                                                      ddp_ref_averaged_params(v->ddp),
                                                                      ddp_ref_divisor(v->ddp))));
    DDP_CHECK(st);
    sabotage_after_backward(v);
    count_ref_comm(v, syncs, ref_reductions, ref_bytes);
    v->last_synced = ddp_ref_last_synced(v->ddp);
    v->bwd_since_zero = 1;
    v->bwd_op = v->op;
    if (!v->shard) /* the reference's own check is DDP's: a sharded run compares with shard_ref's sums instead */
        VERIFY_COSTED(v, COST_REF_SUMS, refcheck_accumulate(&v->refcheck, v->m, v->last_synced, v->n));
    return s->after_backward ? s->after_backward(ctx, v->last_synced) : DDP_OK;
}

/* The order tolerance's buffers of a sharded run, made at its first use. */
static ddp_status shard_buffers(verify_ops *v)
{
    size_t n = model_size(v->m);
    if (!v->shard_allow)
        v->shard_allow = malloc((n ? n : 1) * sizeof *v->shard_allow);
    if (!v->shard_abs)
        v->shard_abs = malloc((n ? n : 1) * sizeof *v->shard_abs);
    return v->shard_allow && v->shard_abs ? DDP_OK : ddp_error(DDP_ERR_NOMEM, "the sharded bound: %zu elements", n);
}

/*
 * The sharded bound, computed from the magnitudes of the local gradients as their backwards made them (scaled),
 * times f: an unscale multiplied both sides' gradients by the same power of two, which multiplies their difference
 * exactly (doc/SEMANTICS.md "Loss scaling"); terms a backward added after it are at most f = 1 of theirs.
 */
static void sharded_unscaled(verify_ops *v, double f)
{
    if (f != 1)
        budget_scale_bound(v->shard_allow, model_size(v->m), f);
}

/* What a grab's comparison may allow each element: the order tolerance's bound (DDP's or the sharded one), NULL. */
static ddp_status grab_allow(verify_ops *v, int synced, const float **allow)
{
    *allow = NULL;
    if (!v->bounded)
        return DDP_OK;
    if (v->clipped) {
        *allow = v->clip_allow;
        return DDP_OK;
    }
    if (!v->shard) {
        *allow = v->budget.E;
        return DDP_OK;
    }
    DDP_CHECK(shard_buffers(v));
    ddp_status st = DDP_OK;
    int local = shard_ref_reads_local(v->shard, synced);
    VERIFY_COSTED(v, COST_BOUND, st = AS_CHECKS(budget_sharded(v->shard, v->wr, local, model_size(v->m), v->shard_abs,
                                                                v->shard_allow)));
    /* the unscale multiplied the sharded gradients alone: an unsharded local sum's magnitudes are at most its own */
    sharded_unscaled(v, local ? fmax(v->shard_unscale, 1) : v->shard_unscale);
    *allow = v->shard_allow;
    return st;
}

/* What a factor in a failing check's pattern is named by (pattern.h). */
static pattern_constants pattern_constants_of(const verify_ops *v)
{
    pattern_constants k = {.nranks = v->n, .running = v->nactive, .window = v->explain.window,
                           .growth = v->scaler_cfg.on && v->scaler_cfg.dynamic ? v->scaler_cfg.growth : 0,
                           .loss_scale = v->scaler_cfg.on ? v->scaler.scale : 0};
    if (v->shard) {
        mesh me = shard_ref_mesh(v->shard);
        k.replicas = me.replicas;
        k.shards = me.shards;
    }
    return k;
}

int verify_ops_grab_synced(const verify_ops *v)
{
    return v->bwd_since_zero ? v->last_synced : -1;
}

static ddp_status do_grab(verify_ops *v, const verify_side *s, void *ctx)
{
    const float *actual, *buffers;
    DDP_CHECK(s->values(ctx, RECORD_GRAB, v->grab++, &actual, &buffers));
    verify_record *rec = next_record(v);
    rec->synced = verify_ops_grab_synced(v);
    /* A .grad that is None where DDP's is not (or the reverse) first: it explains the zeros it reads as. */
    const unsigned char *none = NULL;
    const held_mask *held = v->held;
    if (s->grab_layout)
        DDP_CHECK(s->grab_layout(ctx, v->grab - 1, &none, &held));
    /* A sharded rank that holds its shards there holds them whatever its local .grad is (None included). */
    if (v->shard && !shard_ref_reads_local(v->shard, rec->synced))
        none = NULL;
    if (none)
        checker_compare_none(v->m, model_grad_defined(v->m), none, held, rec);
    const float *expected = v->shard ? shard_ref_grads(v->shard, rec->synced) : model_grads(v->m);
    const unsigned char *reduced = rec->synced == 1 && !v->shard ? ddp_ref_reduced_params(v->ddp) : NULL;
    const float *allow;
    DDP_CHECK(grab_allow(v, rec->synced, &allow));
    VERIFY_COSTED(v, COST_COMPARE, {
        checker_compare_held(v->tol, v->m, expected, actual, allow, reduced, held, rec);
        check_buffers(v, buffers, rec);
    });
    if (s->padding)
        s->padding(ctx, RECORD_GRAB, rec);
    pattern_constants k = pattern_constants_of(v);
    ddp_status ex;
    VERIFY_COSTED(v, COST_COMPARE, ex = AS_CHECKS(explain_grab(&v->explain, v->wr,
                                                               v->explain_across_ranks && v->nactive == v->n, v->m,
                                                               expected, actual, held, &k, rec)));
    DDP_CHECK(ex);
    explain_remember_grab(&v->explain, v->m, v->grab - 1, expected, actual, held);
    /* The reference's own check sums every rank's local gradients since the last zero_grad: not while a rank that
     * ran out of inputs holds gradients its peers' syncs did not take (uneven_window), every rank or none. */
    ddp_status st = DDP_OK;
    /* it checks the sums: not clipped or unscaled ones, nor an inf's */
    int sums = !v->clipped && !v->unscaled_since_zero && !v->fault_window;
    if (rec->synced == 1 && !v->uneven_window && !v->shard && sums)
        VERIFY_COSTED(v, COST_REF_CHECK,
                      st = AS_CHECKS(refcheck_run(&v->refcheck, v->wr, v->m, ddp_ref_reduced_params(v->ddp), rec)));
    DDP_CHECK(st);
    if (s->grabbed)
        DDP_CHECK(s->grabbed(ctx, rec, actual, held));
    if (v->fig)
        v->fig->planted += rec->planted;
    rec->done = 1;
    return DDP_OK;
}

/* Two ranks' clip coefficients are the same: the same bits, or both NaN (whatever their payloads). */
static int same_coef(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b));
}

/*
 * clip:MAX (doc/SEMANTICS.md "Clipping"): the reference's exact norm of its gradients (a sharded run's: the
 * sharded gradient, every element, which every rank holds alike) and the interval of a correct coefficient;
 * the implementation clips and says its coefficient; every rank's coefficients, the implementation's and the
 * reference's, gathered (a collective). The implementation's must be the same bits on every rank where the
 * reference's are, and lie in the interval; the reference then multiplies by it (its own when it failed), so
 * what follows compares the same clipping, and the order tolerance's bound follows the product.
 */
static ddp_status do_clip(verify_ops *v, const verify_side *s, void *ctx)
{
    const sched_clip *c = sched_clip_at(v->schedule, v->op);
    size_t n = model_size(v->m);
    if (!c || !s->clip)
        return ddp_error(DDP_ERR_INVALID, "op %zu: a clip this run cannot make", v->op);
    DDP_CHECK(do_unscale(v, s, ctx)); /* GradScaler's recipe: scaler.unscale_(optimizer), then clip */
    if ((v->bounded && !v->clip_allow && !(v->clip_allow = malloc((n ? n : 1) * sizeof *v->clip_allow))) ||
        (!v->clip_gather && !(v->clip_gather = malloc(2 * (size_t)v->n * sizeof *v->clip_gather))))
        return ddp_error(DDP_ERR_NOMEM, "the clip's bound: %zu floats", n);
    float *g = v->shard ? shard_ref_sharded_mut(v->shard) : model_grads(v->m);
    const float *E; /* the gradients' bound, as a grab after this synced backward allows it */
    DDP_CHECK(grab_allow(v, 1, &E));
    clip_ref ref;
    clip_reference(g, E, n, c->max_norm, c->inf_norm, &ref);
    float coef = NAN;
    DDP_CHECK(s->clip(ctx, c, &coef));
    float mine[2] = {coef, ref.coef};
    ddp_status st;
    VERIFY_COSTED(v, COST_AGREEMENT, st = AS_CHECKS(coll_allgather(v->wr, mine, v->clip_gather, sizeof mine)));
    DDP_CHECK(st);
    int refs_agree = 1, other = -1;
    for (int r = 0; r < v->n; r++) {
        refs_agree &= same_coef(v->clip_gather[2 * r + 1], ref.coef);
        if (other < 0 && !same_coef(v->clip_gather[2 * r], coef))
            other = r;
    }
    /* A NaN among the gradients (a window GradScaler skips) makes torch's norm and coefficient NaN: a correct
     * clip's is NaN too, and no bound is around it. */
    int outside = isnan(ref.coef) ? !isnan(coef) : !(ref.lo <= coef && coef <= ref.hi);
    verify_clip_check k = {.op = v->op, .coef = coef, .ref_coef = ref.coef, .ref_norm = ref.norm, .lo = ref.lo,
                           .hi = ref.hi, .other_rank = -1, .outside = outside};
    if (refs_agree && other >= 0) { /* every rank says so, naming the first rank whose bits differ from its own */
        k.failed = VERIFY_CLIP_RANKS;
        k.other_rank = other;
        k.other_coef = v->clip_gather[2 * other];
    } else if (k.outside) {
        k.failed = VERIFY_CLIP_BOUND;
    }
    if (k.failed && coef > 0 && coef < 1 && ref.coef < 1) { /* both clipped: the norms' ratio, named if it can be */
        pattern_constants pk = pattern_constants_of(v);
        k.norm = (verify_pattern){.kind = PATTERN_FACTOR, .factor = (double)ref.coef / coef};
        pattern_name_factor(k.norm.factor, &pk, &k.norm);
    }
    if (k.failed && !v->clip_failure.failed)
        v->clip_failure = k;
    if (v->fig) {
        v->fig->clip_ref_min = v->fig->clips ? fminf(v->fig->clip_ref_min, ref.coef) : ref.coef;
        v->fig->clip_ref_max = v->fig->clips ? fmaxf(v->fig->clip_ref_max, ref.coef) : ref.coef;
        v->fig->clips++;
        v->fig->clips_failed += k.failed != VERIFY_CLIP_OK;
        double room = coef >= ref.coef ? ref.hi - ref.coef : ref.coef - ref.lo, d = fabs((double)coef - ref.coef);
        if (!k.failed && d > 0)
            v->fig->clip_worst = fmax(v->fig->clip_worst, room > 0 ? d / room : 1);
    }
    float use = k.failed ? ref.coef : coef;
    if (v->bounded)
        clip_bound_after(g, E, n, use, v->clip_allow);
    clip_scale(g, n, use);
    v->clipped = 1;
    return DDP_OK;
}

/* The implementation's parameters become the reference's, where this rank holds them (the rest are not its). */
static void rebase(const verify_ops *v, float *w, const float *actual)
{
    size_t n = model_size(v->m);
    if (!v->param_held) {
        memcpy(w, actual, n * sizeof *w);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (v->param_held->elem[i])
            w[i] = actual[i];
}

/*
 * The parameters' bound after the step just made (budget.h): the gradients' bound (a sharded run's, a collective;
 * none when they were judged under a tolerance of their own), through the momentum buffers when there are some,
 * through the update; AdamW's through its moments and its division (budget_adamw).
 */
static ddp_status step_bound(verify_ops *v, const float *w)
{
    size_t n = model_size(v->m);
    const float *g = v->shard ? shard_ref_sharded(v->shard) : model_grads(v->m), *E = NULL;
    if (v->clipped && v->bounded) {
        E = v->clip_allow;
    } else if (v->shard && v->bounded) {
        DDP_CHECK(shard_buffers(v)); /* a step before any grab made them */
        DDP_CHECK(budget_sharded(v->shard, v->wr, 0, n, v->shard_abs, v->shard_allow));
        sharded_unscaled(v, v->shard_unscale);
        E = v->shard_allow;
    } else if (v->bounded) {
        E = v->budget.E;
    }
    if (v->optim.adamw.on) {
        budget_adamw(&v->optim, g, E, w, v->momentum_allow, v->second_allow, v->param_allow);
        return DDP_OK;
    }
    if (v->optim.momentum != 0) {
        budget_momentum(&v->optim, g, E, v->momentum_allow);
        E = v->momentum_allow;
    }
    budget_step(v->lr, E, ddp_optim_direction(&v->optim, g), w, n, v->param_allow);
    return DDP_OK;
}

/* The parameters after a step or at the end (verify_params_rule). */
static ddp_status do_params(verify_ops *v, const verify_side *s, void *ctx, int after_step)
{
    const float *actual, *buffers;
    DDP_CHECK(s->values(ctx, after_step ? RECORD_STEP : RECORD_END, after_step ? v->step++ : 0, &actual, &buffers));
    verify_record *rec = next_record(v);
    rec->synced = -1;
    float *w = model_weights(v->m);
    tolerance tol = *v->tol;
    const float *allow = NULL; /* at the end: nothing since the last (rebased) step */
    int replay = v->params_rule == PARAMS_REPLAY;
    if (replay)
        tol.kind = after_step ? TOL_ORDER : TOL_BITWISE;
    if (after_step && v->abs_local) { /* model averaging: the parameters are all there is to check */
        ddp_status st = DDP_OK;
        VERIFY_COSTED(v, COST_BOUND, st = AS_CHECKS(budget_averaged_params(v->wr, v->lr, w, model_grads(v->m),
                                                                           model_size(v->m), v->abs_local,
                                                                           v->abs_local + model_size(v->m) + 1,
                                                                           v->param_allow)));
        DDP_CHECK(st);
        allow = v->param_allow;
    } else if (after_step && v->param_allow && !v->step_skipped) { /* a skipped step moved nothing: no bound */
        ddp_status st = DDP_OK;
        VERIFY_COSTED(v, COST_BOUND, st = AS_CHECKS(step_bound(v, w)));
        DDP_CHECK(st);
        allow = v->param_allow;
    }
    VERIFY_COSTED(v, COST_COMPARE, {
        checker_compare_held(&tol, v->m, w, actual, allow, NULL, v->param_held, rec);
        check_buffers(v, buffers, rec);
    });
    if (s->padding)
        s->padding(ctx, after_step ? RECORD_STEP : RECORD_END, rec);
    if (after_step && rec->ndiff) {
        pattern_constants k = pattern_constants_of(v);
        const float *g = v->shard ? shard_ref_sharded(v->shard) : model_grads(v->m);
        explain_step(&v->explain, v->m, w, actual, ddp_optim_stateful(&v->optim) ? g : NULL,
                     v->adamw.on ? PATTERN_SGD_UPDATE : PATTERN_NO_MOMENTUM, v->lr, v->param_held, &k, rec);
    }
    if (after_step)
        explain_after_step(&v->explain, v->m, v->shard ? shard_ref_sharded(v->shard) : model_grads(v->m));
    if (v->fig)
        v->fig->planted += rec->planted;
    rec->done = 1;
    /*
     * After a failed check too the reference goes on from the implementation's parameters (doc/SEMANTICS.md "After
     * a divergence"): the next window is then judged from where it starts, and a wrong step does not make every
     * later gradient differ. The first divergence, and so the verdict, is found before. Not the gradients: a
     * window's error stays in it until zero_grad, and an implementation may rightly change .grad between a grab and
     * its step (a reduction deferred to the step), which taking them would judge as a wrong step. Not in a sharded
     * run, whose reference keeps shards of its own, and not parameters that are NaN or infinite: the reference
     * would carry them into its own sanity checks, and fail them for the implementation's fault.
     */
    if (replay || checker_rebases(&tol, rec) || (!v->shard && rec->ndiff && !rec->nonfinite))
        rebase(v, w, actual);
    return DDP_OK;
}

/*
 * An op of an uneven repetition that this rank, having run out, does not run. Inside join it shadows its
 * peers (ddp_ref.h): at their forward the reference's main_hook and the implementation's join_shadow, at
 * their backward the reference's zeros and its part in the checks' collectives; a grab or a step it does not
 * reach leaves a record that says so. Without join it has stopped (verify_ops_run).
 */
static ddp_status shadow_op(verify_ops *v, const verify_side *s, void *ctx, sched_op op)
{
    switch (op) {
    case OP_FWD:
        DDP_CHECK(ddp_ref_join_shadow_forward(v->ddp, v->peer_depth == 0));
        return s->join_shadow ? s->join_shadow(ctx) : DDP_OK;
    case OP_BWD:
        DDP_CHECK(ddp_ref_join_shadow_backward(v->ddp));
        if (!ddp_ref_join_shadow_synced(v->ddp))
            return DDP_OK;
        if (v->bounded) {
            ddp_status st = DDP_OK;
            VERIFY_COSTED(v, COST_BOUND, st = AS_CHECKS(budget_shadow_sync(&v->budget, v->wr)));
            DDP_CHECK(st);
        }
        return s->shadow_synced ? s->shadow_synced(ctx) : DDP_OK;
    case OP_GRAB:
    case OP_STEP: {
        verify_record *rec = next_record(v);
        rec->synced = -1;
        rec->joined = rec->done = 1;
        v->grab += op == OP_GRAB;
        v->step += op == OP_STEP;
        return DDP_OK;
    }
    default: return DDP_OK;
    }
}

static ddp_status run_op(verify_ops *v, const verify_side *s, void *ctx, sched_op op)
{
    const sched *sc = v->schedule;
    switch (op) {
    case OP_ENTER:
        DDP_CHECK(ddp_ref_no_sync_enter(v->ddp));
        return s->no_sync ? s->no_sync(ctx, 1) : DDP_OK;
    case OP_EXIT:
        DDP_CHECK(ddp_ref_no_sync_exit(v->ddp));
        return s->no_sync ? s->no_sync(ctx, 0) : DDP_OK;
    case OP_FWD: return do_forward(v, s, ctx);
    case OP_BWD: return do_backward(v, s, ctx);
    case OP_GRAB: return do_grab(v, s, ctx);
    case OP_JOIN_ENTER: {
        int divide = sc->joins[sched_join_of(sc, v->op)].divide_by_initial_world_size;
        ddp_ref_join_enter(v->ddp, divide);
        v->in_join = 1;
        return s->join_enter ? s->join_enter(ctx, divide) : DDP_OK;
    }
    case OP_JOIN_EXIT: {
        v->in_join = 0;
        int last = sched_last_joiner(sc, v->counts, v->n, sched_join_of(sc, v->op));
        DDP_CHECK(ddp_ref_join_exit(v->ddp, last));
        return s->join_exit ? s->join_exit(ctx, last) : DDP_OK;
    }
    case OP_ZERO:
        v->uneven_window &= v->nactive < v->n;
        ddp_ref_zero_grad(v->ddp);
        explain_zero(&v->explain);
        if (v->shard)
            shard_ref_zero(v->shard, v->set_to_none);
        refcheck_zero(&v->refcheck);
        budget_zero(&v->budget);
        v->clipped = 0;
        v->unscaled_since_zero = v->fault_window = 0;
        v->shard_unscale = 1;
        v->fault_op = -1;
        v->fault_rank = -1;
        if (v->abs_local)
            memset(v->abs_local, 0, (model_size(v->m) + 1) * sizeof *v->abs_local);
        v->last_synced = v->bwd_since_zero = 0;
        return s->zero_grad ? s->zero_grad(ctx) : DDP_OK;
    case OP_CLIP: return do_clip(v, s, ctx);
    case OP_STEP: {
        DDP_CHECK(do_unscale(v, s, ctx));
        explain_before_step(&v->explain, v->m);
        int skipped = v->step_skipped = v->scaler_cfg.on && v->found_inf; /* GradScaler's _maybe_opt_step */
        if (!skipped && v->shard)
            ddp_optim_step(&v->optim, v->m, NULL, model_weights(v->m), shard_ref_sharded(v->shard));
        else if (!skipped)
            ddp_optim_step(&v->optim, v->m, model_grad_defined(v->m), model_weights(v->m), model_grads(v->m));
        if (s->step)
            DDP_CHECK(s->step(ctx));
        if (v->scaler_cfg.on) { /* GradScaler.update; the next clip or step unscales again */
            scaler_update(&v->scaler_cfg, &v->scaler, v->found_inf);
            v->unscaled = 0;
        }
        return do_params(v, s, ctx, 1);
    }
    }
    return ddp_error(DDP_ERR_INVALID, "unknown op %d", (int)op);
}

/* Who runs op i (v->active, v->nactive, v->highest), told to the reference: 1 when this rank does. */
static int who_runs(verify_ops *v, const verify_side *s, void *ctx, size_t i)
{
    const sched *sc = v->schedule;
    v->nactive = sched_participants(sc, v->counts, v->n, i, v->active, &v->highest);
    ddp_ref_participants(v->ddp, v->nactive, v->highest);
    if (v->nactive < v->n && (sc->ops[i] == OP_FWD || sc->ops[i] == OP_BWD))
        v->uneven_window = 1;
    if (s->participants)
        s->participants(ctx);
    return v->active[v->rank];
}

ddp_status verify_ops_run(verify_ops *v, const verify_side *s, void *ctx, int *ran_out)
{
    const sched *sc = v->schedule;
    *ran_out = 0; /* outside join: this rank stopped where it ran out, and its peers will wait for it */
    coll_set_caller(COLL_CALLER_REFERENCE);
    for (size_t i = 0; i < sc->nops; i++) {
        sched_op op = sc->ops[i];
        world_set_op(v->wr, (int)i, sched_op_name(op));
        v->op = i;
        int mine = who_runs(v, s, ctx, i);
        if (!mine && !v->in_join) {
            *ran_out = 1;
            return DDP_OK;
        }
        if (s->before_op)
            DDP_CHECK(s->before_op(ctx, i, op));
        DDP_CHECK(mine ? run_op(v, s, ctx, op) : shadow_op(v, s, ctx, op));
        v->peer_depth += op == OP_ENTER ? 1 : op == OP_EXIT ? -1 : 0;
        if (s->after_op)
            DDP_CHECK(s->after_op(ctx, i));
    }
    world_set_op(v->wr, (int)sc->nops, "end");
    return do_params(v, s, ctx, 0);
}
