/*
 * rank.c - one rank of a verification run (rank.h): build both sides, run
 * the schedule op by op on both, and compare at every grab.
 */
#include "rank.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agreement.h"
#include "checker.h"
#include "clock.h"
#include "dump.h"
#include "faults.h"
#include "judge.h"
#include "machine.h"
#include "record.h"
#include "refcheck.h"
#include "stream.h"

static ddp_status replica_create(rank_ctx *c, model **m)
{
    DDP_CHECK(model_create(c->cfg->model_spec, c->cfg->batch, m));
    if (c->cfg->inputs_dir)
        return dump_read_init(c->cfg->inputs_dir, *m);
    model_init(*m, c->cfg->seed, c->rank); /* rank-distinct: the broadcast must fix it */
    return DDP_OK;
}

static ddp_status ref_create(rank_ctx *c, ref_side *s)
{
    DDP_CHECK(replica_create(c, &s->m));
    DDP_CHECK(ddp_ref_create(&c->cfg->ddp, s->m, c->wr, &s->ddp));
    return ddp_ref_broadcast_params(s->ddp);
}

static void ref_destroy(ref_side *s)
{
    ddp_ref_destroy(s->ddp);
    model_destroy(s->m);
}

/* A callback of the implementation returned non-zero: say which and why, in its words and in ddpsim's. */
static ddp_status impl_failed(rank_ctx *c, const char *callback)
{
    const impl_env *e = &c->impl.env;
    if (e->coll_error[0] && e->error[0] && strcmp(e->error, e->coll_error) != 0)
        return ddp_error(DDP_ERR_BACKEND, "implementation '%s' failed in %s: %s (its collective: %s)", c->cfg->impl,
                         callback, e->error, e->coll_error);
    return ddp_error(DDP_ERR_BACKEND, "implementation '%s' failed in %s: %s", c->cfg->impl, callback,
                     e->error[0] ? e->error : e->coll_error[0] ? e->coll_error : "(no message)");
}

/*
 * The rank's own thread makes the reference's collectives unless it says
 * otherwise: a callback of the implementation runs as the implementation's,
 * ddpsim's checks as the checks' (coll_set_caller).
 */
static ddp_status impl_returned(rank_ctx *c, int rc, const char *callback)
{
    coll_set_caller(COLL_CALLER_REFERENCE);
    return rc == 0 ? DDP_OK : impl_failed(c, callback);
}
#define IMPL_CALL(c, call, name) impl_returned((c), (coll_set_caller(COLL_CALLER_IMPL), (call)), (name))

static ddp_status checks_returned(ddp_status s)
{
    coll_set_caller(COLL_CALLER_REFERENCE);
    return s;
}
#define AS_CHECKS(call) checks_returned((coll_set_caller(COLL_CALLER_CHECKS), (call)))

static ddp_status impl_create(rank_ctx *c)
{
    impl_side *s = &c->impl;
    DDP_CHECK(replica_create(c, &s->m));
    s->ops = c->cfg->impl_ops;
    s->env = (impl_env){.wr = c->wr, .m = s->m, .cfg = c->cfg->ddp, .chaos = c->cfg->chaos,
                        .chaos_seed = c->cfg->chaos_seed, .zero_to_none = c->cfg->ddp.set_to_none};
    impl_services_init(&s->svc, s->views, &s->env);
    if (c->cfg->backend == VERIFY_BACKEND_NCCL) {
        /* A little under the watchdog's limit, so a stuck NCCL call is aborted and named by its rank; the init
         * gets longer (NCCL_INIT_TIMEOUT_S at least) and counts as progress meanwhile. */
        double t = c->cfg->timeout_s;
        nccl_settings ns = {.ngpus = c->cfg->ngpus, .timeout_s = t * 0.8,
                            .init_timeout_s = t > 0 && t > NCCL_INIT_TIMEOUT_S ? t : t > 0 ? NCCL_INIT_TIMEOUT_S : 0,
                            .ring_check = c->cfg->nccl_ring_check};
        DDP_CHECK(nccl_comm_create(c->wr, &ns, c->nccl_fig, &s->env.nccl));
        s->env.backend_avg = c->cfg->nccl_avg;
    }
    int rc = 0;
    ddp_status st = IMPL_CALL(c, (rc = s->ops->create(&s->svc, &s->state)), "create");
    *c->refused = rc != 0;
    return st;
}

