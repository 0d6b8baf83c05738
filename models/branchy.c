/*
 * branchy.c - branchy:IN-H-OUT, a model whose parameters are not all used
 * every micro-step, for find_unused_parameters and for "a parameter used
 * only in an earlier micro-step of the window":
 *
 *   h   = tanh(trunk(x))                      always
 *   out = [branch & 1] head_a(h) + [branch & 2] head_b(h)
 *   loss = mse(out, y)
 *
 * branch is 1, 2 or 3, drawn from (seed, rank, micro-step), so ranks and
 * micro-steps differ in which head runs; every third micro-step (m % 3 == 2)
 * runs head_b alone on every rank, so that in an accumulation window of
 * three head_a is used only in earlier micro-steps. "unused" is a registered Linear
 * the forward never calls (a module defined but not called). Names follow a
 * PyTorch module with attributes trunk, head_a, head_b, unused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "model_impl.h"
#include "rng.h"

enum { P_TRUNK_W, P_TRUNK_B, P_HEAD_A_W, P_HEAD_A_B, P_HEAD_B_W, P_HEAD_B_B, P_UNUSED_W, P_UNUSED_B };

typedef struct branchy_state {
    float *pre, *h, *ya, *yb, *out;  /* [B,H] [B,H] [B,OUT] [B,OUT] [B,OUT] */
    float *dh, *dpre, *dout;         /* [B,H] [B,H] [B,OUT] */
    float *arena;
} branchy_state;

static ddp_status branchy_build(model *m)
{
    int I = m->dims[0], H = m->dims[1], O = m->dims[2];
    model_add_param(m, "trunk.weight", H, I, INIT_LINEAR, I);
    model_add_param(m, "trunk.bias", H, 0, INIT_LINEAR, I);
    model_add_param(m, "head_a.weight", O, H, INIT_LINEAR, H);
    model_add_param(m, "head_a.bias", O, 0, INIT_LINEAR, H);
    model_add_param(m, "head_b.weight", O, H, INIT_LINEAR, H);
    model_add_param(m, "head_b.bias", O, 0, INIT_LINEAR, H);
    model_add_param(m, "unused.weight", O, H, INIT_LINEAR, H);
    model_add_param(m, "unused.bias", O, 0, INIT_LINEAR, H);
    m->x_cols = I;
    m->y_cols = O;
    /* With both heads: the most work a step does. */
    m->flops = model_linear_flops(m->B, I, H, 0) + 2 * model_linear_flops(m->B, H, O, 1);
    m->act_floats = 4 * (size_t)m->B * (size_t)H + 4 * (size_t)m->B * (size_t)O;
    return DDP_OK;
}

static ddp_status branchy_alloc(model *m)
{
    size_t BH = (size_t)m->B * (size_t)m->dims[1], BO = (size_t)m->B * (size_t)m->dims[2];
    branchy_state *s = calloc(1, sizeof *s);
    if (!s)
        return ddp_error(DDP_ERR_NOMEM, "branchy state");
    m->state = s;
    s->arena = calloc(m->act_floats, sizeof(float));
    if (!s->arena)
        return ddp_error(DDP_ERR_NOMEM, "branchy activations");
    float *p = s->arena;
    s->pre = p, p += BH;
    s->h = p, p += BH;
    s->dh = p, p += BH;
    s->dpre = p, p += BH;
    s->ya = p, p += BO;
    s->yb = p, p += BO;
    s->out = p, p += BO;
    s->dout = p;
    return DDP_OK;
}

static double branchy_forward(model *m, const model_batch *b)
{
    branchy_state *s = m->state;
    int B = m->B, I = m->dims[0], H = m->dims[1], O = m->dims[2];
    size_t BO = (size_t)B * (size_t)O;
    linear_forward(s->pre, b->x, model_w(m, P_TRUNK_W), model_w(m, P_TRUNK_B), B, I, H);
    tanh_forward(s->h, s->pre, (size_t)B * (size_t)H);
    m->used[P_TRUNK_W] = m->used[P_TRUNK_B] = 1;
    memset(s->out, 0, BO * sizeof(float));
    if (b->branch & 1) {
        linear_forward(s->ya, s->h, model_w(m, P_HEAD_A_W), model_w(m, P_HEAD_A_B), B, H, O);
        residual_forward(s->out, s->out, s->ya, BO);
        m->used[P_HEAD_A_W] = m->used[P_HEAD_A_B] = 1;
    }
    if (b->branch & 2) {
        linear_forward(s->yb, s->h, model_w(m, P_HEAD_B_W), model_w(m, P_HEAD_B_B), B, H, O);
        residual_forward(s->out, s->out, s->yb, BO);
        m->used[P_HEAD_B_W] = m->used[P_HEAD_B_B] = 1;
    }
    return mse_forward(s->out, b->y, BO);
}

