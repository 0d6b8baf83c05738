/*
 * manifest.h - what the manifests of dumps (dump.h) and recordings
 * (record.h) share, written and read by one codec:
 *
 *   "params":  [{"name": "0.weight", "shape": [64, 32]}, ...]
 *   "buffers": [{"name": "bn.running_mean", "shape": [32]}, ...]
 *   "ddp": {"bucket_cap": B, "first_bucket_cap": B, "find_unused_parameters": bool,
 *           "find_unused_rule": "window" | "syncing-backward", "gradient_as_bucket_view": bool,
 *           "algo": "ordered" | ..., "comm_hook": "none" | "allreduce" | "fp16" | "bf16",
 *           "static_graph": bool, "broadcast_buffers": bool},
 *   "zero_grad": "fill_zeros" | "set_to_none",
 *   "optimizer": {"type": "sgd", "lr": X, "momentum": M}
 *              | {"type": "adamw", "lr": X, "betas": [B1, B2], "eps": E, "weight_decay": W},
 *   "loss_scale": "S" | "dynamic:INIT,GROWTH,BACKOFF,INTERVAL"   (scaler.h; left out: none)
 *   "planted": [{"kind": "inf" | "nan", "rank": R, "op": K}, ...]   (--fault inf|nan: left out: none)
 *   "joins": [...], "uneven": [...]   (schedule.h's blocks, resolved: manifest_write_uneven)
 *
 * Every member of "ddp", "zero_grad", "optimizer" and "loss_scale" may be left out: a
 * reader takes ddp_config_default()'s value and says which it read
 * (manifest_ddp_fields), so a check compares only what a file says.
 */
#ifndef DDPSIM_MANIFEST_H
#define DDPSIM_MANIFEST_H

#include <stdio.h>

#include "ddp_ref.h"
#include "json.h"
#include "model.h"
#include "schedule.h"
#include "status.h"

/* The options of a ddp_config a manifest records, one bit each in a manifest_ddp_fields mask. */
typedef enum manifest_ddp_field {
    MF_BUCKET_CAP,
    MF_FIRST_BUCKET_CAP,
    MF_FIND_UNUSED,
    MF_FIND_UNUSED_RULE,
    MF_BUCKET_VIEW,
    MF_ALGO,
    MF_COMM_HOOK,
    MF_STATIC_GRAPH,
    MF_BROADCAST_BUFFERS,
    MF_ZERO_GRAD,
    MF_LR,
    MF_MOMENTUM,
    MF_OPTIMIZER, /* optimizer.type, and AdamW's hyperparameters */
    MF_LOSS_SCALE,
    MF_NFIELDS
} manifest_ddp_field;
typedef unsigned manifest_ddp_fields;
#define MF_ALL ((1u << MF_NFIELDS) - 1)

/* ,\n "ddp": {...every field...},\n "zero_grad": ...,\n "optimizer": {...} of d, to f; "loss_scale" with one. */
void manifest_write_ddp(FILE *f, const ddp_config *d);
/*
 * The same from a manifest's root (path: for messages) into out, which starts as ddp_config_default(); *read
 * says which fields the file gave. A top-level "find_unused_parameters" and "lr" (the dumps' version 1, as
 * PyTorch scripts write it) count when the sections do not say. DDP_ERR_INVALID naming the member.
 */
ddp_status manifest_read_ddp(const char *path, const json_value *root, ddp_config *out, manifest_ddp_fields *read);
/*
 * The first field of `fields` in which what a file recorded differs from a run's: DDP_ERR_INVALID "PATH: the
 * WHAT was made with NAME VALUE, this run has VALUE (OPTION)"; DDP_OK when they agree.
 */
ddp_status manifest_ddp_compare(const char *path, const char *what, const ddp_config *file, const ddp_config *run,
                                manifest_ddp_fields fields);

/*
 * The infs and NaNs planted into backwards (--fault inf|nan, faults.h): "kind" inf or nan, the rank, the backward's
 * op index. GradScaler must find them: a run that plants one needs "loss_scale".
 */
typedef struct manifest_plant {
    int nan; /* 0: an inf */
    int rank;
    size_t op;
} manifest_plant;
#define MANIFEST_MAX_PLANTS 16

/* ,\n "planted": [...] of n plants (nothing when n is 0), to f. */
void manifest_write_plants(FILE *f, const manifest_plant *p, int n);
/*
 * "planted" from a manifest's root (left out: *n = 0), each against the schedule (op K a backward) and the ranks;
 * DDP_ERR_INVALID naming the entry.
 */
ddp_status manifest_read_plants(const char *path, const json_value *root, const sched *s, int nranks,
                                manifest_plant *out, int *n);

/* "params" of m ([{"name": ..., "shape": [...]}, ...]), to f. */
void manifest_write_params(FILE *f, const model *m);
/* "buffers" of m ([{"name": ..., "shape": [count]}, ...]), to f. */
void manifest_write_buffers(FILE *f, const model *m);
/*
 * A schedule's join blocks and uneven repetitions, resolved at nranks (nothing when it has none): ,\n
 * "joins": [{"enter": OP, "exit": OP, "divide_by_initial_world_size": bool}, ...], "uneven": [{"first": OP,
 * "body": N, "iterations": K, "counts": [rank 0's, ...]}, ...]. Only for a schedule sched_resolve accepted.
 */
void manifest_write_uneven(FILE *f, const sched *s, int nranks);

#endif
