/*
 * model.h - the CPU models ddpsim trains, selected by a spec string:
 *
 *   mlp:IN-H1-...-OUT  nn.Sequential(Linear, ReLU, Linear, ..., Linear), mse loss
 *   branchy[:IN-H-OUT] a trunk and two heads; each micro-step uses head_a,
 *                      head_b or both (chosen by seed, rank, micro-step); a
 *                      fourth linear, "unused", is never called
 *   attn[:V-T-C]       a transformer block on a vocabulary of V tokens,
 *                      sequences of T, width C, cross-entropy loss
 *   bn[:IN-H-OUT]      Linear, BatchNorm1d (train mode), tanh, Linear, mse:
 *                      the one family with BUFFERS (running statistics that
 *                      every forward moves, as torch.nn.BatchNorm1d's)
 *   lm[:V-T-C]         attn's network as a language model on ragged data:
 *                      each sequence has its own number of valid tokens
 *                      (the rest padding, targets ignored), a micro-batch
 *                      may have none, and the loss is the SUM of the valid
 *                      tokens' cross-entropies times a factor the trainer
 *                      chooses (its loss normalization, --loss-norm)
 *   lm-equal[:V-T-C]   lm with every position valid: the same count in every
 *                      sequence, micro-batch and rank (what hides the
 *                      normalization mistakes lm's ragged counts show)
 *   tied[:IN-H]        an autoencoder whose decoder is its encoder's weight
 *                      transposed, the encoder under reentrant activation
 *                      checkpointing: enc.weight's gradient arrives in two
 *                      PIECES, one per use (tied.c)
 *
 * All parameters live in one contiguous float buffer and all gradients in
 * another, in registration order, each with a PyTorch-style name and shape
 * (model_param), so a gradient can be matched one to one with a torch run.
 * backward ACCUMULATES into the gradients; zero_grad is separate.
 *
 * Init and data are pure functions of (seed, rank, micro-step, tensor)
 * through rng.h; "rank" here is only a stream number: models know nothing
 * of processes or communication.
 */
#ifndef DDPSIM_MODEL_H
#define DDPSIM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define MODEL_MAX_PARAMS 256
#define MODEL_MAX_BUFFERS 16
#define MODEL_NAME_LEN 96
#define MODEL_MAX_NDIM 4
#define MODEL_DEFAULT_SPEC "mlp:32-64-64-16"
#define MODEL_MAX_DIM 65536
#define MODEL_MAX_FLOATS ((size_t)1 << 30) /* 4 GiB of parameters */

typedef struct model model;

typedef struct model_param {
    char name[MODEL_NAME_LEN]; /* "0.weight", "head_a.bias", "attn.q.weight", ... */
    int ndim;                  /* 1 to MODEL_MAX_NDIM (ddpsim's own families: 1 or 2) */
    int shape[MODEL_MAX_NDIM]; /* [out, in] for a linear weight, as PyTorch; unused dimensions 1 */
    size_t offset;             /* first element in the weight / gradient buffers */
    size_t count;              /* elements */
} model_param;

/*
 * A buffer: module state that is not a parameter (no gradient), such as
 * BatchNorm's running_mean, running_var and num_batches_tracked, in
 * registration order in one float buffer of its own. PyTorch's
 * num_batches_tracked is an int64; here it is a float, exact up to 2^24
 * forwards.
 */
typedef struct model_buffer {
    char name[MODEL_NAME_LEN]; /* "bn.running_mean", ... */
    size_t offset;             /* first element in model_buffers() */
    size_t count;
} model_buffer;

/*
 * One micro-batch. Which fields a model uses: mlp and branchy read x [B, IN]
 * and y [B, OUT]; attn reads tokens and targets [B, T]; branchy reads branch
 * (bit 0: head_a runs, bit 1: head_b runs).
 */
typedef struct model_batch {
    int B;
    float *x, *y;
    int *tokens, *targets;
    int branch;
} model_batch;

/*
 * Once per process, before any forward or backward: pins OpenBLAS to one
 * thread (the same bits whatever the machine, and no oversubscription when
 * ranks share the cores). The models never change process-wide settings
 * behind their caller's back; this is the one call that does, on purpose.
 */
void model_runtime_init(void);

/*
 * The threads OpenBLAS would run a product on in this process, before model_runtime_init: above 1 when
 * the library's constructor started a thread pool (OpenBLAS's pthread build does, sized by the cores or
 * OPENBLAS_NUM_THREADS). sim/blas_pool.c restarts the program without one.
 */
int model_blas_threads(void);

/* Address space the matrix products take in each process besides the model's own memory: OpenBLAS's work
 * buffer (about 129 MiB), 0 under portable math. */
size_t model_blas_buffer_bytes(void);

