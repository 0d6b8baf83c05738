/*
 * ddp_ref.c - the reference DDP (ddp_ref.h).
 *
 * A bucket is a list of parameters in bucket order. In the constructor's
 * layout each bucket is a run of consecutive parameter indices, whose
 * gradients are contiguous in the model's buffer: scaling and reducing in
 * place there gives exactly the values PyTorch's copy into a bucket and back
 * gives, without the copy. After the rebuild a bucket holds its parameters
 * in the order their gradients became ready; it is then gathered into a flat
 * buffer in that order, reduced, and scattered back, as PyTorch's reducer
 * does. The order matters to a ring's summation (and to another backend's),
 * not to ordered or exact, which sum each element over the ranks in rank
 * order wherever it lies: there a rebuilt bucket whose parameters are a run
 * of consecutive indices in another order (the ready order of a chain of
 * layers is the reverse) is also reduced in place, over the same elements,
 * with the same bits and two passes over it fewer.
 */
#include "ddp_ref.h"

#include <stdlib.h>
#include <string.h>

typedef struct ref_bucket {
    int members[MODEL_MAX_PARAMS]; /* parameter indices, in bucket order */
    int n;
    size_t count;                  /* elements */
    int contiguous;                /* members are consecutive, ascending: reduce in place */
    int lowest;                    /* the lowest member ... */
    int consecutive;               /* ... and the members are consecutive indices in some order: in place under
                                    * ordered or exact */
} ref_bucket;

struct ddp_ref {
    ddp_config cfg;
    model *m;
    world_rank *wr;
    int nbuckets;
    ref_bucket buckets[MODEL_MAX_PARAMS];
    float *flat;            /* a bucket's gathered gradients (rebuilt layout), room for flat_count */
    size_t flat_count;
    int nosync_depth;       /* no_sync contexts entered and not exited (they nest) */
    int fwd_param_sync;     /* require_forward_param_sync: the next forward broadcasts the buffers */
    int fwd_pending;        /* a forward waits for its backward */
    int armed;              /* prepare_for_backward ran (a forward outside no_sync) and no backward has synced since */
    size_t arm_forward;     /* the arming forward (counted from 1), for errors */
    size_t nforward;
    unsigned char arm_used[MODEL_MAX_PARAMS]; /* the parameters the arming forward used ... */
    int arm_used_known;     /* ... when its caller ran the forward through ddp_ref_forward */
    int last_synced;
    unsigned char used_now[MODEL_MAX_PARAMS]; /* got a gradient in the current backward */
    float window_used[MODEL_MAX_PARAMS]; /* used by a forward since the last sync (1/0), allreduced at sync */
    /* The reducer's device copy of the used map (local_used_map_dev_): the global map of the last sync, own or
     * shadowed. A joined rank contributes it to each shadowed sync and takes the result in place
     * (distributed.py _match_unused_params_allreduce, 1.13 and 2.x), so a parameter a peer used in one shadowed
     * sync counts as used in the next one too. */
    float dev_used[MODEL_MAX_PARAMS];
    float *saved;           /* local gradients of globally unused parameters, kept across the allreduce */
    unsigned char reduced[MODEL_MAX_PARAMS]; /* which parameters the last sync reduced */
    unsigned char averaged[MODEL_MAX_PARAMS]; /* ... and whose .grad took the allreduce's result on this rank */
    unsigned char alias[MODEL_MAX_PARAMS];   /* gradient_as_bucket_view: .grad is its bucket's view by now */
    /* The rebuild: the ready order of the first syncing backward, applied at the next forward. */
    int ready_order[MODEL_MAX_PARAMS], nready;
    int recorded, rebuilt;
    ddp_reduce_fn reduce;   /* another backend's allreduce (NULL: the CPU collectives) */
    void *reduce_ctx;
    int backend_avg;        /* the backend averages: buckets go unscaled */
    float *wire;            /* a compressing hook's gathered chunk: every rank's values (COMM_HOOK_CHUNK * N floats) */
    /* join (ddp_ref.h) */
    int join_enabled, divide_initial;
    int nactive, highest;   /* who runs the op at hand (all ranks, the last, unless told) */
    int div;                /* the divisor the last forward set for its backward's sync */
    int shadow_armed, shadow_synced;
    float *zeros;           /* a shadow's contribution: zeros for the largest bucket */
    size_t zeros_count;
    uint64_t reductions, reduced_bytes; /* every collective reduction so far, and the bytes each rank gave it */
};


