/*
 * sharded_bugs.c - the catalogue's sharded bugs: real ZeRO, FSDP, HSDP and
 * Megatron distributed-optimizer gradient bugs, each the built-in sharded
 * engine of its mode (sharded.c) with the hooks its mechanism changes, so
 * that what catches it is its bug and nothing else. SHARDED_BUGS is the
 * table: identifier, --impl name, mode, mechanism, source; each has its
 * block below, named hooks_<ID>. The sources were read for the mechanism
 * (../shared/research/sync-bugs-2024-2026.md has them with their dates).
 */
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "impl.h"
#include "sharded.h"

/* X(ID, name, mode, mechanism, source) */
#define SHARDED_BUGS(X)                                                                                              \
    X(FSDP_NO_SYNC_DROPPED, "fsdp-no-sync-dropped", DDPSIM_SHARD_FSDP,                                               \
      "FSDP without no_sync around the non-final micro-steps: every backward reduce-scatters into the shards (the " \
      "sum comes out in another order, and at a sync per micro-step)",                                              \
      "huggingface/transformers PR #34645 (a refactor dropped no_sync for FSDP; the FSDP tests had no gradient "     \
      "accumulation)")                                                                                               \
    X(HSDP_ALLREDUCE_EVERY_MICROSTEP, "hsdp-allreduce-every-microstep", DDPSIM_SHARD_HSDP,                           \
      "HSDP all-reduces over the replica group in every backward instead of deferring it to the syncing one",        \
      "pytorch/pytorch PR #126166 (set_requires_all_reduce added to defer it; cosmos-framework PR #162 uses it)")     \
    X(HSDP_PARTIAL_NOT_REPLICATED, "hsdp-partial-not-replicated", DDPSIM_SHARD_HSDP,                                 \
      "HSDP accumulates the earlier micro-steps after the replica all-reduce instead of before it: only the "       \
      "syncing micro-step is reduced across replicas",                                                               \
      "pytorch/pytorch PR #125484 (\"the preceding microbatch's gradients will not be contributed across the "      \
      "replica group\")")                                                                                            \
    X(HSDP_DIVIDES_BY_SHARD_GROUP, "hsdp-divides-by-shard-group", DDPSIM_SHARD_HSDP,                                 \
      "on a 2-D mesh the divide factor is the shard group's size, not the data-parallel degree: the replica "       \
      "all-reduce sums what it should average",                                                                      \
      "pytorch/pytorch #155903 (the reduce-scatter divide factor differs on a 2-D mesh and the flattened one)")      \
    X(ZERO2_BOUNDARY_EVERY_BACKWARD, "zero2-boundary-every-backward", DDPSIM_SHARD_ZERO2,                            \
      "ZeRO-2 told one accumulation step while the trainer accumulates: every backward is a boundary that resets "  \
      "the partition, only the last micro-batch survives",                                                           \
      "allenai/open-instruct PR #1498 (ZeRO-2 resets all_grad_tensors at each boundary)")                            \
    X(ZERO2_COPIES_AFTER_FIRST_STEP, "zero2-copies-after-first-step", DDPSIM_SHARD_ZERO2,                            \
      "micro_step_id reset to -1 at a step but started at 0: after the first step the non-boundary micro-steps "    \
      "copy into the partition instead of accumulating",                                                             \
      "deepspeedai/DeepSpeed PR #6550")                                                                              \
    X(REMAINDER_UNIT_UNREDUCED, "remainder-unit-unreduced", DDPSIM_SHARD_FSDP,                                       \
      "the gradients left in the last, partly filled bucket at the end of the backward are never reduced",          \
      "deepspeedai/DeepSpeed #4879 (ZeRO-3: \"only partial gradients are reduced\")")                                \
    X(EXACT_BUCKET_UNREDUCED, "exact-bucket-unreduced", DDPSIM_SHARD_FSDP,                                           \
      "a parameter exactly the bucket size fills its bucket without triggering the reduction: it is not reduced",    \
      "deepspeedai/DeepSpeed PR #4321 (ZeRO-3 contiguous gradients with reduce_scatter)")                            \
    X(ACCUMULATED_SHARD_RESCALED, "accumulated-shard-rescaled", DDPSIM_SHARD_ZERO2,                                  \
      "the 1/DP scaling is applied to the accumulated shard, and the new reduced gradient added unscaled: "         \
      "micro-step i ends up scaled by DP^(i-k)",                                                                     \
      "NVIDIA/Megatron-LM PR #3023 (Megatron-FSDP)")                                                                 \
    X(ONE_RANK_GROUP_RESCALES, "one-rank-group-rescales", DDPSIM_SHARD_HSDP,                                         \
      "a shard group of one rank reduces in place on the accumulating buffer, so the reduction's 1/N multiplier "   \
      "rescales everything accumulated so far at every micro-step",                                                  \
      "NVIDIA/Megatron-LM PR #6773 (a one-rank reduction cannot carry a premul-sum multiplier)")                     \
    X(GATHER_BUFFER_NOT_ZEROED, "gather-buffer-not-zeroed", DDPSIM_SHARD_ZERO1,                                      \
      "the staging buffer doubles as the parameters' all-gather receive buffer and is not zeroed: the next "        \
      "reduction adds the gradient onto the gathered parameters",                                                    \
      "NVIDIA/Megatron-LM PR #4609 (layerwise distributed optimizer reuses bucket.grad_data)")                       \
    X(UNPADDED_SHARD_OFFSETS, "unpadded-shard-offsets", DDPSIM_SHARD_ZERO2,                                          \
      "the shard boundaries are computed from the unpadded bucket: with a size not a multiple of the DP size the "  \
      "tail is reduced by nobody and every slice is off",                                                            \
      "NVIDIA/Megatron-LM #561 (buckets not individually padded to a multiple of the DP size)")                      \
    X(PADDING_NOT_ZERO, "padding-not-zero", DDPSIM_SHARD_ZERO1,                                                      \
      "the bucket's padding is taken from a reused buffer instead of zeros: the last rank's shard holds garbage "   \
      "past the parameters",                                                                                         \
      "NVIDIA/Megatron-LM PR #5898 (bucket-end padding leaking into the distributed optimizer)")                     \
    X(UNIT_REDUCED_AT_FIRST_READY, "unit-reduced-at-first-ready", DDPSIM_SHARD_ZERO2,                                \
      "a bucket's copy for the reduction is taken when its first gradient is in, not its last: the others of this " \
      "micro-step are missing",                                                                                      \
      "deepspeedai/DeepSpeed #8061 (average_tensor waits only on the current stream's copies)")                      \
    X(UNUSED_PARAM_UNIT_SKIPPED, "unused-param-unit-skipped", DDPSIM_SHARD_ZERO1,                                    \
      "a bucket holding a parameter this backward did not use is never launched: the reduction waits for a hook "   \
      "that never fires",                                                                                            \
      "NVIDIA/Megatron-LM #1150 (\"Communication call has not been issued for this bucket\")")                  \
    X(FSDP_CLIP_LOCAL_NORM, "fsdp-clip-local-norm", DDPSIM_SHARD_FSDP,                                               \
      "clip_grad_norm_ by the norm of the rank's own shards: the norm's all-reduce is skipped, so each rank clips "  \
      "by a different, smaller norm (about 1/sqrt(N) of the global one)",                                            \
      "RLinf/RLinf PR #1558 (get_grad_norm skipped its all_reduce and clipped by the local shard's norm; "           \
      "pytorch/pytorch #170862, pytorch/torchtitan #766)")                                                           \
    X(HSDP_CLIP_NORM_OVER_WORLD, "hsdp-clip-norm-over-world", DDPSIM_SHARD_HSDP,                                     \
      "HSDP sums the shards' squared norms over every rank instead of the shard group: each shard is counted once "  \
      "per replica, the norm sqrt(R) times too large, the gradients clipped too hard",                              \
      "ByteDance-Seed/VeOmni PR #862 (issue #184: the norm reduced over the whole FSDP group, not dp_shard)")        \
    X(ZERO1_CLIP_NORM_UNDERCOUNTS, "zero1-clip-norm-undercounts", DDPSIM_SHARD_ZERO1,                               \
      "the norm counts the last unit's gradients on rank 0 alone (ownership by the wrong group): the other ranks' "  \
      "shards of it are left out, every rank agrees on a norm too small, and the clipping is too weak",              \
      "NVIDIA/Megatron-LM PR #5916 (EP > 1 and TP > 1: the norm omits some experts; radixark/Megatron-LM PR #80: "   \
      "only TP rank 0 kept its expert gradient in the norm, 11.51 against 12.28)")                                 \
    X(ZERO2_FOUND_INF_UNREDUCED, "zero2-found-inf-unreduced", DDPSIM_SHARD_ZERO2,                                   \
      "the loss scaler checks only the rank's own gradient shards for an inf and never reduces the finding: the "  \
      "rank holding an overflow skips its step, the others take theirs (seen with --loss-scale)",                  \
      "facebookresearch/fairscale #180 (torch's GradScaler with OSS: rank-local skips that can deadlock; fixed by "  \
      "ShardedGradScaler, PR #182)")                                                                                 \
    X(FSDP_FOUND_INF_COPIED_EARLY, "fsdp-found-inf-copied-early", DDPSIM_SHARD_FSDP,                                \
      "the sharded scaler all-reduces found_inf asynchronously and copies it back before the reduction finished: " \
      "each rank keeps its own shards' finding (seen with --loss-scale)",                                           \
      "pytorch/pytorch PR #115710 (ShardedGradScaler copied found_inf before waiting on the async all_reduce; "     \
      "other ranks did not see rank 0's inf)")