static void impl_destroy(impl_side *s, int failed)
{
    if (s->ops && s->state)
        s->ops->destroy(s->state); /* first: an implementation's own threads may still reduce */
    nccl_comm_destroy(s->env.nccl, failed);
    model_destroy(s->m);
}

/* Hand the implementation its ready events, in order, and write them to the trace. */
static void deliver(rank_ctx *c, const int *events, int n)
{
    impl_side *s = &c->impl;
    for (int i = 0; i < n && c->bwd_status == DDP_OK; i++) {
        if (c->trace.f) {
            char extra[128];
            snprintf(extra, sizeof extra, "\"param\": %d, \"name\": \"%s\"", events[i],
                     model_param_at(s->m, events[i])->name);
            trace_event(&c->trace, c->op, "ready", extra);
        }
        c->bwd_status = IMPL_CALL(c, s->ops->grad_ready(s->state, events[i]), "grad_ready");
    }
}

/* The implementation's side of a parameter whose gradient just completed: its .grad, then its event. */
static void impl_ready(rank_ctx *c, const model *src, int p)
{
    int out[MODEL_MAX_PARAMS];
    model_accumulate(c->impl.m, src, p); /* AccumulateGrad runs first; the hook after */
    int n = ready_produce(&c->events, p, out);
    if (n < 0 && c->bwd_status == DDP_OK)
        c->bwd_status = DDP_ERR_INVALID;
    deliver(c, out, n);
}

/* Backward of the reference's replica, serving the implementation too when their parameters are equal. */
static void on_ready_ref(void *ctx, int p)
{
    rank_ctx *c = ctx;
    model_accumulate(c->ref.m, c->ref.m, p);
    ddp_ref_grad_ready(c->ref.ddp, p);
    if (c->shared)
        impl_ready(c, c->ref.m, p);
}

/* Backward of the implementation's own replica (its parameters differ from the reference's). */
static void on_ready_impl(void *ctx, int p)
{
    rank_ctx *c = ctx;
    impl_ready(c, c->impl.m, p);
}

/*
 * Which .grad is None is ddpsim's to keep on both sides (ddpsim_impl.h
 * grad_defined): after a sync, every parameter the reference's sync gave a
 * value has one on the implementation's side too.
 */
static void mirror_defined(rank_ctx *c)
{
    if (!ddp_ref_last_synced(c->ref.ddp))
        return;
    const unsigned char *reduced = ddp_ref_reduced_params(c->ref.ddp);
    unsigned char *defined = model_grad_defined(c->impl.m);
    for (int p = 0; p < model_nparams(c->impl.m); p++)
        defined[p] |= reduced[p];
}

/*
 * One backward. Gradients complete layer by layer and each one's event goes
 * out at once, interleaved with the rest of the backward, as autograd's
 * hooks do: an implementation that reads a gradient before its event sees
 * it incomplete, and a communication thread overlaps the remaining compute.
 * The implementation ends its backward (draining its own reductions) before
 * the reference reduces, so the two never interleave their collectives.
 */
static ddp_status run_backward(rank_ctx *c)
{
    impl_side *im = &c->impl;
    c->bwd_status = DDP_OK;
    ready_begin(&c->events, &c->chaos, c->nbwd, c->cfg->replay, c->rank, &c->next_ready);
    uint64_t t0 = clock_now_ns(), comm0 = world_coll_ns(c->wr);
    model_backward_local(c->ref.m, on_ready_ref, c);
    if (!c->shared)
        model_backward_local(im->m, on_ready_impl, c);
    int out[MODEL_MAX_PARAMS];
    int n = ready_finish(&c->events, out);
    if (n < 0 && c->bwd_status == DDP_OK)
        c->bwd_status = DDP_ERR_INVALID;
    deliver(c, out, n > 0 ? n : 0);
    uint64_t t1 = clock_now_ns(), comm1 = world_coll_ns(c->wr);
    DDP_CHECK(c->bwd_status);
    c->nbwd++;
    DDP_CHECK(IMPL_CALL(c, im->ops->backward_end(im->state), "backward_end"));
    /* The implementation's time in collectives while the backward computed was hidden behind it; the rest,
     * until its backward_end returned, it made the step wait for. */
    uint64_t comm2 = world_coll_ns(c->wr);
    c->fig->compute_ns += t1 - t0;
    c->fig->impl_comm_hidden_ns += comm1 > comm0 ? comm1 - comm0 : 0;
    c->fig->impl_comm_exposed_ns += comm2 > comm1 ? comm2 - comm1 : 0;
    if (!c->budget.E) {
        DDP_CHECK(ddp_ref_backward_end(c->ref.ddp));
        mirror_defined(c);
        return DDP_OK;
    }
    /* The order tolerance's bound follows the accumulation and the sync (budget.h). */
    budget_accumulate(&c->budget, c->ref.m, model_grads(c->ref.m), model_used(c->ref.m));
    int syncs = ddp_ref_pending_sync(c->ref.ddp);
    if (syncs)
        budget_before_sync(&c->budget, model_grads(c->ref.m));
    DDP_CHECK(ddp_ref_backward_end(c->ref.ddp));
    mirror_defined(c);
    return syncs ? AS_CHECKS(budget_after_sync(&c->budget, c->wr, c->ref.m, ddp_ref_averaged_params(c->ref.ddp),
                                               ddp_ref_divisor(c->ref.ddp)))
                 : DDP_OK;
}