/*
 * Buckets from a layout (ddp_bucket_layout): nb buckets of sizes[k]
 * parameters each, members in bucket order; the flat buffer sized for the
 * largest bucket that has to be gathered.
 */
static ddp_status set_layout(ddp_ref *d, const int *members, const int *sizes, int nb)
{
    d->nbuckets = nb;
    size_t gathered = 0;
    for (int k = 0, j = 0; k < nb; k++) {
        ref_bucket *b = &d->buckets[k];
        b->n = sizes[k];
        b->count = 0;
        b->contiguous = 1;
        int highest = members[j];
        b->lowest = members[j];
        for (int q = 0; q < b->n; q++, j++) {
            b->members[q] = members[j];
            b->count += model_param_at(d->m, members[j])->count;
            if (q > 0 && b->members[q] != b->members[q - 1] + 1)
                b->contiguous = 0;
            b->lowest = members[j] < b->lowest ? members[j] : b->lowest;
            highest = members[j] > highest ? members[j] : highest;
        }
        b->consecutive = highest - b->lowest + 1 == b->n; /* a parameter is in one bucket once */
        if (!b->contiguous && b->count > gathered)
            gathered = b->count;
    }
    if (gathered > d->flat_count) {
        float *f = realloc(d->flat, gathered * sizeof(float));
        if (!f)
            return ddp_error(DDP_ERR_NOMEM, "a bucket's flat buffer of %zu floats", gathered);
        d->flat = f;
        d->flat_count = gathered;
    }
    return DDP_OK;
}

/* The constructor's layout (buckets.h): one bucket, or with find_unused the caps over the reversed registration order. */
static ddp_status initial_layout(ddp_ref *d)
{
    int members[MODEL_MAX_PARAMS], sizes[MODEL_MAX_PARAMS];
    int nb = ddp_bucket_layout(d->m, d->cfg.first_bucket_cap, d->cfg.bucket_cap, d->cfg.find_unused, NULL, 0, members,
                               sizes);
    return set_layout(d, members, sizes, nb);
}

/*
 * reducer.cpp's rebuild_buckets: the parameters in the order their
 * gradients became ready in the first syncing backward, filled with the same
 * two limits (first bucket, then cap) and not reversed, so the small first
 * bucket now holds the parameters whose gradients come first.
 */
static ddp_status rebuild(ddp_ref *d)
{
    /* Ranks may have seen different orders; every rank takes rank 0's (sync_bucket_indices). */
    int32_t order[MODEL_MAX_PARAMS];
    for (int i = 0; i < d->nready; i++)
        order[i] = d->ready_order[i];
    DDP_CHECK(coll_broadcast(d->wr, order, (size_t)d->nready * sizeof order[0], 0));
    int members[MODEL_MAX_PARAMS], sizes[MODEL_MAX_PARAMS];
    int nb = ddp_bucket_layout(d->m, d->cfg.first_bucket_cap, d->cfg.bucket_cap, d->cfg.find_unused, order, d->nready,
                               members, sizes);
    if (nb < 0)
        return ddp_error(DDP_ERR_INVALID, "rank 0's bucket order is corrupt");
    d->rebuilt = 1;
    return set_layout(d, members, sizes, nb);
}

void ddp_ref_set_reducer(ddp_ref *d, ddp_reduce_fn fn, void *ctx, int backend_avg)
{
    d->reduce = fn;
    d->reduce_ctx = ctx;
    d->backend_avg = fn && backend_avg;
}

/* Sum (or, for a backend that averages, average) buf over all ranks. */
static ddp_status allreduce(ddp_ref *d, float *buf, size_t count, coll_algo algo, int avg)
{
    d->reductions++;
    d->reduced_bytes += count * sizeof *buf;
    if (d->reduce)
        return d->reduce(d->reduce_ctx, buf, count, avg);
    return coll_allreduce(d->wr, buf, count, COLL_FLOAT, COLL_SUM, algo);
}

ddp_config ddp_config_default(void)
{
    return (ddp_config){.algo = COLL_ORDERED, .bucket_cap = DDP_DEFAULT_BUCKET_CAP,
                        .first_bucket_cap = DDP_DEFAULT_FIRST_BUCKET_CAP, .lr = DDP_DEFAULT_LR};
}

