/*
 * tied.c - tied:IN-H, the family with a TIED weight used on both sides of
 * a reentrant activation checkpoint: an autoencoder whose decoder is its
 * encoder's weight transposed,
 *
 *   h = checkpoint(tanh(enc(x)))        out = h @ enc.weight + dec_bias
 *   loss = mse(out, y)
 *
 * with parameters dec_bias [IN], enc.weight [H, IN] and enc.bias [H], in
 * that order (the PyTorch twin, python/ddpsim_torch/twins.py Tied, registers
 * dec_bias on the module itself, and named_parameters() lists those first). enc.weight gets one
 * gradient per backward, the sum of its two uses, but in two PIECES, each
 * its own AccumulateGrad and hook call: the decoder's first (the outer
 * backward reaches the decoder's weight before the checkpoint's function),
 * then the encoder's, from the backward that reentrant checkpointing runs
 * inside the backward (torch.utils.checkpoint, use_reentrant=True, 1.13's
 * default). So a DDP that reduces a parameter at its first hook reduces the
 * decoder's piece alone and keeps the encoder's local: DeepSpeed #8224's
 * "missing one subgraph's contribution" (and #988: "activation
 * checkpointing causes backward hook to be invoked on each gradient of a
 * shared weight"). PyTorch's DDP runs such a model only with
 * static_graph=True, which counts the first iteration's hook calls and
 * marks the parameter ready at the last one; ddpsim reports it complete
 * once, after both pieces, and keeps the pieces (model_piece) so each is
 * added to .grad on its own, as each AccumulateGrad does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "model_impl.h"

enum { P_DEC_B, P_ENC_W, P_ENC_B }; /* torch's named_parameters(): the module's own first, then enc's */

typedef struct tied_state {
    float *pre, *h, *out;     /* [B,H] [B,H] [B,IN] */
    float *dpre, *dh, *dout;
    float *wt, *dwt;          /* enc.weight transposed [IN,H], and the decoder's gradient of it */
    float *denc;              /* the encoder's gradient of enc.weight [H,IN] */
    float *arena;
} tied_state;

static ddp_status tied_build(model *m)
{
    int I = m->dims[0], H = m->dims[1];
    model_add_param(m, "dec_bias", I, 0, INIT_LINEAR, H);
    model_add_param(m, "enc.weight", H, I, INIT_LINEAR, I);
    model_add_param(m, "enc.bias", H, 0, INIT_LINEAR, I);
    m->x_cols = I;
    m->y_cols = I;
    m->flops = model_linear_flops(m->B, I, H, 0) + model_linear_flops(m->B, H, I, 1);
    m->act_floats = 4 * (size_t)m->B * (size_t)H + 2 * (size_t)m->B * (size_t)I + 3 * (size_t)H * (size_t)I;
    return DDP_OK;
}

static ddp_status tied_alloc(model *m)
{
    size_t BH = (size_t)m->B * (size_t)m->dims[1], BI = (size_t)m->B * (size_t)m->dims[0];
    size_t HI = (size_t)m->dims[1] * (size_t)m->dims[0];
    tied_state *s = calloc(1, sizeof *s);
    if (!s)
        return ddp_error(DDP_ERR_NOMEM, "tied state");
    m->state = s;
    s->arena = calloc(m->act_floats, sizeof(float));
    m->parts[P_ENC_W] = malloc(2 * HI * sizeof(float));
    if (!s->arena || !m->parts[P_ENC_W])
        return ddp_error(DDP_ERR_NOMEM, "tied activations");
    m->parts_cap[P_ENC_W] = 2 * HI;
    float *p = s->arena;
    s->pre = p, p += BH;
    s->h = p, p += BH;
    s->dpre = p, p += BH;
    s->dh = p, p += BH;
    s->out = p, p += BI;
    s->dout = p, p += BI;
    s->wt = p, p += HI;
    s->dwt = p, p += HI;
    s->denc = p;
    return DDP_OK;
}

