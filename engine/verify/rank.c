/*
 * rank.c - one rank of a live verification run (rank.h): build both sides,
 * and be the implementation's side of every op (ops.h) for a plugin: what it
 * is told, when, and where its values are.
 */
#include "rank.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clip.h"
#include "clock.h"
#include "dump.h"
#include "faults.h"
#include "machine.h"
#include "record.h"
#include "stream.h"

static ddp_status replica_create(rank_ctx *c, model **m)
{
    DDP_CHECK(model_create(c->cfg->model_spec, c->cfg->batch, m));
    if (c->cfg->inputs_dir)
        return dump_read_init(c->cfg->inputs_dir, *m);
    model_init(*m, c->cfg->seed, c->rank); /* rank-distinct: the broadcast must fix it */
    return DDP_OK;
}

/*
 * The reference: DDP's, and with --shard the sharded one beside it. DDP's
 * then only decides when a backward syncs, with find_unused on: a sharded
 * run reduces every parameter (an unused one contributes its .grad as it
 * is), which DDP without find_unused refuses to do.
 */
static ddp_status ref_create(rank_ctx *c, ref_side *s)
{
    DDP_CHECK(replica_create(c, &s->m));
    ddp_config dc = c->cfg->ddp;
    dc.find_unused |= c->cfg->shard != SHARD_NONE;
    DDP_CHECK(ddp_ref_create(&dc, s->m, c->wr, &s->ddp));
    if (c->cfg->shard != SHARD_NONE) {
        mesh me = mesh_or_flat(&c->cfg->mesh, c->n);
        DDP_CHECK(shard_ref_create(c->cfg->shard, &me, c->cfg->ddp.algo, s->m, c->wr, &s->shard));
        if (c->cfg->tol.kind == TOL_ORDER)
            DDP_CHECK(shard_ref_track_abs(s->shard)); /* the order tolerance's bound (budget_sharded) */
    }
    return ddp_ref_broadcast_params(s->ddp);
}

static void ref_destroy(ref_side *s)
{
    shard_ref_destroy(s->shard);
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
static void impl_calling(rank_ctx *c)
{
    interleave_point(); /* --sched: each callback is a point where the plugin's other threads may go first */
    interleave_callback(1);
    coll_set_caller(COLL_CALLER_IMPL);
    c->impl_t0 = clock_now_ns();
}

static ddp_status impl_returned(rank_ctx *c, int rc, const char *callback)
{
    interleave_callback(0);
    c->fig->cost_ns[COST_IMPL] += clock_now_ns() - c->impl_t0; /* the implementation's own work */
    coll_set_caller(COLL_CALLER_REFERENCE);
    return rc == 0 ? DDP_OK : impl_failed(c, callback);
}
#define IMPL_CALL(c, call, name) impl_returned((c), (impl_calling(c), (call)), (name))


/* --shard: the layout the implementation declares (version 5), checked, and what this rank holds of it. */
static ddp_status impl_layout(rank_ctx *c)
{
    impl_side *s = &c->impl;
    if (!s->ops->shard_layout)
        return ddp_error(DDP_ERR_BACKEND,
                         "implementation '%s' declares no sharded layout: --shard needs interface version 5's "
                         "shard_layout", c->cfg->impl);
    int nunits = 0;
    const ddpsim_flat_unit *units = NULL;
    DDP_CHECK(IMPL_CALL(c, s->ops->shard_layout(s->state, &nunits, &units), "shard_layout"));
    ddp_status st = shard_view_init(&c->view, c->cfg->shard, &s->env.mesh, c->rank, s->m, nunits, units);
    if (st == DDP_ERR_BACKEND) {
        char why[400];
        snprintf(why, sizeof why, "%s", ddp_error_text()); /* ddp_error writes where ddp_error_text reads */
        return ddp_error(DDP_ERR_BACKEND, "implementation '%s' is wrong in %s", c->cfg->impl, why);
    }
    DDP_CHECK(st);
    c->v.param_held = shard_mode_params_sharded(c->cfg->shard) ? &c->view.held : NULL;
    return DDP_OK;
}

/* What a grab of a sharded run reads: the shards, unless the mode reads the unsharded local .grad there. */
static int reads_shards(const rank_ctx *c)
{
    return c->v.shard && !shard_ref_reads_local(c->v.shard, verify_ops_grab_synced(&c->v));
}

static ddp_status impl_create(rank_ctx *c)
{
    impl_side *s = &c->impl;
    DDP_CHECK(replica_create(c, &s->m));
    DDP_CHECK(ddp_optim_init(&s->optim, c->cfg->ddp.lr, c->cfg->ddp.momentum, &c->cfg->ddp.adamw,
                             model_size(s->m)));
    s->ops = c->cfg->impl_ops;
    s->env = (impl_env){.wr = c->wr, .m = s->m, .cfg = c->cfg->ddp, .chaos = c->cfg->chaos,
                        .chaos_seed = c->cfg->chaos_seed, .zero_to_none = c->cfg->ddp.set_to_none,
                        .shard_mode = (int)c->cfg->shard, .mesh = c->cfg->mesh,
                        .trace_fn = c->trace.on ? trace_event_here : NULL, .trace = &c->trace};
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
    DDP_CHECK(st);
    return c->cfg->shard != SHARD_NONE ? impl_layout(c) : DDP_OK;
}

static void impl_destroy(rank_ctx *c, int failed)
{
    impl_side *s = &c->impl;
    if (s->ops && s->state) {
        interleave_callback(1);
        s->ops->destroy(s->state); /* first: an implementation's own threads may still reduce */
        interleave_callback(0);
    }
    shard_view_free(&c->view);
    nccl_comm_destroy(s->env.nccl, failed);
    ddp_optim_free(&s->optim);
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
            trace_event(&c->trace, c->v.op, "ready", extra);
        }
        c->bwd_status = IMPL_CALL(c, s->ops->grad_ready(s->state, events[i]), "grad_ready");
    }
}

