/*
 * run.c - a verification run seen from the parent (verify.h): validate the
 * configuration before any rank exists, create the world, run every rank
 * (rank.c), and collect the records, figures and peak memory.
 */
#include "config.h"
#include "verify.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "chaos.h"
#include "clock.h"
#include "dump.h"
#include "gpu_probe.h"
#include "machine.h"
#include "impl.h"
#include "judge.h"
#include "rank.h"
#include "stream.h"

void verify_count_comm(verify_rank_figures *fig, uint64_t reductions, uint64_t bytes, uint64_t unsynced)
{
    fig->comm_known = 1;
    fig->impl_reductions += reductions;
    fig->impl_reduced_bytes = bytes == VERIFY_BYTES_UNCOUNTED || fig->impl_reduced_bytes == VERIFY_BYTES_UNCOUNTED
                                  ? VERIFY_BYTES_UNCOUNTED : fig->impl_reduced_bytes + bytes;
    fig->impl_unsynced_reductions += unsynced;
}

const char *verify_none_text(int first_none)
{
    return first_none == VERIFY_NONE_ACTUAL ? "its .grad is None, where DDP's holds a tensor"
                                            : "its .grad holds a tensor, where DDP's is None";
}

const char *verify_cost_name(verify_cost c)
{
    static const char *const names[COST_N] = {
        [COST_IMPL] = "impl_ms", [COST_SHARED_TEST] = "shared_test_ms", [COST_REF_SUMS] = "ref_sums_ms",
        [COST_REF_CHECK] = "ref_check_ms", [COST_AGREEMENT] = "agreement_ms", [COST_COMPARE] = "compare_ms",
        [COST_BOUND] = "bound_ms", [COST_OUTPUT] = "output_ms"};
    return c >= 0 && c < COST_N ? names[c] : "?";
}

void verify_config_defaults(verify_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->nranks = VERIFY_DEFAULT_RANKS;
    cfg->impl = "reference";
    cfg->impl_ops = &impl_reference_ops;
    cfg->model_spec = MODEL_DEFAULT_SPEC;
    cfg->batch = VERIFY_DEFAULT_BATCH;
    cfg->seed = 1;
    cfg->timeout_s = WORLD_DEFAULT_TIMEOUT_S;
    cfg->ddp = ddp_config_default();
    cfg->tol.kind = TOL_BITWISE;
}

/*
 * Check the inputs directory before any rank starts, so that anything wrong
 * in it is a usage error naming the file rather than a failed rank: the
 * manifest against this run (ranks, batch, every parameter's name and
 * shape, the options that change bits), every init tensor, and every batch
 * of every rank the schedule will read (shape, dtype, finite values, tokens
 * in the vocabulary).
 */
static ddp_status check_inputs(const verify_config *cfg)
{
    dump_manifest_info run = {.nranks = cfg->nranks, .model_spec = cfg->model_spec, .batch = cfg->batch,
                              .ddp = &cfg->ddp, .schedule = cfg->schedule};
    if (dump_check_manifest(cfg->inputs_dir, &run) != DDP_OK)
        return ddp_error_prefix(DDP_ERR_INVALID, "--inputs");
    model *m = NULL;
    model_batch b;
    DDP_CHECK(model_create(cfg->model_spec, cfg->batch, &m));
    ddp_status s = model_batch_alloc(m, &b);
    if (s == DDP_OK)
        s = dump_read_init(cfg->inputs_dir, m);
    for (int r = 0; s == DDP_OK && r < cfg->nranks; r++)
        for (size_t k = 0; s == DDP_OK && k < cfg->schedule->nfwd; k++) {
            model_batch_fill(m, &b, cfg->seed, r, k); /* what the dump may replace: a branch too */
            s = dump_read_batch(cfg->inputs_dir, r, k, m, &b);
        }
    model_batch_free(&b);
    model_destroy(m);
    if (s != DDP_OK)
        return ddp_error_prefix(DDP_ERR_INVALID, "--inputs");
    return DDP_OK;
}

/*
 * What the run will take, against what the machine has, before any rank
 * tries to allocate it: per rank two replicas (parameters, gradients, local
 * gradients, activations), the reference's check (a double and a float per
 * parameter), room for an implementation's own copy of the gradients and
 * for the buckets gathered after the rebuild, and under the order
 * tolerance its bounds (three floats per parameter); the shared segment in
 * /dev/shm.
 */
