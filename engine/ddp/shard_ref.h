/*
 * shard_ref.h - the sharded reference: what each rank of a sharded data
 * parallelism holds of the gradient at every point of a schedule, by mode
 * (ZeRO-1/2, FSDP, HSDP; ddpsim_impl.h ddpsim_shard_mode, doc/SEMANTICS.md
 * "Sharded data parallelism"). It runs beside the DDP reference (ddp_ref.h),
 * which still decides when a backward syncs (the arming), and follows the
 * same local gradients (model_local_grads of the reference's replica).
 *
 * Three sums, each over every element of the model (a rank compares only
 * its own slice of them; the layout is the implementation's):
 *   L  the unsharded local accumulation since the last reduction (.grad):
 *      AccumulateGrad's rule, a None .grad takes the first gradient as it is;
 *   P  HSDP only: the reduce-scattered partial sum of the micro-steps since
 *      the last sync (FSDP2's partial_reduce_output);
 *   A  the sharded gradient: what the optimizer steps with.
 * A reduction scales each contribution by fl(1/N) (N the world's size: the
 * whole data-parallel degree, DDP's and the PREMUL_SUM convention) and sums:
 *   ZERO1, FSDP  a syncing backward: A (+)= world-sum(L * 1/N), L = 0;
 *   ZERO2        every backward: the same;
 *   HSDP         every backward: P (+)= shard-group-sum(L * 1/N), L = 0; a
 *                syncing backward then A (+)= replica-group-sum(P), P empty
 *                (torch _fsdp_collectives.py foreach_reduce: the reduce-
 *                scatter's output plus the partial, then the all-reduce).
 * "(+)=" is a copy into a shard that holds nothing yet (since zero_grad; a
 * ZeRO micro_step_id of 0, FSDP2's None sharded .grad), an add otherwise.
 * After a reduction L holds zeros and its .grad stays a tensor, as an
 * implementation that clears its own buffers leaves it.
 */
#ifndef DDPSIM_SHARD_REF_H
#define DDPSIM_SHARD_REF_H

#include <stdint.h>

#include "coll.h"
#include "ddp_ref.h"
#include "mesh.h"
#include "model.h"
#include "status.h"
#include "world.h"

/* The modes, numbered as ddpsim_impl.h's ddpsim_shard_mode. */
typedef enum shard_mode { SHARD_NONE = 0, SHARD_ZERO1, SHARD_ZERO2, SHARD_FSDP, SHARD_HSDP } shard_mode;

const char *shard_mode_name(shard_mode m); /* "none", "zero1", ... */
/* "zero1" | "zero2" | "fsdp" | "hsdp"; DDP_ERR_INVALID names them. */
ddp_status shard_mode_parse(const char *text, shard_mode *out);
/* FSDP and HSDP shard the parameters too. */
int shard_mode_params_sharded(shard_mode m);
/* A micro-step that does not sync may reduce-scatter (ZERO2, HSDP), never all-reduce. */
int shard_mode_scatters_unsynced(shard_mode m);
/* What a grab reads: the unsharded local .grad (ZERO1 and FSDP unless the last backward synced), else A. */
int shard_mode_reads_local(shard_mode m, int last_synced);

/*
 * The mesh of a mode without --mesh: HSDP replicates twice when the world
 * splits evenly (2 x N/2, the smallest mesh with both groups), else it
 * replicates over shard groups of one rank (N x 1); the others shard over
 * the world (1 x N).
 */
mesh shard_default_mesh(shard_mode m, int nranks);

/* A mesh given for mode m over nranks: R x S = nranks, and R > 1 only for HSDP; DDP_ERR_INVALID, what prefixed. */
ddp_status shard_check_mesh(shard_mode m, const mesh *given, int nranks, const char *what);

/*
 * The DDP option the sharded reference does not model, in words, or NULL: a
 * sharded run reduces every parameter in one rule (so find_unused, the
 * bucket view, a communication hook and static_graph have no meaning the
 * reference gives them), and its group sums are ordered (not the ring's).
 */
const char *shard_unmodelled_option(const ddp_config *d);

typedef struct shard_ref shard_ref;

/* Over the reference's replica m (not owned) on this rank of a world that is mesh_ (copied). */
ddp_status shard_ref_create(shard_mode mode, const mesh *mesh_, coll_algo algo, model *m, world_rank *wr,
                            shard_ref **out);
void shard_ref_destroy(shard_ref *s);
/* After the replica's local backward: its gradients into L, and the mode's reductions (collectives). */
ddp_status shard_ref_backward(shard_ref *s, int syncs);
/* zero_grad: every sum empty, and with set_to_none every .grad None again. */
void shard_ref_zero(shard_ref *s, int set_to_none);
shard_mode shard_ref_mode(const shard_ref *s);
mesh shard_ref_mesh(const shard_ref *s);
/* shard_mode_reads_local of its mode */
int shard_ref_reads_local(const shard_ref *s, int last_synced);
/* The gradient a grab compares with (every element; shard_mode_reads_local says which sum). */
const float *shard_ref_grads(const shard_ref *s, int last_synced);
/* A, what the optimizer steps with (optim.h). */
const float *shard_ref_sharded(const shard_ref *s);
/* ... to change in place (a clip scales it). */
float *shard_ref_sharded_mut(shard_ref *s);

/*
 * For the order tolerance (budget.h): from now on, per element, this rank's
 * sum of |local gradient| over the micro-steps behind L (since the last
 * reduction) and behind A (since zero_grad), in double, with how many
 * micro-steps each holds; DDP_ERR_NOMEM.
 */
ddp_status shard_ref_track_abs(shard_ref *s);
const double *shard_ref_abs_local(const shard_ref *s, uint64_t *micro);
const double *shard_ref_abs_sharded(const shard_ref *s, uint64_t *micro);

#endif
