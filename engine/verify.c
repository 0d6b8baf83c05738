/*
 * verify.c - the rank side of a verification run and its setup (verify.h).
 */
#include "verify.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "dump.h"
#include "gpu_probe.h"
#include "impl.h"
#include "rng.h"

/* The reference: a model replica and its DDP state. */
typedef struct side {
    model *m;
    ddp_ref *ddp;
} side;

/* The implementation under test: its replica, driven through ddpsim_impl.h. */
typedef struct impl_side {
    model *m;
    const ddpsim_impl_ops *ops;
    void *state;
    impl_env env;
    ddpsim_services svc;
    ddpsim_param_view views[MODEL_MAX_PARAMS];
    int no_sync;
} impl_side;

typedef struct rank_ctx {
    const verify_config *cfg;
    world_rank *wr;
    int rank, n;
    side ref;
    impl_side impl;
    int impl_is_ref_name;
    model *global;        /* rank 0: the single-process replica */
    model_batch batch, gbatch;
    uint64_t next_batch, pending_batch;
    int params_in_sync;   /* every rank's parameters are equal */
    int grads_agree;      /* every rank's gradients are equal */
    int last_was_synced_bwd;
    int bwd_since_zero;   /* a backward ran since the start or the last zero_grad */
    verify_record *records;
    nccl_figures *nccl_fig; /* this rank's, in the shared segment */
    /* chaos, trace, replay */
    uint64_t chaos_key;
    int straggler;
    uint64_t nbwd;
    FILE *trace;
    uint64_t t;           /* logical time: this rank's event counter */
    size_t op;            /* the op being executed */
    size_t next_ready;    /* replay: next recorded ready event of this rank */
} rank_ctx;

static ddp_status replica_create(rank_ctx *c, model **m)
{
    DDP_CHECK(model_create(c->cfg->model_spec, c->cfg->batch, m));
    if (c->cfg->inputs_dir)
        return dump_read_init(c->cfg->inputs_dir, *m);
    model_init(*m, c->cfg->seed, c->rank); /* rank-distinct: the broadcast must fix it */
    return DDP_OK;
}

static ddp_status side_create(rank_ctx *c, side *s)
{
    DDP_CHECK(replica_create(c, &s->m));
    DDP_CHECK(ddp_ref_create(&c->cfg->ddp, s->m, c->wr, &s->ddp));
    return ddp_ref_broadcast_params(s->ddp);
}

static void side_destroy(side *s)
{
    ddp_ref_destroy(s->ddp);
    model_destroy(s->m);
}

const char *verify_dump_name(const verify_config *cfg)
{
    /* A plugin is named by its table, not its path; nothing but the built-in reference writes "reference". */
    static _Thread_local char name[64];
    const char *n = cfg->impl_ops->name ? cfg->impl_ops->name : "impl";
    if (cfg->impl_ops == &impl_reference_ops)
        return "reference";
    snprintf(name, sizeof name, "%s%s", strcmp(n, "reference") == 0 ? "impl-" : "", n);
    for (char *q = name; *q; q++)
        if (*q == '/' || (*q == '.' && q == name))
            *q = '_';
    return name;
}

/* A callback of the implementation returned non-zero: say which and why. */
static ddp_status impl_failed(rank_ctx *c, const char *callback)
{
    return ddp_error(DDP_ERR_BACKEND, "implementation '%s' failed in %s: %s", c->cfg->impl, callback,
                     c->impl.env.error[0] ? c->impl.env.error : "(no message)");
}
#define IMPL_CALL(c, call, name) ((call) == 0 ? DDP_OK : impl_failed((c), (name)))

