/*
 * mlp.c - mlp:IN-H1-...-OUT, the nn.Sequential(Linear, ReLU, ..., Linear)
 * with mse loss. Layer l is module index 2l in the Sequential (ReLUs take
 * the odd indices), so its parameters are "<2l>.weight" [d(l+1), d(l)] and
 * "<2l>.bias", exactly as PyTorch names them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "model_impl.h"

typedef struct mlp_state {
    int nlayers;
    float **act;  /* act[l]: input of layer l [B, d(l)]; act[0] is the batch's x */
    float **pre;  /* pre[l]: output of linear l [B, d(l+1)] (before the ReLU) */
    float **dact; /* gradient of act[l] (l >= 1) */
    float **dpre; /* gradient of pre[l] */
    float *arena;
} mlp_state;

static ddp_status mlp_build(model *m)
{
    int L = m->ndims - 1;
    for (int l = 0; l < L; l++) {
        char name[MODEL_NAME_LEN];
        snprintf(name, sizeof name, "%d.weight", 2 * l);
        model_add_param(m, name, m->dims[l + 1], m->dims[l], INIT_LINEAR, m->dims[l]);
        snprintf(name, sizeof name, "%d.bias", 2 * l);
        model_add_param(m, name, m->dims[l + 1], 0, INIT_LINEAR, m->dims[l]);
        m->flops += model_linear_flops(m->B, m->dims[l], m->dims[l + 1], l > 0);
    }
    m->x_cols = m->dims[0];
    m->y_cols = m->dims[L];
    for (int l = 1; l <= L; l++)
        m->act_floats += (size_t)m->B * (size_t)m->dims[l] * (l < L ? 4 : 2);
    return DDP_OK;
}

static ddp_status mlp_alloc(model *m)
{
    int L = m->ndims - 1;
    mlp_state *s = calloc(1, sizeof *s);
    if (!s)
        return ddp_error(DDP_ERR_NOMEM, "mlp state");
    m->state = s;
    s->nlayers = L;
    s->act = calloc((size_t)L + 1, sizeof *s->act);
    s->pre = calloc((size_t)L, sizeof *s->pre);
    s->dact = calloc((size_t)L + 1, sizeof *s->dact);
    s->dpre = calloc((size_t)L, sizeof *s->dpre);
    s->arena = calloc(m->act_floats ? m->act_floats : 1, sizeof *s->arena);
    if (!s->act || !s->pre || !s->dact || !s->dpre || !s->arena)
        return ddp_error(DDP_ERR_NOMEM, "mlp activations (%zu floats)", m->act_floats);
    float *p = s->arena;
    for (int l = 0; l < L; l++) {
        size_t n = (size_t)m->B * (size_t)m->dims[l + 1];
        s->pre[l] = p, p += n;
        s->dpre[l] = p, p += n;
        if (l + 1 < L) {
            s->act[l + 1] = p, p += n;
            s->dact[l + 1] = p, p += n;
        }
    }
    return DDP_OK;
}

static double mlp_forward(model *m, const model_batch *b)
{
    mlp_state *s = m->state;
    int L = s->nlayers;
    s->act[0] = b->x;
    for (int l = 0; l < L; l++) {
        linear_forward(s->pre[l], s->act[l], model_w(m, 2 * l), model_w(m, 2 * l + 1), m->B, m->dims[l],
                       m->dims[l + 1]);
        m->used[2 * l] = m->used[2 * l + 1] = 1;
        if (l + 1 < L)
            relu_forward(s->act[l + 1], s->pre[l], (size_t)m->B * (size_t)m->dims[l + 1]);
    }
    return mse_forward(s->pre[L - 1], b->y, (size_t)m->B * (size_t)m->dims[L]);
}

static void mlp_backward(model *m)
{
    mlp_state *s = m->state;
    int L = s->nlayers;
    mse_backward(s->dpre[L - 1], s->pre[L - 1], m->batch->y, (size_t)m->B * (size_t)m->dims[L]);
    for (int l = L - 1; l >= 0; l--) {
        size_t nin = (size_t)m->B * (size_t)m->dims[l];
        if (l > 0)
            memset(s->dact[l], 0, nin * sizeof(float));
        linear_backward(l > 0 ? s->dact[l] : NULL, model_lg(m, 2 * l), model_lg(m, 2 * l + 1), s->dpre[l], s->act[l],
                        model_w(m, 2 * l), m->B, m->dims[l], m->dims[l + 1]);
        model_param_done(m, 2 * l + 1);
        model_param_done(m, 2 * l);
        if (l > 0) {
            memset(s->dpre[l - 1], 0, nin * sizeof(float));
            relu_backward(s->dpre[l - 1], s->dact[l], s->pre[l - 1], nin);
        }
    }
}

static void mlp_free(model *m)
{
    mlp_state *s = m->state;
    if (!s)
        return;
    free(s->act);
    free(s->pre);
    free(s->dact);
    free(s->dpre);
    free(s->arena);
    free(s);
    m->state = NULL;
}

static int mlp_gemms(const model *m, model_gemm *out, int max)
{
    int n = 0;
    for (int l = 0; l + 1 < m->ndims; l++)
        n = model_linear_gemms(out, n, max, m->B, m->dims[l], m->dims[l + 1], l > 0);
    return n;
}

static void mlp_describe(const model *m, char *buf, size_t len)
{
    int n = snprintf(buf, len, "[");
    for (int l = 0; l + 1 < m->ndims && n > 0 && (size_t)n < len; l++) {
        n += snprintf(buf + n, len - (size_t)n, "%s{\"type\": \"linear\", \"in\": %d, \"out\": %d}", l ? ", " : "",
                      m->dims[l], m->dims[l + 1]);
        if (l + 2 < m->ndims && (size_t)n < len)
            n += snprintf(buf + n, len - (size_t)n, ", {\"type\": \"relu\"}");
    }
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, "]");
}

const model_family_ops model_mlp_ops = {
    .name = "mlp",
    .default_dims = "32-64-64-16",
    .min_dims = 2,
    .max_dims = MODEL_MAX_DIMS,
    .build = mlp_build,
    .alloc = mlp_alloc,
    .forward = mlp_forward,
    .backward = mlp_backward,
    .free_state = mlp_free,
    .fill = model_fill_uniform,
    .gemms = mlp_gemms,
    .describe = mlp_describe,
    .loss = "mse",
};