/*
 * Portable math (--portable-math): the models' matrix products in ddpsim's fixed-order kernels instead of
 * OpenBLAS's, so that the bits do not depend on the CPU's BLAS kernel. Process-wide, before the first forward
 * (forked ranks inherit it). model_math describes what computes the products ("OpenBLAS 0.3.21, kernel
 * Haswell" or "portable (...)") into buf, and returns buf.
 */
void model_set_portable_math(int on);
const char *model_math(char *buf, size_t len);

/*
 * Parse spec and build a model for micro-batches of `batch` rows.
 * DDP_ERR_INVALID with a message naming the problem for a bad spec or size;
 * DDP_ERR_NOMEM.
 */
ddp_status model_create(const char *spec, int batch, model **out);
void model_destroy(model *m);

/*
 * The same model's names, shapes and sizes without any buffers (for
 * reports and manifests): only the layout queries may be used on it.
 */
ddp_status model_create_layout(const char *spec, int batch, model **out);

/*
 * The layers as a JSON array for a dump manifest, e.g. for an mlp
 * [{"type": "linear", "in": 4, "out": 8}, {"type": "relu"}, ...]; other
 * families name each module as their parameters do.
 */
void model_describe(const model *m, char *buf, size_t len);
/* The loss: "mse" or "cross_entropy". */
const char *model_loss_name(const model *m);

/* The spec in canonical form ("mlp:4-8-3", "branchy:8-16-4", "attn:32-8-16"). */
const char *model_spec(const model *m);
/* The model family: "mlp", "branchy" or "attn". */
const char *model_family(const model *m);
/* Some parameter's gradient arrives in pieces within one backward (tied): PyTorch's DDP needs static_graph. */
int model_grads_in_pieces(const model *m);
int model_batch_rows(const model *m);
/* A batch's columns: x [rows, x_cols] and y [rows, y_cols] (0 for a model that reads tokens), and tokens and
 * targets [rows, seq_len] (0 for one that reads x and y). */
void model_batch_cols(const model *m, int *x_cols, int *y_cols, int *seq_len);

int model_nparams(const model *m);
const model_param *model_param_at(const model *m, int i);
/* Index of the parameter with this name, or -1. */
int model_param_find(const model *m, const char *name);
size_t model_size(const model *m); /* total parameter elements */
/* The bytes a replica of this model takes (parameters, gradients, local gradients, activations, a batch); the
 * layout alone knows it, so it is checked before anything is allocated. */
size_t model_memory_bytes(const model *m);
float *model_weights(const model *m); /* the buffers are the model's; const only says the model's layout is not changed */
float *model_grads(const model *m);

/* The buffers (none for most families): what DDP's broadcast_buffers broadcasts before a forward. */
int model_nbuffers(const model *m);
const model_buffer *model_buffer_at(const model *m, int i);
size_t model_buffers_size(const model *m); /* total buffer elements */
float *model_buffers(const model *m);      /* NULL when there are none */

/* Rank-distinct initialization (PyTorch's default ranges; see model.c), buffers included. */
void model_init(model *m, uint64_t seed, int rank);

/* Allocate the fields this model's batches use; free them. */
ddp_status model_batch_alloc(const model *m, model_batch *b);
void model_batch_free(model_batch *b);
/* Fill a batch with the data of (seed, rank, micro-step): rank- and step-distinct. */
void model_batch_fill(const model *m, model_batch *b, uint64_t seed, int rank, uint64_t micro);

/* Forward on a batch; the loss (mean, as PyTorch) is computed in double. */
ddp_status model_forward(model *m, const model_batch *b, double *loss);
/*
 * Backward of the last forward, as autograd runs it: this micro-step's
 * gradient of every used parameter (its "local gradient") is computed into
 * the local-gradient buffer, layer by layer, last layer first, and ready(ctx,
 * p) is called the moment p's local gradient is complete, interleaved with
 * the rest of the backward (when autograd would run p's AccumulateGrad).
 * .grad is not touched: adding the local gradient in is the caller's
 * (model_accumulate). ready may be NULL. Entries of unused parameters in the
 * local buffer are left as they were.
 */
typedef void (*model_ready_fn)(void *ctx, int param);
void model_backward_local(model *m, model_ready_fn ready, void *ctx);
/* This micro-step's local gradients (valid for the used parameters after a backward). */
const float *model_local_grads(const model *m);
/*
 * Loss scaling (GradScaler's scale(loss), engine/ddp/scaler.h): from the
 * next backward on, every local gradient is scale times what it would be,
 * multiplied as each parameter's gradient completes. The backward is linear
 * in the loss's gradient, so for a power of two this is exactly the
 * backward of the scaled loss, whatever the order of its operations
 * (outside overflow and the subnormal range). 1 (the default): none.
 */