static ddp_status impl_create(rank_ctx *c)
{
    impl_side *s = &c->impl;
    DDP_CHECK(replica_create(c, &s->m));
    s->ops = c->cfg->impl_ops;
    s->env = (impl_env){.wr = c->wr, .m = s->m, .cfg = c->cfg->ddp, .chaos = c->cfg->chaos,
                        .chaos_seed = c->cfg->chaos_seed};
    impl_services_init(&s->svc, s->views, &s->env);
    if (c->cfg->backend == VERIFY_BACKEND_NCCL) {
        /* A little under the watchdog's limit, so a stuck NCCL call is aborted and named by its rank. */
        nccl_settings ns = {.ngpus = c->cfg->ngpus, .timeout_s = c->cfg->timeout_s * 0.8, .ring_check = 1};
        DDP_CHECK(nccl_comm_create(c->wr, &ns, c->nccl_fig, &s->env.nccl));
        s->env.backend_avg = c->cfg->nccl_avg;
    }
    return IMPL_CALL(c, s->ops->create(&s->svc, &s->state), "create");
}

static void impl_destroy(impl_side *s, int failed)
{
    if (s->ops && s->state)
        s->ops->destroy(s->state); /* first: an implementation's own threads may still reduce */
    nccl_comm_destroy(s->env.nccl, failed);
    model_destroy(s->m);
}

/*
 * The ready events of one backward: every used parameter once, last
 * registered first, as backward produces them; under chaos in a seeded
 * random order (every gradient is complete when the events are delivered,
 * so any order is one a backward could produce); under replay in the
 * recorded order.
 */