static ddp_status check_memory(const verify_config *cfg, const model *layout)
{
    double per_param = 20.0 + (cfg->tol.kind == TOL_ORDER ? 12.0 : 0.0);
    double per_rank = 2.0 * (double)model_memory_bytes(layout) + per_param * (double)model_size(layout);
    double need = per_rank * cfg->nranks;
    world_config wc = {.nranks = cfg->nranks, .user_bytes = verify_user_bytes(cfg->schedule, cfg->nranks)};
    double shm = (double)world_segment_bytes(&wc);
    size_t avail = machine_memory_available(), shm_free = machine_disk_free("/dev/shm");
    char a[32], b[32];
    if (avail && need + shm > (double)avail)
        return ddp_error(DDP_ERR_INVALID,
                         "--model: %s with batch %d needs about %s of memory on %d ranks (two replicas per rank: "
                         "parameters, gradients and activations), and this machine has %s available: use fewer "
                         "--ranks, a smaller --batch or a smaller model",
                         model_spec(layout), cfg->batch, machine_format_bytes(need + shm, a, sizeof a), cfg->nranks,
                         machine_format_bytes((double)avail, b, sizeof b));
    /* Each rank is a fork of this process under its RLIMIT_AS (ulimit -v): what it adds to this process's size
     * must fit, OpenBLAS's work buffer above all, whose failed mapping OpenBLAS retries forever. 16 MiB more
     * for the threads' stacks and what the libraries allocate. */
    double grow = per_rank + shm + (double)model_blas_buffer_bytes() + 16.0 * 1024 * 1024;
    size_t as_limit = machine_address_space_limit();
    if (as_limit && (grow >= (double)SIZE_MAX || !machine_address_space_fits((size_t)grow))) {
        size_t used = machine_address_space_used();
        char c[32];
        return ddp_error(DDP_ERR_INVALID,
                         "--model: each rank needs about %s of address space beyond ddpsim's own %s (its replicas, the "
                         "shared segment%s), and the address-space limit (ulimit -v) is %s: raise the limit, or run a "
                         "smaller --model or --batch%s",
                         machine_format_bytes(grow, a, sizeof a), machine_format_bytes((double)used, b, sizeof b),
                         model_blas_buffer_bytes() ? " and OpenBLAS's 128 MiB work buffer" : "",
                         machine_format_bytes((double)as_limit, c, sizeof c),
                         model_blas_buffer_bytes() ? " (--portable-math needs no OpenBLAS buffer)" : "");
    }
    size_t fsize = machine_file_size_limit();
    if (fsize && shm > (double)fsize)
        return ddp_error(DDP_ERR_INVALID,
                         "--ranks: %d ranks and %zu grabs need a %s shared-memory segment, a file in /dev/shm, and the "
                         "file-size limit (ulimit -f) is %s",
                         cfg->nranks, cfg->schedule->ngrabs, machine_format_bytes(shm, a, sizeof a),
                         machine_format_bytes((double)fsize, b, sizeof b));
    if (shm_free && shm > (double)shm_free)
        return ddp_error(DDP_ERR_INVALID,
                         "--ranks: %d ranks and %zu grabs need a %s shared-memory segment, and /dev/shm has %s free",
                         cfg->nranks, cfg->schedule->ngrabs, machine_format_bytes(shm, a, sizeof a),
                         machine_format_bytes((double)shm_free, b, sizeof b));
    return DDP_OK;
}

/* The faults against the ranks and the schedule. */
static ddp_status check_faults(const verify_config *cfg)
{
    for (int f = 0; f < cfg->nfaults; f++) {
        const verify_fault *ft = &cfg->faults[f];
        if (ft->rank >= cfg->nranks)
            return ddp_error(DDP_ERR_INVALID, "--fault: rank=%d does not exist (--ranks %d)", ft->rank, cfg->nranks);
        if (ft->kind != FAULT_SLOW && (size_t)ft->op >= cfg->schedule->nops)
            return ddp_error(DDP_ERR_INVALID, "--fault: op=%ld is past the schedule's %zu ops", ft->op,
                             cfg->schedule->nops);
        if ((ft->kind == FAULT_INF || ft->kind == FAULT_NAN) && cfg->schedule->ops[ft->op] != OP_BWD)
            return ddp_error(DDP_ERR_INVALID, "--fault %s: op=%ld is '%s', not a backward (bwd)",
                             fault_kind_name(ft->kind), ft->op, sched_op_name(cfg->schedule->ops[ft->op]));
        if ((ft->kind == FAULT_INF || ft->kind == FAULT_NAN) && !cfg->ddp.scaler.on)
            return ddp_error(DDP_ERR_INVALID, "--fault %s: needs --loss-scale (without a scaler nothing skips the "
                                              "step, and every parameter the inf reaches becomes inf or NaN on "
                                              "both sides: nothing left to check)",
                             fault_kind_name(ft->kind));
    }
    return DDP_OK;
}

/*
 * --loss-scale (scaler.h): what ddpsim checks of it, said before any rank starts. GradScaler is not Joinable
 * (torch/amp/grad_scaler.py): a rank that ran out of an uneven repetition neither steps nor updates its scale while
 * its peers do, so torch defines no common semantics there.
 */
