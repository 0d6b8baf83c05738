/*
 * check.c - the reference replayed on a recorded run (check.h): the
 * implementation's side of every op (ops.h) is what the recording holds.
 */
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "machine.h"
#include "ops.h"
#include "rank.h"
#include "stream.h"

typedef struct source_ctx {
    const record_run *rec;
    int rank;
    int finite_only; /* a local gradient that is not finite is the run's breakage, unless a scaler is to find it */
} source_ctx;

static ddp_status src_used(void *ctx, uint64_t micro, unsigned char *used)
{
    const source_ctx *s = ctx;
    return record_used(s->rec, s->rank, micro, used);
}

static ddp_status src_grad(void *ctx, uint64_t micro, int p, float *dst)
{
    const source_ctx *s = ctx;
    char what[64];
    snprintf(what, sizeof what, "rank%d/micro%llu", s->rank, (unsigned long long)micro);
    return record_read(s->rec, what, p, dst, s->finite_only);
}

static int src_npieces(void *ctx, uint64_t micro, int p)
{
    const source_ctx *s = ctx;
    char what[64];
    snprintf(what, sizeof what, "rank%d/micro%llu", s->rank, (unsigned long long)micro);
    return record_npieces(s->rec, what, p);
}

static ddp_status src_piece(void *ctx, uint64_t micro, int p, int k, float *dst)
{
    const source_ctx *s = ctx;
    char what[64];
    snprintf(what, sizeof what, "rank%d/micro%llu", s->rank, (unsigned long long)micro);
    return record_read_piece(s->rec, what, p, k, dst);
}

typedef struct check_rank {
    const check_config *cfg;
    const record_run *rec;
    world_rank *wr;
    int rank;
    verify_ops v;           /* the ops' semantics and the checks (ops.h): the reference is v.m, v.ddp */
    source_ctx src;
    model *m;
    ddp_ref *ddp;
    shard_ref *shard;       /* the recording's "shard": its mode's reference beside DDP's (which decides the syncs) */
    float *actual;          /* the recorded values of the check at hand */
    held_mask held;         /* what this rank holds of the gradients, when the recording says (grad_shards) */
    held_mask grab_held;    /* ... at the grab at hand, when its held.json says */
    held_mask param_held;   /* ... of the parameters at the check at hand, when its held.json says */
    unsigned char none[MODEL_MAX_PARAMS]; /* which .grad were None at the grab at hand (none.json) */
    float *seen;            /* the buffers the implementation's module held as a forward began */
    uint64_t nfwd;
    uint64_t nclip;         /* clips so far: the next one's recorded coefficient is clip<nclip>.json */
    uint64_t nscale, nunscale; /* backwards and unscales so far ("loss_scale": scale<m>.json, unscale<k>.json) */
    verify_fault planted[VERIFY_MAX_FAULTS]; /* the recording's "planted", as --fault's */
    verify_rank_area *area;
} check_rank;

/* A recorded file that cannot be used is the recording's fault (bad input), not the check's. */
static ddp_status bad_record(check_rank *c, ddp_status s)
{
    if (s != DDP_OK)
        c->area->bad_record = 1;
    return s;
}

/* The recorded model's source failing is the recording's problem, said with the file. */
static ddp_status source_status(check_rank *c)
{
    char msg[512];
    ddp_status s = model_recorded_status(c->m, msg, sizeof msg);
    return s == DDP_OK ? DDP_OK : bad_record(c, ddp_error(s, "%s", msg));
}

/* DIR/rank<r>/fwd<k>/<which>/<buffer>.npy of every buffer into dst (laid out as the model's buffers). */
static ddp_status read_buffers(check_rank *c, uint64_t k, const char *which, float *dst)
{
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "rank%d/fwd%llu/%s", c->rank, (unsigned long long)k, which);
    for (int b = 0; b < c->rec->nbuffers; b++)
        DDP_CHECK(bad_record(c, record_read(c->rec, rel, c->rec->nparams + b, dst + model_buffer_at(c->m, b)->offset,
                                            0)));
    return DDP_OK;
}

/* ---- the implementation's side of the ops (ops.h verify_side), from a recording ---- */

/*
 * After a forward, for the buffers: the reference's forward_begin broadcast
 * rank 0's buffers or not by PyTorch's rule, on the buffers each rank's
 * module held after its previous forward (as recorded), which is what this
 * forward should have seen; the recorded ones are compared with them,
 * bitwise. Then the forward's recorded result becomes the reference's: no
 * math here moves the buffers, as none computes the gradients.
 */
static ddp_status rec_forward_end(void *ctx)
{
    check_rank *c = ctx;
    DDP_CHECK(source_status(c));
    if (!c->rec->nbuffers)
        return DDP_OK;
    DDP_CHECK(read_buffers(c, c->nfwd, "seen", c->seen));
    verify_ops_forward_buffers(&c->v, c->seen);
    return read_buffers(c, c->nfwd++, "after", model_buffers(c->m));
}

