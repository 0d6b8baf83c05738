/*
 * record.h - a recorded run: what an implementation under test did, written
 * by whoever ran it (ddpsim's Python front end, or a framework's own test),
 * for `ddpsim check DIR` to replay the reference DDP on. An extension of the
 * dump layout (dump.h):
 *
 *   DIR/manifest.json                        what was run (below)
 *   DIR/init/<param>.npy                     the parameters every rank started from
 *   DIR/rank<r>/micro<m>/used.json           ["<param>", ...]: which parameters got a
 *                                            gradient in rank r's m-th backward
 *   DIR/rank<r>/micro<m>/<param>.npy         that local gradient (the micro-step's alone,
 *                                            as a plain copy of the model computes it)
 *   DIR/rank<r>/micro<m>/comm.json           {"reductions": N, "bytes": B}: what the
 *                                            implementation reduced in that backward
 *                                            (may be left out: not counted; "bytes" too)
 *   DIR/<impl>/rank<r>/grab<k>/<param>.npy   the implementation's .grad at grab k (a None
 *                                            .grad written as zeros)
 *   DIR/<impl>/rank<r>/grab<k>/none.json     ["<param>", ...]: whose .grad was None there
 *                                            (may be left out: then None is not checked)
 *   DIR/<impl>/rank<r>/grab<k>/held.json     {"<param>": [[START, COUNT], ...]}: what rank r
 *                                            held at grab k (may be left out: below)
 *   DIR/<impl>/rank<r>/step<s>/<param>.npy   its parameters after step s
 *   DIR/<impl>/rank<r>/end/<param>.npy       its parameters at the end
 *   DIR/<impl>/rank<r>/clip<k>.json          {"coef": C}: the coefficient rank r's k-th clip
 *                                            applied (version 8; "nan", "inf" as strings)
 *   DIR/<impl>/rank<r>/scale<m>.json         {"scale": S}: with "loss_scale", what rank r's m-th
 *                                            backward multiplied its loss by (version 9)
 *   DIR/<impl>/rank<r>/unscale<k>.json       {"found_inf": bool}: what rank r's k-th unscale_
 *                                            found, every gradient's elements over every rank
 *   DIR/rank<r>/micro<m>/tokens.json         with "loss_norm": [T0, T1, ...], the valid tokens
 *                                            of each sequence of that micro-batch (version 10)
 *   DIR/<impl>/rank<r>/factor<m>.json        {"factor": F}: with "loss_norm", what rank r's m-th
 *                                            backward multiplied its summed token loss by; and
 *                                            "mixed": {"sequence": S, "factor": G} when not every
 *                                            valid token got F (sequence S's got G: a per-sequence
 *                                            normalization, which fails)
 *   DIR/init/<buffer>.npy                    with "buffers": the buffers every rank started from
 *   DIR/rank<r>/fwd<k>/seen/<buffer>.npy     the buffers rank r's module held when its k-th
 *                                            forward began (after any broadcast of DDP's)
 *   DIR/rank<r>/fwd<k>/after/<buffer>.npy    ... and when it ended (the forward moved them)
 *
 * manifest.json:
 *
 *   {"format": "ddpsim-record", "version": 2, "ranks": N, "impl": "NAME",
 *    "recorded_by": "...", "model": "...",
 *    "params": [{"name": "0.weight", "shape": [64, 32]}, ...],
 *    "buffers": [{"name": "bn.running_mean", "shape": [32]}, ...],
 *    "ddp": {...}, "zero_grad": "...", "optimizer": {"type": "sgd", "lr": X}   (manifest.h)
 *    "ops": ["fwd", "bwd", "enter", "exit", "grab", "zero", "step", "join_enter", "join_exit", ...],
 *    "joins": [{"enter": OP, "exit": OP, "divide_by_initial_world_size": bool}, ...],
 *    "uneven": [{"first": OP, "body": N, "iterations": K, "counts": [rank 0's, ...]}, ...],
 *    "clips": [{"op": OP, "max_norm": X, "norm_type": 2 | "inf"}, ...],
 *    "loss_scale": "S" | "dynamic:INIT,GROWTH,BACKOFF,INTERVAL",
 *    "planted": [{"kind": "inf" | "nan", "rank": R, "op": K}, ...],
 *    "grad_shards": [{"<param>": [[START, COUNT], ...], ...}, ... one object per rank],
 *    "shard": {"mode": "zero1" | "zero2" | "fsdp" | "hsdp", "mesh": "RxS"},
 *    "loss_norm": "global-tokens" | "micro-batch-mean" | "sum"}
 *
 * "joins" and "uneven" (uneven inputs, schedule.h) may be left out. A rank
 * has files only for the ops it ran: none for the grabs and steps past its
 * count (their numbers stay the run's), micro<m> and fwd<k> counting its
 * own, and nothing after the point where it ran out outside join.
 *
 * Every file is float32 of its parameter's shape, C order. "recorded_by",
 * "model", "ddp" (and its members), "zero_grad" and "optimizer" may be left
 * out (defaults: PyTorch's, and lr 0.1); the rest is required. "buffers"
 * may be left out (nothing checked of the buffers); an integer buffer such
 * as num_batches_tracked is written as float32.
 *
 * "grad_shards" (sharded data parallelism: ZeRO, FSDP, fairscale's OSS)
 * says which elements of each .grad a rank holds: rank r's object maps a
 * parameter to the element ranges (flat, C order) of its gradient that the
 * rank owns; a parameter its object does not name, it holds nothing of.
 * Only what a rank holds is compared at a grab (what it does not own is
 * never read: scratch, stale or None by design), each range against the
 * same elements of DDP's gradient; every element must be held by some rank
 * (else it could go unchecked: refused), a rank's ranges may not overlap.
 * Left out: every rank holds every element. A grab's held.json (the same
 * object as a rank's entry) says what the rank held there instead, for a
 * layout that changes (FSDP2 keeps the whole local sum while gradient sync
 * is off, a shard after a sync); the ranks that reached a grab must hold
 * every element between them. The parameters after a step and at the end
 * are compared whole on every rank, unless that check's held.json
 * (<impl>/rank<r>/step<k>/held.json, end/held.json) says which elements of
 * the parameters the rank held there (FSDP: its parameter shard).
 *
 * "shard" (version 4) says which sharded data parallelism recorded the run,
 * and so which accumulation rule its gradients follow (shard_ref.h,
 * doc/SEMANTICS.md): ZeRO-2's sharded sum reduced at every micro-step,
 * HSDP's deferred replica all-reduce on the mesh "RxS" (R replicas of shard
 * groups of S ranks, torch's DeviceMesh numbering; left out: the mode's
 * default, shard_default_mesh). Without it a recording is judged as DDP,
 * which is the rule of zero1 and fsdp too. A sharded recording may not use
 * the DDP options the sharded reference does not model
 * (shard_unmodelled_option) nor uneven inputs. In a mode that reduces in a
 * backward that does not sync (zero2, hsdp), comm.json's "scatters" (the
 * reduce-scatters and reduces among its "reductions") are allowed there;
 * without "scatters" that backward's count is not held against it.
 *
 * "loss_scale" (version 9; scaler.h, as --loss-scale spells it) says the
 * implementation scaled its loss as torch's GradScaler does: the local
 * gradients of rank<r>/micro<m> are what its backward made, at the scale
 * of its scale<m>.json (inf and NaN allowed: an overflow is GradScaler's
 * to find), and before the first clip or step since the last step it ran
 * unscale_ and wrote what it found (unscale<k>.json, k counting its
 * unscales). The replay runs the reference's own scaler: its scale at
 * every backward and its finding at every unscale are what the
 * implementation's must be; its gradients at a grab are the scaled ones
 * before the unscale, the unscaled ones after. "planted" (--fault inf|nan)
 * names the backwards where an inf or NaN was put into a rank's gradient
 * on purpose (ddpsim: element 0 of the first gradient the backward
 * completes), into the implementation's and into the local gradient
 * recorded for that backward, which carries it to the reference (the
 * replay plants nothing itself); the checks of that window follow it. It
 * needs "loss_scale". Neither goes with uneven inputs or join.
 *
 * "loss_norm" (version 10; loss_norm.h, as --loss-norm spells it) says the
 * run's loss is a token loss whose normalization the trainer chose, and
 * which one it intended: each backward's loss is the sum of its
 * micro-batch's valid tokens' losses times the factor of its factor<m>.json,
 * and its local gradients in rank<r>/micro<m> are what that backward made
 * (at that factor). The counts of every rank's micro-batches (tokens.json,
 * the same number of sequences in each) give the windows (zero_grad to
 * zero_grad) and the intended factor of every backward: a recorded factor
 * is checked against it as a live run's (a failure names the mistakes that
 * give it), and the reference takes a factor that holds as it is (the rest
 * compares the same normalization bitwise) and rescales the gradients of
 * one that does not to the intended factor. Not with "loss_scale",
 * "shard", "optimizer": {"averages": ...}, uneven inputs or join.
 *
 * "optimizer": {"averages": "parameters"} (version 5): the implementation
 * averages the parameters over the ranks after each rank's local SGD step
 * (model averaging, post-local SGD: torch.distributed.algorithms'
 * PeriodicModelAverager with period 1), instead of averaging the gradients
 * before one step. Its .grad are its own business (local, not synced), so
 * the ops may have no grab; every step's parameters are compared with DDP's
 * within the bound of averaging parameters instead of gradients
 * (budget_averaged_params). Not with "shard", uneven inputs or join, and
 * only with a step to check.
 */