static ddp_status check_loss_scale(const verify_config *cfg)
{
    if (!cfg->ddp.scaler.on)
        return DDP_OK;
    if (cfg->schedule->nuneven || cfg->schedule->njoins)
        return ddp_error(DDP_ERR_INVALID, "--loss-scale: not with uneven inputs or join{} (the schedule has them): "
                                          "torch's GradScaler has no join hook, so a rank that ran out misses its "
                                          "peers' updates and the ranks scale by different factors after join");
    if (cfg->shard != SHARD_NONE && (cfg->impl_ops->api_version < 9 || !cfg->impl_ops->scaler_scale))
        return ddp_error(DDP_ERR_INVALID,
                         "--loss-scale: '%s' has no scaler_scale and scaler_unscale (interface version 9): under "
                         "--shard ddpsim cannot unscale an implementation's shards for it",
                         cfg->impl);
    return DDP_OK;
}

/*
 * With find_unused, a backward synced by an earlier forward than its own
 * ("fwd nosync{fwd bwd}") is PyTorch's error when the two forwards used
 * different parameters (ddp_ref.c check_arming). Only branchy's forwards
 * differ in what they use; their batches are known before any rank starts.
 */
/*
 * static_graph=True changes no gradient that ddpsim models (the first
 * iteration's allreduce is delayed to the end of its backward; the unused
 * parameters are the first iteration's): the reference is the same. What
 * the torch of --static-graph-rule cannot run is refused with its reason:
 * the schedules of sched_static_graph_conflict, a model whose used
 * parameters change (branchy), and ring, whose bits follow a bucket rebuild
 * whose timing under static_graph ddpsim does not model.
 */
static ddp_status check_static_graph(const verify_config *cfg, int branchy)
{
    if (!cfg->ddp.static_graph)
        return DDP_OK;
    int first_iteration = cfg->ddp.static_graph_first_iteration;
    ssize_t op = sched_static_graph_conflict(cfg->schedule, first_iteration);
    if (op >= 0 && first_iteration)
        return ddp_error(DDP_ERR_INVALID, "--static-graph: op %zd (bwd) is a backward no sync armed, through a forward "
                                          "between the first and the second syncing forward: PyTorch < 2.1's DDP "
                                          "fails there (the first iteration's delayed allreduce: expect_autograd_hooks_ "
                                          "INTERNAL ASSERT, reducer.cpp)", op);
    if (op >= 0)
        return ddp_error(DDP_ERR_INVALID, "--static-graph: op %zd (bwd), the first backward, is one no sync armed: "
                                          "PyTorch 2.1+'s DDP fails there (it queues the delayed allreduce of the "
                                          "first iteration: expect_autograd_hooks_ INTERNAL ASSERT, reducer.cpp; PR "
                                          "#103487); --static-graph-rule first-iteration is PyTorch < 2.1's rule", op);
    if (branchy)
        return ddp_error(DDP_ERR_INVALID, "--static-graph: branchy uses different parameters in different "
                                          "iterations, and static_graph requires the same graph every iteration");
    if (cfg->ddp.algo == COLL_RING)
        return ddp_error(DDP_ERR_INVALID, "--static-graph: not with --algo ring (its bits follow the bucket rebuild, "
                                          "whose timing under static_graph ddpsim does not model)");
    return DDP_OK;
}

/* A communication hook: what ddpsim models of it, said before any rank starts (comm_hook.h). */
static ddp_status check_comm_hook(const verify_config *cfg)
{
    ddp_comm_hook h = cfg->ddp.comm_hook;
    if (h == DDP_HOOK_NONE)
        return DDP_OK;
    const char *name = ddp_comm_hook_name(h);
    for (int i = 0; i < impl_builtin_count(); i++)
        if (impl_builtin_at(i)->ops == cfg->impl_ops && impl_builtin_at(i)->is_mutant)
            return ddp_error(DDP_ERR_INVALID, "--comm-hook %s: the catalogue's bugs ('%s') are modelled on DDP without a "
                                              "communication hook", name, cfg->impl);
    if (cfg->backend == VERIFY_BACKEND_NCCL)
        return ddp_error(DDP_ERR_INVALID, "--comm-hook %s: not with --backend nccl (the hooks run on the CPU "
                                          "collectives)", name);
    if (ddp_comm_hook_compresses(h) && cfg->ddp.algo == COLL_RING)
        return ddp_error(DDP_ERR_INVALID, "--comm-hook %s: a sum in %s is modelled in the ordered and exact orders, "
                                          "not ring: give --algo ordered or exact", name, h == DDP_HOOK_FP16 ? "float16" : "bfloat16");
    for (int i = 0; i < cfg->nfaults; i++)
        if (cfg->faults[i].kind == FAULT_FLIP && ddp_comm_hook_compresses(h))
            return ddp_error(DDP_ERR_INVALID, "--fault flip: it corrupts an allreduce, and with --comm-hook %s the "
                                              "implementation's buckets are gathered instead", name);
    return DDP_OK;
}

