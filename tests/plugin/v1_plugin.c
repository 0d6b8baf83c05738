/*
 * v1_plugin.c - a plugin built for interface version 1, as one compiled
 * against the old header would be: its table ends after step (no
 * optimizer_step), and the bytes that follow it here are poison. ddpsim
 * must load it and run it without reading past the version-1 table, and
 * without the version-2 services it never asks for.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "simple_ddp.h"

/* ddpsim_impl_ops as version 1 defined it. */
typedef struct v1_ops {
    uint32_t api_version;
    const char *name;
    const char *description;
    int (*create)(const ddpsim_services *svc, void **state);
    void (*destroy)(void *state);
    int (*forward_begin)(void *state, int no_sync_active);
    int (*no_sync_enter)(void *state);
    int (*no_sync_exit)(void *state);
    int (*grad_ready)(void *state, int param);
    int (*backward_end)(void *state);
    int (*zero_grad)(void *state);
    int (*step)(void *state);
} v1_ops;

static int v_create(const ddpsim_services *svc, void **state)
{
    static const sddp_hooks none = {0};
    sddp *d;
    int rc = sddp_create(svc, &none, &d);
    *state = d;
    return rc;
}
static void v_destroy(void *state) { sddp_destroy(state); }
static int v_forward_begin(void *state, int no_sync) { return sddp_forward_begin(state, no_sync); }
static int v_grad_ready(void *state, int p)
{
    sddp_grad_ready(state, p);
    return 0;
}
static int v_backward_end(void *state) { return sddp_backward_end(state); }
static int v_nothing(void *state)
{
    (void)state;
    return 0;
}

static const struct {
    v1_ops ops;
    unsigned char poison[64]; /* where a version-2 table would go on: a call through it crashes */
} table = {
    {1, "v1-plugin", "a version-1 plugin", v_create, v_destroy, v_forward_begin, v_nothing, v_nothing, v_grad_ready,
     v_backward_end, v_nothing, v_nothing},
    {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
};

const ddpsim_impl_ops *ddpsim_impl_get(void)
{
    return (const ddpsim_impl_ops *)(const void *)&table.ops;
}