static void branchy_backward(model *m)
{
    branchy_state *s = m->state;
    int B = m->B, I = m->dims[0], H = m->dims[1], O = m->dims[2];
    size_t BH = (size_t)B * (size_t)H;
    mse_backward(s->dout, s->out, m->batch->y, (size_t)B * (size_t)O);
    memset(s->dh, 0, BH * sizeof(float));
    /* out is a sum: each head's output gradient is dout itself. */
    if (m->batch->branch & 2) {
        linear_backward(s->dh, model_lg(m, P_HEAD_B_W), model_lg(m, P_HEAD_B_B), s->dout, s->h,
                        model_w(m, P_HEAD_B_W), B, H, O);
        model_param_done(m, P_HEAD_B_B);
        model_param_done(m, P_HEAD_B_W);
    }
    if (m->batch->branch & 1) {
        linear_backward(s->dh, model_lg(m, P_HEAD_A_W), model_lg(m, P_HEAD_A_B), s->dout, s->h,
                        model_w(m, P_HEAD_A_W), B, H, O);
        model_param_done(m, P_HEAD_A_B);
        model_param_done(m, P_HEAD_A_W);
    }
    memset(s->dpre, 0, BH * sizeof(float));
    tanh_backward(s->dpre, s->dh, s->h, BH);
    linear_backward(NULL, model_lg(m, P_TRUNK_W), model_lg(m, P_TRUNK_B), s->dpre, m->batch->x,
                    model_w(m, P_TRUNK_W), B, I, H);
    model_param_done(m, P_TRUNK_B);
    model_param_done(m, P_TRUNK_W);
}

static void branchy_free(model *m)
{
    branchy_state *s = m->state;
    if (!s)
        return;
    free(s->arena);
    free(s);
    m->state = NULL;
}

static void branchy_fill(const model *m, model_batch *b, uint64_t key, uint64_t micro)
{
    model_mlp_ops.fill(m, b, key, micro); /* same x, y layout as an mlp */
    /* Every third micro-step runs head_b alone on every rank, so in a window of
     * three head_a is used only in earlier micro-steps; otherwise the branch
     * is drawn per (seed, rank, micro-step). */
    b->branch = micro % 3 == 2 ? 2 : 1 + (int)rng_below(rng_key(key, 'b'), 0, 3);
}

static int branchy_gemms(const model *m, model_gemm *out, int max)
{
    int n = model_linear_gemms(out, 0, max, m->B, m->dims[0], m->dims[1], 0);
    n = model_linear_gemms(out, n, max, m->B, m->dims[1], m->dims[2], 1);
    return model_linear_gemms(out, n, max, m->B, m->dims[1], m->dims[2], 1);
}

static void branchy_describe(const model *m, char *buf, size_t len)
{
    int I = m->dims[0], H = m->dims[1], O = m->dims[2];
    snprintf(buf, len,
             "[{\"type\": \"linear\", \"name\": \"trunk\", \"in\": %d, \"out\": %d}, {\"type\": \"tanh\"}, "
             "{\"type\": \"linear\", \"name\": \"head_a\", \"in\": %d, \"out\": %d, \"when\": \"branch & 1\"}, "
             "{\"type\": \"linear\", \"name\": \"head_b\", \"in\": %d, \"out\": %d, \"when\": \"branch & 2\"}, "
             "{\"type\": \"sum\", \"of\": [\"head_a\", \"head_b\"]}, "
             "{\"type\": \"linear\", \"name\": \"unused\", \"in\": %d, \"out\": %d, \"when\": \"never\"}]",
             I, H, H, O, H, O, H, O);
}

const model_family_ops model_branchy_ops = {
    .name = "branchy",
    .default_dims = "8-16-4",
    .min_dims = 3,
    .max_dims = 3,
    .build = branchy_build,
    .alloc = branchy_alloc,
    .forward = branchy_forward,
    .backward = branchy_backward,
    .free_state = branchy_free,
    .fill = branchy_fill,
    .gemms = branchy_gemms,
    .describe = branchy_describe,
    .loss = "mse",
};