/*
 * Uneven inputs and join (schedule.h): every rank's counts at this many ranks, and what join is modelled
 * with. The rest is refused with the reason, before any rank starts.
 */
static ddp_status check_uneven(const verify_config *cfg)
{
    const sched *sc = cfg->schedule;
    if (sched_resolve(sc, cfg->nranks, NULL) != DDP_OK)
        return ddp_error_prefix(DDP_ERR_INVALID, "--schedule");
    if (!sc->njoins)
        return DDP_OK;
    const ddpsim_impl_ops *ops = cfg->impl_ops;
    if (ops->api_version < 4 || !ops->join_enter || !ops->join_shadow || !ops->join_exit)
        return ddp_error(DDP_ERR_INVALID,
                         "--schedule: join{...} needs an implementation with join_enter, join_shadow and join_exit "
                         "(interface version 4), and '%s' %s", cfg->impl,
                         ops->api_version < 4 ? "was built for an earlier version" : "leaves them NULL");
    if (cfg->ddp.comm_hook != DDP_HOOK_NONE)
        return ddp_error(DDP_ERR_INVALID, "--schedule: join{...} with --comm-hook: a joined rank runs the hook on "
                                          "buckets of zeros, which ddpsim does not model");
    if (cfg->nccl_avg)
        return ddp_error(DDP_ERR_INVALID, "--schedule: join{...} with --nccl-op avg: ncclAvg divides by the world size, "
                                          "not by the ranks still running, and a joined rank's zeros would need it "
                                          "too; not modelled (use --nccl-op sum)");
    if (cfg->ddp.static_graph)
        return ddp_error(DDP_ERR_INVALID, "--schedule: join{...} with --static-graph: not modelled (1.13 has no "
                                          "test of the two together)");
    return DDP_OK;
}

static ddp_status check_arming_uses(const verify_config *cfg)
{
    model *m = NULL;
    model_batch b;
    DDP_CHECK(model_create(cfg->model_spec, cfg->batch, &m));
    ddp_status s = model_batch_alloc(m, &b);
    unsigned char used_arm[MODEL_MAX_PARAMS];
    for (int r = 0; s == DDP_OK && r < cfg->nranks; r++) {
        sched_arming a = {0};
        for (size_t i = 0; s == DDP_OK && i < cfg->schedule->nops; i++) {
            size_t arm = a.arming_forward, nfwd = a.forwards; /* before a bwd: what armed it, and the forwards */
            if (sched_arming_step(&a, cfg->schedule->ops[i])) {
                if (arm == nfwd - 1)
                    continue;
                for (int k = 0; k < 2 && s == DDP_OK; k++) {
                    size_t f = k == 0 ? arm : nfwd - 1;
                    model_batch_fill(m, &b, cfg->seed, r, f);
                    if (cfg->inputs_dir)
                        s = dump_read_batch(cfg->inputs_dir, r, f, m, &b);
                    if (s == DDP_OK)
                        s = model_forward(m, &b, NULL);
                    if (s == DDP_OK && k == 0)
                        memcpy(used_arm, model_used(m), (size_t)model_nparams(m));
                }
                for (int p = 0; s == DDP_OK && p < model_nparams(m); p++)
                    if (used_arm[p] != model_used(m)[p])
                        s = ddp_error(DDP_ERR_INVALID,
                                      "--schedule: op %zu (bwd) syncs, armed by forward %zu, but runs through forward "
                                      "%zu, and on rank %d they differ in using %s: with find_unused_parameters "
                                      "PyTorch fails there (%s)", i, arm, nfwd - 1, r, model_param_at(m, p)->name,
                                      model_used(m)[p] ? "Expected to mark a variable ready only once"
                                                       : "Expected to have finished reduction in the prior iteration");
            }
        }
    }
    model_batch_free(&b);
    model_destroy(m);
    return s;
}

/*
 * --shard: what the sharded reference models today (shard_ref.h), and the
 * implementation able to run it. What it does not model is refused here,
 * not approximated: DDP's own options (a sharded run reduces every
 * parameter in one rule), uneven inputs, tolerances other than bitwise (the
 * order bound is DDP's arithmetic), the ring order (it depends on how the
 * buffer is cut, and the implementation cuts it in units) and NCCL.
 */