/* The implementation's side of a parameter whose gradient just completed: its .grad, then its event. */
static void impl_ready(rank_ctx *c, const model *src, int p)
{
    int out[MODEL_MAX_PARAMS];
    /* AccumulateGrad runs first; the hook after. The reference's backward at the implementation's loss scale. */
    model_accumulate_times(c->impl.m, src, p, src == c->impl.m ? 1.0f : c->share_factor);
    int n = ready_produce(&c->events, p, out);
    if (n < 0 && c->bwd_status == DDP_OK)
        c->bwd_status = DDP_ERR_INVALID;
    deliver(c, out, n);
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
    if (!ddp_ref_last_synced(c->v.ddp) || c->cfg->shard != SHARD_NONE) /* a sharded run's .grad is local */
        return;
    const unsigned char *reduced = ddp_ref_reduced_params(c->v.ddp);
    unsigned char *defined = model_grad_defined(c->impl.m);
    for (int p = 0; p < model_nparams(c->impl.m); p++)
        defined[p] |= reduced[p];
}

/* ---- the implementation's side of the ops (ops.h verify_side), for a live plugin ---- */

static ddp_status live_before_op(void *ctx, size_t i, sched_op op)
{
    rank_ctx *c = ctx;
    if (faults_before_op(c->cfg->faults, c->cfg->nfaults, c->rank, i))
        c->impl.env.flip_pending = 1; /* the implementation's next reduction, never the reference's */
    chaos_delay(&c->chaos, i);
    trace_event(&c->trace, i, sched_op_name(op), NULL);
    trace_flush(&c->trace); /* a rank the supervisor kills still shows the op it stopped in */
    return DDP_OK;
}

static ddp_status live_after_op(void *ctx, size_t i)
{
    rank_ctx *c = ctx;
    return trace_arrivals(&c->trace, i, c->wr);
}

static void live_participants(void *ctx)
{
    rank_ctx *c = ctx;
    c->impl.env.join_nactive = c->v.nactive;
    c->impl.env.join_highest = c->v.highest;
    c->impl.env.join_peers_sync = c->v.peer_depth == 0;
}