/* --record: the implementation's buffers as this forward began ("seen") or ended ("after"), record.h's layout. */
static ddp_status record_buffers(rank_ctx *c, const char *which, int ended)
{
    if (!c->cfg->record_dir || !model_nbuffers(c->impl.m))
        return DDP_OK;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/rank%d/fwd%llu/%s", c->cfg->record_dir, c->rank,
             (unsigned long long)c->nfwd_recorded, which);
    c->nfwd_recorded += ended;
    DDP_CHECK(dump_mkdirs(dir));
    return dump_write_buffer_tensors(dir, c->impl.m, model_buffers(c->impl.m));
}

/*
 * The forward: the reference's, and the implementation's own only when its
 * parameters or its buffers differ from the reference's as the forward
 * starts (after both sides' buffer broadcasts). Otherwise the same math on
 * the same bits would give the same activations and move the buffers the
 * same way, so the implementation's buffers take the reference's.
 */
static ddp_status run_forward(rank_ctx *c)
{
    impl_side *im = &c->impl;
    uint64_t t0 = clock_now_ns();
    DDP_CHECK(ddp_ref_forward_begin(c->ref.ddp));
    DDP_CHECK(IMPL_CALL(c, im->ops->forward_begin(im->state, im->no_sync > 0), "forward_begin"));
    size_t nbuf = model_buffers_size(im->m);
    c->shared = memcmp(model_weights(c->ref.m), model_weights(im->m), model_size(im->m) * sizeof(float)) == 0 &&
                (nbuf == 0 || memcmp(model_buffers(c->ref.m), model_buffers(im->m), nbuf * sizeof(float)) == 0);
    DDP_CHECK(record_buffers(c, "seen", 0));
    DDP_CHECK(model_forward(c->ref.m, &c->batch, NULL));
    ddp_ref_forward_end(c->ref.ddp);
    if (!c->shared)
        DDP_CHECK(model_forward(im->m, &c->batch, NULL));
    else if (nbuf)
        memcpy(model_buffers(im->m), model_buffers(c->ref.m), nbuf * sizeof(float));
    c->fig->compute_ns += clock_now_ns() - t0;
    return record_buffers(c, "after", 1);
}

/* The batch of forward b on `rank`: seeded, or read from the inputs directory. */
static ddp_status get_batch(rank_ctx *c, int rank, uint64_t b, model *m, model_batch *out)
{
    if (c->cfg->sabotage == SABOTAGE_SAME_DATA)
        rank = 0;
    model_batch_fill(m, out, c->cfg->seed, rank, b);
    if (c->cfg->inputs_dir)
        DDP_CHECK(dump_read_batch(c->cfg->inputs_dir, rank, b, m, out));
    return DDP_OK;
}

/* Both sides' gradients of grab k into DIR/<side>/rank<r>/grab<k>/. */
static ddp_status dump_grab(rank_ctx *c, size_t k)
{
    char dir[PATH_MAX], name[64];
    snprintf(dir, sizeof dir, "%s/reference/rank%d/grab%zu", c->cfg->dump_dir, c->rank, k);
    DDP_CHECK(dump_mkdirs(dir));
    DDP_CHECK(dump_write_tensors(dir, c->ref.m, model_grads(c->ref.m)));
    if (c->cfg->impl_ops == &impl_reference_ops)
        return DDP_OK; /* the same replica's gradients once more */
    snprintf(dir, sizeof dir, "%s/%s/rank%d/grab%zu", c->cfg->dump_dir, verify_dump_name(c->cfg, name, sizeof name),
             c->rank, k);
    DDP_CHECK(dump_mkdirs(dir));
    return dump_write_tensors(dir, c->impl.m, model_grads(c->impl.m));
}