#define AS_ENUM(id, name, mode, mechanism, source) SBUG_##id,
typedef enum sharded_bug { SHARDED_BUGS(AS_ENUM) SBUG_COUNT } sharded_bug;

/* fsdp-no-sync-dropped: every backward reduces */
static int always(sharded *s, int mode_says)
{
    (void)s;
    (void)mode_says;
    return 1;
}
static const sharded_hooks hooks_FSDP_NO_SYNC_DROPPED = {.reduces = always};

/* hsdp-allreduce-every-microstep */
static const sharded_hooks hooks_HSDP_ALLREDUCE_EVERY_MICROSTEP = {.all_reduce_every_backward = 1};

/* hsdp-partial-not-replicated: the all-reduce takes this backward's reduce-scatter alone, the partial is added after */
static void keep_this_backward(sharded *s, int k, float *partial, int *empty, const float *got, size_t count)
{
    (void)k;
    if (!sharded_syncs(s)) {
        if (*empty)
            memcpy(partial, got, count * sizeof *partial);
        else
            for (size_t i = 0; i < count; i++)
                partial[i] += got[i];
        *empty = 0;
    }
    /* a syncing backward leaves the partial as it was: replica_input takes `got` alone */
}
static const float *this_backward_only(sharded *s, int k, const float *partial, const float *this_backward)
{
    (void)s;
    (void)k;
    (void)partial;
    return this_backward;
}
static void add_partial_after(sharded *s, int k, float *reduced, const float *partial, size_t count)
{
    (void)s;
    (void)k;
    for (size_t i = 0; i < count; i++)
        reduced[i] += partial[i];
}
static const sharded_hooks hooks_HSDP_PARTIAL_NOT_REPLICATED = {.accumulate_partial = keep_this_backward,
                                                                .replica_input = this_backward_only,
                                                                .after_replica = add_partial_after};