static ddp_status live_no_sync(void *ctx, int enter)
{
    rank_ctx *c = ctx;
    impl_side *im = &c->impl;
    im->no_sync += enter ? 1 : -1; /* a depth: nested no_sync contexts each restore what they found */
    return enter ? IMPL_CALL(c, im->ops->no_sync_enter(im->state), "no_sync_enter")
                 : IMPL_CALL(c, im->ops->no_sync_exit(im->state), "no_sync_exit");
}

/* The batch of the next forward: seeded, or read from the inputs directory; and --dump's copy of it. */
static ddp_status live_batch(void *ctx, model_batch *batch)
{
    rank_ctx *c = ctx;
    c->fwd_t0 = clock_now_ns();
    int rank = c->cfg->sabotage == SABOTAGE_SAME_DATA ? 0 : c->rank;
    uint64_t b = c->next_batch++;
    model_batch_fill(c->v.m, batch, c->cfg->seed, rank, b);
    if (c->cfg->inputs_dir)
        DDP_CHECK(dump_read_batch(c->cfg->inputs_dir, rank, b, c->v.m, batch));
    return c->cfg->dump_dir ? dump_write_batch(c->cfg->dump_dir, c->rank, b, c->v.m, batch) : DDP_OK;
}

/* --record: the implementation's buffers as this forward began ("seen") or ended ("after"), record.h's layout. */
static ddp_status record_buffers(rank_ctx *c, const char *which, int ended)
{
    if (!c->cfg->record_dir || !model_nbuffers(c->impl.m))
        return DDP_OK;
    uint64_t k = c->nfwd_recorded;
    c->nfwd_recorded += ended;
    return record_write_forward_buffers(c->cfg->record_dir, c->rank, k, which, c->impl.m);
}

/*
 * The forward: the reference's, and the implementation's own only when its
 * parameters or its buffers differ from the reference's as the forward
 * starts (after both sides' buffer broadcasts). Otherwise the same math on
 * the same bits would give the same activations and move the buffers the
 * same way, so the implementation's buffers take the reference's.
 */
static ddp_status live_forward_begin(void *ctx)
{
    rank_ctx *c = ctx;
    impl_side *im = &c->impl;
    DDP_CHECK(IMPL_CALL(c, im->ops->forward_begin(im->state, im->no_sync > 0), "forward_begin"));
    size_t nbuf = model_buffers_size(im->m);
    VERIFY_COSTED(&c->v, COST_SHARED_TEST,
                  c->shared = !c->v.loss_norm && /* the token loss: each side's backward takes its own factor */
                              memcmp(model_weights(c->v.m), model_weights(im->m), model_size(im->m) * sizeof(float)) ==
                                  0 &&
                              (nbuf == 0 ||
                               memcmp(model_buffers(c->v.m), model_buffers(im->m), nbuf * sizeof(float)) == 0));
    return record_buffers(c, "seen", 0);
}

static ddp_status live_forward_end(void *ctx)
{
    rank_ctx *c = ctx;
    impl_side *im = &c->impl;
    size_t nbuf = model_buffers_size(im->m);
    double loss = 0;
    ddp_status s = c->shared ? DDP_OK : model_forward(im->m, &c->v.batch, &loss);
    if (s != DDP_OK && isfinite(loss))
        return s;
    /* a loss that is not finite is the implementation's parameters' (a NaN it stepped into them): its gradients
     * say so at the next check, not a failed rank */
    if (c->shared && nbuf)
        memcpy(model_buffers(im->m), model_buffers(c->v.m), nbuf * sizeof(float));
    c->fig->compute_ns += clock_now_ns() - c->fwd_t0;
    return record_buffers(c, "after", 1);
}

/*
 * One backward. Gradients complete layer by layer and each one's event goes
 * out at once, interleaved with the rest of the backward, as autograd's
 * hooks do: an implementation that reads a gradient before its event sees
 * it incomplete, and a communication thread overlaps the remaining compute.
 */