/*
 * --record: the run as a framework's test records it (record.h). The
 * implementation's values go to DIR/<impl>/rank<r>/<what>; a micro-step's
 * local gradients are those of the replica that computed the
 * implementation's backward, so `ddpsim check` replays the reference on
 * what the implementation was really given.
 */
static ddp_status record_impl(rank_ctx *c, const char *what, const float *values)
{
    if (!c->cfg->record_dir)
        return DDP_OK;
    char dir[PATH_MAX], name[64];
    snprintf(dir, sizeof dir, "%s/%s/rank%d/%s", c->cfg->record_dir, verify_dump_name(c->cfg, name, sizeof name),
             c->rank, what);
    DDP_CHECK(dump_mkdirs(dir));
    return dump_write_tensors(dir, c->impl.m, values);
}

static ddp_status record_micro(rank_ctx *c)
{
    if (!c->cfg->record_dir)
        return DDP_OK;
    const model *m = c->shared ? c->ref.m : c->impl.m;
    return record_write_micro(c->cfg->record_dir, c->rank, c->nbwd - 1, m, model_local_grads(m), model_used(m));
}

/* The deliberately wrong references of ddpsim's own tests (verify_sabotage), before and after a backward. */
static void sabotage_before_backward(rank_ctx *c)
{
    if (c->cfg->sabotage == SABOTAGE_DROPS_MICROSTEPS && ddp_ref_pending_sync(c->ref.ddp))
        model_zero_grad(c->ref.m);
}

static void sabotage_after_backward(rank_ctx *c)
{
    if (c->cfg->sabotage == SABOTAGE_RANK_DISAGREES && c->rank == 1 && ddp_ref_last_synced(c->ref.ddp)) {
        uint32_t u;
        memcpy(&u, model_grads(c->ref.m), sizeof u);
        u ^= 1;
        memcpy(model_grads(c->ref.m), &u, sizeof u);
    }
}

/* This rank's record of the next check, cleared (in the records' ring: stream.h). */
static verify_record *next_record(rank_ctx *c)
{
    verify_record *rec = stream_next(c->wr, c->user, c->next_check++);
    rec->uneven = c->uneven_window;
    return rec;
}

static ddp_status do_grab(rank_ctx *c, size_t k)
{
    verify_record *rec = next_record(c);
    rec->synced = c->bwd_since_zero ? ddp_ref_last_synced(c->ref.ddp) : -1;
    checker_compare(&c->cfg->tol, c->ref.m, model_grads(c->ref.m), model_grads(c->impl.m), c->budget.E,
                    rec->synced == 1 ? ddp_ref_reduced_params(c->ref.ddp) : NULL, rec);
    checker_compare_buffers(c->ref.m, model_buffers(c->ref.m), model_buffers(c->impl.m), rec);
    /* The reference's own check sums every rank's local gradients since the last zero_grad: not while a rank that
     * ran out of inputs holds gradients its peers' syncs did not take (uneven_window), every rank or none. */
    if (c->last_was_synced_bwd && !c->uneven_window)
        DDP_CHECK(AS_CHECKS(refcheck_run(&c->refcheck, c->wr, c->ref.m, ddp_ref_reduced_params(c->ref.ddp), rec)));
    if (c->cfg->dump_dir)
        DDP_CHECK(dump_grab(c, k));
    char what[32];
    snprintf(what, sizeof what, "grab%zu", k);
    DDP_CHECK(record_impl(c, what, model_grads(c->impl.m)));
    rec->done = 1;
    return DDP_OK;
}

/*
 * The implementation's parameters against the reference's, after a step or
 * at the end. Under a tolerance that is not bitwise a passing check also
 * puts the reference's parameters into the implementation's replica: the
 * drift it allowed (reported as the check's difference) would otherwise
 * grow step by step and feed every later gradient, which the tolerance does
 * not account for.
 */
