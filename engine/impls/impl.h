/*
 * impl.h - implementations under test inside ddpsim: the registry of
 * built-ins (reference, bucketed and the catalogue of real DDP bugs), the
 * loading of plugins, and the services ddpsim gives an implementation.
 * Every one of them, built in or not, is driven through ddpsim_impl.h.
 */
#ifndef DDPSIM_IMPL_INTERNAL_H
#define DDPSIM_IMPL_INTERNAL_H

#include <stdatomic.h>

#include "ddp_ref.h"
#include "ddpsim_impl.h"
#include "mesh.h"
#include "model.h"
#include "nccl_comm.h"
#include "status.h"
#include "world.h"

#define IMPL_NAME_LEN 256
#define IMPL_ERROR_LEN 512

/* A built-in implementation and what the catalogue says of it. */
typedef struct impl_entry {
    const ddpsim_impl_ops *ops;
    const char *source;   /* where the bug was reported ("" for correct implementations) */
    int is_mutant;        /* a known-wrong implementation the checker must catch */
    int bitwise_only;     /* its results are right in real arithmetic: only a bitwise comparison can tell */
    int shard_mode;       /* the --shard mode it is (ddpsim_shard_mode; 0: DDP), the battery it runs */
} impl_entry;

int impl_builtin_count(void);
const impl_entry *impl_builtin_at(int i);

typedef struct impl_handle {
    const ddpsim_impl_ops *ops; /* a built-in's table, or `table` */
    ddpsim_impl_ops table;      /* a plugin's, copied whole (a version-1 table leaves the version-2 part NULL) */
    const impl_entry *entry; /* NULL for a plugin */
    void *dl;                /* dlopen handle of a plugin */
    char name[IMPL_NAME_LEN];
} impl_handle;

/*
 * A built-in by name, or a plugin when name contains a '/' (dlopen). For a
 * plugin: DDP_ERR_INVALID with dlerror's text when it does not load, lacks
 * ddpsim_impl_get, returns NULL, has an api_version other than 1 to 4, or
 * misses a callback. Unknown names list the built-ins.
 */
ddp_status impl_open(const char *name, impl_handle *out);
void impl_close(impl_handle *h);

/* What stands behind services->env for every implementation on a rank. */
typedef struct impl_env {
    world_rank *wr;
    model *m;
    ddp_config cfg;
    int chaos;            /* built-ins may shake their own timing-only choices with it */
    uint64_t chaos_seed;
    uint64_t chaos_key;   /* this rank's stream of chaos points (services->chaos_point) */
    _Atomic uint64_t chaos_count[16]; /* pauses so far, by site */
    int zero_to_none;
    nccl_comm *nccl;      /* --backend nccl: the implementation's reductions go through NCCL */
    int backend_avg;      /* --nccl-op avg: built-ins leave buckets unscaled and ask for ncclAvg */
    int flip_pending;     /* --fault flip: the next reduction's contribution gets one bit flipped */
    ddpsim_buffer_view buffers[MODEL_MAX_BUFFERS]; /* services->buffers */
    /* Under join, who runs the op at hand (ranks still running, the highest of them) and the last joiner:
     * what the reference implementation is told as the checker's reference is (ddp_ref_participants). */
    int join_nactive, join_highest, join_last, join_peers_sync;
    /* The implementation's reductions so far, calls and bytes (communication conformance: verify ops.c):
     * all-reduces, and reduce-scatters apart */
    _Atomic uint64_t reductions, reduced_bytes, scatters, scattered_bytes;
    int shard_mode;       /* --shard (ddpsim_shard_mode) */
    mesh mesh;            /* --mesh: 1 x N unless HSDP's */
    /* --trace: trace_event_here(trace, ...) for what the implementation does (its collectives, its communication
     * thread's items), from any of its threads; NULL: not traced */
    void (*trace_fn)(void *trace, const char *ev, const char *extra);
    void *trace;
    char error[IMPL_ERROR_LEN];      /* what the implementation said (set_error) */
    char coll_error[IMPL_ERROR_LEN]; /* why the last collective it called failed, in ddpsim's words */
} impl_env;

/*
 * The implementation's allreduce (a ddp_reduce_fn over an impl_env): the
 * sum over ranks through the run's backend, or with avg the average (NCCL's
 * ncclAvg; on the CPU each contribution times 1/N, then the sum). A pending
 * --fault flip corrupts this rank's contribution (element 0, a high mantissa
 * bit) on the way in.
 */
ddp_status impl_reduce(void *env, float *buf, size_t count, int avg);

/*
 * The built-ins' join announcement (PyTorch's notify_join_context and _check_global_requires_backward_grad_sync
 * in one collective): every rank's (running, syncs) allgathered; how many run, whether any syncs, and the
 * highest rank running (PyTorch's _find_common_rank). Returns non-zero when the collective failed.
 */
int impl_join_announce(const ddpsim_services *svc, int running, int syncs, int *nrunning, int *any, int *highest);

/*
 * The built-ins' join (PyTorch 1.13's Join with DDP's _DDPJoinHook), one state for all of them. join_enter
 * turns it on (it stays on after the block, as in PyTorch 1.13); a forward under it announces this rank
 * running, a shadowed forward announces it out; join_exit is the final sync.
 */
typedef struct impl_join {
    int on, divide_initial;
    int shadowed;   /* forwards shadowed in this join block: 0 makes this rank a last joiner */
} impl_join;
void impl_join_enter(impl_join *j, int divide_by_initial_world_size);
/*
 * A forward of this rank (syncs: outside no_sync): under join the announcement, then *nrunning, *any and *src
 * (the rank whose buffers the forward takes: 0, or under join the highest running); outside join the world, 1
 * when it syncs, rank 0. Non-zero when the collective failed.
 */
int impl_join_forward(const ddpsim_services *svc, const impl_join *j, int syncs, int *nrunning, int *any, int *src);
/* A peer's forward shadowed by this rank (ddpsim_impl.h join_shadow): whether the peers sync, and from where. */
int impl_join_shadow(const ddpsim_services *svc, impl_join *j, int *any, int *src);
/*
 * join_exit (distributed.py _sync_final_model): a rank that shadowed nothing in the block is a last joiner;
 * every rank takes the parameters (and with buffers the buffers) of the highest of them.
 */
int impl_join_exit(const ddpsim_services *svc, impl_join *j, int buffers);

/* Fill views (model_nparams entries) and svc for the implementation's replica m. */
void impl_services_init(ddpsim_services *svc, ddpsim_param_view *views, impl_env *env);

/* The run's GradScaler as the services (version 9) tell it: the built-ins' own scalers start from it. */
scaler_config impl_scaler_config(const ddpsim_services *svc);

/* Built-ins reach the engine's world and model through the services' env. */
static inline impl_env *impl_env_of(const ddpsim_services *svc) { return svc->env; }

extern const ddpsim_impl_ops impl_reference_ops, impl_bucketed_ops;
/* The sharded built-ins (sharded.c), one per mode. */
extern const ddpsim_impl_ops impl_zero1_ops, impl_zero2_ops, impl_fsdp_ops, impl_hsdp_ops;
/* The mode's correct built-in: what --shard MODE runs without --impl (NULL for DDPSIM_SHARD_NONE). */
const ddpsim_impl_ops *impl_sharded_default(int shard_mode);
/* The mutants' tables (impl_mutants.c), in catalogue order. */
int impl_mutant_count(void);
const impl_entry *impl_mutant_at(int i);
/* The sharded ones (sharded_bugs.c). */
int impl_sharded_mutant_count(void);
const impl_entry *impl_sharded_mutant_at(int i);

#endif