static void live_backward_begin(void *ctx)
{
    rank_ctx *c = ctx;
    c->bwd_status = DDP_OK;
    ready_begin(&c->events, &c->chaos, c->nbwd, c->cfg->replay, c->rank, &c->next_ready);
    c->bwd_t0 = clock_now_ns();
    c->bwd_comm0 = world_coll_ns(c->wr);
    c->bwd_red0 = atomic_load(&c->impl.env.reductions);
    c->bwd_bytes0 = atomic_load(&c->impl.env.reduced_bytes);
    c->bwd_rs0 = atomic_load(&c->impl.env.scatters);
    c->bwd_rs_bytes0 = atomic_load(&c->impl.env.scattered_bytes);
}

/* The implementation's reductions in this backward, counted by its services (impl_reduce): the reduce-scatters
 * among them (ops.c decides which count against a backward that does not sync). */
static ddp_status live_backward_comm(void *ctx, uint64_t micro, record_comm_counts *counts)
{
    rank_ctx *c = ctx;
    (void)micro;
    uint64_t rs = atomic_load(&c->impl.env.scatters) - c->bwd_rs0;
    uint64_t rs_bytes = atomic_load(&c->impl.env.scattered_bytes) - c->bwd_rs_bytes0;
    *counts = c->bwd_counts = (record_comm_counts){
        .known = 1,
        .reductions = atomic_load(&c->impl.env.reductions) - c->bwd_red0 + rs,
        .bytes = atomic_load(&c->impl.env.reduced_bytes) - c->bwd_bytes0 + rs_bytes,
        .scatters = rs,
        .scatter_bytes = rs_bytes,
    };
    return DDP_OK;
}

/* In the reference's backward: the implementation is served by it when their parameters are equal. */
static void live_grad_ready(void *ctx, int p)
{
    rank_ctx *c = ctx;
    if (c->shared)
        impl_ready(c, c->v.m, p);
}

static ddp_status live_backward_end(void *ctx)
{
    rank_ctx *c = ctx;
    impl_side *im = &c->impl;
    float planted;
    if (!c->shared && verify_ops_planted(&c->v, &planted)) /* the same overflow in the implementation's own backward */
        model_plant_fault(im->m, planted);
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
    c->fig->compute_ns += t1 - c->bwd_t0;
    c->fig->impl_comm_hidden_ns += comm1 > c->bwd_comm0 ? comm1 - c->bwd_comm0 : 0;
    c->fig->impl_comm_exposed_ns += comm2 > comm1 ? comm2 - comm1 : 0;
    return DDP_OK;
}

/*
 * After the reference's sync: the None-ness mirrored, --record's local
 * gradients (those of the replica that computed the implementation's
 * backward, so `ddpsim check` replays the reference on what the
 * implementation was really given), and after a sync the implementation's
 * ranks agree.
 */
static ddp_status live_after_backward(void *ctx, int synced)
{
    rank_ctx *c = ctx;
    mirror_defined(c);
    ddp_status st = DDP_OK;
    if (c->cfg->record_dir) {
        const model *m = c->shared ? c->v.m : c->impl.m;
        VERIFY_COSTED(&c->v, COST_OUTPUT, {
            st = record_write_micro(c->cfg->record_dir, c->rank, c->nbwd - 1, m, model_local_grads(m), model_used(m),
                                    c->shared ? c->share_factor : 1.0f);
            if (st == DDP_OK)
                st = record_write_comm(c->cfg->record_dir, c->rank, c->nbwd - 1, &c->bwd_counts);
            const loss_windows *lw = &c->v.lw;
            if (st == DDP_OK && c->v.loss_norm) /* the counts the windows of a replay are made of */
                st = record_write_tokens(c->cfg->record_dir, c->rank, c->nbwd - 1,
                                         lw->bwd_rows + (c->nbwd - 1) * (size_t)lw->rows, lw->rows);
        });
        DDP_CHECK(st);
    }
    if (synced && c->cfg->shard == SHARD_NONE) /* a sharded rank's .grad is not what it holds */
        VERIFY_COSTED(&c->v, COST_AGREEMENT,
                      st = AS_CHECKS(agreement_check(&c->v.agreement, c->wr, c->impl.m, model_grads(c->impl.m),
                                                     ddp_ref_reduced_params(c->v.ddp), c->v.op, c->v.active)));
    return st;
}

