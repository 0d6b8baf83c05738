/*
 * impl.c - the implementation registry, plugin loading and services (impl.h).
 */
#include "impl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "coll.h"

static const impl_entry correct[] = {
    {&impl_reference_ops, "", 0, 0},
    {&impl_bucketed_ops, "", 0, 0},
};
#define NCORRECT ((int)(sizeof correct / sizeof correct[0]))

int impl_builtin_count(void)
{
    return NCORRECT + impl_mutant_count();
}

const impl_entry *impl_builtin_at(int i)
{
    return i < NCORRECT ? &correct[i] : impl_mutant_at(i - NCORRECT);
}

static ddp_status open_plugin(const char *path, impl_handle *out)
{
    dlerror();
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl)
        return ddp_error(DDP_ERR_INVALID, "cannot load plugin %s: %s", path, dlerror());
    ddpsim_impl_get_fn get = NULL;
    *(void **)&get = dlsym(dl, DDPSIM_IMPL_ENTRY);
    const ddpsim_impl_ops *ops = get ? get() : NULL;
    ddp_status s = DDP_OK;
    if (!get)
        s = ddp_error(DDP_ERR_INVALID, "plugin %s does not export %s() (see ddpsim_impl.h)", path, DDPSIM_IMPL_ENTRY);
    else if (!ops)
        s = ddp_error(DDP_ERR_INVALID, "plugin %s: %s() returned NULL", path, DDPSIM_IMPL_ENTRY);
    else if (ops->api_version != DDPSIM_IMPL_API_VERSION)
        s = ddp_error(DDP_ERR_INVALID, "plugin %s was built for interface version %u; this ddpsim speaks version %d",
                      path, ops->api_version, DDPSIM_IMPL_API_VERSION);
    else if (!ops->create || !ops->destroy || !ops->forward_begin || !ops->no_sync_enter || !ops->no_sync_exit ||
             !ops->grad_ready || !ops->backward_end || !ops->zero_grad || !ops->step)
        s = ddp_error(DDP_ERR_INVALID, "plugin %s leaves a callback of ddpsim_impl_ops NULL", path);
    if (s != DDP_OK) {
        dlclose(dl);
        return s;
    }
    out->ops = ops;
    out->dl = dl;
    return DDP_OK;
}

ddp_status impl_open(const char *name, impl_handle *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    if (strchr(name, '/'))
        return open_plugin(name, out);
    for (int i = 0; i < impl_builtin_count(); i++)
        if (strcmp(impl_builtin_at(i)->ops->name, name) == 0) {
            out->entry = impl_builtin_at(i);
            out->ops = out->entry->ops;
            return DDP_OK;
        }
    return ddp_error(DDP_ERR_INVALID,
                     "unknown implementation '%s' (see ddpsim --list; a plugin is given by a path, e.g. ./libmine.so)",
                     name);
}

void impl_close(impl_handle *h)
{
    if (h->dl)
        dlclose(h->dl);
    memset(h, 0, sizeof *h);
}

ddp_status impl_reduce(void *env, float *buf, size_t count, int avg)
{
    impl_env *e = env;
    if (e->nccl)
        return nccl_comm_allreduce(e->nccl, buf, count, avg);
    if (avg) {
        float inv = (float)(1.0 / world_size(e->wr));
        for (size_t i = 0; i < count; i++)
            buf[i] *= inv;
    }
    return coll_allreduce(e->wr, buf, count, COLL_FLOAT, COLL_SUM, e->cfg.algo);
}

static int svc_allreduce(void *env, float *buf, size_t count)
{
    return impl_reduce(env, buf, count, 0) == DDP_OK ? 0 : -1;
}

static int svc_broadcast(void *env, void *buf, size_t bytes, int root)
{
    return coll_broadcast(((impl_env *)env)->wr, buf, bytes, root) == DDP_OK ? 0 : -1;
}

static int svc_allgather(void *env, const void *send, void *recv, size_t bytes)
{
    return coll_allgather(((impl_env *)env)->wr, send, recv, bytes) == DDP_OK ? 0 : -1;
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
