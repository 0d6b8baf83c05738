/*
 * dump.h - the dump directory (`--dump DIR`), a stable layout that numpy and
 * PyTorch read:
 *
 *   DIR/manifest.json                       what was run (see dump_write_manifest)
 *   DIR/init/<param>.npy                    parameters after the initial broadcast
 *   DIR/rank<r>/batch<b>.x.npy, .y.npy      inputs and targets of forward b on rank r
 *   DIR/<impl>/rank<r>/grab<k>/<param>.npy  gradients of each implementation at grab k
 *
 * The same layout is what `--inputs DIR` reads back (init and batches), so a
 * run that PyTorch wrote can be replayed through ddpsim.
 */
#ifndef DDPSIM_DUMP_H
#define DDPSIM_DUMP_H

#include <stdint.h>
#include <stdio.h>

#include "ddp_ref.h"
#include "manifest.h"
#include "model.h"
#include "schedule.h"
#include "status.h"

/* mkdir -p. DDP_ERR_SYSTEM with the path when it fails. */
ddp_status dump_mkdirs(const char *path);

/*
 * Whether an output PATH can be created under the rule for every output path: only its last component is
 * created, in a directory that exists. DDP_ERR_INVALID naming the missing parent otherwise.
 */
ddp_status dump_check_parent(const char *path);

/*
 * Whether DIR may receive a dump, without touching it (its parent exists: dump_check_parent): it does not exist,
 * or holds no file at any depth, or holds an earlier ddpsim dump (its
 * manifest.json says "format": "ddpsim-dump") and force is set. Otherwise
 * DDP_ERR_INVALID saying why: stale files of another run would sit beside a
 * manifest that does not list them.
 */
ddp_status dump_check_dir(const char *dir, int force);

/*
 * Make DIR ready (dump_check_dir first): clear an earlier dump when force
 * allows it, then create DIR, DIR/init, DIR/rank<r> and DIR/<impl>/rank<r>
 * for every impl.
 */
ddp_status dump_prepare(const char *dir, int nranks, const char *const *impls, int nimpls, int force);

/* p's shape as the .npy files have it (p->ndim entries count). */
void dump_param_shape(const model_param *p, size_t shape[MODEL_MAX_NDIM]);

/* Every buffer of m (values laid out as model_buffers) as <subdir>/<name>.npy, 1-D. */
ddp_status dump_write_buffer_tensors(const char *subdir, const model *m, const float *values);

/* Write every parameter (or every gradient) of m as <subdir>/<name>.npy. */
ddp_status dump_write_tensors(const char *subdir, const model *m, const float *values);

/*
 * DIR/<side>/rank<r>/<what>/<param>.npy of every parameter (what: a check's values, record_values_name), the
 * directory created: the layouts' per-rank values of one side (dump.h, record.h).
 */
ddp_status dump_write_rank_tensors(const char *dir, const char *side, int rank, const char *what, const model *m,
                                   const float *values);
/* DIR/init/: m's parameters as every rank starts from them, and with_buffers its buffers. */
ddp_status dump_write_init(const char *dir, const model *m, int with_buffers);

/* DIR/rank<r>/batch<b>.{x,y}.npy: floats for mlp/branchy, int32 tokens and targets for attn. */
ddp_status dump_write_batch(const char *dir, int rank, uint64_t b, const model *m, const model_batch *batch);

/* Load DIR/init/<param>.npy into the parameters; DDP_ERR_INVALID on a missing file, a wrong shape or dtype, or a
 * value that is not finite (a run on it could verify nothing). */
ddp_status dump_read_init(const char *dir, model *m);

/* Load DIR/rank<r>/batch<b>.{x,y}.npy into batch: shapes and dtypes checked against the model, floats finite,
 * tokens and targets in the vocabulary. */
ddp_status dump_read_batch(const char *dir, int rank, uint64_t b, const model *m, model_batch *batch);

/* What a run is, as a manifest records it: everything needed to replay the dump elsewhere. */
typedef struct dump_manifest_info {
    int nranks;
    uint64_t seed;
    const char *model_spec;
    int batch;
    const ddp_config *ddp;    /* bucket caps, find_unused, bucket_view, algo, lr */
    const char *schedule_text;
    const sched *schedule;
    const char *const *impls;
    int nimpls;
    const manifest_plant *planted; /* --fault inf|nan (nplanted 0: none) */
    int nplanted;
    const char *loss_norm;    /* the token model's --loss-norm, as it spells it (NULL: no token loss) */
} dump_manifest_info;

/*
 * DIR/manifest.json, format "ddpsim-dump" version 3: ranks, seed, the model
 * (name, layers, loss, every parameter's name and shape), the batch, the
 * schedule and its ops (each backward with whether it syncs and, when it
 * does, "armed_by": the forward that armed the reducer), and what changes
 * bits: every option of the ddp config, "zero_grad", "optimizer",
 * "loss_scale" and "planted" (manifest.h's codec); "loss_norm" for the
 * token model.
 */
ddp_status dump_write_manifest(const char *dir, const dump_manifest_info *info);

/*
 * Check DIR/manifest.json against the run about to read DIR's inputs: the
 * format, the number of ranks, the batch, every parameter's name and shape,
 * and every option that changes bits the manifest records, read with
 * manifest.h's codec and compared field by field (version 1, as PyTorch
 * scripts write it: find_unused_parameters and lr; version 2 the "ddp"
 * section but broadcast_buffers; version 3 everything). DDP_ERR_INVALID
 * naming the field, the dump's value and the run's.
 */
ddp_status dump_check_manifest(const char *dir, const dump_manifest_info *run);

#endif