static ddp_status live_zero_grad(void *ctx)
{
    rank_ctx *c = ctx;
    impl_side *im = &c->impl;
    model_zero_grad_as(im->m, c->cfg->ddp.set_to_none);
    return IMPL_CALL(c, im->ops->zero_grad(im->state), "zero_grad");
}

/* The implementation's own GradScaler (interface version 9), or ddpsim's for it. */
static int own_scaler(const impl_side *im)
{
    return im->ops->api_version >= 9 && im->ops->scaler_scale && im->ops->scaler_unscale;
}

static ddp_status live_step(void *ctx)
{
    rank_ctx *c = ctx;
    impl_side *im = &c->impl;
    int owned = 0, skips = verify_ops_impl_skips_step(&c->v); /* --loss-scale: an inf or NaN was found */
    if (im->ops->optimizer_step && !skips)
        DDP_CHECK(IMPL_CALL(c, im->ops->optimizer_step(im->state, &owned), "optimizer_step"));
    if (!owned && !skips)
        ddp_optim_step(&im->optim, im->m, model_grad_defined(im->m), model_weights(im->m), model_grads(im->m));
    DDP_CHECK(IMPL_CALL(c, im->ops->step(im->state), "step"));
    if (c->cfg->ddp.scaler.on && !own_scaler(im)) /* GradScaler.update, ddpsim's for it, from its own finding */
        scaler_update(&c->cfg->ddp.scaler, &c->scaler, c->impl_found_inf);
    return DDP_OK;
}

/* --loss-scale before a backward: the scale the implementation multiplies its loss by, which its own backward
 * takes, and a shared one (the reference's, at the reference's scale) is multiplied into its .grad by. */
static ddp_status live_loss_scale(void *ctx, float ref_scale, float *scale)
{
    rank_ctx *c = ctx;
    impl_side *im = &c->impl;
    if (own_scaler(im))
        DDP_CHECK(IMPL_CALL(c, im->ops->scaler_scale(im->state, scale), "scaler_scale"));
    else
        *scale = c->scaler.scale;
    c->scale = *scale;
    c->share_factor = *scale / ref_scale; /* powers of two: exact (a wrong one fails the scale's check first) */
    model_set_loss_scale(im->m, *scale);
    ddp_status st = DDP_OK;
    if (c->cfg->record_dir) /* the scale of the backward's local gradients, micro<nbwd> (record.h) */
        VERIFY_COSTED(&c->v, COST_OUTPUT,
                      st = record_write_scale(c->cfg->record_dir, c->name, c->rank, c->nbwd, *scale));
    return st;
}

/* The token loss before a backward: the implementation's trainer's factor (version 10), or ddpsim's trainer's, the
 * intended one; the implementation's own backward takes it (forward_begin never shares a token loss's). */
static ddp_status live_loss_factor(void *ctx, const ddpsim_loss_window *w, float ref, float *factor)
{
    rank_ctx *c = ctx;
    impl_side *im = &c->impl;
    if (im->ops->api_version >= 10 && im->ops->loss_factor)
        DDP_CHECK(IMPL_CALL(c, im->ops->loss_factor(im->state, w, factor), "loss_factor"));
    else
        *factor = ref;
    model_set_token_factor(im->m, *factor);
    ddp_status st = DDP_OK;
    if (c->cfg->record_dir) /* the factor of the backward's local gradients, micro<nbwd> (record.h) */
        VERIFY_COSTED(&c->v, COST_OUTPUT,
                      st = record_write_factor(c->cfg->record_dir, c->name, c->rank, c->nbwd, *factor));
    return st;
}