void model_set_loss_scale(model *m, float scale);
float model_loss_scale(const model *m);
/*
 * The token loss (lm): whether m has one; the valid tokens of each of the B
 * sequences of the batch of (seed, rank, micro-step) into rows[B], a pure
 * function (every rank can count every rank's batches, as a trainer that
 * prefetches its window and all-reduces the counts can); and the factor
 * the next backward multiplies the summed loss by (1 until set; no effect
 * on other families). lm-equal: T in every sequence. lm: ragged by construction: rank 1 has at most one valid
 * token per sequence and none at all in every third micro-batch, every other
 * rank one sequence without any valid token in each micro-batch and 1 to T
 * in the others.
 */
int model_has_token_loss(const model *m);
void model_row_tokens(const model *m, uint64_t seed, int rank, uint64_t micro, int *rows);
void model_set_token_factor(model *m, float factor);
float model_token_factor(const model *m);
/*
 * A fault in the next backward only (--fault inf / nan: an overflow in one
 * rank's micro-step): element 0 of the local gradient of the first
 * parameter that completes becomes value, after the scaling, before any
 * AccumulateGrad or hook sees it.
 */
void model_plant_fault(model *m, float value);
/*
 * PyTorch's AccumulateGrad: dst's .grad of parameter p += src's local
 * gradient of p (same layout); a .grad that is None becomes the local
 * gradient itself (so a -0 stays -0, where 0 + -0 would be +0).
 */
void model_accumulate(model *dst, const model *src, int p);
/*
 * The same with src's local gradient times factor first (a power of two: exact): the other side's loss scale over
 * the one src's backward used, for an implementation whose scale is not the reference's, served by the
 * reference's backward.
 */
void model_accumulate_times(model *dst, const model *src, int p, float factor);
/* The whole backward with accumulation: .grad += local gradient, each parameter when it is ready. */
void model_backward(model *m);
/*
 * Whether each .grad is a tensor or None: None at creation (as a fresh
 * PyTorch parameter), a tensor after its first accumulation or when a sync
 * gives it a value; None again after zero_grad(set_to_none=True). A None
 * .grad holds zeros in the buffer, so it reads as zeros.
 */
unsigned char *model_grad_defined(model *m);
/* zero_grad: set_to_none = 0 fills the tensors with zeros (None stays None); 1 makes every .grad None. */
void model_zero_grad_as(model *m, int set_to_none);
void model_zero_grad(model *m); /* model_zero_grad_as(m, 0) */
/* used[i] is 1 when parameter i took part in the last forward. */
const unsigned char *model_used(const model *m);

/*
 * A recorded model (recorded.c): parameters declared by name and shape, no
 * math; each forward takes the next micro-step and the source says which
 * parameters it used, and the backward hands back the local gradients the
 * source gives for that micro-step, last registered first. What
 * `ddpsim check` replays the reference DDP on.
 */
typedef struct model_param_decl {
    const char *name;
    int ndim;
    int shape[MODEL_MAX_NDIM];
} model_param_decl;

typedef struct model_grad_source {
    /* Which parameters got a gradient in micro-step micro: used[p] = 0 or 1 for every parameter. */
    ddp_status (*used)(void *ctx, uint64_t micro, unsigned char *used);
    /* Parameter p's local gradient of micro-step micro into dst (its count of floats). */
    ddp_status (*grad)(void *ctx, uint64_t micro, int p, float *dst);
    void *ctx;
    /*
     * Optional (NULL: one piece always): how many pieces p's gradient of
     * micro-step micro arrived in (0 or 1: one), and piece k (0-based) into
     * dst. Two or more: each is added to .grad on its own (model_accumulate).
     */
    int (*npieces)(void *ctx, uint64_t micro, int p);
    ddp_status (*piece)(void *ctx, uint64_t micro, int p, int k, float *dst);
} model_grad_source;

/*
 * Pieces of parameter p's gradient in the last backward (0: one, the local gradient), and piece k's values.
 * A model whose .grad model_accumulate filled from another replica keeps that replica's pieces too.
 */
int model_npieces(const model *m, int p);
const float *model_piece(const model *m, int p, int k);

ddp_status model_create_recorded(const model_param_decl *decls, int n, const model_grad_source *src, model **out);
/* Declare a recorded model's buffers (no math moves them: their values are the caller's to set). */
ddp_status model_recorded_add_buffers(model *m, const model_param_decl *decls, int n);
/* A recorded model's first source failure since it was made (DDP_OK: none), its message into msg. */
ddp_status model_recorded_status(const model *m, char *msg, size_t len);

/* Floating-point operations of one forward + backward (for GFLOP/s). */
double model_flops(const model *m);

/* Shapes of the matrix products one forward + backward runs: the sgemm baseline of `bench model`. */
typedef struct model_gemm {
    int M, N, K;
    int transA, transB;
} model_gemm;
int model_gemms(const model *m, model_gemm *out, int max);

#endif