/* hsdp-divides-by-shard-group: each contribution times 1/S, not 1/N */
static void scale_by_shard_group(sharded *s, int k, float *send, const float *grad)
{
    size_t len = sharded_unit_len(s, k);
    coll_mul_inv_n(send, grad, len, sharded_group_size(s));
    (void)send;
}
static const sharded_hooks hooks_HSDP_DIVIDES_BY_SHARD_GROUP = {.fill = scale_by_shard_group};

/* zero2-boundary-every-backward: each backward's result replaces the partition */
static void replace(sharded *s, int k, float *shard, int *empty, const float *got, size_t count)
{
    (void)s;
    (void)k;
    memcpy(shard, got, count * sizeof *shard);
    *empty = 0;
}
static const sharded_hooks hooks_ZERO2_BOUNDARY_EVERY_BACKWARD = {.accumulate = replace};

/* zero2-copies-after-first-step: after a step, a non-boundary micro-step copies */
static void copy_when_off_by_one(sharded *s, int k, float *shard, int *empty, const float *got, size_t count)
{
    (void)k;
    int copies = *empty || (sharded_steps(s) > 0 && !sharded_syncs(s));
    if (copies)
        memcpy(shard, got, count * sizeof *shard);
    else
        for (size_t i = 0; i < count; i++)
            shard[i] += got[i];
    *empty = 0;
}
static const sharded_hooks hooks_ZERO2_COPIES_AFTER_FIRST_STEP = {.accumulate = copy_when_off_by_one};

