/*
 * services.c - what ddpsim gives every implementation on a rank (impl.h,
 * ddpsim_impl.h): its parameter views and the collectives, routed through
 * the run's backend.
 */
#include "impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "coll.h"
#include "interleave.h"
#include "rng.h"

/* A pending --fault flip on this rank's contribution: element 0, the top mantissa bit (it moves by up to half). */
static void flip_contribution(impl_env *e, float *buf, size_t count)
{
    if (!e->flip_pending || count == 0)
        return;
    uint32_t u;
    memcpy(&u, &buf[0], sizeof u);
    u ^= UINT32_C(1) << 22;
    memcpy(&buf[0], &u, sizeof u);
    e->flip_pending = 0;
}

/* When a traced collective starts (0: not traced). */
static uint64_t coll_start(const impl_env *e)
{
    return e->trace_fn ? clock_now_ns() : 0;
}

/* A collective the implementation called has ended (trace.h "coll"): for the timeline of the HTML page. */
static ddp_status coll_traced(impl_env *e, const char *kind, int group, size_t bytes, uint64_t t0, ddp_status s)
{
    if (!e->trace_fn)
        return s;
    static const char *const group_name[] = {"world", "shard", "replica"};
    char extra[192];
    snprintf(extra, sizeof extra, "\"kind\": \"%s\", \"group\": \"%s\", \"bytes\": %zu, \"dur_us\": %.1f%s", kind,
             group >= 0 && group <= DDPSIM_GROUP_REPLICA ? group_name[group] : "?", bytes, (clock_now_ns() - t0) / 1e3,
             s == DDP_OK ? "" : ", \"ok\": false");
    e->trace_fn(e->trace, "coll", extra);
    return s;
}

ddp_status impl_reduce(void *env, float *buf, size_t count, int avg)
{
    impl_env *e = env;
    atomic_fetch_add_explicit(&e->reductions, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->reduced_bytes, count * sizeof *buf, memory_order_relaxed);
    flip_contribution(e, buf, count);
    uint64_t t0 = coll_start(e);
    ddp_status s;
    if (e->nccl) {
        s = nccl_comm_allreduce(e->nccl, buf, count, avg);
    } else {
        if (avg)
            coll_mul_inv_n(buf, buf, count, world_size(e->wr));
        s = coll_allreduce(e->wr, buf, count, COLL_FLOAT, COLL_SUM, e->cfg.algo);
    }
    return coll_traced(e, "allreduce", DDPSIM_GROUP_WORLD, count * sizeof *buf, t0, s);
}

/*
 * Under chaos, a seeded pause of up to 200 us at a site, for whichever
 * thread gets there: the n-th pause at a site is the same for a seed.
 */
static void svc_chaos_point(void *env, uint32_t site)
{
    impl_env *e = env;
    if (interleave_active()) { /* --sched: a point of the scheduler instead of a pause */
        interleave_point();
        return;
    }
    if (!e->chaos)
        return;
    size_t slot = site % (sizeof e->chaos_count / sizeof e->chaos_count[0]);
    uint64_t n = atomic_fetch_add_explicit(&e->chaos_count[slot], 1, memory_order_relaxed);
    clock_sleep_us(rng_below(rng_key(e->chaos_key, site), n, 201));
}

/* A collective's entry: a point (chaos, or the scheduler's), then ddpsim's own code until svc_result. */
static void svc_begin(void *env, uint32_t site)
{
    svc_chaos_point(env, site);
    interleave_ddpsim(1);
}

enum { SITE_ALLREDUCE = 0x636f6c31, SITE_BROADCAST, SITE_ALLGATHER, SITE_REDUCE_SCATTER, SITE_GROUP_ALLREDUCE,
       SITE_GROUP_ALLGATHER }; /* the services' own chaos sites */

/* A collective the implementation called: 0, or -1 with ddpsim's reason kept for the report. The collective's own
 * code ran as ddpsim's (svc_begin), not as the plugin's: --sched leaves it alone. */
static int svc_result(impl_env *e, ddp_status s)
{
    interleave_ddpsim(0);
    if (s == DDP_OK)
        return 0;
    snprintf(e->coll_error, sizeof e->coll_error, "%s", ddp_error_text());
    return -1;
}

static int svc_allreduce(void *env, float *buf, size_t count)
{
    svc_begin(env, SITE_ALLREDUCE);
    return svc_result(env, impl_reduce(env, buf, count, 0));
}

static int svc_broadcast(void *env, void *buf, size_t bytes, int root)
{
    impl_env *e = env;
    svc_begin(env, SITE_BROADCAST);
    uint64_t t0 = coll_start(e);
    return svc_result(e, coll_traced(e, "broadcast", DDPSIM_GROUP_WORLD, bytes, t0,
                                     coll_broadcast(e->wr, buf, bytes, root)));
}

static int svc_allgather(void *env, const void *send, void *recv, size_t bytes)
{
    impl_env *e = env;
    svc_begin(env, SITE_ALLGATHER);
    uint64_t t0 = coll_start(e);
    return svc_result(e, coll_traced(e, "allgather", DDPSIM_GROUP_WORLD, bytes * (size_t)world_size(e->wr), t0,
                                     coll_allgather(e->wr, send, recv, bytes)));
}