const char *ddp_find_unused_rule_name(const ddp_config *cfg)
{
    return cfg->find_unused_syncing_backward ? "syncing-backward" : "window";
}

const char *ddp_find_unused_rule_text(const ddp_config *cfg)
{
    return cfg->find_unused_syncing_backward ? "used by the syncing backward: PyTorch < 2.4"
                                             : "used in the window: PyTorch >= 2.4";
}

ddp_status ddp_ref_create(const ddp_config *cfg, model *m, world_rank *wr, ddp_ref **out)
{
    *out = NULL;
    if (cfg->bucket_cap == 0 || cfg->first_bucket_cap == 0)
        return ddp_error(DDP_ERR_INVALID, "bucket caps must be positive");
    ddp_ref *d = calloc(1, sizeof *d);
    if (!d)
        return ddp_error(DDP_ERR_NOMEM, "reference DDP");
    d->cfg = *cfg;
    d->m = m;
    d->wr = wr;
    d->fwd_param_sync = 1; /* distributed.py __init__: self.require_forward_param_sync = True */
    d->nactive = d->div = world_size(wr);
    d->highest = world_size(wr) - 1;
    if (initial_layout(d) != DDP_OK) {
        ddp_ref_destroy(d);
        return ddp_error(DDP_ERR_NOMEM, "reference DDP buckets");
    }
    if (cfg->find_unused)
        d->saved = malloc(model_size(m) * sizeof(float));
    if (cfg->find_unused && !d->saved) {
        ddp_ref_destroy(d);
        return ddp_error(DDP_ERR_NOMEM, "reference DDP scratch of %zu floats", model_size(m));
    }
    *out = d;
    return DDP_OK;
}

void ddp_ref_destroy(ddp_ref *d)
{
    if (!d)
        return;
    free(d->saved);
    free(d->flat);
    free(d->wire);
    free(d->zeros);
    free(d);
}

/* Every rank takes rank src's buffers (_broadcast_coalesced of modules_buffers). */
static ddp_status broadcast_buffers(ddp_ref *d, int src)
{
    if (!model_nbuffers(d->m))
        return DDP_OK;
    return coll_broadcast(d->wr, model_buffers(d->m), model_buffers_size(d->m) * sizeof(float), src);
}

/* utils.py _sync_module_states: named_parameters() and named_buffers() from src. */
static ddp_status sync_module_states(ddp_ref *d, int src)
{
    DDP_CHECK(coll_broadcast(d->wr, model_weights(d->m), model_size(d->m) * sizeof(float), src));
    return broadcast_buffers(d, src);
}

ddp_status ddp_ref_broadcast_params(ddp_ref *d)
{
    /* 1.13 distributed.py __init__: parameters and buffers, whatever broadcast_buffers says (from PyTorch 2.1, PR
     * #100729, broadcast_buffers=False skips the buffers here too). */
    return sync_module_states(d, 0);
}

/* distributed.py no_sync(): require_backward_grad_sync = False inside, the value found restored at exit. */
ddp_status ddp_ref_no_sync_enter(ddp_ref *d)
{
    d->nosync_depth++;
    return DDP_OK;
}

ddp_status ddp_ref_no_sync_exit(ddp_ref *d)
{
    if (d->nosync_depth == 0)
        return ddp_error(DDP_ERR_INVALID, "no_sync exited without being entered");
    d->nosync_depth--; /* and nothing else: exiting no_sync does not sync */
    return DDP_OK;
}

/* _sync_buffers: rank 0, or while join is enabled the highest rank still running (_find_common_rank). */
static int buffer_source(const ddp_ref *d)
{
    return d->join_enabled ? d->highest : 0;
}

/* distributed.py forward: "if torch.is_grad_enabled() and self.reducer._rebuild_buckets()", at any forward after the
 * first sync, inside no_sync too; never with find_unused_parameters (should_rebuild_buckets). A joined rank's
 * main_hook calls it too. */
static ddp_status rebuild_when_due(ddp_ref *d)
{
    if (d->recorded && !d->rebuilt && !d->cfg.find_unused)
        DDP_CHECK(rebuild(d));
    return DDP_OK;
}