/* --loss-scale's unscale_: the implementation's, or ddpsim's over its .grad (right for DDP: .grad is synced). */
static ddp_status live_unscale(void *ctx, int *found_inf)
{
    rank_ctx *c = ctx;
    impl_side *im = &c->impl;
    if (own_scaler(im)) {
        DDP_CHECK(IMPL_CALL(c, im->ops->scaler_unscale(im->state, found_inf), "scaler_unscale"));
    } else {
        float inv = scaler_inv_scale(c->scaler.scale);
        *found_inf = c->impl_found_inf = scaler_unscale(model_grads(im->m), model_size(im->m), inv);
    }
    ddp_status st = DDP_OK;
    if (c->cfg->record_dir)
        VERIFY_COSTED(&c->v, COST_OUTPUT,
                      st = record_write_unscale(c->cfg->record_dir, c->name, c->rank, c->nunscale, *found_inf));
    c->nunscale++;
    return st;
}

/* clip: the implementation's clip_grads, or without one (plain DDP: refused under --shard) ddpsim's, torch's way. */
static ddp_status live_clip(void *ctx, const sched_clip *k, float *coef)
{
    rank_ctx *c = ctx;
    impl_side *im = &c->impl;
    if (im->ops->api_version >= 8 && im->ops->clip_grads)
        DDP_CHECK(IMPL_CALL(c, im->ops->clip_grads(im->state, k->max_norm, k->inf_norm, coef), "clip_grads"));
    else
        *coef = clip_grads_torch(im->m, model_grads(im->m), k->max_norm, k->inf_norm);
    ddp_status st = DDP_OK;
    if (c->cfg->record_dir)
        VERIFY_COSTED(&c->v, COST_OUTPUT,
                      st = record_write_clip(c->cfg->record_dir, c->name, c->rank, c->nclip, *coef));
    c->nclip++;
    return st;
}

static ddp_status live_join_enter(void *ctx, int divide)
{
    rank_ctx *c = ctx;
    impl_side *im = &c->impl;
    if (!im->ops->join_enter || !im->ops->join_shadow || !im->ops->join_exit) /* refused before: a guard */
        return ddp_error(DDP_ERR_BACKEND, "implementation '%s' does not support join", c->cfg->impl);
    return IMPL_CALL(c, im->ops->join_enter(im->state, divide), "join_enter");
}

static ddp_status live_join_exit(void *ctx, int last)
{
    rank_ctx *c = ctx;
    c->impl.env.join_last = last;
    return IMPL_CALL(c, c->impl.ops->join_exit(c->impl.state), "join_exit");
}

static ddp_status live_join_shadow(void *ctx)
{
    rank_ctx *c = ctx;
    return IMPL_CALL(c, c->impl.ops->join_shadow(c->impl.state), "join_shadow");
}

/* A joined rank takes part in the agreement check of its peers' sync with its own gradients left out. */
static ddp_status live_shadow_synced(void *ctx)
{
    rank_ctx *c = ctx;
    ddp_status st;
    VERIFY_COSTED(&c->v, COST_AGREEMENT,
                  st = AS_CHECKS(agreement_check(&c->v.agreement, c->wr, c->impl.m, NULL,
                                                 ddp_ref_reduced_params(c->v.ddp), c->v.op, c->v.active)));
    return st;
}

/* What the implementation's gradients are compared with: DDP's, or under --shard the sharded reference's. */
static const float *reference_grads(const rank_ctx *c)
{
    if (!c->v.shard)
        return model_grads(c->v.m);
    return shard_ref_grads(c->v.shard, verify_ops_grab_synced(&c->v));
}