static ddp_status check_shard(const verify_config *cfg)
{
    int mesh_given = cfg->mesh.shards > 0;
    for (int i = 0; i < impl_builtin_count(); i++) {
        const impl_entry *e = impl_builtin_at(i);
        if (e->ops == cfg->impl_ops && e->shard_mode != (int)cfg->shard && e->shard_mode != SHARD_NONE)
            return ddp_error(DDP_ERR_INVALID, "--impl: '%s' is sharded data parallelism: run it with --shard %s",
                             cfg->impl, shard_mode_name((shard_mode)e->shard_mode));
    }
    if (cfg->shard == SHARD_NONE)
        return mesh_given ? ddp_error(DDP_ERR_INVALID, "--mesh: needs --shard (hsdp, or zero1/zero2/fsdp as 1xN)")
                          : DDP_OK;
    const char *mode = shard_mode_name(cfg->shard);
    if (mesh_given)
        DDP_CHECK(shard_check_mesh(cfg->shard, &cfg->mesh, cfg->nranks, "--mesh"));
    if (cfg->impl_ops->api_version < 5)
        return ddp_error(DDP_ERR_INVALID, "--shard: '%s' was built for interface version %u, which cannot declare a "
                                          "sharded layout; rebuild it against version 5",
                         cfg->impl, (unsigned)cfg->impl_ops->api_version);
    if (!cfg->impl_ops->shard_layout)
        return ddp_error(DDP_ERR_INVALID, "--shard: '%s' declares no sharded layout (ddpsim_impl.h shard_layout): it is "
                                          "not sharded data parallelism (the built-ins are zero1, zero2, fsdp, hsdp)",
                         cfg->impl);
    const char *what = shard_unmodelled_option(&cfg->ddp);
    if (!what)
        what = cfg->tol.kind != TOL_BITWISE && shard_mode_params_sharded(cfg->shard)
                   ? "--tolerance (other than bitwise: with sharded parameters)"
               : cfg->backend == VERIFY_BACKEND_NCCL ? "--backend nccl"
               : cfg->schedule->nuneven ? "--schedule (uneven inputs)"
               : NULL;
    if (what)
        return ddp_error(DDP_ERR_INVALID, "--shard %s: %s is not modelled by the sharded reference (it reduces every "
                                          "parameter, ordered or exact, on the CPU, even inputs; tolerances other "
                                          "than bitwise with zero1 and zero2 alone)",
                         mode, what);
    return DDP_OK;
}

loss_norm verify_loss_norm(const verify_config *cfg)
{
    model *layout = NULL;
    if (model_create_layout(cfg->model_spec, cfg->batch, &layout) != DDP_OK)
        return cfg->loss_norm;
    int tokens = model_has_token_loss(layout);
    model_destroy(layout);
    return !tokens ? LOSS_NORM_NONE : cfg->loss_norm ? cfg->loss_norm : LOSS_NORM_GLOBAL_TOKENS;
}

/* --loss-norm: the token model, a schedule whose windows every rank runs alike, and nothing that
 * replays batches (--inputs does not carry the token counts). */
static ddp_status check_loss_norm(const verify_config *cfg, int tokens)
{
    if (cfg->loss_norm && !tokens)
        return ddp_error(DDP_ERR_INVALID, "--loss-norm: %s has no token loss; the trainer's normalization is checked "
                                          "on the token model: --model lm", cfg->model_spec);
    if (!tokens)
        return DDP_OK;
    if (cfg->schedule->nuneven || cfg->schedule->njoins)
        return ddp_error(DDP_ERR_INVALID, "--model lm: a schedule with uneven repetitions or join{...} is not "
                                          "modelled with the token loss (each rank's windows would depend on what the "
                                          "others ran)");
    if (cfg->inputs_dir)
        return ddp_error(DDP_ERR_INVALID, "--model lm: --inputs does not carry the token counts yet");
    return DDP_OK;
}

