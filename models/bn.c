/*
 * bn.c - bn:IN-H-OUT, the family with buffers: a module with attributes
 * fc1, bn, fc2,
 *
 *   out = fc2(tanh(bn(fc1(x))))       loss = mse(out, y)
 *
 * bn is torch.nn.BatchNorm1d(H) in train mode (momentum 0.1): the forward
 * normalises with the batch's statistics, so the gradients never read the
 * running statistics, but every forward moves them (running_mean,
 * running_var) and counts itself (num_batches_tracked). Those are the
 * buffers DDP's broadcast_buffers sends from rank 0 before a forward; a rank
 * that misses a broadcast keeps statistics of its own data only, which no
 * gradient shows and the buffer comparison does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "model_impl.h"

enum { P_FC1_W, P_FC1_B, P_BN_W, P_BN_B, P_FC2_W, P_FC2_B };
enum { B_MEAN, B_VAR, B_COUNT };

#define BN_MOMENTUM 0.1f

typedef struct bn_state {
    float *pre, *z, *h, *out;  /* [B,H] [B,H] [B,H] [B,OUT] */
    float *dpre, *dz, *dh, *dout;
    float *mean, *rstd;        /* [H] */
    float *arena;
} bn_state;

static ddp_status bn_build(model *m)
{
    int I = m->dims[0], H = m->dims[1], O = m->dims[2];
    if (m->B < 2)
        return ddp_error(DDP_ERR_INVALID, "model bn: batch norm in train mode needs a batch of at least 2 rows, got "
                                          "%d (PyTorch: \"Expected more than 1 value per channel when training\")",
                         m->B);
    model_add_param(m, "fc1.weight", H, I, INIT_LINEAR, I);
    model_add_param(m, "fc1.bias", H, 0, INIT_LINEAR, I);
    model_add_param(m, "bn.weight", H, 0, INIT_NORM_GAIN, H);
    model_add_param(m, "bn.bias", H, 0, INIT_NORM_BIAS, H);
    model_add_param(m, "fc2.weight", O, H, INIT_LINEAR, H);
    model_add_param(m, "fc2.bias", O, 0, INIT_LINEAR, H);
    /* PyTorch starts them at 0, 1 and 0; here rank-distinct around those, for the constructor's broadcast. */
    model_add_buffer(m, "bn.running_mean", H, 0.0f, 0.1f);
    model_add_buffer(m, "bn.running_var", H, 1.0f, 0.1f);
    model_add_buffer(m, "bn.num_batches_tracked", 1, 0.0f, 0.0f);
    m->x_cols = I;
    m->y_cols = O;
    m->flops = model_linear_flops(m->B, I, H, 0) + model_linear_flops(m->B, H, O, 1);
    m->act_floats = 6 * (size_t)m->B * (size_t)H + 2 * (size_t)m->B * (size_t)O + 2 * (size_t)H;
    return DDP_OK;
}

static ddp_status bn_alloc(model *m)
{
    size_t BH = (size_t)m->B * (size_t)m->dims[1], BO = (size_t)m->B * (size_t)m->dims[2];
    bn_state *s = calloc(1, sizeof *s);
    if (!s)
        return ddp_error(DDP_ERR_NOMEM, "bn state");
    m->state = s;
    s->arena = calloc(m->act_floats, sizeof(float));
    if (!s->arena)
        return ddp_error(DDP_ERR_NOMEM, "bn activations");
    float *p = s->arena;
    s->pre = p, p += BH;
    s->z = p, p += BH;
    s->h = p, p += BH;
    s->dpre = p, p += BH;
    s->dz = p, p += BH;
    s->dh = p, p += BH;
    s->out = p, p += BO;
    s->dout = p, p += BO;
    s->mean = p, p += m->dims[1];
    s->rstd = p;
    return DDP_OK;
}

