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

#include "ddp_ref.h"
#include "model.h"
#include "schedule.h"
#include "status.h"

/* mkdir -p. DDP_ERR_SYSTEM with the path when it fails. */
ddp_status dump_mkdirs(const char *path);

/* Create DIR, DIR/init, DIR/rank<r> and DIR/<impl>/rank<r> for every impl. */
ddp_status dump_prepare(const char *dir, int nranks, const char *const *impls, int nimpls);

/* Write every parameter (or every gradient) of m as <subdir>/<name>.npy. */
ddp_status dump_write_tensors(const char *subdir, const model *m, const float *values);

/* DIR/rank<r>/batch<b>.{x,y}.npy: floats for mlp/branchy, int32 tokens and targets for attn. */
ddp_status dump_write_batch(const char *dir, int rank, uint64_t b, const model *m, const model_batch *batch);

/* Load DIR/init/<param>.npy into the parameters; DDP_ERR_INVALID on a missing file or wrong shape. */
ddp_status dump_read_init(const char *dir, model *m);

/* Load DIR/rank<r>/batch<b>.{x,y}.npy into batch (shapes checked against the model). */
ddp_status dump_read_batch(const char *dir, int rank, uint64_t b, const model *m, model_batch *batch);

typedef struct dump_manifest_info {
    int nranks;
    uint64_t seed;
    const char *model_spec;
    int batch;
    double lr;
    int find_unused;
    const char *schedule_text;
    const sched *schedule;
    const char *const *impls;
    int nimpls;
} dump_manifest_info;

/* DIR/manifest.json (format "ddpsim-dump", version 1). */
ddp_status dump_write_manifest(const char *dir, const dump_manifest_info *info);

#endif