static void check_params(rank_ctx *c, int after_step)
{
    verify_record *rec = next_record(c);
    rec->synced = -1;
    const float *e = model_weights(c->ref.m);
    float *a = model_weights(c->impl.m);
    const float *allow = NULL; /* at the end: nothing since the last (rebased) step */
    if (c->param_allow && after_step) {
        budget_params(&c->budget, 1, c->cfg->ddp.lr, model_grads(c->ref.m), e, c->param_allow);
        allow = c->param_allow;
    }
    checker_compare(&c->cfg->tol, c->ref.m, e, a, allow, NULL, rec);
    checker_compare_buffers(c->ref.m, model_buffers(c->ref.m), model_buffers(c->impl.m), rec);
    rec->done = 1;
    if (c->cfg->tol.kind != TOL_BITWISE && judge_record_ok(rec))
        memcpy(a, e, model_size(c->ref.m) * sizeof *a);
}

/*
 * An op of an uneven repetition that this rank, having run out, does not run. Inside join it shadows its
 * peers (ddp_ref.h): at their forward the reference's main_hook and the implementation's join_shadow, at
 * their backward the reference's zeros and its part in the agreement check; a grab or a step it does not
 * reach leaves a record that says so. Without join it has stopped (verify_rank_main).
 */
static ddp_status shadow_op(rank_ctx *c, sched_op op)
{
    impl_side *im = &c->impl;
    switch (op) {
    case OP_FWD:
        DDP_CHECK(ddp_ref_join_shadow_forward(c->ref.ddp, c->peer_depth == 0));
        return IMPL_CALL(c, im->ops->join_shadow(im->state), "join_shadow");
    case OP_BWD:
        DDP_CHECK(ddp_ref_join_shadow_backward(c->ref.ddp));
        if (!ddp_ref_join_shadow_synced(c->ref.ddp))
            return DDP_OK;
        if (c->budget.E)
            DDP_CHECK(AS_CHECKS(budget_shadow_sync(&c->budget, c->wr)));
        return AS_CHECKS(agreement_check(&c->agreement, c->wr, c->impl.m, NULL, ddp_ref_reduced_params(c->ref.ddp),
                                         c->op, c->active));
    case OP_GRAB:
    case OP_STEP: {
        verify_record *rec = next_record(c);
        rec->synced = -1;
        rec->joined = rec->done = 1;
        c->next_grab += op == OP_GRAB;
        c->nsteps += op == OP_STEP;
        return DDP_OK;
    }
    default: return DDP_OK;
    }
}

/* Who runs op i: c->active, c->nactive, c->highest, told to the reference and the reference implementation. */
static int who_runs(rank_ctx *c, size_t i)
{
    const sched *sc = c->cfg->schedule;
    c->nactive = sched_participants(sc, c->counts, c->n, i, c->active, &c->highest);
    ddp_ref_participants(c->ref.ddp, c->nactive, c->highest);
    c->impl.env.join_nactive = c->nactive;
    c->impl.env.join_highest = c->highest;
    c->impl.env.join_peers_sync = c->peer_depth == 0;
    if (c->nactive < c->n && (sc->ops[i] == OP_FWD || sc->ops[i] == OP_BWD))
        c->uneven_window = 1;
    return c->active[c->rank];
}