ddp_status ddp_ref_forward_begin(ddp_ref *d)
{
    DDP_CHECK(rebuild_when_due(d));
    /* forward: "if self._check_sync_bufs_pre_fwd(): self._sync_buffers()", i.e. will_sync_module_buffers():
     * require_forward_param_sync and broadcast_buffers and buffers exist; from rank 0 without join. The flag is
     * the PREVIOUS forward's "torch.is_grad_enabled() and self.require_backward_grad_sync" (True at
     * construction): the first forward inside no_sync still broadcasts, later ones inside do not, and neither
     * does the first one after the exit (pytorch #63916 is about the list of buffers, re-read here each time). */
    if (d->fwd_param_sync && !d->cfg.no_broadcast_buffers)
        DDP_CHECK(broadcast_buffers(d, buffer_source(d)));
    d->fwd_param_sync = d->nosync_depth == 0;
    /* reducer.cpp set_divide_factor: the world size, or under join without divide_by_initial_world_size the count
     * of ranks that announced this forward (notify_join_context); the last forward's announcement counts. */
    d->div = d->join_enabled && !d->divide_initial ? d->nactive : world_size(d->wr);
    d->fwd_pending = 1; /* a forward before it that never got its backward: its graph is dropped */
    d->nforward++;
    /* "if torch.is_grad_enabled() and self.require_backward_grad_sync: ... reducer.prepare_for_backward(...)":
     * a forward outside no_sync arms the reducer (expect_autograd_hooks_); one inside leaves it as it is. */
    if (d->nosync_depth == 0) {
        d->armed = 1;
        d->arm_forward = d->nforward;
        d->arm_used_known = 0;
    }
    memset(d->used_now, 0, sizeof d->used_now);
    return DDP_OK;
}

void ddp_ref_forward_end(ddp_ref *d)
{
    if (d->armed && d->arm_forward == d->nforward) { /* search_unused_parameters on this forward's output */
        memcpy(d->arm_used, model_used(d->m), (size_t)model_nparams(d->m));
        d->arm_used_known = 1;
    }
}

ddp_status ddp_ref_forward(ddp_ref *d, const model_batch *b)
{
    DDP_CHECK(ddp_ref_forward_begin(d));
    DDP_CHECK(model_forward(d->m, b, NULL));
    ddp_ref_forward_end(d);
    return DDP_OK;
}

void ddp_ref_grad_ready(ddp_ref *d, int p)
{
    d->used_now[p] = 1;
    d->window_used[p] = 1.0f;
    /* autograd_hook's push_rebuilt_params: the ready order of the first backward that syncs */
    if (!d->recorded && d->fwd_pending && d->armed && d->nready < MODEL_MAX_PARAMS)
        d->ready_order[d->nready++] = p;
}

/*
 * Scale bucket k's gradients by 1/N, then sum-allreduce them. How each is
 * scaled is reducer.cpp's mark_variable_ready_dense: a grad that is not (yet)
 * an alias of its bucket view is multiplied by 1/N (rounded to float once)
 * while copied in, at::mul_out(bucket_view, grad, 1.0 / N); with
 * gradient_as_bucket_view the grad then becomes the view, and from the next
 * sync on the reducer divides it in place, bucket_view.div_(N). So the first
 * sync multiplies and later ones divide (the two differ in the last bit for
 * N not a power of two); a zero that fills zeros keeps the alias.
 */
/* The registered communication hook on one bucket (comm_hook.h): its prelude, then its collective. */
static ddp_status hook_reduce(ddp_ref *d, float *buf, size_t count)
{
    int n = world_size(d->wr);
    comm_hook_compress(buf, count, n, d->cfg.comm_hook);
    if (!ddp_comm_hook_compresses(d->cfg.comm_hook))
        return allreduce(d, buf, count, d->cfg.algo, 0); /* allreduce_hook: a float sum of the divided bucket */
    if (!d->wire && !(d->wire = malloc(COMM_HOOK_CHUNK * (size_t)n * sizeof(float))))
        return ddp_error(DDP_ERR_NOMEM, "the communication hook's gather buffer");
    for (size_t at = 0; at < count; at += COMM_HOOK_CHUNK) {
        size_t c = count - at < COMM_HOOK_CHUNK ? count - at : COMM_HOOK_CHUNK;
        DDP_CHECK(coll_allgather(d->wr, buf + at, d->wire, c * sizeof(float)));
        comm_hook_sum_gathered(d->wire, n, c, d->cfg.comm_hook, d->cfg.algo == COLL_EXACT, buf + at);
    }
    return DDP_OK;
}