/* The implementation's values of a check, and --dump's and --record's copies of them (dump.h, record.h). */
static ddp_status live_values(void *ctx, record_values kind, uint64_t k, const float **actual,
                              const float **buffers)
{
    rank_ctx *c = ctx;
    const verify_config *cfg = c->cfg;
    model *im = c->impl.m;
    char what[32];
    record_values_name(kind, k, what, sizeof what);
    *actual = kind == RECORD_GRAB ? model_grads(im) : model_weights(im);
    if (kind == RECORD_GRAB && reads_shards(c))
        *actual = shard_view_read(&c->view, im, 0);
    else if (kind != RECORD_GRAB && c->v.param_held)
        *actual = shard_view_read(&c->view, im, 1);
    else
        c->view.pad_bad = 0;
    *buffers = model_buffers(im);
    ddp_status st = DDP_OK;
    VERIFY_COSTED(&c->v, COST_OUTPUT, {
        if (kind == RECORD_GRAB && cfg->dump_dir) {
            st = dump_write_rank_tensors(cfg->dump_dir, "reference", c->rank, what, c->v.m, reference_grads(c));
            if (st == DDP_OK && cfg->impl_ops != &impl_reference_ops) /* else the same replica's once more */
                st = dump_write_rank_tensors(cfg->dump_dir, c->name, c->rank, what, im, *actual);
        }
        if (st == DDP_OK && cfg->record_dir)
            st = dump_write_rank_tensors(cfg->record_dir, c->name, c->rank, what, im, *actual);
        /* A sharded rank holds its shards whatever its local .grad is: no None to record (a live sharded run
         * compares none either). */
        if (st == DDP_OK && cfg->record_dir && kind == RECORD_GRAB && cfg->shard == SHARD_NONE)
            st = record_write_grad_none(cfg->record_dir, c->name, c->rank, what, im, model_grad_defined(im));
        /* A sharded run's recording: what this rank held there, where it held a part (record.h held.json). */
        if (st == DDP_OK && cfg->record_dir && (kind == RECORD_GRAB ? reads_shards(c) : c->v.param_held != NULL))
            st = record_write_held(cfg->record_dir, c->name, c->rank, what, im, c->view.held.elem);
    });
    return st;
}

static ddp_status live_grab_layout(void *ctx, uint64_t k, const unsigned char **none, const held_mask **held)
{
    rank_ctx *c = ctx;
    (void)k;
    *none = NULL;
    if (reads_shards(c))
        *held = &c->view.held;
    return DDP_OK;
}

static void live_padding(void *ctx, record_values kind, verify_record *rec)
{
    rank_ctx *c = ctx;
    (void)kind;
    shard_view_padding_into(&c->view, rec);
}

static const verify_side live_side = {
    .before_op = live_before_op,
    .after_op = live_after_op,
    .participants = live_participants,
    .no_sync = live_no_sync,
    .batch = live_batch,
    .forward_begin = live_forward_begin,
    .forward_end = live_forward_end,
    .backward_begin = live_backward_begin,
    .grad_ready = live_grad_ready,
    .backward_end = live_backward_end,
    .backward_comm = live_backward_comm,
    .after_backward = live_after_backward,
    .zero_grad = live_zero_grad,
    .step = live_step,
    .clip = live_clip,
    .loss_scale = live_loss_scale,
    .loss_factor = live_loss_factor,
    .unscale = live_unscale,
    .join_enter = live_join_enter,
    .join_exit = live_join_exit,
    .join_shadow = live_join_shadow,
    .shadow_synced = live_shadow_synced,
    .values = live_values,
    .grab_layout = live_grab_layout,
    .padding = live_padding,
};