/* remainder-unit-unreduced: the last unit launched (unit 0: the backward ends with the first parameters) */
static int skip_first_unit(sharded *s, int k)
{
    return sharded_unit_count(s) > 1 && k == 0;
}
static const sharded_hooks hooks_REMAINDER_UNIT_UNREDUCED = {.skip = skip_first_unit};

/* exact-bucket-unreduced: a unit exactly bucket_cap bytes */
static int skip_exact_cap(sharded *s, int k)
{
    return sharded_unit_len(s, k) * sizeof(float) == sharded_services(s)->bucket_cap;
}
static const sharded_hooks hooks_EXACT_BUCKET_UNREDUCED = {.skip = skip_exact_cap};

/* accumulated-shard-rescaled: the sum goes unscaled; the 1/N lands on what was accumulated */
static void unscaled(sharded *s, int k, float *send, const float *grad)
{
    size_t len = sharded_unit_len(s, k);
    (void)s;
    memcpy(send, grad, len * sizeof *send);
}
static void rescale_then_add(sharded *s, int k, float *shard, int *empty, const float *got, size_t count)
{
    (void)k;
    float inv = (float)(1.0 / sharded_services(s)->world_size);
    for (size_t i = 0; i < count; i++)
        shard[i] = (*empty ? 0.0f : shard[i]) * inv + got[i];
    *empty = 0;
}
static const sharded_hooks hooks_ACCUMULATED_SHARD_RESCALED = {.fill = unscaled, .accumulate = rescale_then_add};

/* one-rank-group-rescales: with S = 1 the partial is (partial + g) * 1/N */
static void unscaled_if_alone(sharded *s, int k, float *send, const float *grad)
{
    size_t len = sharded_unit_len(s, k);
    if (sharded_group_size(s) == 1)
        memcpy(send, grad, len * sizeof *send);
    else
        coll_mul_inv_n(send, grad, len, sharded_services(s)->world_size);
}
static void in_place_multiplier(sharded *s, int k, float *partial, int *empty, const float *got, size_t count)
{
    (void)k;
    int n = sharded_services(s)->world_size;
    if (sharded_group_size(s) != 1) {
        if (*empty)
            memcpy(partial, got, count * sizeof *partial);
        else
            for (size_t i = 0; i < count; i++)
                partial[i] += got[i];
    } else {
        for (size_t i = 0; i < count; i++)
            partial[i] = (*empty ? 0.0f : partial[i]) + got[i];
        coll_mul_inv_n(partial, partial, count, n);
    }
    *empty = 0;
}
static const sharded_hooks hooks_ONE_RANK_GROUP_RESCALES = {.fill = unscaled_if_alone,
                                                            .accumulate_partial = in_place_multiplier};

/* gather-buffer-not-zeroed: the step gathers into the staging buffer; the next fill adds onto it */
static int gather_into_staging(sharded *s, int k, float *send, const float *mine, size_t count)
{
    const ddpsim_services *svc = sharded_services(s);
    (void)k;
    return svc->allgather_group(svc->env, DDPSIM_GROUP_WORLD, mine, send, count * sizeof(float));
}
static void add_onto_staging(sharded *s, int k, float *send, const float *grad)
{
    size_t len = sharded_unit_len(s, k);
    int n = sharded_services(s)->world_size;
    float inv = (float)(1.0 / n);
    for (size_t i = 0; i < len; i++)
        send[i] = send[i] + grad[i] * inv;
}
static const sharded_hooks hooks_GATHER_BUFFER_NOT_ZEROED = {.gather_into_send = gather_into_staging,
                                                             .fill = add_onto_staging};

/* unpadded-shard-offsets: the reduce-scatter cut at floor(len / S) per rank */
static size_t floor_count(sharded *s, int k)
{
    return sharded_unit_len(s, k) / (size_t)sharded_group_size(s);
}
static const sharded_hooks hooks_UNPADDED_SHARD_OFFSETS = {.scatter_count = floor_count};