static ddp_status reduce_bucket(ddp_ref *d, int k)
{
    int n = d->div; /* the world size, unless join says otherwise */
    const ref_bucket *b = &d->buckets[k];
    float *grads = model_grads(d->m);
    /* A contiguous bucket is reduced where it lies, and so is a consecutive one where position does not matter to
     * the sum; any other is gathered in bucket order into d->flat. */
    int in_place = b->contiguous || (b->consecutive && !d->reduce && d->cfg.comm_hook == DDP_HOOK_NONE &&
                                     (d->cfg.algo == COLL_ORDERED || d->cfg.algo == COLL_EXACT));
    float *buf = in_place ? grads + model_param_at(d->m, b->lowest)->offset : d->flat;
    size_t off = 0;
    for (int j = 0; j < b->n; j++) {
        int i = b->members[j];
        const model_param *p = model_param_at(d->m, i);
        float *gi = grads + p->offset, *dst = in_place ? gi : buf + off;
        if (d->backend_avg || d->cfg.comm_hook != DDP_HOOK_NONE)
            memmove(dst, gi, p->count * sizeof(float)); /* a hook gets the gradient unscaled */
        else if (d->cfg.bucket_view && d->alias[i])
            coll_div_n(dst, gi, p->count, n);
        else
            coll_mul_inv_n(dst, gi, p->count, n); /* PyTorch: mul_out(bucket_view, grad, 1.0 / N) */
        off += p->count;
    }
    if (d->cfg.comm_hook == DDP_HOOK_NONE)
        DDP_CHECK(allreduce(d, buf, b->count, d->cfg.algo, d->backend_avg));
    else
        DDP_CHECK(hook_reduce(d, buf, b->count));
    if (in_place)
        return DDP_OK;
    off = 0;
    for (int j = 0; j < b->n; j++) {
        const model_param *p = model_param_at(d->m, b->members[j]);
        memcpy(grads + p->offset, buf + off, p->count * sizeof(float));
        off += p->count;
    }
    return DDP_OK;
}

/*
 * With gradient_as_bucket_view a parameter that no rank used but whose .grad
 * is defined on this rank is averaged all the same: the reducer marks it
 * ready with that .grad, which it copies (times 1/N) into the bucket and
 * then makes the bucket's view (or, already the view, divides in place,
 * mark_variable_ready_dense), so the allreduce writes the average into it;
 * finalize_bucket_dense's "a globally unused grad is kept untouched" only
 * skips re-pointing it. A None .grad stays None. (Observed on 1.13: a
 * parameter used only under no_sync and then by no rank's syncing backward
 * is averaged with the bucket view and kept local without it.)
 */
static int keeps_view(const ddp_ref *d, int i)
{
    return d->cfg.bucket_view && model_grad_defined(d->m)[i];
}