#ifndef DDPSIM_RECORD_H
#define DDPSIM_RECORD_H

#include <limits.h>
#include <stdint.h>

#include "ddp_ref.h"
#include "loss_norm.h"
#include "manifest.h"
#include "model.h"
#include "mesh.h"
#include "schedule.h"
#include "shard_ref.h"
#include "status.h"

#define RECORD_NAME_LEN 128
/* 10: "loss_norm", each micro-step's tokens.json and each rank's factor<m>.json;
 * 9: "loss_scale", "planted", and each rank's scale<m>.json and unscale<k>.json;
 * 8: "clips" (the clip ops' arguments) and each rank's clip<k>.json;
 * 7: "optimizer": {"type": "adamw", "betas": [B1, B2], "eps": E, "weight_decay": W};
 * 6: "optimizer": {"momentum": M};
 * 5: "optimizer": {"averages": "parameters"}; 4: "shard", comm.json's "scatters" and a parameter check's held.json; 3: "grad_shards" and a grab's none.json;
 * 2: "ddp" has every option (manifest.h), "algo" among them; versions 1 (without "algo") to 3 are read as well */
#define RECORD_VERSION 10

/* A slice of a parameter's gradient that a rank holds (grad_shards): elements [start, start + count). */
typedef struct record_held {
    int param;
    size_t start, count;
} record_held;