static ddp_status ready_order(rank_ctx *c, int *order, int *n)
{
    const unsigned char *used = model_used(c->impl.m);
    *n = 0;
    for (int p = model_nparams(c->impl.m) - 1; p >= 0; p--)
        if (used[p])
            order[(*n)++] = p;
    if (c->cfg->replay) {
        const verify_replay *rp = c->cfg->replay;
        unsigned char seen[MODEL_MAX_PARAMS] = {0};
        for (int i = 0; i < *n; i++) {
            if (c->next_ready >= rp->nready[c->rank])
                return ddp_error(DDP_ERR_INVALID, "replay: the trace has fewer ready events than this run on rank %d",
                                 c->rank);
            int p = rp->ready[c->rank][c->next_ready++];
            if (p < 0 || p >= model_nparams(c->impl.m) || !used[p] || seen[p])
                return ddp_error(DDP_ERR_INVALID, "replay: ready event %zu of rank %d does not fit this run",
                                 c->next_ready - 1, c->rank);
            seen[p] = 1;
            order[i] = p;
        }
    } else if (c->cfg->chaos) {
        uint64_t key = rng_key(rng_key(c->chaos_key, 'r'), c->nbwd);
        for (int i = *n - 1; i > 0; i--) {
            int j = (int)rng_below(key, (uint64_t)i, (uint32_t)i + 1);
            int t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    }
    return DDP_OK;
}

static void trace_event(rank_ctx *c, const char *ev, const char *extra)
{
    if (c->trace)
        fprintf(c->trace, "{\"t\": %llu, \"rank\": %d, \"op\": %zu, \"ev\": \"%s\"%s%s}\n",
                (unsigned long long)c->t++, c->rank, c->op, ev, extra ? ", " : "", extra ? extra : "");
}

static ddp_status impl_backward(rank_ctx *c)
{
    impl_side *s = &c->impl;
    model_backward(s->m);
    int order[MODEL_MAX_PARAMS], n;
    DDP_CHECK(ready_order(c, order, &n));
    for (int i = 0; i < n; i++) {
        if (c->trace) {
            char extra[128];
            snprintf(extra, sizeof extra, "\"param\": %d, \"name\": \"%s\"", order[i],
                     model_param_at(s->m, order[i])->name);
            trace_event(c, "ready", extra);
        }
        DDP_CHECK(IMPL_CALL(c, s->ops->grad_ready(s->state, order[i]), "grad_ready"));
    }
    c->nbwd++;
    return IMPL_CALL(c, s->ops->backward_end(s->state), "backward_end");
}

/* Write the barrier arrivals of the op just run into the trace. */
static ddp_status trace_arrivals(rank_ctx *c)
{
    const uint32_t *pos;
    int lost;
    size_t n = world_take_arrivals(c->wr, &pos, &lost);
    if (lost)
        return ddp_error(DDP_ERR_NOMEM, "trace: out of memory recording arrivals");
    for (size_t i = 0; i < n; i++) {
        char extra[64];
        snprintf(extra, sizeof extra, "\"pos\": %u", pos[i]);
        trace_event(c, "arrive", extra);
    }
    return DDP_OK;
}

static void sleep_us(unsigned us)
{
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Faults that strike rank c->rank before op i, and the chaos delays. */
static void before_op(rank_ctx *c, size_t i)
{
    const verify_config *cfg = c->cfg;
    for (int f = 0; f < cfg->nfaults; f++) {
        const verify_fault *ft = &cfg->faults[f];
        if (ft->rank != c->rank)
            continue;
        if (ft->kind == FAULT_SLOW) {
            sleep_us(ft->ms * 1000u);
            continue;
        }
        if (ft->op != (long)i)
            continue;
        switch (ft->kind) {
        case FAULT_CRASH: raise(SIGKILL); break;
        case FAULT_ABORT: {
            struct rlimit none = {0, 0}; /* no core file left behind */
            setrlimit(RLIMIT_CORE, &none);
            abort();
        }
        case FAULT_HANG:
            for (;;)
                pause(); /* no progress, not in a collective: the watchdog's case */
        case FAULT_FLIP: world_inject_flip(c->wr); break;
        case FAULT_SLOW: break;
        }
    }
    if (cfg->chaos) {
        /* Every rank a little late, the straggler a lot, all seeded. */
        uint32_t us = rng_below(rng_key(c->chaos_key, 'd'), i, 200);
        if (c->rank == c->straggler)
            us += 500 + rng_below(rng_key(c->chaos_key, 'D'), i, 1500);
        sleep_us(us);
    }
}

/* The batch of forward b on `rank`: seeded, or read from the inputs directory. */
static ddp_status get_batch(rank_ctx *c, int rank, uint64_t b, model *m, model_batch *out)
{
    model_batch_fill(m, out, c->cfg->seed, rank, b);
    if (c->cfg->inputs_dir)
        DDP_CHECK(dump_read_batch(c->cfg->inputs_dir, rank, b, m, out));
    return DDP_OK;
}

static uint64_t hash_bits(const float *x, size_t n)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    const uint32_t *u = (const uint32_t *)x;
    for (size_t i = 0; i < n; i++)
        h = (h ^ u[i]) * UINT64_C(0x100000001b3);
    return h;
}

/* Elements of x that are NaN or infinite (a loop the compiler vectorizes). */
static size_t count_nonfinite(const float *x, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !isfinite(x[i]);
    return bad;
}

/* One tensor, element by element, into rec (accumulated locally: rec lives in shared memory). */
static void compare_tensor(rank_ctx *c, verify_record *rec, int p, const float *e, const float *a, size_t count)
{
    float tensor_max = 0; /* the largest finite |expected| of this tensor, for ulp-of-max */
    if (c->cfg->tol.kind == TOL_ULP_OF_MAX)
        for (size_t j = 0; j < count; j++)
            if (isfinite(e[j]) && fabsf(e[j]) > tensor_max)
                tensor_max = fabsf(e[j]);
    uint64_t hist[TOL_ULP_BINS] = {0}, nonfinite = 0, ndiff = 0;
    double max_abs = rec->max_abs;
    uint32_t max_ulp = rec->max_ulp;
    for (size_t j = 0; j < count; j++) {
        float ev = e[j], av = a[j];
        int finite = isfinite(ev) && isfinite(av);
        uint32_t ulp = tol_ulp_distance(ev, av);
        if (finite) {
            double d = fabs((double)av - ev);
            if (d > max_abs)
                max_abs = d;
            if (ulp > max_ulp)
                max_ulp = ulp;
            hist[tol_ulp_bin(ulp)]++;
        } else {
            nonfinite++;
        }
        if (!tol_match_in(&c->cfg->tol, ev, av, tensor_max)) {
            if (!rec->has_first) {
                rec->has_first = 1;
                rec->first_param = p;
                rec->first_index = j;
                rec->first_expected = ev;
                rec->first_actual = av;
                rec->first_ulp = ulp;
            }
            ndiff++;
        }
    }
    for (int k = 0; k < TOL_ULP_BINS; k++)
        rec->ulp_hist[k] += hist[k];
    rec->nonfinite += nonfinite;
    rec->ndiff += ndiff;
    rec->max_abs = max_abs;
    rec->max_ulp = max_ulp;
}

/*
 * Compare the implementation's gradients with the reference's. A tensor with
 * the same bits on both sides and nothing non-finite in it matches under
 * every tolerance with distance 0: one memcmp instead of the element loop.
 */
static void compare(rank_ctx *c, verify_record *rec)
{
    const model *m = c->ref.m;
    const float *e = model_grads(c->ref.m), *a = model_grads(c->impl.m);
    for (int p = 0; p < model_nparams(m); p++) {
        const model_param *par = model_param_at(m, p);
        const float *ep = e + par->offset, *ap = a + par->offset;
        if (memcmp(ep, ap, par->count * sizeof(float)) == 0 && count_nonfinite(ep, par->count) == 0)
            rec->ulp_hist[0] += par->count;
        else
            compare_tensor(c, rec, p, ep, ap, par->count);
    }
}

/*
 * Rank 0's reference against the single-process replica: the replica's
 * gradient buffer holds S, the sum over ranks and micro-steps of local
 * gradients since zero_grad, so the synced reference must equal S / N.
 * Parameters that the last sync left local (unused everywhere) are skipped.
 */
static void global_check(rank_ctx *c, verify_record *rec)
{
    const unsigned char *reduced = ddp_ref_reduced_params(c->ref.ddp);
    const float *g = model_grads(c->ref.m), *S = model_grads(c->global);
    double err = 0, scale = 0;
    for (int p = 0; p < model_nparams(c->ref.m); p++) {
        if (!reduced[p])
            continue;
        const model_param *par = model_param_at(c->ref.m, p);
        for (size_t j = par->offset; j < par->offset + par->count; j++) {
            double want = (double)S[j] / c->n, d = fabs(g[j] - want);
            if (!(d <= err))
                err = d; /* NaN propagates into err and fails the check */
            if (fabs(want) > scale)
                scale = fabs(want);
        }
    }
    rec->global_checked = 1;
    rec->global_err = err;
    rec->global_scale = scale;
}

static ddp_status do_grab(rank_ctx *c, size_t k)
{
    verify_record *rec = &c->records[k * (size_t)c->n + (size_t)c->rank];
    memset(rec, 0, sizeof *rec);
    rec->synced = c->bwd_since_zero ? ddp_ref_last_synced(c->ref.ddp) : -1;
    compare(c, rec);
    rec->ref_hash = hash_bits(model_grads(c->ref.m), model_size(c->ref.m));
    rec->impl_hash = hash_bits(model_grads(c->impl.m), model_size(c->impl.m));
    if (c->global && c->params_in_sync && c->last_was_synced_bwd)
        global_check(c, rec);
    if (c->cfg->dump_dir) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s/reference/rank%d/grab%zu", c->cfg->dump_dir, c->rank, k);
        DDP_CHECK(dump_mkdirs(dir));
        DDP_CHECK(dump_write_tensors(dir, c->ref.m, model_grads(c->ref.m)));
        if (!c->impl_is_ref_name) {
            snprintf(dir, sizeof dir, "%s/%s/rank%d/grab%zu", c->cfg->dump_dir, verify_dump_name(c->cfg), c->rank, k);
            DDP_CHECK(dump_mkdirs(dir));
            DDP_CHECK(dump_write_tensors(dir, c->impl.m, model_grads(c->impl.m)));
        }
    }
    rec->done = 1;
    return DDP_OK;
}