/* padding-not-zero: the padding comes from whatever the reused buffer held (ones here) */
static void stale_padding(sharded *s, int k, float *send, const float *grad)
{
    size_t len = sharded_unit_len(s, k);
    int n = sharded_services(s)->world_size;
    coll_mul_inv_n(send, grad, len, n);
    size_t S = (size_t)sharded_group_size(s), padded = (len + S - 1) / S * S;
    for (size_t i = len; i < padded; i++)
        send[i] = 1.0f;
}
static const sharded_hooks hooks_PADDING_NOT_ZERO = {.fill = stale_padding};

/* unit-reduced-at-first-ready */
static const sharded_hooks hooks_UNIT_REDUCED_AT_FIRST_READY = {.fill_at_first_ready = 1};

/* unused-param-unit-skipped */
static const sharded_hooks hooks_UNUSED_PARAM_UNIT_SKIPPED = {.unused_blocks = 1};

/* fsdp-clip-local-norm: no reduction of the norm */
static int no_clip_group(sharded *s)
{
    (void)s;
    return -1;
}
static const sharded_hooks hooks_FSDP_CLIP_LOCAL_NORM = {.clip_group = no_clip_group};

/* hsdp-clip-norm-over-world: the norm reduced over the world, replicas included */
static int world_clip_group(sharded *s)
{
    (void)s;
    return DDPSIM_GROUP_WORLD;
}
static const sharded_hooks hooks_HSDP_CLIP_NORM_OVER_WORLD = {.clip_group = world_clip_group};

/* zero1-clip-norm-undercounts: only rank 0 counts the last unit */
static int last_unit_on_rank0_only(sharded *s, int k)
{
    return k != sharded_unit_count(s) - 1 || sharded_services(s)->rank == 0;
}
static const sharded_hooks hooks_ZERO1_CLIP_NORM_UNDERCOUNTS = {.clip_counts = last_unit_on_rank0_only};

/* zero2-found-inf-unreduced: torch's GradScaler on the rank's own shards */
static const sharded_hooks hooks_ZERO2_FOUND_INF_UNREDUCED = {.found_inf_unreduced = 1};

/* fsdp-found-inf-copied-early: the reduced finding never reaches the rank's flag */
static const sharded_hooks hooks_FSDP_FOUND_INF_COPIED_EARLY = {.found_inf_kept_local = 1};

/* ---- the tables the registry reads ---- */

#define AS_CREATE(id, name, mode, mechanism, source)                                                                 \
    static int create_##id(const ddpsim_services *svc, void **state)                                                 \
    {                                                                                                                \
        return sharded_create(svc, state, mode, &hooks_##id);                                                        \
    }
SHARDED_BUGS(AS_CREATE)

#define AS_OPS(id, text, mode, mechanism, source)                                                                    \
    [SBUG_##id] = {                                                                                                  \
        .api_version = DDPSIM_IMPL_API_VERSION, .name = text, .description = mechanism, .create = create_##id,       \
        .destroy = sharded_destroy, .forward_begin = sharded_forward_begin, .no_sync_enter = sharded_no_sync_enter, \
        .no_sync_exit = sharded_no_sync_exit, .grad_ready = sharded_grad_ready,                                      \
        .backward_end = sharded_backward_end, .zero_grad = sharded_zero_grad, .step = sharded_step,                  \
        .optimizer_step = sharded_optimizer_step, .shard_layout = sharded_layout,                                    \
        .clip_grads = sharded_clip_grads, .scaler_scale = sharded_scaler_scale,                                      \
        .scaler_unscale = sharded_scaler_unscale,                                                                    \
    },
static const ddpsim_impl_ops sharded_mutant_ops[SBUG_COUNT] = {SHARDED_BUGS(AS_OPS)};

#define AS_ENTRY(id, name, mode, mechanism, text_source)                                                             \
    [SBUG_##id] = {&sharded_mutant_ops[SBUG_##id], text_source, 1, 0, mode},
static const impl_entry entries[SBUG_COUNT] = {SHARDED_BUGS(AS_ENTRY)};

int impl_sharded_mutant_count(void)
{
    return SBUG_COUNT;
}

const impl_entry *impl_sharded_mutant_at(int i)
{
    return &entries[i];
}