typedef struct record_run {
    char dir[PATH_MAX];
    int nranks;
    int nparams, nbuffers;
    /* the parameters, then the buffers (index nparams + b): record_read reads either */
    char names[MODEL_MAX_PARAMS + MODEL_MAX_BUFFERS][MODEL_NAME_LEN];
    model_param_decl decls[MODEL_MAX_PARAMS + MODEL_MAX_BUFFERS];
    sched schedule;
    ddp_config ddp;          /* find_unused, bucket_view, caps, set_to_none, find_unused_rule, lr */
    char impl[RECORD_NAME_LEN], recorded_by[RECORD_NAME_LEN], model[RECORD_NAME_LEN];
    /* grad_shards: rank r holds held[held_at[r] .. held_at[r + 1]); held_at NULL when every rank holds all */
    record_held *held;
    size_t *held_at;
    int held_by_grab;        /* some grab's held.json says what a rank held there */
    int params_held;         /* some parameter check's held.json says what a rank held of the parameters */
    shard_mode shard;        /* "shard": the mode (SHARD_NONE: judged as DDP) and its mesh */
    mesh mesh;
    int params_averaged;     /* "optimizer": {"averages": "parameters"}: parameters averaged, only they are checked */
    manifest_plant planted[MANIFEST_MAX_PLANTS]; /* "planted": the infs and NaNs put into backwards */
    int nplanted;
    loss_norm loss_norm;     /* "loss_norm" (LOSS_NORM_NONE: not a token loss) ... */
    loss_tokens tokens;      /* ... and every rank's tokens.json (tokens.counts is token_counts) */
    int *token_counts;
} record_run;