ddp_status verify_check_config(const verify_config *cfg)
{
    if (!cfg->impl_ops || !cfg->impl)
        return ddp_error(DDP_ERR_INVALID, "--impl: no implementation under test");
    if (!cfg->schedule)
        return ddp_error(DDP_ERR_INVALID, "--schedule: no schedule");
    if (cfg->nranks < 1 || cfg->nranks > WORLD_MAX_RANKS)
        return ddp_error(DDP_ERR_INVALID, "--ranks: %d is out of range 1..%d", cfg->nranks, WORLD_MAX_RANKS);
    model *layout = NULL;
    if (model_create_layout(cfg->model_spec, cfg->batch, &layout) != DDP_OK)
        return ddp_error_prefix(DDP_ERR_INVALID, "--model");
    int branchy = strcmp(model_family(layout), "branchy") == 0, nbuffers = model_nbuffers(layout);
    int pieces = model_grads_in_pieces(layout), tokens = model_has_token_loss(layout);
    ddp_status ms = check_memory(cfg, layout);
    model_destroy(layout);
    DDP_CHECK(ms);
    DDP_CHECK(check_loss_norm(cfg, tokens));
    if (pieces && !cfg->ddp.static_graph)
        return ddp_error(DDP_ERR_INVALID, "--model: %s's enc.weight gets its gradient in two pieces in one backward (a "
                                          "tied weight used on both sides of a reentrant checkpoint), and PyTorch's DDP "
                                          "fails there without static_graph=True (\"Expected to mark a variable ready "
                                          "only once\"): add --static-graph", cfg->model_spec);
    DDP_CHECK(check_shard(cfg));
    if (branchy && !cfg->ddp.find_unused && cfg->shard == SHARD_NONE)
        return ddp_error(DDP_ERR_INVALID, "--model: branchy has parameters that some forwards do not use; PyTorch DDP "
                                          "needs find_unused_parameters=True for it: add --find-unused");
    ssize_t clash = sched_step_conflict(cfg->schedule, cfg->ddp.set_to_none);
    if (clash >= 0)
        return ddp_error(DDP_ERR_INVALID, "--schedule: op %zd (step) comes between a forward and its backward while "
                                          "gradients exist: the step changes the parameters that forward saved, and "
                                          "PyTorch's autograd refuses the backward", clash);
    if (branchy && cfg->ddp.find_unused)
        DDP_CHECK(check_arming_uses(cfg));
    if (cfg->ddp.bucket_cap == 0 || cfg->ddp.first_bucket_cap == 0)
        return ddp_error(DDP_ERR_INVALID, "--bucket-cap: bucket caps must be positive");
    if (cfg->ddp.first_bucket_cap > cfg->ddp.bucket_cap && cfg->ddp.first_bucket_cap != DDP_DEFAULT_FIRST_BUCKET_CAP)
        return ddp_error(DDP_ERR_INVALID, "--first-bucket-cap: is larger than --bucket-cap");
    DDP_CHECK(check_faults(cfg));
    DDP_CHECK(check_loss_scale(cfg));
    if (cfg->backend == VERIFY_BACKEND_NCCL && !gpu_probe_built())
        return ddp_error(DDP_ERR_INVALID, "--backend: %s", GPU_PROBE_NOT_BUILT);
    if (cfg->nccl_avg && cfg->backend != VERIFY_BACKEND_NCCL)
        return ddp_error(DDP_ERR_INVALID, "--nccl-op: avg needs --backend nccl");
    if (cfg->nccl_avg && cfg->impl_ops != &impl_reference_ops && cfg->impl_ops != &impl_bucketed_ops)
        return ddp_error(DDP_ERR_INVALID, "--nccl-op: avg: only the built-in reference and bucketed implementations "
                                          "leave their buckets unscaled for ncclAvg; '%s' scales them itself",
                         cfg->impl);
    DDP_CHECK(check_comm_hook(cfg));
    DDP_CHECK(check_static_graph(cfg, branchy));
    DDP_CHECK(check_uneven(cfg));
    if (cfg->ddp.momentum != 0 && cfg->impl_ops->optimizer_step && cfg->impl_ops->api_version < 6)
        return ddp_error(DDP_ERR_INVALID,
                         "--optimizer: momentum, and '%s' has an optimizer_step that may own the update, built for "
                         "interface version %u, which does not tell it the momentum; rebuild it against version 6 "
                         "(services->momentum)",
                         cfg->impl, (unsigned)cfg->impl_ops->api_version);
    if (cfg->ddp.adamw.on && cfg->impl_ops->optimizer_step && cfg->impl_ops->api_version < 7)
        return ddp_error(DDP_ERR_INVALID,
                         "--optimizer: adamw, and '%s' has an optimizer_step that may own the update, built for "
                         "interface version %u, which does not tell it AdamW's hyperparameters; rebuild it against "
                         "version 7 (services->adamw_on)",
                         cfg->impl, (unsigned)cfg->impl_ops->api_version);
    if (cfg->schedule->nclips && cfg->shard != SHARD_NONE &&
        (cfg->impl_ops->api_version < 8 || !cfg->impl_ops->clip_grads))
        return ddp_error(DDP_ERR_INVALID,
                         "the schedule clips, and '%s' has no clip_grads (interface version 8): under --shard ddpsim "
                         "cannot clip an implementation's shards for it",
                         cfg->impl);
    if (cfg->ddp.set_to_none && cfg->ddp.bucket_view && cfg->impl_ops->api_version < 2)
        return ddp_error(DDP_ERR_INVALID,
                         "--zero-grad: none with --bucket-view changes how the next sync scales (it multiplies "
                         "again), and '%s' was built for interface version 1, which cannot see zero_to_none; "
                         "rebuild it against version 2",
                         cfg->impl);
    if (nbuffers && cfg->impl_ops->api_version < 3)
        return ddp_error(DDP_ERR_INVALID,
                         "--model: %s has buffers (DDP broadcasts them before a forward), and '%s' was built for "
                         "interface version %u, which cannot see them; rebuild it against version 3",
                         cfg->model_spec, cfg->impl, (unsigned)cfg->impl_ops->api_version);
    if (cfg->inputs_dir)
        DDP_CHECK(check_inputs(cfg));
    if (cfg->dump_dir && dump_check_dir(cfg->dump_dir, cfg->dump_force) != DDP_OK)
        return ddp_error_prefix(DDP_ERR_INVALID, "--dump");
    if (cfg->record_dir && dump_check_dir(cfg->record_dir, cfg->dump_force) != DDP_OK)
        return ddp_error_prefix(DDP_ERR_INVALID, "--record");
    if (cfg->record_dir && cfg->dump_dir && strcmp(cfg->record_dir, cfg->dump_dir) == 0)
        return ddp_error(DDP_ERR_INVALID, "--record and --dump name the same directory: each has its own manifest");
    /* The ranks write the trace's parts beside it (trace.c): a place they cannot write is found here, not there. */
    struct stat st;
    if (cfg->trace_path && stat(cfg->trace_path, &st) == 0 && S_ISDIR(st.st_mode))
        return ddp_error(DDP_ERR_INVALID, "--trace: %s is a directory", cfg->trace_path);
    if (cfg->trace_path && dump_check_parent(cfg->trace_path) != DDP_OK)
        return ddp_error_prefix(DDP_ERR_INVALID, "--trace");
    return DDP_OK;
}