/*
 * The reference's backward read the recorded local gradients. A backward the manifest says an inf or NaN was
 * planted into must carry one (the replay plants nothing itself): a recording without it is not what it says.
 */
static ddp_status rec_backward_end(void *ctx)
{
    check_rank *c = ctx;
    DDP_CHECK(source_status(c));
    float value;
    if (!verify_ops_planted(&c->v, &value))
        return DDP_OK;
    const float *g = model_local_grads(c->m);
    const unsigned char *used = model_used(c->m);
    for (int p = 0; p < model_nparams(c->m); p++) {
        const model_param *par = model_param_at(c->m, p);
        for (size_t j = 0; used[p] && j < par->count; j++)
            if (!isfinite(g[par->offset + j]))
                return DDP_OK;
    }
    return bad_record(c, ddp_error(DDP_ERR_INVALID, "%s/rank%d/micro%llu: the manifest's \"planted\" %s at op %llu "
                                                    "is not in this backward's local gradients (every value finite)",
                                   c->rec->dir, c->rank, (unsigned long long)(c->nscale - 1),
                                   isnan(value) ? "NaN" : "inf", (unsigned long long)c->v.op));
}

/* A held.json into mask (made at its first use). */
static ddp_status held_from(check_rank *c, held_mask *mask, const record_held *h, size_t n)
{
    if (!mask->elem)
        DDP_CHECK(held_mask_init(mask, c->m));
    held_mask_clear(mask, c->m);
    for (size_t i = 0; i < n; i++)
        held_mask_add(mask, c->m, h[i].param, h[i].start, h[i].count);
    held_mask_finish(mask, c->m);
    return DDP_OK;
}

/* What the rank held of the parameters at this check (ops.h verify_ops.param_held, read after values). */
static ddp_status params_layout(check_rank *c, record_values kind, uint64_t k)
{
    record_held *h;
    size_t n;
    int known;
    c->v.param_held = NULL;
    DDP_CHECK(bad_record(c, record_check_held(c->rec, c->rank, kind, k, &h, &n, &known)));
    ddp_status s = known ? held_from(c, &c->param_held, h, n) : DDP_OK;
    free(h);
    if (known && s == DDP_OK)
        c->v.param_held = &c->param_held;
    return s;
}

/* The implementation's recorded values of every parameter from DIR/<impl>/rank<r>/<what>. */
static ddp_status rec_values(void *ctx, record_values kind, uint64_t k, const float **actual, const float **buffers)
{
    check_rank *c = ctx;
    char what[32], rel[PATH_MAX];
    record_values_name(kind, k, what, sizeof what);
    snprintf(rel, sizeof rel, "%s/rank%d/%s", c->rec->impl, c->rank, what);
    for (int p = 0; p < c->rec->nparams; p++)
        DDP_CHECK(bad_record(c, record_read(c->rec, rel, p, c->actual + model_param_at(c->m, p)->offset, 0)));
    *actual = c->actual;
    *buffers = NULL; /* compared as the forwards went */
    return kind == RECORD_GRAB ? DDP_OK : params_layout(c, kind, k);
}

/* The implementation's reductions in a backward, when the recording counted them (micro<m>/comm.json). */
static ddp_status rec_backward_comm(void *ctx, uint64_t micro, record_comm_counts *counts)
{
    check_rank *c = ctx;
    return bad_record(c, record_comm(c->rec, c->rank, micro, counts));
}

/* The recorded grab's none.json and held.json, when it has them. */
static ddp_status rec_grab_layout(void *ctx, uint64_t k, const unsigned char **none, const held_mask **held)
{
    check_rank *c = ctx;
    char what[32], rel[PATH_MAX];
    record_values_name(RECORD_GRAB, k, what, sizeof what);
    snprintf(rel, sizeof rel, "%s/rank%d/%s", c->rec->impl, c->rank, what);
    int known;
    DDP_CHECK(bad_record(c, record_grad_none(c->rec, rel, c->none, &known)));
    *none = known ? c->none : NULL;
    record_held *h;
    size_t n;
    DDP_CHECK(bad_record(c, record_check_held(c->rec, c->rank, RECORD_GRAB, k, &h, &n, &known)));
    if (known) {
        ddp_status s = held_from(c, &c->grab_held, h, n);
        free(h);
        DDP_CHECK(s);
        *held = &c->grab_held;
    }
    return DDP_OK;
}

/*
 * A recording has the implementation's gradients at grabs only: its ranks' agreement is checked there. Not
 * when the ranks hold shards: each holds different elements (the rest scratch), and each held element is
 * compared with DDP's instead.
 */