/* The single-process replica runs the same micro-step on every rank's batch, accumulating. */
static ddp_status global_backward(rank_ctx *c)
{
    for (int r = 0; r < c->n; r++) {
        DDP_CHECK(get_batch(c, r, c->pending_batch, c->global, &c->gbatch));
        DDP_CHECK(model_forward(c->global, &c->gbatch, NULL));
        model_backward(c->global);
    }
    return DDP_OK;
}

static ddp_status run_op(rank_ctx *c, sched_op op, size_t *grab)
{
    impl_side *im = &c->impl;
    switch (op) {
    case OP_ENTER:
        DDP_CHECK(ddp_ref_no_sync_enter(c->ref.ddp));
        im->no_sync = 1;
        return IMPL_CALL(c, im->ops->no_sync_enter(im->state), "no_sync_enter");
    case OP_EXIT:
        DDP_CHECK(ddp_ref_no_sync_exit(c->ref.ddp));
        im->no_sync = 0;
        return IMPL_CALL(c, im->ops->no_sync_exit(im->state), "no_sync_exit");
    case OP_FWD:
        DDP_CHECK(get_batch(c, c->rank, c->next_batch, c->ref.m, &c->batch));
        if (c->cfg->dump_dir)
            DDP_CHECK(dump_write_batch(c->cfg->dump_dir, c->rank, c->next_batch, c->ref.m, &c->batch));
        c->pending_batch = c->next_batch++;
        DDP_CHECK(ddp_ref_forward(c->ref.ddp, &c->batch));
        DDP_CHECK(IMPL_CALL(c, im->ops->forward_begin(im->state, im->no_sync), "forward_begin"));
        return model_forward(im->m, &c->batch, NULL);
    case OP_BWD:
        DDP_CHECK(ddp_ref_backward(c->ref.ddp));
        DDP_CHECK(impl_backward(c));
        c->grads_agree = c->last_was_synced_bwd = ddp_ref_last_synced(c->ref.ddp);
        c->bwd_since_zero = 1;
        if (c->global && c->params_in_sync)
            DDP_CHECK(global_backward(c));
        return DDP_OK;
    case OP_GRAB: return do_grab(c, (*grab)++);
    case OP_ZERO:
        ddp_ref_zero_grad(c->ref.ddp);
        model_zero_grad(im->m);
        if (c->global)
            model_zero_grad(c->global);
        c->grads_agree = 1;
        c->last_was_synced_bwd = c->bwd_since_zero = 0;
        return IMPL_CALL(c, im->ops->zero_grad(im->state), "zero_grad");
    case OP_STEP:
        ddp_ref_step(c->ref.ddp);
        ddp_sgd_step(im->m, c->cfg->ddp.lr);
        DDP_CHECK(IMPL_CALL(c, im->ops->step(im->state), "step"));
        if (!c->grads_agree)
            c->params_in_sync = 0; /* local gradients moved the ranks apart for good */
        if (c->global && c->params_in_sync)
            memcpy(model_weights(c->global), model_weights(c->ref.m), model_size(c->ref.m) * sizeof(float));
        return DDP_OK;
    }
    return ddp_error(DDP_ERR_INVALID, "unknown op %d", (int)op);
}