/* One check's records, as the stream hands them over: into the tally, the kept arrays and the sink. */
static void take_check(void *arg, size_t k, const verify_record *recs)
{
    verify_result *out = arg;
    sched_check ck;
    if (!sched_check_next(out->sched, &out->check_iter, &ck))
        return; /* cannot happen: the stream hands over exactly nchecks checks */
    judge_take_check(&out->tally, &ck, recs, out->nranks);
    if (out->records) {
        out->checks[k] = ck;
        memcpy(&out->records[k * (size_t)out->nranks], recs, (size_t)out->nranks * sizeof *recs);
    }
    if (out->sink.on_check)
        out->sink.on_check(out->sink.arg, &ck, recs, out->nranks);
}

/* The supervisor's tick (world_config.poll): take what every rank has written. */
static int take_ready(void *arg)
{
    verify_result *out = arg;
    return stream_take(world_user_area(out->w), out->nranks, out->nchecks, 0, &out->taken, take_check, out);
}

size_t verify_user_bytes(const sched *s, int nranks)
{
    return stream_user_bytes(stream_ring_checks(sched_nchecks(s), nranks), nranks);
}

ddp_status verify_result_start(verify_result *out, world_config *wc, const sched *s, int with_nccl,
                               const verify_sink *sink)
{
    size_t nchecks = sched_nchecks(s), nrec = nchecks * (size_t)wc->nranks;
    out->nranks = wc->nranks;
    out->ngrabs = s->ngrabs;
    out->nchecks = nchecks;
    out->sched = s;
    out->ring = stream_ring_checks(nchecks, wc->nranks);
    sched_check_iter_init(&out->check_iter);
    judge_tally_init(&out->tally);
    if (sink)
        out->sink = *sink;
    wc->user_bytes = stream_user_bytes(out->ring, wc->nranks);
    wc->poll = take_ready;
    wc->poll_arg = out;
    DDP_CHECK(world_create(wc, &out->w));
    if (out->sink.keep_records) {
        out->checks = calloc(nchecks, sizeof *out->checks);
        out->records = calloc(nrec, sizeof *out->records);
    }
    out->figures = calloc((size_t)wc->nranks, sizeof *out->figures);
    out->agreement = calloc((size_t)wc->nranks, sizeof *out->agreement);
    if (with_nccl)
        out->nccl = calloc((size_t)wc->nranks, sizeof *out->nccl);
    if ((out->sink.keep_records && (!out->checks || !out->records)) || !out->figures || !out->agreement ||
        (with_nccl && !out->nccl))
        return ddp_error(DDP_ERR_NOMEM, "%zu check records", nrec);
    memset(world_user_area(out->w), 0, wc->user_bytes);
    stream_init(world_user_area(out->w), out->ring);
    return DDP_OK;
}

