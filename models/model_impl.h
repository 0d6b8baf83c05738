/*
 * model_impl.h - what the model families (mlp.c, branchy.c, attn.c) share
 * with model.c: the model struct, the family table entry, and the helpers to
 * register parameters. Not part of the models' public interface.
 */
#ifndef DDPSIM_MODEL_IMPL_H
#define DDPSIM_MODEL_IMPL_H

#include "model.h"

#define MODEL_MAX_DIMS 32

/* How model_init fills a parameter. */
typedef enum init_kind {
    INIT_LINEAR,    /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)): nn.Linear's weight and bias */
    INIT_NORM_GAIN, /* 1 + U(-0.1, 0.1): a LayerNorm weight, made rank-distinct */
    INIT_NORM_BIAS, /* U(-0.1, 0.1) */
    INIT_EMBEDDING, /* U(-1, 1) */
} init_kind;

typedef struct model_family_ops {
    const char *name;
    const char *default_dims; /* used when the spec has no ":dims" (NULL: dims required) */
    int min_dims, max_dims;
    /* Register parameters (model_add_param), size the batch and the activations (act_floats); no allocation. */
    ddp_status (*build)(model *m);
    /* Allocate m->state and its act_floats of activations once the parameter buffers exist. */
    ddp_status (*alloc)(model *m);
    double (*forward)(model *m, const model_batch *b);
    void (*backward)(model *m);
    void (*free_state)(model *m);
    void (*fill)(const model *m, model_batch *b, uint64_t key, uint64_t micro);
    int (*gemms)(const model *m, model_gemm *out, int max);
    void (*describe)(const model *m, char *buf, size_t len);
    const char *loss;
    /* Some parameter's gradient arrives in pieces within one backward (reentrant checkpointing: tied); its
     * alloc sizes parts[] for them, and PyTorch's DDP needs static_graph=True for it. */
    int grads_in_pieces;
    /* A token loss (lm, lm-equal): the batch's targets carry LAYERS_IGNORE_TARGET past each row's valid tokens
     * (model_row_tokens), the forward sums the kept tokens' losses and the backward seeds them with
     * token_factor (model_set_token_factor). MODEL_TOKENS_RAGGED: the counts differ by rank, micro-batch and
     * sequence; MODEL_TOKENS_EQUAL: every position is valid, every count the same. */
    int token_loss;
} model_family_ops;

enum { MODEL_TOKENS_NONE = 0, MODEL_TOKENS_RAGGED, MODEL_TOKENS_EQUAL };

struct model {
    const model_family_ops *ops;
    char spec[160];
    int B;
    int dims[MODEL_MAX_DIMS];
    int ndims;
    /* batch layout, set by build */
    int x_cols, y_cols, seq_len;
    model_param params[MODEL_MAX_PARAMS];
    init_kind init[MODEL_MAX_PARAMS];
    int fan_in[MODEL_MAX_PARAMS];
    int nparams;
    size_t size;
    model_buffer buffers[MODEL_MAX_BUFFERS];
    float buf_base[MODEL_MAX_BUFFERS], buf_spread[MODEL_MAX_BUFFERS]; /* init: base + U(-spread, spread) */
    int nbuffers;
    size_t buf_size;
    float *buf;
    size_t act_floats;    /* the activation arena a forward + backward needs (set by build, used by alloc) */
    float *w, *g;
    float *lg;            /* this micro-step's local gradients (model_backward_local) */
    model_ready_fn ready; /* during backward: told as each parameter's local gradient completes */
    void *ready_ctx;
    unsigned char done[MODEL_MAX_PARAMS]; /* during backward: reported complete */
    unsigned char used[MODEL_MAX_PARAMS];
    unsigned char defined[MODEL_MAX_PARAMS]; /* .grad is a tensor (0: None, read as zeros) */
    /*
     * A recorded run's parameter whose gradient of this micro-step arrived in
     * nparts[i] >= 2 pieces (a backward inside the backward: reentrant
     * checkpointing), each added to .grad by its own AccumulateGrad:
     * parts[i] holds them in order (lg still holds their sum). 0 otherwise.
     */
    int nparts[MODEL_MAX_PARAMS];
    float *parts[MODEL_MAX_PARAMS];
    size_t parts_cap[MODEL_MAX_PARAMS];
    /* Loss scaling (model_set_loss_scale): every local gradient times loss_scale as it completes (1: none). */
    float loss_scale;
    /* The token loss's factor (token_loss families): what the summed loss is multiplied by. */
    float token_factor;
    /* A planted inf or NaN (model_plant_fault): element 0 of the first local gradient of the next backward. */
    int fault_armed;
    float fault_value;
    const model_batch *batch; /* of the last forward, for backward */
    double flops;
    void *state;
};

/* Register a parameter (cols 0: 1-D of `rows`). Returns its index, or -1 past MODEL_MAX_PARAMS. */
int model_add_param(model *m, const char *name, int rows, int cols, init_kind init, int fan_in);

/* Register a buffer of count floats, initialised to base + U(-spread, spread) per rank. -1 past MODEL_MAX_BUFFERS. */
int model_add_buffer(model *m, const char *name, int count, float base, float spread);
static inline float *model_buf(model *m, int i) { return m->buf + m->buffers[i].offset; }

static inline float *model_w(model *m, int i) { return m->w + m->params[i].offset; }
/* Where a family's backward writes (accumulates) parameter i's local gradient of this micro-step. */
static inline float *model_lg(model *m, int i) { return m->lg + m->params[i].offset; }

/*
 * A family's backward calls this the moment parameter i's local gradient is
 * complete (every use of it in this micro-step added in): that is when
 * autograd would run the parameter's AccumulateGrad node.
 */
void model_param_done(model *m, int i);

/* A family's fill of x [B, x_cols] and y [B, y_cols] uniform in [-1, 1) from key (mlp, bn). */
void model_fill_uniform(const model *m, model_batch *b, uint64_t key, uint64_t micro);

/* Record a gemm shape into out[n] if n < max; returns n + 1. */
int model_gemm_add(model_gemm *out, int n, int max, int M, int N, int K, int transA, int transB);

/* The gemms of a linear forward + backward over rows x in -> out (with_dinp: the input gradient too). */
int model_linear_gemms(model_gemm *out, int n, int max, int rows, int in, int outf, int with_dinp);

/* FLOPs of a linear forward + backward. */
double model_linear_flops(int rows, int in, int outf, int with_dinp);

extern const model_family_ops model_mlp_ops, model_branchy_ops, model_attn_ops, model_lm_ops, model_lm_equal_ops, model_bn_ops,
    model_tied_ops;

#endif