/*
 * Read DIR/manifest.json and check every file the run needs against it
 * (present, float32, its parameter's shape; used.json naming known
 * parameters; local gradients present for what used.json names), reading
 * only the headers. DDP_ERR_INVALID naming the file and what is wrong.
 */
ddp_status record_open(const char *dir, record_run *out);
void record_close(record_run *r);

/* DIR/<what>/<param>.npy (param >= nparams: buffer param - nparams) into dst (what: "init", "rank0/micro3", "impl/rank0/grab2", ...); finite_only refuses NaN. */
ddp_status record_read(const record_run *r, const char *what, int param, float *dst, int finite_only);
/*
 * A gradient that arrived in pieces within one backward (reentrant
 * checkpointing): what/<name>.part1.npy, .part2.npy, ... in arrival order.
 * record_npieces counts them (0: none, the gradient is one piece);
 * record_read_piece reads piece k (0-based), finite values only.
 */
int record_npieces(const record_run *r, const char *what, int param);
ddp_status record_read_piece(const record_run *r, const char *what, int param, int k, float *dst);

/* The values of a check, as the layout names their directory: grab<k>, step<k> or end. */
typedef enum record_values { RECORD_GRAB, RECORD_STEP, RECORD_END } record_values;
const char *record_values_name(record_values kind, uint64_t k, char *buf, size_t len);

/*
 * What/none.json, when the recording has it: none[p] = 1 for each parameter
 * whose .grad was None there, and *known = 1; *known = 0 without the file.
 */
ddp_status record_grad_none(const record_run *r, const char *what, unsigned char *none, int *known);

/*
 * Rank's held.json at check k of a kind (a grab: what it held of the gradients; a step or the end: of the
 * parameters) into *out (malloc'd, sorted; the caller frees), *known = 1; *known = 0 without one.
 */
ddp_status record_check_held(const record_run *r, int rank, record_values kind, uint64_t k, record_held **out,
                             size_t *n, int *known);

/*
 * DIR/rank<r>/micro<m>/comm.json, {"reductions": N, "bytes": B, "scatters": K, "scatter_bytes": C}: the
 * reductions the implementation made in that backward, when its recorder counted them (known = 0 without the
 * file); "bytes" may be left out (RECORD_UNCOUNTED: torch's CommDebugMode counts calls only); "scatters", how
 * many of them were reduce-scatters or reduces to one rank, and their bytes, too.
 */
#define RECORD_UNCOUNTED UINT64_MAX
typedef struct record_comm_counts {
    int known;
    uint64_t reductions, bytes, scatters, scatter_bytes;
} record_comm_counts;
ddp_status record_comm(const record_run *r, int rank, uint64_t micro, record_comm_counts *out);