static ddp_status sync_gradients(ddp_ref *d)
{
    int np = model_nparams(d->m);
    float global_used[MODEL_MAX_PARAMS];
    const unsigned char *used_now = d->used_now;
    if (d->cfg.find_unused) {
        /* Which parameters did any rank use in this window (before PyTorch 2.4: in this backward)? Sums of 0/1. */
        for (int i = 0; i < np; i++)
            global_used[i] = d->cfg.find_unused_syncing_backward ? (float)d->used_now[i] : d->window_used[i];
        DDP_CHECK(allreduce(d, global_used, (size_t)np, COLL_ORDERED, 0));
        memcpy(d->dev_used, global_used, (size_t)np * sizeof *global_used);
        for (int i = 0; i < np; i++)
            if (global_used[i] == 0.0f && !keeps_view(d, i)) {
                /* Unused everywhere: its slot reduces as zero and its local gradient stays. */
                const model_param *p = model_param_at(d->m, i);
                memcpy(d->saved + p->offset, model_grads(d->m) + p->offset, p->count * sizeof(float));
                memset(model_grads(d->m) + p->offset, 0, p->count * sizeof(float));
            }
    } else {
        for (int i = 0; i < np; i++)
            if (!used_now[i])
                return ddp_error(DDP_ERR_INVALID,
                                 "parameter '%s' was not used by the forward of a syncing backward on rank %d; "
                                 "PyTorch DDP fails here unless find_unused_parameters=True (--find-unused)",
                                 model_param_at(d->m, i)->name, world_rank_id(d->wr));
    }
    unsigned char *defined = model_grad_defined(d->m);
    for (int i = 0; i < np; i++) {
        d->reduced[i] = !d->cfg.find_unused || global_used[i] != 0.0f;
        d->averaged[i] = d->reduced[i] || keeps_view(d, i);
        defined[i] |= d->reduced[i]; /* copy_bucket_to_grad: a None .grad of a parameter another rank used gets the value */
    }
    for (int k = 0; k < d->nbuckets; k++)
        DDP_CHECK(reduce_bucket(d, k));
    /* finalize_bucket_dense: with gradient_as_bucket_view every reduced grad is its bucket's view from now on
     * (a locally unused one too: grad = bucket_view); a globally unused one is left as it was. */
    for (int i = 0; i < np && d->cfg.bucket_view; i++)
        d->alias[i] |= d->averaged[i];
    if (d->cfg.find_unused)
        for (int i = 0; i < np; i++)
            if (!d->averaged[i]) {
                const model_param *p = model_param_at(d->m, i);
                memcpy(model_grads(d->m) + p->offset, d->saved + p->offset, p->count * sizeof(float));
            }
    memset(d->window_used, 0, sizeof d->window_used);
    return DDP_OK;
}

/*
 * A backward synced by an earlier forward's arming (fwd nosync{fwd bwd}):
 * with find_unused_parameters the reducer took the unused parameters from
 * the arming forward's graph. A parameter the backward's graph uses that the
 * arming forward did not is marked ready twice ("Expected to mark a variable
 * ready only once"); one the arming forward used that the backward's graph
 * does not is never marked ready, and the reduction never finishes
 * ("Expected to have finished reduction in the prior iteration"). Both are
 * PyTorch's errors, so they are refused here with its words.
 */
static ddp_status check_arming(const ddp_ref *d)
{
    if (!d->cfg.find_unused || d->arm_forward == d->nforward || !d->arm_used_known)
        return DDP_OK;
    for (int i = 0; i < model_nparams(d->m); i++)
        if (d->arm_used[i] != d->used_now[i])
            return ddp_error(DDP_ERR_INVALID,
                             "parameter '%s' %s by the forward that armed this sync (forward %zu) but %s by the "
                             "forward this backward runs through (forward %zu): with find_unused_parameters "
                             "PyTorch fails here (%s)", model_param_at(d->m, i)->name,
                             d->arm_used[i] ? "was used" : "was not used", d->arm_forward,
                             d->used_now[i] ? "is" : "is not", d->nforward,
                             d->used_now[i] ? "Expected to mark a variable ready only once"
                                            : "Expected to have finished reduction in the prior iteration");
    return DDP_OK;
}

ddp_status ddp_ref_backward_end(ddp_ref *d)
{
    if (!d->fwd_pending)
        return ddp_error(DDP_ERR_INVALID, "backward without a forward");
    d->fwd_pending = 0;
    d->last_synced = d->armed;
    if (d->armed) {
        DDP_CHECK(check_arming(d));
        DDP_CHECK(sync_gradients(d));
        d->recorded = 1;
        d->armed = 0; /* finalize_backward: expect_autograd_hooks_ = false */
    }
    return DDP_OK;
}

/* AccumulateGrad, then the reducer's hook: each parameter the moment backward completes it. */
typedef struct ready_ctx {
    ddp_ref *d;
    model_ready_fn after;
    void *ctx;
} ready_ctx;

/* A gradient completed: AccumulateGrad into .grad first, then DDP's autograd hook, then the caller's. */
static void own_ready(void *ctx, int p)
{
    ready_ctx *r = ctx;
    model_accumulate(r->d->m, r->d->m, p);
    ddp_ref_grad_ready(r->d, p);
    if (r->after)
        r->after(r->ctx, p);
}

void ddp_ref_backward_local(ddp_ref *d, model_ready_fn after, void *ctx)
{
    ready_ctx r = {d, after, ctx};
    model_backward_local(d->m, own_ready, &r);
}

