/*
 * ddpsim_impl.h - the contract between ddpsim and a DDP implementation
 * under test, built in or loaded from a shared object (--impl ./libmine.so).
 * This header is installed; it needs nothing else from ddpsim.
 *
 * An implementation is a table of callbacks (ddpsim_impl_ops). A shared
 * object exports one function,
 *
 *     const ddpsim_impl_ops *ddpsim_impl_get(void);
 *
 * whose table's api_version must equal DDPSIM_IMPL_API_VERSION.
 *
 * On every rank ddpsim gives the implementation its own model replica (the
 * parameter and gradient views below) and drives it through the schedule:
 *
 *   fwd    forward_begin(no_sync_active), then the model's forward
 *   bwd    the model's backward, which ADDS this micro-step's gradient to
 *          every used parameter's .grad; then grad_ready(p) once per
 *          parameter that received a gradient, in the order backward
 *          produces them (last-registered first); then backward_end()
 *   enter  no_sync_enter()          exit  no_sync_exit()
 *   zero   ddpsim fills every .grad with zeros, then zero_grad()
 *   step   ddpsim applies SGD (p += -lr * grad), then step()
 *
 * Before the first op, create() is called; it should broadcast the
 * parameters from rank 0 as DDP's constructor does (or not: ddpsim checks).
 * The implementation may call the collectives in the services from any
 * callback, or from its own threads while a callback is running; every rank
 * must make the same collective calls in the same order. Callbacks return 0
 * on success; anything else fails the run, with the message the
 * implementation wrote through services->set_error.
 *
 * ddpsim compares the .grad views with its reference at every grab.
 */
#ifndef DDPSIM_IMPL_H
#define DDPSIM_IMPL_H

#include <stddef.h>
#include <stdint.h>

#define DDPSIM_IMPL_API_VERSION 1

typedef struct ddpsim_param_view {
    const char *name; /* PyTorch's name: "0.weight", "head_a.bias", ... */
    int ndim;         /* 1 or 2 */
    int shape[2];     /* [out, in] for a linear weight */
    size_t count;     /* elements */
    float *data;      /* the parameter (contiguous, C order) */
    float *grad;      /* its .grad (never NULL: zeros until a backward writes it) */
} ddpsim_param_view;

typedef struct ddpsim_services {
    int rank, world_size;
    int nparams;
    const ddpsim_param_view *params; /* registration order; params[i].grad of consecutive i are contiguous */
    float *all_grads;                /* every .grad as one buffer (params[0].grad), total_count floats */
    size_t total_count;

    /* DDP options the user chose (an implementation may ignore what it does not model). */
    size_t bucket_cap, first_bucket_cap; /* bytes */
    int find_unused, bucket_view;

    /*
     * Collectives over all ranks, blocking, deterministic (the run's --algo
     * order). Return 0 on success, non-zero when the world is failing.
     */
    int (*allreduce_sum)(void *env, float *buf, size_t count);
    int (*broadcast)(void *env, void *buf, size_t bytes, int root);
    int (*allgather)(void *env, const void *send, void *recv, size_t bytes_per_rank);
    /* Record why the implementation fails (shown in the report); returns -1. */
    int (*set_error)(void *env, const char *message);
    void *env;
} ddpsim_services;

typedef struct ddpsim_impl_ops {
    uint32_t api_version; /* DDPSIM_IMPL_API_VERSION */
    const char *name;
    const char *description; /* one line */
    int (*create)(const ddpsim_services *svc, void **state);
    void (*destroy)(void *state);
    int (*forward_begin)(void *state, int no_sync_active);
    int (*no_sync_enter)(void *state);
    int (*no_sync_exit)(void *state);
    int (*grad_ready)(void *state, int param);
    int (*backward_end)(void *state);
    int (*zero_grad)(void *state);
    int (*step)(void *state);
} ddpsim_impl_ops;

/* What a plugin exports (declared here, so a plugin's definition is checked against it). */
const ddpsim_impl_ops *ddpsim_impl_get(void);
typedef const ddpsim_impl_ops *(*ddpsim_impl_get_fn)(void);
#define DDPSIM_IMPL_ENTRY "ddpsim_impl_get"

#endif
