/*
 * services.c - what ddpsim gives every implementation on a rank (impl.h,
 * ddpsim_impl.h): its parameter views and the collectives, routed through
 * the run's backend.
 */
#include "impl.h"

#include <stdio.h>
#include <string.h>

#include "coll.h"

ddp_status impl_reduce(void *env, float *buf, size_t count, int avg)
{
    impl_env *e = env;
    if (e->flip_pending && count > 0) {
        uint32_t u;
        memcpy(&u, &buf[0], sizeof u);
        u ^= UINT32_C(1) << 22; /* the top mantissa bit: the value moves by up to half */
        memcpy(&buf[0], &u, sizeof u);
        e->flip_pending = 0;
    }
    if (e->nccl)
        return nccl_comm_allreduce(e->nccl, buf, count, avg);
    if (avg)
        coll_mul_inv_n(buf, buf, count, world_size(e->wr));
    return coll_allreduce(e->wr, buf, count, COLL_FLOAT, COLL_SUM, e->cfg.algo);
}

/* A collective the implementation called: 0, or -1 with ddpsim's reason kept for the report. */
static int svc_result(impl_env *e, ddp_status s)
{
    if (s == DDP_OK)
        return 0;
    snprintf(e->coll_error, sizeof e->coll_error, "%s", ddp_error_text());
    return -1;
}

static int svc_allreduce(void *env, float *buf, size_t count)
{
    return svc_result(env, impl_reduce(env, buf, count, 0));
}

static int svc_broadcast(void *env, void *buf, size_t bytes, int root)
{
    return svc_result(env, coll_broadcast(((impl_env *)env)->wr, buf, bytes, root));
}

static int svc_allgather(void *env, const void *send, void *recv, size_t bytes)
{
    return svc_result(env, coll_allgather(((impl_env *)env)->wr, send, recv, bytes));
}

static int svc_set_error(void *env, const char *message)
{
    impl_env *e = env;
    snprintf(e->error, sizeof e->error, "%s", message ? message : "(no message)");
    return -1;
}

void impl_services_init(ddpsim_services *svc, ddpsim_param_view *views, impl_env *env)
{
    model *m = env->m;
    for (int i = 0; i < model_nparams(m); i++) {
        const model_param *p = model_param_at(m, i);
        views[i] = (ddpsim_param_view){p->name, p->ndim, {p->shape[0], p->shape[1]}, p->count,
                                       model_weights(m) + p->offset, model_grads(m) + p->offset};
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
    };
}