static double bn_forward(model *m, const model_batch *b)
{
    bn_state *s = m->state;
    int B = m->B, I = m->dims[0], H = m->dims[1], O = m->dims[2];
    linear_forward(s->pre, b->x, model_w(m, P_FC1_W), model_w(m, P_FC1_B), B, I, H);
    batchnorm_forward(s->z, s->mean, s->rstd, model_buf(m, B_MEAN), model_buf(m, B_VAR), s->pre, model_w(m, P_BN_W),
                      model_w(m, P_BN_B), B, H, BN_MOMENTUM);
    model_buf(m, B_COUNT)[0] += 1.0f;
    tanh_forward(s->h, s->z, (size_t)B * (size_t)H);
    linear_forward(s->out, s->h, model_w(m, P_FC2_W), model_w(m, P_FC2_B), B, H, O);
    for (int i = 0; i <= P_FC2_B; i++)
        m->used[i] = 1;
    return mse_forward(s->out, b->y, (size_t)B * (size_t)O);
}

static void bn_backward(model *m)
{
    bn_state *s = m->state;
    int B = m->B, I = m->dims[0], H = m->dims[1], O = m->dims[2];
    size_t BH = (size_t)B * (size_t)H;
    mse_backward(s->dout, s->out, m->batch->y, (size_t)B * (size_t)O);
    memset(s->dh, 0, BH * sizeof(float));
    linear_backward(s->dh, model_lg(m, P_FC2_W), model_lg(m, P_FC2_B), s->dout, s->h, model_w(m, P_FC2_W), B, H, O);
    model_param_done(m, P_FC2_B);
    model_param_done(m, P_FC2_W);
    memset(s->dz, 0, BH * sizeof(float));
    tanh_backward(s->dz, s->dh, s->h, BH);
    memset(s->dpre, 0, BH * sizeof(float));
    batchnorm_backward(s->dpre, model_lg(m, P_BN_W), model_lg(m, P_BN_B), s->dz, s->pre, model_w(m, P_BN_W), s->mean,
                       s->rstd, B, H);
    model_param_done(m, P_BN_B);
    model_param_done(m, P_BN_W);
    linear_backward(NULL, model_lg(m, P_FC1_W), model_lg(m, P_FC1_B), s->dpre, m->batch->x, model_w(m, P_FC1_W), B, I,
                    H);
    model_param_done(m, P_FC1_B);
    model_param_done(m, P_FC1_W);
}

static void bn_free(model *m)
{
    bn_state *s = m->state;
    if (!s)
        return;
    free(s->arena);
    free(s);
    m->state = NULL;
}

static int bn_gemms(const model *m, model_gemm *out, int max)
{
    int n = model_linear_gemms(out, 0, max, m->B, m->dims[0], m->dims[1], 0);
    return model_linear_gemms(out, n, max, m->B, m->dims[1], m->dims[2], 1);
}

static void bn_describe(const model *m, char *buf, size_t len)
{
    snprintf(buf, len,
             "[{\"module\": \"fc1\", \"type\": \"linear\", \"in\": %d, \"out\": %d}, "
             "{\"module\": \"bn\", \"type\": \"batchnorm1d\", \"features\": %d, \"momentum\": 0.1, \"eps\": 1e-05}, "
             "{\"type\": \"tanh\"}, {\"module\": \"fc2\", \"type\": \"linear\", \"in\": %d, \"out\": %d}]",
             m->dims[0], m->dims[1], m->dims[1], m->dims[1], m->dims[2]);
}

const model_family_ops model_bn_ops = {
    .name = "bn",
    .default_dims = "16-32-8",
    .min_dims = 3,
    .max_dims = 3,
    .build = bn_build,
    .alloc = bn_alloc,
    .forward = bn_forward,
    .backward = bn_backward,
    .free_state = bn_free,
    .fill = model_fill_uniform, /* each rank its own batches: the ranks' running statistics differ */
    .gemms = bn_gemms,
    .describe = bn_describe,
    .loss = "mse",
};