/* The shared user area: a record per (grab, rank), then the NCCL figures of every rank. */
static nccl_figures *nccl_area(void *user, size_t nrec)
{
    return (nccl_figures *)((verify_record *)user + nrec);
}

static ddp_status rank_main(world_rank *wr, void *arg)
{
    const verify_config *cfg = arg;
    rank_ctx c;
    memset(&c, 0, sizeof c);
    c.cfg = cfg;
    c.wr = wr;
    c.rank = world_rank_id(wr);
    c.n = world_size(wr);
    c.records = world_rank_user_area(wr);
    c.nccl_fig = nccl_area(c.records, cfg->schedule->ngrabs * (size_t)c.n) + c.rank;
    c.impl_is_ref_name = cfg->impl_ops == &impl_reference_ops;
    c.params_in_sync = c.grads_agree = 1;
    ddp_status s = DDP_OK;
    world_set_op(wr, -1, "setup");
    c.chaos_key = rng_key(rng_key(cfg->chaos_seed, 0x6368616f /* "chao" */), (uint64_t)c.rank);
    c.straggler = (int)rng_below(rng_key(cfg->chaos_seed, 's'), 0, (uint32_t)c.n);
    if (cfg->trace_path) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s.rank%d", cfg->trace_path, c.rank);
        c.trace = fopen(path, "w");
        if (!c.trace)
            return ddp_error(DDP_ERR_SYSTEM, "cannot create %s", path);
        world_record_arrivals(wr, 1);
    }
    if (cfg->replay && c.rank < cfg->replay->nranks)
        world_force_arrivals(wr, cfg->replay->arrivals[c.rank], cfg->replay->narrivals[c.rank]);
    s = side_create(&c, &c.ref);
    if (s == DDP_OK)
        s = impl_create(&c);
    if (s == DDP_OK)
        s = model_batch_alloc(c.ref.m, &c.batch);
    if (s == DDP_OK && c.rank == 0) {
        s = model_create(cfg->model_spec, cfg->batch, &c.global);
        if (s == DDP_OK)
            s = model_batch_alloc(c.global, &c.gbatch);
        if (s == DDP_OK)
            memcpy(model_weights(c.global), model_weights(c.ref.m), model_size(c.ref.m) * sizeof(float));
        if (s == DDP_OK && cfg->dump_dir) {
            char dir[PATH_MAX];
            snprintf(dir, sizeof dir, "%s/init", cfg->dump_dir);
            s = dump_write_tensors(dir, c.ref.m, model_weights(c.ref.m));
        }
    }
    if (s == DDP_OK)
        s = trace_arrivals(&c); /* the constructor's broadcasts */
    size_t grab = 0;
    for (size_t i = 0; s == DDP_OK && i < cfg->schedule->nops; i++) {
        world_set_op(wr, (int)i, sched_op_name(cfg->schedule->ops[i]));
        c.op = i;
        before_op(&c, i);
        trace_event(&c, sched_op_name(cfg->schedule->ops[i]), NULL);
        s = run_op(&c, cfg->schedule->ops[i], &grab);
        if (s == DDP_OK)
            s = trace_arrivals(&c);
    }
    if (c.trace && fclose(c.trace) != 0 && s == DDP_OK)
        s = ddp_error(DDP_ERR_SYSTEM, "cannot write the trace of rank %d", c.rank);
    model_batch_free(&c.batch);
    model_batch_free(&c.gbatch);
    model_destroy(c.global);
    impl_destroy(&c.impl, s != DDP_OK);
    side_destroy(&c.ref);
    return s;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * Check the inputs directory before any rank starts, so a missing or
 * misshapen file is a usage error with its path rather than a failed rank:
 * every init tensor, and the first and last batch of every rank.
 */