static ddp_status run_op(rank_ctx *c, sched_op op, size_t *grab)
{
    impl_side *im = &c->impl;
    switch (op) {
    case OP_ENTER:
        DDP_CHECK(ddp_ref_no_sync_enter(c->ref.ddp));
        im->no_sync++; /* a depth: nested no_sync contexts each restore what they found */
        return IMPL_CALL(c, im->ops->no_sync_enter(im->state), "no_sync_enter");
    case OP_EXIT:
        DDP_CHECK(ddp_ref_no_sync_exit(c->ref.ddp));
        im->no_sync--;
        return IMPL_CALL(c, im->ops->no_sync_exit(im->state), "no_sync_exit");
    case OP_FWD:
        DDP_CHECK(get_batch(c, c->rank, c->next_batch, c->ref.m, &c->batch));
        if (c->cfg->dump_dir)
            DDP_CHECK(dump_write_batch(c->cfg->dump_dir, c->rank, c->next_batch, c->ref.m, &c->batch));
        c->pending_batch = c->next_batch++;
        return run_forward(c);
    case OP_BWD:
        sabotage_before_backward(c);
        DDP_CHECK(run_backward(c));
        DDP_CHECK(record_micro(c));
        sabotage_after_backward(c);
        c->last_was_synced_bwd = ddp_ref_last_synced(c->ref.ddp);
        refcheck_accumulate(&c->refcheck, c->ref.m, c->last_was_synced_bwd, c->n);
        c->bwd_since_zero = 1;
        return c->last_was_synced_bwd
                   ? AS_CHECKS(agreement_check(&c->agreement, c->wr, c->impl.m, model_grads(c->impl.m),
                                               ddp_ref_reduced_params(c->ref.ddp), c->op, c->active))
                   : DDP_OK;
    case OP_GRAB: return do_grab(c, (*grab)++);
    case OP_JOIN_ENTER: {
        const sched *sc = c->cfg->schedule;
        int k = sched_join_of(sc, c->op);
        int divide = sc->joins[k].divide_by_initial_world_size;
        ddp_ref_join_enter(c->ref.ddp, divide);
        c->in_join = 1;
        if (!im->ops->join_enter || !im->ops->join_shadow || !im->ops->join_exit) /* refused before: a guard */
            return ddp_error(DDP_ERR_BACKEND, "implementation '%s' does not support join", c->cfg->impl);
        return IMPL_CALL(c, im->ops->join_enter(im->state, divide), "join_enter");
    }
    case OP_JOIN_EXIT: {
        c->in_join = 0;
        int last = sched_last_joiner(c->cfg->schedule, c->counts, c->n, sched_join_of(c->cfg->schedule, c->op));
        im->env.join_last = last;
        DDP_CHECK(ddp_ref_join_exit(c->ref.ddp, last));
        return IMPL_CALL(c, im->ops->join_exit(im->state), "join_exit");
    }
    case OP_ZERO:
        c->uneven_window &= c->nactive < c->n;
        ddp_ref_zero_grad(c->ref.ddp);
        model_zero_grad_as(im->m, c->cfg->ddp.set_to_none);
        refcheck_zero(&c->refcheck);
        c->last_was_synced_bwd = c->bwd_since_zero = 0;
        budget_zero(&c->budget);
        return IMPL_CALL(c, im->ops->zero_grad(im->state), "zero_grad");
    case OP_STEP: {
        ddp_ref_step(c->ref.ddp);
        int owned = 0;
        if (im->ops->optimizer_step)
            DDP_CHECK(IMPL_CALL(c, im->ops->optimizer_step(im->state, &owned), "optimizer_step"));
        if (!owned)
            ddp_sgd_step(im->m, c->cfg->ddp.lr);
        DDP_CHECK(IMPL_CALL(c, im->ops->step(im->state), "step"));
        char what[32];
        snprintf(what, sizeof what, "step%llu", (unsigned long long)c->nsteps++);
        DDP_CHECK(record_impl(c, what, model_weights(im->m)));
        check_params(c, 1);
        return DDP_OK;
    }
    }
    return ddp_error(DDP_ERR_INVALID, "unknown op %d", (int)op);
}

/* Everything a rank needs before its first op: both sides, the sums of the reference's own check, the dump's init. */
static ddp_status rank_setup(rank_ctx *c)
{
    const verify_config *cfg = c->cfg;
    const sched *sc = cfg->schedule;
    c->counts = malloc((sc->nuneven ? sc->nuneven : 1) * (size_t)c->n * sizeof *c->counts);
    c->active = malloc((size_t)c->n);
    if (!c->counts || !c->active)
        return ddp_error(DDP_ERR_NOMEM, "the uneven counts of %d ranks", c->n);
    DDP_CHECK(sched_resolve(sc, c->n, c->counts)); /* checked before any rank started: cannot fail here */
    DDP_CHECK(trace_open(&c->trace, cfg->trace_path, c->rank, c->wr));
    if (cfg->replay && c->rank < cfg->replay->nranks)
        world_force_arrivals(c->wr, cfg->replay->arrivals[c->rank], cfg->replay->narrivals[c->rank]);
    DDP_CHECK(ref_create(c, &c->ref));
    DDP_CHECK(impl_create(c));
    DDP_CHECK(model_batch_alloc(c->ref.m, &c->batch));
    DDP_CHECK(refcheck_init(&c->refcheck, model_size(c->ref.m), cfg->ddp.comm_hook));
    if (cfg->tol.kind == TOL_ORDER) {
        DDP_CHECK(budget_init(&c->budget, model_size(c->ref.m), c->n, cfg->ddp.comm_hook));
        c->param_allow = malloc(model_size(c->ref.m) * sizeof *c->param_allow);
        if (!c->param_allow)
            return ddp_error(DDP_ERR_NOMEM, "the order tolerance's bound on the parameters");
    }
    DDP_CHECK(agreement_init(&c->agreement, c->agree, c->n));
    const char *dirs[2] = {cfg->dump_dir, cfg->record_dir};
    for (int i = 0; i < 2; i++)
        if (c->rank == 0 && dirs[i]) {
            char dir[PATH_MAX];
            snprintf(dir, sizeof dir, "%s/init", dirs[i]);
            DDP_CHECK(dump_write_tensors(dir, c->ref.m, model_weights(c->ref.m)));
            if (i == 1)
                DDP_CHECK(dump_write_buffer_tensors(dir, c->ref.m, model_buffers(c->ref.m)));
        }
    return trace_arrivals(&c->trace, c->op, c->wr); /* the constructors' broadcasts */
}