/* Which parameters got a gradient in rank's micro-step m (used[p] = 0 or 1). */
ddp_status record_used(const record_run *r, int rank, uint64_t micro, unsigned char *used);
/* DIR/<impl>/rank<r>/clip<k>.json: the coefficient rank r's k-th clip applied (required for each clip it ran). */
ddp_status record_clip(const record_run *r, int rank, uint64_t k, float *coef);
/* DIR/<impl>/rank<r>/scale<m>.json: the loss scale of rank r's m-th backward (required with "loss_scale"). */
ddp_status record_scale(const record_run *r, int rank, uint64_t micro, float *scale);
/* DIR/<impl>/rank<r>/unscale<k>.json: what rank r's k-th unscale_ found (required with "loss_scale"). */
ddp_status record_unscale(const record_run *r, int rank, uint64_t k, int *found_inf);
/* DIR/<impl>/rank<r>/factor<m>.json: the factor of rank r's m-th backward's token loss (required with "loss_norm";
 * any float: a micro-batch without a valid token may have inf or NaN); its "mixed" {"sequence": S, "factor": G},
 * when the recorder found no one factor for the micro-batch (sequence S's tokens got G), into *mixed_sequence
 * and *mixed_factor (-1: none). */
ddp_status record_factor(const record_run *r, int rank, uint64_t micro, float *factor, int *mixed_sequence,
                         float *mixed_factor);

/* ---- writing one (ddpsim --record DIR: a live run recorded as any framework would) ---- */

typedef struct record_info {
    int nranks;
    const char *impl, *recorded_by, *model;
    const model *layout;
    const ddp_config *ddp;
    const sched *schedule;
    shard_mode shard;        /* SHARD_NONE: no "shard" */
    mesh mesh;
    const manifest_plant *planted; /* "planted" (nplanted 0: none) */
    int nplanted;
    loss_norm loss_norm;     /* LOSS_NORM_NONE: no "loss_norm" */
} record_info;

/* DIR/manifest.json (DIR prepared with dump_prepare). */
ddp_status record_write_manifest(const char *dir, const record_info *info);
/* DIR/rank<r>/micro<m>/: used.json and the local gradient of every used parameter (local: m's layout), with its
 * pieces (<param>.part<k>.npy) when it came in two or more (model_npieces), each value times factor (1: as they
 * are; an implementation served by the reference's backward at another loss scale, rank.c: the ratio of the two) */
ddp_status record_write_micro(const char *dir, int rank, uint64_t micro, const model *m, const float *local,
                              const unsigned char *used, float factor);
/* DIR/rank<r>/micro<m>/comm.json (the directory exists): the implementation's reductions in that backward. */
ddp_status record_write_comm(const char *dir, int rank, uint64_t micro, const record_comm_counts *c);
/* DIR/<side>/rank<r>/clip<k>.json: {"coef": C} (C a number, or "nan", "inf", "-inf"). */
ddp_status record_write_clip(const char *dir, const char *side, int rank, uint64_t k, float coef);
/* DIR/<side>/rank<r>/scale<m>.json and unscale<k>.json: a backward's loss scale, an unscale_'s finding. */
ddp_status record_write_scale(const char *dir, const char *side, int rank, uint64_t micro, float scale);
ddp_status record_write_unscale(const char *dir, const char *side, int rank, uint64_t k, int found_inf);
/* With "loss_norm": DIR/<side>/rank<r>/factor<m>.json, a backward's factor; DIR/rank<r>/micro<m>/tokens.json (the
 * directory exists), its micro-batch's valid tokens per sequence. */
ddp_status record_write_factor(const char *dir, const char *side, int rank, uint64_t micro, float factor);
ddp_status record_write_tokens(const char *dir, int rank, uint64_t micro, const int *rows, int n);
/* DIR/<side>/rank<r>/<what>/held.json (the directory exists): the elements of m's layout whose held[] is not 0. */
ddp_status record_write_held(const char *dir, const char *side, int rank, const char *what, const model *m,
                             const unsigned char *held);
/* DIR/<side>/rank<r>/<what>/none.json (the directory exists): the parameters whose .grad is None (defined[p] 0). */
ddp_status record_write_grad_none(const char *dir, const char *side, int rank, const char *what, const model *m,
                                  const unsigned char *defined);
/* DIR/rank<r>/fwd<k>/<which>/<buffer>.npy: m's buffers as rank's forward k began ("seen") or ended ("after"). */
ddp_status record_write_forward_buffers(const char *dir, int rank, uint64_t k, const char *which, const model *m);

#endif