static ddp_status check_inputs(const verify_config *cfg)
{
    model *m = NULL;
    model_batch b;
    DDP_CHECK(model_create(cfg->model_spec, cfg->batch, &m));
    ddp_status s = model_batch_alloc(m, &b);
    if (s == DDP_OK)
        s = dump_read_init(cfg->inputs_dir, m);
    for (int r = 0; s == DDP_OK && r < cfg->nranks && cfg->schedule->nfwd > 0; r++) {
        s = dump_read_batch(cfg->inputs_dir, r, 0, m, &b);
        if (s == DDP_OK)
            s = dump_read_batch(cfg->inputs_dir, r, cfg->schedule->nfwd - 1, m, &b);
    }
    model_batch_free(&b);
    model_destroy(m);
    if (s != DDP_OK)
        return ddp_error_prefix(DDP_ERR_INVALID, "--inputs");
    return DDP_OK;
}

ddp_status verify_check_config(const verify_config *cfg)
{
    if (!cfg->impl_ops || !cfg->impl)
        return ddp_error(DDP_ERR_INVALID, "no implementation under test");
    model *layout = NULL;
    DDP_CHECK(model_create_layout(cfg->model_spec, cfg->batch, &layout));
    model_destroy(layout);
    if (cfg->nranks < 1 || cfg->nranks > WORLD_MAX_RANKS)
        return ddp_error(DDP_ERR_INVALID, "number of ranks %d is out of range 1..%d", cfg->nranks, WORLD_MAX_RANKS);
    if (cfg->backend == VERIFY_BACKEND_NCCL && !gpu_probe_built())
        return ddp_error(DDP_ERR_INVALID, "--backend nccl: %s", GPU_PROBE_NOT_BUILT);
    if (cfg->nccl_avg && cfg->backend != VERIFY_BACKEND_NCCL)
        return ddp_error(DDP_ERR_INVALID, "--nccl-op avg needs --backend nccl");
    if (cfg->nccl_avg && cfg->impl_ops != &impl_reference_ops && cfg->impl_ops != &impl_bucketed_ops)
        return ddp_error(DDP_ERR_INVALID, "--nccl-op avg: only the built-in reference and bucketed implementations "
                                          "leave their buckets unscaled for ncclAvg; '%s' scales them itself",
                         cfg->impl);
    size_t nrec = cfg->schedule->ngrabs * (size_t)cfg->nranks;
    if (nrec > VERIFY_MAX_RECORDS)
        return ddp_error(DDP_ERR_INVALID, "%zu grabs on %d ranks is more than %zu records; grab less often",
                         cfg->schedule->ngrabs, cfg->nranks, VERIFY_MAX_RECORDS);
    if (cfg->inputs_dir)
        DDP_CHECK(check_inputs(cfg));
    if (cfg->dump_dir) {
        const char *impls[2] = {"reference", verify_dump_name(cfg)};
        if (dump_prepare(cfg->dump_dir, cfg->nranks, impls, cfg->impl_ops == &impl_reference_ops ? 1 : 2) != DDP_OK)
            return ddp_error_prefix(DDP_ERR_INVALID, "--dump");
    }
    return DDP_OK;
}