/* dst [cols, rows] = src [rows, cols] transposed. */
static void transpose(float *dst, const float *src, int rows, int cols)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            dst[(size_t)c * (size_t)rows + (size_t)r] = src[(size_t)r * (size_t)cols + (size_t)c];
}

static double tied_forward(model *m, const model_batch *b)
{
    tied_state *s = m->state;
    int B = m->B, I = m->dims[0], H = m->dims[1];
    linear_forward(s->pre, b->x, model_w(m, P_ENC_W), model_w(m, P_ENC_B), B, I, H);
    tanh_forward(s->h, s->pre, (size_t)B * (size_t)H);
    transpose(s->wt, model_w(m, P_ENC_W), H, I); /* the decoder: a linear layer whose weight is enc.weight.t() */
    linear_forward(s->out, s->h, s->wt, model_w(m, P_DEC_B), B, H, I);
    m->used[P_ENC_W] = m->used[P_ENC_B] = m->used[P_DEC_B] = 1;
    return mse_forward(s->out, b->y, (size_t)B * (size_t)I);
}

static void tied_backward(model *m)
{
    tied_state *s = m->state;
    int B = m->B, I = m->dims[0], H = m->dims[1];
    size_t BH = (size_t)B * (size_t)H, HI = (size_t)H * (size_t)I;
    mse_backward(s->dout, s->out, m->batch->y, (size_t)B * (size_t)I);
    /* The outer backward: the decoder, its bias, and its piece of enc.weight (through the transpose). */
    memset(s->dh, 0, BH * sizeof(float));
    memset(s->dwt, 0, HI * sizeof(float));
    linear_backward(s->dh, s->dwt, model_lg(m, P_DEC_B), s->dout, s->h, s->wt, B, H, I);
    model_param_done(m, P_DEC_B);
    float *first = m->parts[P_ENC_W], *second = first + HI;
    transpose(first, s->dwt, I, H);
    /* The checkpoint's own backward (its forward recomputed: the same values): the encoder's piece. */
    memset(s->dpre, 0, BH * sizeof(float));
    tanh_backward(s->dpre, s->dh, s->h, BH);
    memset(second, 0, HI * sizeof(float));
    linear_backward(NULL, second, model_lg(m, P_ENC_B), s->dpre, m->batch->x, model_w(m, P_ENC_W), B, I, H);
    model_param_done(m, P_ENC_B);
    /* enc.weight's gradient: the two pieces, added as the two AccumulateGrads add them into a None .grad */
    float *lg = model_lg(m, P_ENC_W);
    for (size_t j = 0; j < HI; j++)
        lg[j] = first[j] + second[j];
    m->nparts[P_ENC_W] = 2;
    model_param_done(m, P_ENC_W);
}

static void tied_free(model *m)
{
    tied_state *s = m->state;
    if (!s)
        return;
    free(s->arena);
    free(s);
    m->state = NULL;
}

static int tied_gemms(const model *m, model_gemm *out, int max)
{
    int n = model_linear_gemms(out, 0, max, m->B, m->dims[0], m->dims[1], 0);
    return model_linear_gemms(out, n, max, m->B, m->dims[1], m->dims[0], 1);
}

static void tied_describe(const model *m, char *buf, size_t len)
{
    snprintf(buf, len,
             "[{\"module\": \"enc\", \"type\": \"linear\", \"in\": %d, \"out\": %d, \"checkpoint\": \"reentrant\"}, "
             "{\"type\": \"tanh\"}, {\"type\": \"linear\", \"in\": %d, \"out\": %d, \"weight\": \"enc.weight.t()\", "
             "\"bias\": \"dec_bias\"}]",
             m->dims[0], m->dims[1], m->dims[1], m->dims[0]);
}

const model_family_ops model_tied_ops = {
    .name = "tied",
    .default_dims = "16-32",
    .min_dims = 2,
    .max_dims = 2,
    .build = tied_build,
    .alloc = tied_alloc,
    .forward = tied_forward,
    .backward = tied_backward,
    .free_state = tied_free,
    .fill = model_fill_uniform,
    .gemms = tied_gemms,
    .describe = tied_describe,
    .loss = "mse",
    .grads_in_pieces = 1,
};