ddp_status verify_rank_main(world_rank *wr, void *arg)
{
    const verify_config *cfg = arg;
    rank_ctx c;
    memset(&c, 0, sizeof c);
    c.cfg = cfg;
    c.wr = wr;
    c.rank = world_rank_id(wr);
    c.n = world_size(wr);
    c.user = world_rank_user_area(wr);
    verify_rank_area *area =
        stream_rank_areas(c.user, stream_ring_checks(sched_nchecks(cfg->schedule), c.n), c.n) + c.rank;
    c.nccl_fig = &area->nccl;
    c.fig = &area->fig;
    c.agree = &area->agree;
    c.refused = &area->refused;
    model_runtime_init();
    coll_set_caller(COLL_CALLER_REFERENCE);
    world_set_op(wr, -1, "setup");
    chaos_rank_init(&c.chaos, cfg->chaos, cfg->chaos_seed, c.rank, c.n);
    ddp_status s = rank_setup(&c);
    c.fig->setup_cpu_ns = clock_cpu_ns();
    c.fig->setup_coll_cpu_ns = world_coll_cpu_ns(wr);
    int ran_out = 0; /* outside join: this rank stopped where it ran out, and its peers will wait for it */
    for (size_t i = 0; s == DDP_OK && i < cfg->schedule->nops; i++) {
        sched_op op = cfg->schedule->ops[i];
        world_set_op(wr, (int)i, sched_op_name(op));
        c.op = i;
        int mine = who_runs(&c, i);
        if (!mine && !c.in_join) {
            ran_out = 1;
            break;
        }
        if (faults_before_op(cfg->faults, cfg->nfaults, c.rank, i))
            c.impl.env.flip_pending = 1; /* the implementation's next reduction, never the reference's */
        chaos_delay(&c.chaos, i);
        trace_event(&c.trace, i, sched_op_name(op), NULL);
        s = mine ? run_op(&c, op, &c.next_grab) : shadow_op(&c, op);
        c.peer_depth += op == OP_ENTER ? 1 : op == OP_EXIT ? -1 : 0;
        if (s == DDP_OK)
            s = trace_arrivals(&c.trace, i, wr);
    }
    if (s == DDP_OK && !ran_out) {
        world_set_op(wr, (int)cfg->schedule->nops, "end");
        s = record_impl(&c, "end", model_weights(c.impl.m));
        if (s == DDP_OK)
            check_params(&c, 0);
    }
    stream_finish(wr, c.user, c.next_check);
    machine_memory mem; /* before teardown: what the rank held, its shared pages counted by their share */
    machine_memory_self(&mem);
    c.fig->pss_kib = mem.pss_kib;
    c.fig->private_kib = mem.private_kib;
    c.fig->shared_kib = mem.shared_kib;
    c.fig->cpu_ns = clock_cpu_ns();
    ddp_status ts = trace_close(&c.trace, cfg->schedule->nops, s == DDP_OK);
    if (s == DDP_OK)
        s = ts;
    model_batch_free(&c.batch);
    refcheck_free(&c.refcheck);
    agreement_free(&c.agreement);
    free(c.param_allow);
    free(c.counts);
    free(c.active);
    budget_free(&c.budget);
    impl_destroy(&c.impl, s != DDP_OK);
    ref_destroy(&c.ref);
    world_publish(wr, area, sizeof *area); /* its figures, agreement and NCCL figures, for the parent's side */
    return s;
}