static ddp_status rec_grabbed(void *ctx, verify_record *rec, const float *actual, const held_mask *held)
{
    check_rank *c = ctx;
    if (rec->synced != 1 || c->v.uneven_window || held || c->shard) /* every rank or none, as the reference's check */
        return DDP_OK;
    ddp_status st;
    VERIFY_COSTED(&c->v, COST_AGREEMENT, st = AS_CHECKS(agreement_check(&c->v.agreement, c->wr, c->m, actual,
                                                                        ddp_ref_reduced_params(c->ddp),
                                                                        c->v.bwd_op, NULL)));
    return st;
}

/* A clip: the coefficient the implementation's rank applied, as recorded (its gradients after it are the grabs'). */
static ddp_status rec_clip(void *ctx, const sched_clip *k, float *coef)
{
    check_rank *c = ctx;
    (void)k;
    return bad_record(c, record_clip(c->rec, c->rank, c->nclip++, coef));
}

/*
 * "loss_scale", before a backward: the scale the implementation's rank multiplied its loss by, as recorded. Its
 * local gradients are at that scale; the reference's are them times ref_scale / scale (powers of two: exact; a
 * scale that differs fails the scale's check first).
 */
static ddp_status rec_loss_scale(void *ctx, float ref_scale, float *scale)
{
    check_rank *c = ctx;
    DDP_CHECK(bad_record(c, record_scale(c->rec, c->rank, c->nscale++, scale)));
    model_set_loss_scale(c->m, ref_scale / *scale);
    return DDP_OK;
}

/*
 * "loss_norm", before a backward: the factor the implementation's rank multiplied its summed token loss by, as
 * recorded (ops.c checks it). Its local gradients are at that factor: the reference takes them as they are when it
 * holds, and rescaled to the intended factor when it does not (ref / factor, where that is a finite number other
 * than 0; the failure is reported at this backward whatever follows).
 */
static ddp_status rec_loss_factor(void *ctx, const ddpsim_loss_window *w, float ref, float *factor)
{
    check_rank *c = ctx;
    DDP_CHECK(bad_record(c, record_factor(c->rec, c->rank, (uint64_t)(c->v.bwd_index - 1), factor,
                                          &c->v.mixed_sequence, &c->v.mixed_factor)));
    (void)w;
    float rescale = ref / *factor;
    int holds = c->v.mixed_sequence < 0 && loss_windows_holds(&c->v.lw, c->v.loss_norm, c->v.bwd_index - 1, *factor);
    model_set_loss_scale(c->m, holds || !isfinite(rescale) || rescale == 0 ? 1.0f : rescale);
    return DDP_OK;
}

/* ... at an unscale_: what the implementation's rank found, as recorded. */
static ddp_status rec_unscale(void *ctx, int *found_inf)
{
    check_rank *c = ctx;
    return bad_record(c, record_unscale(c->rec, c->rank, c->nunscale++, found_inf));
}

static const verify_side recorded_side = {
    .clip = rec_clip,
    .loss_scale = rec_loss_scale,
    .loss_factor = rec_loss_factor,
    .unscale = rec_unscale,
    .forward_end = rec_forward_end,
    .backward_end = rec_backward_end,
    .backward_comm = rec_backward_comm,
    .values = rec_values,
    .grabbed = rec_grabbed,
    .grab_layout = rec_grab_layout,
};

/* This rank's slices of grad_shards as a mask over the reference's layout. */
static ddp_status setup_held(check_rank *c)
{
    const record_run *rec = c->rec;
    if (!rec->held_at)
        return DDP_OK;
    DDP_CHECK(held_mask_init(&c->held, c->m));
    for (size_t i = rec->held_at[c->rank]; i < rec->held_at[c->rank + 1]; i++)
        held_mask_add(&c->held, c->m, rec->held[i].param, rec->held[i].start, rec->held[i].count);
    held_mask_finish(&c->held, c->m);
    c->v.held = &c->held;
    return DDP_OK;
}