/* A group of the mesh, or -1 for a number that is not one (the implementation's fault, said in its words). */
static int svc_group(impl_env *e, int group)
{
    if (group == DDPSIM_GROUP_WORLD || group == DDPSIM_GROUP_SHARD || group == DDPSIM_GROUP_REPLICA)
        return group;
    snprintf(e->coll_error, sizeof e->coll_error, "a group collective with group %d (0 world, 1 shard, 2 replica)",
             group);
    return -1;
}

static int svc_reduce_scatter(void *env, int group, const float *send, float *recv, size_t count_per_rank)
{
    impl_env *e = env;
    svc_chaos_point(env, SITE_REDUCE_SCATTER);
    if (svc_group(e, group) < 0)
        return -1;
    interleave_ddpsim(1);
    size_t count = count_per_rank * (size_t)mesh_group_size(&e->mesh, (mesh_group)group);
    atomic_fetch_add_explicit(&e->scatters, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->scattered_bytes, count * sizeof *send, memory_order_relaxed);
    float *flipped = NULL;
    if (e->flip_pending && count > 0) { /* --fault flip: this contribution, a copy (send is the caller's) */
        if (!(flipped = malloc(count * sizeof *flipped)))
            return svc_result(e, ddp_error(DDP_ERR_NOMEM, "a reduce_scatter's flipped copy: %zu floats", count));
        memcpy(flipped, send, count * sizeof *flipped);
        flip_contribution(e, flipped, count);
    }
    uint64_t t0 = coll_start(e);
    ddp_status st = mesh_reduce_scatter_sum(e->wr, &e->mesh, (mesh_group)group, flipped ? flipped : send, recv,
                                            count_per_rank, e->cfg.algo);
    free(flipped);
    return svc_result(e, coll_traced(e, "reduce_scatter", group, count * sizeof *send, t0, st));
}

static int svc_allreduce_group(void *env, int group, float *buf, size_t count)
{
    impl_env *e = env;
    svc_chaos_point(env, SITE_GROUP_ALLREDUCE);
    if (svc_group(e, group) < 0)
        return -1;
    interleave_ddpsim(1);
    if (group == DDPSIM_GROUP_WORLD)
        return svc_result(e, impl_reduce(env, buf, count, 0));
    atomic_fetch_add_explicit(&e->reductions, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->reduced_bytes, count * sizeof *buf, memory_order_relaxed);
    flip_contribution(e, buf, count);
    uint64_t t0 = coll_start(e);
    return svc_result(e, coll_traced(e, "allreduce", group, count * sizeof *buf, t0,
                                     mesh_allreduce_sum(e->wr, &e->mesh, (mesh_group)group, buf, count, e->cfg.algo)));
}

static int svc_allgather_group(void *env, int group, const void *send, void *recv, size_t bytes)
{
    impl_env *e = env;
    svc_chaos_point(env, SITE_GROUP_ALLGATHER);
    if (svc_group(e, group) < 0)
        return -1;
    interleave_ddpsim(1);
    uint64_t t0 = coll_start(e);
    size_t whole = bytes * (size_t)mesh_group_size(&e->mesh, (mesh_group)group);
    return svc_result(e, coll_traced(e, "allgather", group, whole, t0,
                                     mesh_allgather(e->wr, &e->mesh, (mesh_group)group, send, recv, bytes)));
}

static const char *svc_last_error(void *env)
{
    return ((impl_env *)env)->coll_error;
}

static int svc_bucket_layout(void *env, const int *order, int n, int *members, int *sizes)
{
    impl_env *e = env;
    return ddp_bucket_layout(e->m, e->cfg.first_bucket_cap, e->cfg.bucket_cap, e->cfg.find_unused, order, n, members,
                             sizes);
}

static int svc_set_error(void *env, const char *message)
{
    impl_env *e = env;
    snprintf(e->error, sizeof e->error, "%s", message ? message : "(no message)");
    return -1;
}

int impl_join_announce(const ddpsim_services *svc, int running, int syncs, int *nrunning, int *any, int *highest)
{
    int32_t mine[2] = {running, syncs};
    *nrunning = *any = *highest = 0;
    int32_t *every = malloc(sizeof mine * (size_t)svc->world_size);
    if (!every)
        return svc->set_error(svc->env, "out of memory for the join announcement");
    int rc = svc->allgather(svc->env, mine, every, sizeof mine);
    for (int r = 0; rc == 0 && r < svc->world_size; r++) {
        *nrunning += every[2 * r];
        *any |= every[2 * r + 1];
        *highest = every[2 * r] ? r : *highest;
    }
    free(every);
    return rc;
}

void impl_join_enter(impl_join *j, int divide_by_initial_world_size)
{
    j->on = 1;
    j->divide_initial = divide_by_initial_world_size;
    j->shadowed = 0;
}