ddp_status verify_run(const verify_config *cfg, verify_result *out)
{
    memset(out, 0, sizeof *out);
    DDP_CHECK(verify_check_config(cfg));
    size_t nrec = cfg->schedule->ngrabs * (size_t)cfg->nranks;
    world_config wc = {
        .nranks = cfg->nranks,
        .timeout_s = cfg->timeout_s,
        .user_bytes = nrec * sizeof(verify_record) + (size_t)cfg->nranks * sizeof(nccl_figures),
        .jitter_seed = cfg->chaos_seed,
        .jitter_max_us = cfg->chaos ? 100 : 0, /* seeded delays before barrier arrivals */
    };
    DDP_CHECK(world_create(&wc, &out->w));
    out->nranks = cfg->nranks;
    out->ngrabs = cfg->schedule->ngrabs;
    out->records = calloc(nrec ? nrec : 1, sizeof *out->records);
    if (!out->records)
        return ddp_error(DDP_ERR_NOMEM, "%zu grab records", nrec);
    memset(world_user_area(out->w), 0, wc.user_bytes);
    double t0 = now_s();
    ddp_status s = world_run(out->w, rank_main, (void *)cfg);
    out->wall_s = now_s() - t0;
    memcpy(out->records, world_user_area(out->w), nrec * sizeof *out->records);
    if (cfg->backend == VERIFY_BACKEND_NCCL) {
        out->nccl = calloc((size_t)cfg->nranks, sizeof *out->nccl);
        if (out->nccl)
            memcpy(out->nccl, nccl_area(world_user_area(out->w), nrec), (size_t)cfg->nranks * sizeof *out->nccl);
    }
    /* Each rank's own peak, from wait4: RUSAGE_CHILDREN would also count whatever the
     * process that exec'd ddpsim had waited for (a compiler, make). */
    for (int r = 0; r < cfg->nranks; r++) {
        long k = world_outcome(out->w, r)->maxrss_kib;
        out->rank_total_kib += k;
        if (k > out->rank_peak_kib)
            out->rank_peak_kib = k;
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        out->parent_peak_kib = ru.ru_maxrss;
    return s;
}

void verify_result_free(verify_result *r)
{
    free(r->records);
    free(r->nccl);
    world_destroy(r->w);
    memset(r, 0, sizeof *r);
}