static ddp_status setup(check_rank *c, void *user)
{
    const record_run *rec = c->rec;
    verify_ops_config oc = {.tol = &c->cfg->tol, .schedule = &rec->schedule, .lr = rec->ddp.lr,
                            .momentum = rec->ddp.momentum,
                            .adamw = rec->ddp.adamw,
                            .comm_hook = rec->ddp.comm_hook, .params_rule = PARAMS_REPLAY,
                            .agree = &c->area->agree, .fig = &c->area->fig, .explain_across_ranks = 1,
                            .allow_unsynced_comm = c->cfg->allow_unsynced_comm,
                            .set_to_none = rec->ddp.set_to_none, .params_averaged = rec->params_averaged,
                            .scaler = rec->ddp.scaler, .faults = c->planted, .nfaults = rec->nplanted,
                            .plants_recorded = 1, .loss_norm = rec->loss_norm,
                            .tokens = rec->loss_norm ? &rec->tokens : NULL};
    faults_from_plants(rec->planted, rec->nplanted, c->planted);
    DDP_CHECK(verify_ops_init(&c->v, &oc, c->wr, user));
    c->src = (source_ctx){rec, c->rank, !rec->ddp.scaler.on};
    model_grad_source src = {src_used, src_grad, &c->src, src_npieces, src_piece};
    DDP_CHECK(model_create_recorded(rec->decls, rec->nparams, &src, &c->m));
    DDP_CHECK(model_recorded_add_buffers(c->m, rec->decls + rec->nparams, rec->nbuffers));
    for (int p = 0; p < rec->nparams; p++)
        DDP_CHECK(bad_record(c, record_read(rec, "init", p, model_weights(c->m) + model_param_at(c->m, p)->offset, 1)));
    for (int b = 0; b < rec->nbuffers; b++)
        DDP_CHECK(bad_record(c, record_read(rec, "init", rec->nparams + b,
                                            model_buffers(c->m) + model_buffer_at(c->m, b)->offset, 0)));
    if (rec->nbuffers && !(c->seen = malloc(model_buffers_size(c->m) * sizeof *c->seen)))
        return ddp_error(DDP_ERR_NOMEM, "the check's buffers: %zu floats", model_buffers_size(c->m));
    /* A sharded recording: DDP's reference decides which backward syncs, with find_unused on, as a live sharded
     * run's (rank.c ref_create): every parameter is reduced, an unused one with its .grad as it is. */
    ddp_config dc = rec->ddp;
    dc.find_unused |= rec->shard != SHARD_NONE;
    DDP_CHECK(ddp_ref_create(&dc, c->m, c->wr, &c->ddp));
    if (rec->shard != SHARD_NONE) {
        DDP_CHECK(shard_ref_create(rec->shard, &rec->mesh, rec->ddp.algo, c->m, c->wr, &c->shard));
        if (c->cfg->tol.kind == TOL_ORDER)
            DDP_CHECK(shard_ref_track_abs(c->shard)); /* the order tolerance's bound (budget_sharded) */
        c->v.shard = c->shard;
    }
    DDP_CHECK(ddp_ref_broadcast_params(c->ddp));
    size_t n = model_size(c->m);
    if (!(c->actual = malloc(n * sizeof *c->actual)))
        return ddp_error(DDP_ERR_NOMEM, "the check's buffers: %zu floats", n);
    DDP_CHECK(setup_held(c));
    return verify_ops_attach(&c->v, c->m, c->ddp);
}

static ddp_status check_rank_main(world_rank *wr, void *arg)
{
    const check_config *cfg = arg;
    check_rank c;
    memset(&c, 0, sizeof c);
    c.cfg = cfg;
    c.rec = cfg->rec;
    c.wr = wr;
    c.rank = world_rank_id(wr);
    int n = world_size(wr);
    void *user = world_rank_user_area(wr);
    c.area = stream_rank_areas(user, stream_ring_checks(sched_nchecks(&cfg->rec->schedule), n), n) + c.rank;
    model_runtime_init();
    world_set_op(wr, -1, "setup");
    ddp_status s = setup(&c, user);
    int ran_out = 0; /* as the recorded rank did: it stopped there */
    if (s == DDP_OK)
        s = verify_ops_run(&c.v, &recorded_side, &c, &ran_out);
    stream_finish(wr, user, c.v.next_check);
    machine_memory mem; /* what the rank held, its shared pages counted by their share (run.c reports it) */
    machine_memory_self(&mem);
    c.area->fig.pss_kib = mem.pss_kib;
    c.area->fig.private_kib = mem.private_kib;
    c.area->fig.shared_kib = mem.shared_kib;
    verify_ops_free(&c.v);
    free(c.actual);
    free(c.seen);
    held_mask_free(&c.held);
    held_mask_free(&c.grab_held);
    held_mask_free(&c.param_held);
    shard_ref_destroy(c.shard);
    ddp_ref_destroy(c.ddp);
    model_destroy(c.m);
    world_publish(wr, c.area, sizeof *c.area); /* its figures and agreement, for the parent's side */
    return s;
}

ddp_status check_run(const check_config *cfg, verify_result *out)
{
    memset(out, 0, sizeof *out);
    const record_run *rec = cfg->rec;
    world_config wc = {.nranks = rec->nranks, .timeout_s = cfg->timeout_s};
    DDP_CHECK(verify_result_start(out, &wc, &rec->schedule, 0, &cfg->sink));
    out->params_only = rec->params_averaged;
    out->loss_norm = rec->loss_norm;
    double t0 = clock_now_s();
    ddp_status s = world_run(out->w, check_rank_main, (void *)cfg);
    out->wall_s = clock_now_s() - t0;
    verify_result_collect(out);
    return s;
}