/* Everything a rank needs before its first op: both sides, the checks' state, the dump's and recording's init. */
static ddp_status rank_setup(rank_ctx *c, verify_rank_area *area)
{
    const verify_config *cfg = c->cfg;
    verify_ops_config oc = {.tol = &cfg->tol, .schedule = cfg->schedule, .lr = cfg->ddp.lr,
                            .momentum = cfg->ddp.momentum,
                            .adamw = cfg->ddp.adamw,
                            .comm_hook = cfg->ddp.comm_hook, .params_rule = PARAMS_LIVE,
                            .sabotage = cfg->sabotage, .agree = &area->agree, .fig = c->fig,
                            /* not beside NCCL: a collective of ddpsim's at every grab would move where a hang shows */
                            .explain_across_ranks = cfg->backend != VERIFY_BACKEND_NCCL,
                            .allow_unsynced_comm = cfg->allow_unsynced_comm, .set_to_none = cfg->ddp.set_to_none,
                            .scaler = cfg->ddp.scaler, .faults = cfg->faults, .nfaults = cfg->nfaults,
                            .loss_norm = verify_loss_norm(cfg), .seed = cfg->seed};
    DDP_CHECK(verify_ops_init(&c->v, &oc, c->wr, world_rank_user_area(c->wr)));
    scaler_start(&cfg->ddp.scaler, &c->scaler);
    c->scale = c->share_factor = 1.0f;
    DDP_CHECK(trace_open(&c->trace, cfg->trace_path, c->rank, c->wr));
    if (cfg->replay && c->rank < cfg->replay->nranks)
        world_force_arrivals(c->wr, cfg->replay->arrivals[c->rank], cfg->replay->narrivals[c->rank]);
    DDP_CHECK(ref_create(c, &c->ref));
    DDP_CHECK(verify_ops_attach(&c->v, c->ref.m, c->ref.ddp));
    c->v.shard = c->ref.shard;
    DDP_CHECK(impl_create(c));
    verify_dump_name(cfg, c->name, sizeof c->name);
    if (c->rank == 0 && cfg->dump_dir)
        DDP_CHECK(dump_write_init(cfg->dump_dir, c->ref.m, 0));
    if (c->rank == 0 && cfg->record_dir)
        DDP_CHECK(dump_write_init(cfg->record_dir, c->ref.m, 1));
    return trace_arrivals(&c->trace, 0, c->wr); /* the constructors' broadcasts */
}

/* --sched found every thread of the plugin blocked: the rank ends failed, naming each thread's call. */
static _Noreturn void sched_deadlock(void *wr, const char *why)
{
    world_rank_fail_now(wr, why);
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
    void *user = world_rank_user_area(wr);
    verify_rank_area *area = stream_rank_areas(user, stream_ring_checks(sched_nchecks(cfg->schedule), c.n), c.n) +
                             c.rank;
    c.nccl_fig = &area->nccl;
    c.fig = &area->fig;
    c.refused = &area->refused;
    model_runtime_init();
    coll_set_caller(COLL_CALLER_REFERENCE);
    world_set_op(wr, -1, "setup");
    chaos_rank_init(&c.chaos, cfg->chaos, cfg->chaos_seed, c.rank, c.n);
    if (cfg->interleave.mode != INTERLEAVE_OFF) {
        world_set_meet_hook(interleave_before_wait);
        interleave_start(&cfg->interleave, cfg->chaos_seed, c.rank, sched_deadlock, wr);
    }
    ddp_status s = rank_setup(&c, area);
    if (s == DDP_OK) /* --sched pct: about a callback per op, and one per parameter in each backward */
        interleave_horizon(cfg->schedule->nops + cfg->schedule->nfwd * (size_t)model_nparams(c.impl.m));
    c.fig->setup_cpu_ns = clock_cpu_ns();
    c.fig->setup_coll_cpu_ns = world_coll_cpu_ns(wr);
    int ran_out = 0;
    if (s == DDP_OK)
        s = verify_ops_run(&c.v, &live_side, &c, &ran_out);
    stream_finish(wr, user, c.v.next_check);
    machine_memory mem; /* before teardown: what the rank held, its shared pages counted by their share */
    machine_memory_self(&mem);
    c.fig->pss_kib = mem.pss_kib;
    c.fig->private_kib = mem.private_kib;
    c.fig->shared_kib = mem.shared_kib;
    c.fig->cpu_ns = clock_cpu_ns();
    ddp_status ts = trace_close(&c.trace, cfg->schedule->nops, s == DDP_OK);
    if (s == DDP_OK)
        s = ts;
    verify_ops_free(&c.v);
    impl_destroy(&c, s != DDP_OK);
    interleave_stop(&c.fig->sched);
    trace_release(&c.trace); /* after the implementation's threads, which may still have written */
    ref_destroy(&c.ref);
    world_publish(wr, area, sizeof *area); /* its figures, agreement and NCCL figures, for the parent's side */
    return s;
}
