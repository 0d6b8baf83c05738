/*
 * check.c - the reference replayed on a recorded run (check.h).
 */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agreement.h"
#include "budget.h"
#include "checker.h"
#include "clock.h"
#include "judge.h"
#include "machine.h"
#include "stream.h"
#include "rank.h"
#include "refcheck.h"

typedef struct source_ctx {
    const record_run *rec;
    int rank;
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
    return record_read(s->rec, what, p, dst, 1); /* a local gradient that is not finite: the run itself broke */
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
    int rank, n;
    source_ctx src;
    model *m;
    ddp_ref *ddp;
    model_batch batch;
    float *actual;          /* the recorded values of the check at hand */
    float *allow;           /* the parameters' bound after a step */
    float *seen;            /* the buffers the implementation's module held as a forward began */
    verify_record buffers;  /* buffer divergences since the last check, merged into its record */
    uint64_t nfwd;
    order_budget budget;
    ref_check refcheck;
    agreement_state agreement;
    void *user;             /* the shared user area: the records' stream (stream.h) and the rank areas */
    verify_rank_area *area;
    size_t next_check, op;
    size_t bwd_op;          /* the op of the last backward: where a sync happened, for the report */
    uint64_t grab, step;
    int last_synced, bwd_since_zero;
    /* uneven inputs, as rank.c keeps them */
    uint32_t *counts;
    unsigned char *active;
    int nactive, highest, in_join, peer_depth, uneven_window;
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

/* The implementation's recorded values of every parameter from DIR/<impl>/rank<r>/<what>. */
static ddp_status read_actual(check_rank *c, const char *what)
{
    char rel[PATH_MAX];
    for (int p = 0; p < c->rec->nparams; p++) {
        snprintf(rel, sizeof rel, "%s/rank%d/%s", c->rec->impl, c->rank, what);
        DDP_CHECK(bad_record(c, record_read(c->rec, rel, p, c->actual + model_param_at(c->m, p)->offset, 0)));
    }
    return DDP_OK;
}

static verify_record *next_record(check_rank *c)
{
    verify_record *r = stream_next(c->wr, c->user, c->next_check++);
    r->uneven = c->uneven_window;
    return r;
}

/* The buffer divergences of the forwards since the last check into this check's record (after its own). */
static void merge_buffers(check_rank *c, verify_record *rec)
{
    const verify_record *b = &c->buffers;
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
    memset(&c->buffers, 0, sizeof c->buffers);
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

/*
 * A forward, for the buffers: the reference's forward_begin broadcast rank
 * 0's buffers or not by PyTorch's rule, on the buffers each rank's module
 * held after its previous forward (as recorded), which is what this
 * forward should have seen; the recorded ones are compared with them,
 * bitwise. Then the forward's recorded result becomes the reference's: no
 * math here moves the buffers, as none computes the gradients.
 */
static ddp_status forward_buffers(check_rank *c)
{
    if (!c->rec->nbuffers)
        return DDP_OK;
    DDP_CHECK(read_buffers(c, c->nfwd, "seen", c->seen));
    checker_compare_buffers(c->m, model_buffers(c->m), c->seen, &c->buffers);
    return read_buffers(c, c->nfwd++, "after", model_buffers(c->m));
}

static void own_ready(void *ctx, int p)
{
    check_rank *c = ctx;
    model_accumulate(c->m, c->m, p);
    ddp_ref_grad_ready(c->ddp, p);
}

static ddp_status do_backward(check_rank *c)
{
    int syncs = ddp_ref_pending_sync(c->ddp);
    model_backward_local(c->m, own_ready, c);
    DDP_CHECK(source_status(c));
    /* The order tolerance's bound follows the accumulation and the sync (budget.h); the others need none. */
    int bounded = c->cfg->tol.kind == TOL_ORDER;
    if (bounded)
        budget_accumulate(&c->budget, c->m, model_grads(c->m), model_used(c->m));
    if (bounded && syncs)
        budget_before_sync(&c->budget, model_grads(c->m));
    DDP_CHECK(ddp_ref_backward_end(c->ddp));
    if (bounded && syncs)
        DDP_CHECK(budget_after_sync(&c->budget, c->wr, c->m, ddp_ref_averaged_params(c->ddp), ddp_ref_divisor(c->ddp)));
    c->last_synced = ddp_ref_last_synced(c->ddp);
    c->bwd_since_zero = 1;
    c->bwd_op = c->op;
    refcheck_accumulate(&c->refcheck, c->m, c->last_synced, c->n);
    return DDP_OK;
}

static ddp_status do_grab(check_rank *c)
{
    char what[64];
    snprintf(what, sizeof what, "grab%llu", (unsigned long long)c->grab++);
    DDP_CHECK(read_actual(c, what));
    verify_record *rec = next_record(c);
    rec->synced = c->bwd_since_zero ? c->last_synced : -1;
    const float *allow = c->cfg->tol.kind == TOL_ORDER ? c->budget.E : NULL;
    checker_compare(&c->cfg->tol, c->m, model_grads(c->m), c->actual, allow,
                    rec->synced == 1 ? ddp_ref_reduced_params(c->ddp) : NULL, rec);
    merge_buffers(c, rec);
    if (c->bwd_since_zero && c->last_synced && !c->uneven_window) { /* rank.c do_grab: every rank or none */
        const unsigned char *reduced = ddp_ref_reduced_params(c->ddp);
        DDP_CHECK(refcheck_run(&c->refcheck, c->wr, c->m, reduced, rec));
        DDP_CHECK(agreement_check(&c->agreement, c->wr, c->m, c->actual, reduced, c->bwd_op, NULL));
    }
    rec->done = 1;
    return DDP_OK;
}

/*
 * The parameters: after a step the reference's SGD of the parameters
 * recorded after the previous step, within the update's own rounding; then
 * the reference takes the recorded ones, so each step is judged alone. At
 * the end, the last step's, exactly.
 */
static ddp_status do_params(check_rank *c, int after_step)
{
    char what[64];
    if (after_step)
        snprintf(what, sizeof what, "step%llu", (unsigned long long)c->step++);
    else
        snprintf(what, sizeof what, "end");
    DDP_CHECK(read_actual(c, what));
    verify_record *rec = next_record(c);
    rec->synced = -1;
    float *w = model_weights(c->m);
    tolerance tol = c->cfg->tol;
    const float *allow = NULL;
    if (after_step) {
        tol.kind = TOL_ORDER;
        budget_params(&c->budget, c->cfg->tol.kind == TOL_ORDER, c->rec->ddp.lr, model_grads(c->m), w, c->allow);
        allow = c->allow;
    } else {
        tol.kind = TOL_BITWISE;
    }
    checker_compare(&tol, c->m, w, c->actual, allow, NULL, rec);
    merge_buffers(c, rec);
    memcpy(w, c->actual, model_size(c->m) * sizeof *w);
    rec->done = 1;
    return DDP_OK;
}

/* rank.c shadow_op: an op this rank, having run out inside join, shadows or skips. */
static ddp_status shadow_op(check_rank *c, sched_op op)
{
    switch (op) {
    case OP_FWD: return ddp_ref_join_shadow_forward(c->ddp, c->peer_depth == 0);
    case OP_BWD:
        DDP_CHECK(ddp_ref_join_shadow_backward(c->ddp));
        return c->cfg->tol.kind == TOL_ORDER && ddp_ref_join_shadow_synced(c->ddp)
                   ? budget_shadow_sync(&c->budget, c->wr)
                   : DDP_OK;
    case OP_GRAB:
    case OP_STEP: {
        verify_record *rec = next_record(c);
        rec->synced = -1;
        rec->joined = rec->done = 1;
        c->grab += op == OP_GRAB;
        c->step += op == OP_STEP;
        return DDP_OK;
    }
    default: return DDP_OK;
    }
}

static ddp_status run_op(check_rank *c, sched_op op)
{
    const sched *sc = &c->rec->schedule;
    switch (op) {
    case OP_JOIN_ENTER:
        c->in_join = 1;
        ddp_ref_join_enter(c->ddp, sc->joins[sched_join_of(sc, c->op)].divide_by_initial_world_size);
        return DDP_OK;
    case OP_JOIN_EXIT:
        c->in_join = 0;
        return ddp_ref_join_exit(c->ddp, sched_last_joiner(sc, c->counts, c->n, sched_join_of(sc, c->op)));
    case OP_ENTER: return ddp_ref_no_sync_enter(c->ddp);
    case OP_EXIT: return ddp_ref_no_sync_exit(c->ddp);
    case OP_FWD:
        DDP_CHECK(ddp_ref_forward(c->ddp, &c->batch));
        DDP_CHECK(source_status(c));
        return forward_buffers(c);
    case OP_BWD: return do_backward(c);
    case OP_GRAB: return do_grab(c);
    case OP_ZERO:
        c->uneven_window &= c->nactive < c->n;
        ddp_ref_zero_grad(c->ddp);
        budget_zero(&c->budget);
        refcheck_zero(&c->refcheck);
        c->last_synced = c->bwd_since_zero = 0;
        return DDP_OK;
    case OP_STEP:
        ddp_ref_step(c->ddp);
        return do_params(c, 1);
    }
    return ddp_error(DDP_ERR_INVALID, "unknown op %d", (int)op);
}

static ddp_status setup(check_rank *c)
{
    const record_run *rec = c->rec;
    c->counts = malloc((rec->schedule.nuneven ? rec->schedule.nuneven : 1) * (size_t)c->n * sizeof *c->counts);
    c->active = malloc((size_t)c->n);
    if (!c->counts || !c->active)
        return ddp_error(DDP_ERR_NOMEM, "the uneven counts of %d ranks", c->n);
    DDP_CHECK(sched_resolve(&rec->schedule, c->n, c->counts)); /* record_open checked it */
    c->src = (source_ctx){rec, c->rank};
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
    DDP_CHECK(model_batch_alloc(c->m, &c->batch));
    DDP_CHECK(ddp_ref_create(&rec->ddp, c->m, c->wr, &c->ddp));
    DDP_CHECK(ddp_ref_broadcast_params(c->ddp));
    size_t n = model_size(c->m);
    c->actual = malloc(n * sizeof *c->actual);
    c->allow = malloc(n * sizeof *c->allow);
    if (!c->actual || !c->allow)
        return ddp_error(DDP_ERR_NOMEM, "the check's buffers: %zu floats", 2 * n);
    DDP_CHECK(budget_init(&c->budget, n, c->n, rec->ddp.comm_hook));
    DDP_CHECK(refcheck_init(&c->refcheck, n, rec->ddp.comm_hook));
    return agreement_init(&c->agreement, &c->area->agree, c->n);
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
    c.n = world_size(wr);
    c.user = world_rank_user_area(wr);
    c.area = stream_rank_areas(c.user, stream_ring_checks(sched_nchecks(&cfg->rec->schedule), c.n), c.n) + c.rank;
    model_runtime_init();
    world_set_op(wr, -1, "setup");
    ddp_status s = setup(&c);
    const sched *sc = &cfg->rec->schedule;
    int ran_out = 0;
    for (size_t i = 0; s == DDP_OK && i < sc->nops; i++) {
        world_set_op(wr, (int)i, sched_op_name(sc->ops[i]));
        c.op = i;
        c.nactive = sched_participants(sc, c.counts, c.n, i, c.active, &c.highest);
        ddp_ref_participants(c.ddp, c.nactive, c.highest);
        if (c.nactive < c.n && (sc->ops[i] == OP_FWD || sc->ops[i] == OP_BWD))
            c.uneven_window = 1;
        int mine = c.active[c.rank];
        if (!mine && !c.in_join) {
            ran_out = 1; /* as the recorded rank did: it stopped there */
            break;
        }
        s = mine ? run_op(&c, sc->ops[i]) : shadow_op(&c, sc->ops[i]);
        c.peer_depth += sc->ops[i] == OP_ENTER ? 1 : sc->ops[i] == OP_EXIT ? -1 : 0;
    }
    if (s == DDP_OK && !ran_out) {
        world_set_op(wr, (int)sc->nops, "end");
        s = do_params(&c, 0);
    }
    stream_finish(wr, c.user, c.next_check);
    machine_memory mem; /* what the rank held, its shared pages counted by their share (run.c reports it) */
    machine_memory_self(&mem);
    c.area->fig.pss_kib = mem.pss_kib;
    c.area->fig.private_kib = mem.private_kib;
    c.area->fig.shared_kib = mem.shared_kib;
    free(c.counts);
    free(c.active);
    agreement_free(&c.agreement);
    refcheck_free(&c.refcheck);
    budget_free(&c.budget);
    free(c.actual);
    free(c.allow);
    free(c.seen);
    ddp_ref_destroy(c.ddp);
    model_batch_free(&c.batch);
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
    double t0 = clock_now_s();
    ddp_status s = world_run(out->w, check_rank_main, (void *)cfg);
    out->wall_s = clock_now_s() - t0;
    verify_result_collect(out);
    return s;
}
