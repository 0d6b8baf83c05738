/*
 * registry.c - the built-in implementations and plugin loading (impl.h).
 */
#include "impl.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const impl_entry correct[] = {
    {&impl_reference_ops, "", 0, 0, 0},
    {&impl_bucketed_ops, "", 0, 0, 0},
    {&impl_zero1_ops, "", 0, 0, DDPSIM_SHARD_ZERO1},
    {&impl_zero2_ops, "", 0, 0, DDPSIM_SHARD_ZERO2},
    {&impl_fsdp_ops, "", 0, 0, DDPSIM_SHARD_FSDP},
    {&impl_hsdp_ops, "", 0, 0, DDPSIM_SHARD_HSDP},
};
#define NCORRECT ((int)(sizeof correct / sizeof correct[0]))

int impl_builtin_count(void)
{
    return NCORRECT + impl_mutant_count() + impl_sharded_mutant_count();
}

const impl_entry *impl_builtin_at(int i)
{
    if (i < NCORRECT)
        return &correct[i];
    i -= NCORRECT;
    return i < impl_mutant_count() ? impl_mutant_at(i) : impl_sharded_mutant_at(i - impl_mutant_count());
}

const ddpsim_impl_ops *impl_sharded_default(int shard_mode)
{
    for (int i = 0; i < NCORRECT; i++)
        if (shard_mode != DDPSIM_SHARD_NONE && correct[i].shard_mode == shard_mode)
            return correct[i].ops;
    return NULL;
}

static ddp_status open_plugin(const char *path, impl_handle *out)
{
    dlerror();
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *why = dlerror();
        return ddp_error(DDP_ERR_INVALID, "cannot load plugin %s: %s%s", path, why,
                         why && strstr(why, "libtsan") ? " (a plugin built with -fsanitize=thread runs under --race)"
                                                       : "");
    }
    ddpsim_impl_get_fn get = NULL;
    *(void **)&get = dlsym(dl, DDPSIM_IMPL_ENTRY);
    const ddpsim_impl_ops *ops = get ? get() : NULL;
    ddp_status s = DDP_OK;
    if (!get)
        s = ddp_error(DDP_ERR_INVALID, "plugin %s does not export %s() (see ddpsim_impl.h)", path, DDPSIM_IMPL_ENTRY);
    else if (!ops)
        s = ddp_error(DDP_ERR_INVALID, "plugin %s: %s() returned NULL", path, DDPSIM_IMPL_ENTRY);
    else if (ops->api_version < DDPSIM_IMPL_API_MIN_VERSION || ops->api_version > DDPSIM_IMPL_API_VERSION)
        s = ddp_error(DDP_ERR_INVALID,
                      "plugin %s was built for interface version %u; this ddpsim speaks versions %d to %d", path,
                      ops->api_version, DDPSIM_IMPL_API_MIN_VERSION, DDPSIM_IMPL_API_VERSION);
    else if (!ops->create || !ops->destroy || !ops->forward_begin || !ops->no_sync_enter || !ops->no_sync_exit ||
             !ops->grad_ready || !ops->backward_end || !ops->zero_grad || !ops->step)
        s = ddp_error(DDP_ERR_INVALID, "plugin %s leaves a callback of ddpsim_impl_ops NULL", path);
    else if (ops->api_version >= 9 && !ops->scaler_scale != !ops->scaler_unscale)
        s = ddp_error(DDP_ERR_INVALID, "plugin %s has one of scaler_scale and scaler_unscale: loss scaling needs both "
                                       "or neither (ddpsim_impl.h)", path);
    if (s != DDP_OK) {
        dlclose(dl);
        return s;
    }
    /* A version-1 table ends where version 2 added optimizer_step, a version-2 or -3 one where version 4 added
     * join_enter, a version-4 one where version 5 added shard_layout, a version-5 to -7 one where version 8 added
     * clip_grads, a version-8 one where version 9 added scaler_scale, a version-9 one where version 10 added loss_factor:
     * read no further than it goes. */
    memset(&out->table, 0, sizeof out->table);
    memcpy(&out->table, ops,
           ops->api_version >= 10  ? sizeof out->table
           : ops->api_version >= 9 ? offsetof(ddpsim_impl_ops, loss_factor)
           : ops->api_version >= 8 ? offsetof(ddpsim_impl_ops, scaler_scale)
           : ops->api_version >= 5 ? offsetof(ddpsim_impl_ops, clip_grads)
           : ops->api_version >= 4 ? offsetof(ddpsim_impl_ops, shard_layout)
           : ops->api_version >= 2 ? offsetof(ddpsim_impl_ops, join_enter)
                                   : offsetof(ddpsim_impl_ops, optimizer_step));
    out->ops = &out->table;
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