void verify_result_collect(verify_result *out)
{
    void *user = world_user_area(out->w);
    stream_take(user, out->nranks, out->nchecks, 1, &out->taken, take_check, out); /* what is left, reached or not */
    const verify_rank_area *areas = stream_rank_areas(user, out->ring, out->nranks);
    for (int r = 0; r < out->nranks; r++) {
        out->figures[r] = areas[r].fig;
        out->agreement[r] = areas[r].agree;
        out->impl_refused |= areas[r].refused;
        out->bad_record |= areas[r].bad_record;
        if (out->nccl)
            out->nccl[r] = areas[r].nccl;
        /* Each rank's own peak, from wait4: RUSAGE_CHILDREN would also count whatever the
         * process that exec'd ddpsim had waited for (a compiler, make). */
        long k = world_outcome(out->w, r)->maxrss_kib;
        out->rank_total_kib += k;
        if (k > out->rank_peak_kib)
            out->rank_peak_kib = k;
        const verify_rank_figures *fg = &areas[r].fig;
        if (r == 0)
            out->ranks_pss_kib = out->ranks_private_kib = 0;
        if (fg->pss_kib < 0 || out->ranks_pss_kib < 0) {
            out->ranks_pss_kib = out->ranks_private_kib = -1; /* unknown for one rank: unknown for all */
        } else {
            out->ranks_pss_kib += fg->pss_kib;
            out->ranks_private_kib += fg->private_kib;
        }
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        out->parent_peak_kib = ru.ru_maxrss;
}

/*
 * A deadlock or a hang in a run where a rank ran out of an uneven repetition outside join: say which, and
 * why. PyTorch hangs there the same way (its peers wait in the allreduce that rank never makes).
 */
static ddp_status explain_ran_out(const verify_config *cfg, ddp_status s)
{
    const sched *sc = cfg->schedule;
    uint32_t *counts = malloc((sc->nuneven ? sc->nuneven : 1) * (size_t)cfg->nranks * sizeof *counts);
    if (!counts || sched_resolve(sc, cfg->nranks, counts) != DDP_OK) {
        free(counts);
        return s;
    }
    char text[600];
    snprintf(text, sizeof text, "%s", ddp_error_text());
    for (size_t k = 0; k < sc->nuneven; k++) {
        const sched_uneven *u = &sc->uneven[k];
        for (int r = 0; u->join < 0 && r < cfg->nranks; r++) {
            uint32_t c = counts[k * (size_t)cfg->nranks + (size_t)r];
            if (c == u->iterations)
                continue;
            free(counts);
            return ddp_error(s, "%s: rank %d ran out of inputs after %u of %u iterations of the uneven repetition at "
                                "line %d, column %d, outside join, and stopped there; its peers wait for it in their "
                                "next collective (PyTorch DDP hangs the same way: wrap the loop in join{...}, "
                                "model.join())", text, r, c, u->iterations, u->line, u->col);
        }
    }
    free(counts);
    return s;
}

ddp_status verify_run(const verify_config *cfg, verify_result *out)
{
    memset(out, 0, sizeof *out);
    DDP_CHECK(verify_check_config(cfg));
    if (cfg->dump_dir)
        DDP_CHECK(verify_prepare_dump(cfg));
    if (cfg->record_dir)
        DDP_CHECK(verify_prepare_record(cfg));
    world_config wc = {
        .nranks = cfg->nranks,
        .timeout_s = cfg->timeout_s,
        .jitter_seed = cfg->chaos_seed,
        .jitter_max_us = cfg->chaos ? CHAOS_BARRIER_JITTER_US : 0, /* seeded delays before barrier arrivals */
        .coll_cpu = cfg->rank_cpu,
    };
    DDP_CHECK(verify_result_start(out, &wc, cfg->schedule, cfg->backend == VERIFY_BACKEND_NCCL, &cfg->sink));
    out->loss_norm = verify_loss_norm(cfg);
    double t0 = clock_now_s();
    ddp_status s = world_run(out->w, verify_rank_main, (void *)cfg);
    out->wall_s = clock_now_s() - t0;
    verify_result_collect(out);
    if (s == DDP_ERR_DEADLOCK || s == DDP_ERR_TIMEOUT)
        s = explain_ran_out(cfg, s);
    return s;
}

double verify_rank_cpu_outside_s(const verify_result *res, int r)
{
    if (!res->figures || !res->w)
        return 0;
    return (double)(res->figures[r].cpu_ns - world_outcome(res->w, r)->coll_cpu_ns) * 1e-9;
}

double verify_rank_cpu_setup_s(const verify_result *res, int r)
{
    if (!res->figures || !res->w)
        return 0;
    const verify_rank_figures *f = &res->figures[r];
    return (double)(f->setup_cpu_ns - f->setup_coll_cpu_ns) * 1e-9;
}

double verify_rank_cpu_ops_s(const verify_result *res, int r)
{
    return verify_rank_cpu_outside_s(res, r) - verify_rank_cpu_setup_s(res, r);
}

void verify_result_free(verify_result *r)
{
    free(r->checks);
    free(r->records);
    free(r->nccl);
    free(r->figures);
    free(r->agreement);
    world_destroy(r->w);
    memset(r, 0, sizeof *r);
}