ddp_status ddp_ref_backward(ddp_ref *d)
{
    if (!d->fwd_pending)
        return ddp_error(DDP_ERR_INVALID, "backward without a forward");
    ddp_ref_backward_local(d, NULL, NULL);
    return ddp_ref_backward_end(d);
}

void ddp_ref_zero_grad(ddp_ref *d)
{
    model_zero_grad_as(d->m, d->cfg.set_to_none);
    if (d->cfg.set_to_none) /* a None .grad is nobody's view: the next sync copies it in by multiplying again */
        memset(d->alias, 0, sizeof d->alias);
}

void ddp_ref_step(ddp_ref *d)
{
    ddp_sgd_step(d->m, d->cfg.lr);
}

void ddp_ref_join_enter(ddp_ref *d, int divide_by_initial_world_size)
{
    d->join_enabled = 1;
    d->divide_initial = divide_by_initial_world_size;
}

void ddp_ref_participants(ddp_ref *d, int nactive, int highest)
{
    d->nactive = nactive;
    d->highest = highest;
}

ddp_status ddp_ref_join_shadow_forward(ddp_ref *d, int peers_sync)
{
    DDP_CHECK(rebuild_when_due(d));
    /* _check_and_sync_module_buffers: by this rank's own require_forward_param_sync, from the highest rank running */
    if (d->fwd_param_sync && !d->cfg.no_broadcast_buffers)
        DDP_CHECK(broadcast_buffers(d, d->highest));
    d->fwd_param_sync = peers_sync;
    d->shadow_armed = peers_sync;
    return DDP_OK;
}

/* _match_all_reduce_for_bwd_pass: zeros, in the peers' collectives' shapes; _match_unused_params_allreduce: the
 * device used map, in place (dev_used). */
ddp_status ddp_ref_join_shadow_backward(ddp_ref *d)
{
    d->shadow_synced = d->shadow_armed;
    if (!d->shadow_armed)
        return DDP_OK;
    d->shadow_armed = 0;
    size_t most = (size_t)model_nparams(d->m);
    for (int k = 0; k < d->nbuckets; k++)
        most = d->buckets[k].count > most ? d->buckets[k].count : most;
    if (most > d->zeros_count) {
        free(d->zeros);
        if (!(d->zeros = calloc(most, sizeof *d->zeros)))
            return ddp_error(DDP_ERR_NOMEM, "a joined rank's zeros: %zu floats", most);
        d->zeros_count = most;
    }
    if (d->cfg.find_unused)
        DDP_CHECK(allreduce(d, d->dev_used, (size_t)model_nparams(d->m), COLL_ORDERED, 0));
    for (int k = 0; k < d->nbuckets; k++) {
        DDP_CHECK(allreduce(d, d->zeros, d->buckets[k].count, d->cfg.algo, 0));
        memset(d->zeros, 0, d->buckets[k].count * sizeof *d->zeros); /* the sum of zeros is zeros; kept honest */
    }
    return DDP_OK;
}

int ddp_ref_join_shadow_synced(const ddp_ref *d) { return d->shadow_synced; }
int ddp_ref_divisor(const ddp_ref *d) { return d->div; }

ddp_status ddp_ref_join_exit(ddp_ref *d, int last_joiner)
{
    d->nactive = world_size(d->wr);
    d->highest = world_size(d->wr) - 1;
    d->shadow_armed = d->shadow_synced = 0;
    return sync_module_states(d, last_joiner);
}

int ddp_ref_pending_sync(const ddp_ref *d) { return d->fwd_pending && d->armed; }
int ddp_ref_last_synced(const ddp_ref *d) { return d->last_synced; }
int ddp_ref_nbuckets(const ddp_ref *d) { return d->nbuckets; }

void ddp_ref_comm_counts(const ddp_ref *d, uint64_t *reductions, uint64_t *bytes)
{
    *reductions = d->reductions;
    *bytes = d->reduced_bytes;
}
const unsigned char *ddp_ref_averaged_params(const ddp_ref *d)
{
    return d->averaged;
}

const unsigned char *ddp_ref_reduced_params(const ddp_ref *d) { return d->reduced; }

int ddp_ref_bucket(const ddp_ref *d, int k, int *members, int max)
{
    const ref_bucket *b = &d->buckets[k];
    for (int j = 0; j < b->n && j < max; j++)
        members[j] = b->members[j];
    return b->n;
}