int impl_join_forward(const ddpsim_services *svc, const impl_join *j, int syncs, int *nrunning, int *any, int *src)
{
    *nrunning = svc->world_size;
    *any = syncs;
    *src = 0;
    return j->on ? impl_join_announce(svc, 1, syncs, nrunning, any, src) : 0;
}

int impl_join_shadow(const ddpsim_services *svc, impl_join *j, int *any, int *src)
{
    int nrunning;
    j->shadowed++;
    return impl_join_announce(svc, 0, 0, &nrunning, any, src);
}

int impl_join_exit(const ddpsim_services *svc, impl_join *j, int buffers)
{
    int nlast, any, src;
    int shadowed = j->shadowed;
    j->shadowed = 0;
    if (impl_join_announce(svc, shadowed == 0, 0, &nlast, &any, &src))
        return -1;
    for (int p = 0; p < svc->nparams; p++)
        if (svc->broadcast(svc->env, svc->params[p].data, svc->params[p].count * sizeof(float), src))
            return -1;
    if (buffers && svc->nbuffers &&
        svc->broadcast(svc->env, svc->all_buffers, svc->buffers_count * sizeof(float), src))
        return -1;
    return 0;
}

void impl_services_init(ddpsim_services *svc, ddpsim_param_view *views, impl_env *env)
{
    model *m = env->m;
    env->mesh = mesh_or_flat(&env->mesh, world_size(env->wr)); /* no --mesh: one shard group, the world */
    for (int i = 0; i < model_nparams(m); i++) {
        const model_param *p = model_param_at(m, i);
        views[i] = (ddpsim_param_view){p->name, p->ndim, {p->shape[0], p->shape[1]}, p->count,
                                       model_weights(m) + p->offset, model_grads(m) + p->offset};
    }
    for (int i = 0; i < model_nbuffers(m); i++) {
        const model_buffer *b = model_buffer_at(m, i);
        env->buffers[i] = (ddpsim_buffer_view){b->name, b->count, model_buffers(m) + b->offset};
    }
    *svc = (ddpsim_services){
        .rank = world_rank_id(env->wr),
        .world_size = world_size(env->wr),
        .nparams = model_nparams(m),
        .params = views,
        .all_grads = model_grads(m),
        .total_count = model_size(m),
        .bucket_cap = env->cfg.bucket_cap,
        .first_bucket_cap = env->cfg.first_bucket_cap,
        .find_unused = env->cfg.find_unused,
        .bucket_view = env->cfg.bucket_view,
        .allreduce_sum = svc_allreduce,
        .broadcast = svc_broadcast,
        .allgather = svc_allgather,
        .set_error = svc_set_error,
        .env = env,
        .version = DDPSIM_IMPL_API_VERSION,
        .lr = env->cfg.lr,
        .momentum = env->cfg.momentum,
        .adamw_on = env->cfg.adamw.on,
        .beta1 = env->cfg.adamw.beta1,
        .beta2 = env->cfg.adamw.beta2,
        .eps = env->cfg.adamw.eps,
        .weight_decay = env->cfg.adamw.weight_decay,
        .loss_scale_on = env->cfg.scaler.on,
        .loss_scale_dynamic = env->cfg.scaler.dynamic,
        .loss_scale_init = env->cfg.scaler.init,
        .loss_scale_growth = env->cfg.scaler.growth,
        .loss_scale_backoff = env->cfg.scaler.backoff,
        .loss_scale_interval = env->cfg.scaler.interval,
        .zero_to_none = env->zero_to_none,
        .grad_defined = model_grad_defined(m),
        .chaos = env->chaos,
        .chaos_seed = env->chaos_seed,
        .chaos_point = svc_chaos_point,
        .last_error = svc_last_error,
        .comm_hook = (int)env->cfg.comm_hook,
        .bucket_layout = svc_bucket_layout,
        .nbuffers = model_nbuffers(m),
        .buffers = env->buffers,
        .all_buffers = model_buffers(m),
        .buffers_count = model_buffers_size(m),
        .broadcast_buffers = !env->cfg.no_broadcast_buffers,
        .shard_mode = env->shard_mode,
        .mesh_replicas = env->mesh.replicas,
        .mesh_shards = env->mesh.shards,
        .replica_index = mesh_group_index(&env->mesh, MESH_REPLICA, world_rank_id(env->wr)),
        .shard_index = mesh_group_index(&env->mesh, MESH_SHARD, world_rank_id(env->wr)),
        .reduce_scatter_sum = svc_reduce_scatter,
        .allreduce_group = svc_allreduce_group,
        .allgather_group = svc_allgather_group,
    };
    env->chaos_key = rng_key(rng_key(env->chaos_seed, 0x73766370 /* "svcp" */), (uint64_t)world_rank_id(env->wr));
}

scaler_config impl_scaler_config(const ddpsim_services *svc)
{
    return (scaler_config){.on = svc->loss_scale_on, .dynamic = svc->loss_scale_dynamic, .init = svc->loss_scale_init,
                           .growth = svc->loss_scale_growth, .backoff = svc->loss_scale_backoff,
                           .interval = svc->loss_scale_interval};
}
