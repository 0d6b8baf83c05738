/*
 * attn.c - attn:V-T-C, one pre-LayerNorm transformer block (GPT-2 style)
 * with a single causal attention head, over sequences of T tokens from a
 * vocabulary of V, width C, and cross-entropy against per-position targets:
 *
 *   x0 = wte[tok] + wpe[pos]
 *   x1 = x0 + proj(attention(q(l1), k(l1), v(l1)))      l1 = ln1(x0)
 *   x2 = x1 + mlp.proj(gelu_tanh(mlp.fc(ln2(x1))))
 *   loss = crossentropy(head(lnf(x2)), targets)
 *
 * Parameter names follow a PyTorch module with those attribute names
 * (wte, wpe, ln1, attn.q/k/v/proj, ln2, mlp.fc/proj, lnf, head).
 *
 * lm:V-T-C is the same network as a language model on ragged data: the
 * targets past each sequence's valid tokens are ignored (model.c fills
 * them), the loss is the sum over the valid ones, and its backward is
 * seeded with the trainer's factor (model_set_token_factor).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "model_impl.h"
#include "rng.h"

enum {
    P_WTE, P_WPE, P_LN1_W, P_LN1_B, P_Q_W, P_Q_B, P_K_W, P_K_B, P_V_W, P_V_B, P_PROJ_W, P_PROJ_B,
    P_LN2_W, P_LN2_B, P_FC_W, P_FC_B, P_MPROJ_W, P_MPROJ_B, P_LNF_W, P_LNF_B, P_HEAD_W, P_COUNT
};

typedef struct attn_state {
    /* activations, N = B*T rows */
    float *x0, *l1, *q, *k, *v, *ao, *ap, *x1, *l2, *f, *g, *mo, *x2, *lf, *logits, *probs; /* [N,*] */
    float *att;                                          /* [B,T,T] */
    float *mean1, *rstd1, *mean2, *rstd2, *meanf, *rstdf; /* [N] */
    /* their gradients */
    float *dx0, *dl1, *dq, *dk, *dv, *dao, *dx1, *dl2, *df, *dg, *dx2, *dlf, *dlogits, *datt;
    float *arena;
} attn_state;

static ddp_status attn_build(model *m)
{
    int V = m->dims[0], T = m->dims[1], C = m->dims[2];
    model_add_param(m, "wte.weight", V, C, INIT_EMBEDDING, 1);
    model_add_param(m, "wpe.weight", T, C, INIT_EMBEDDING, 1);
    model_add_param(m, "ln1.weight", C, 0, INIT_NORM_GAIN, 1);
    model_add_param(m, "ln1.bias", C, 0, INIT_NORM_BIAS, 1);
    static const char *const qkvp[] = {"attn.q", "attn.k", "attn.v", "attn.proj"};
    for (int i = 0; i < 4; i++) {
        char name[MODEL_NAME_LEN];
        strcpy(name, qkvp[i]);
        strcat(name, ".weight");
        model_add_param(m, name, C, C, INIT_LINEAR, C);
        strcpy(name, qkvp[i]);
        strcat(name, ".bias");
        model_add_param(m, name, C, 0, INIT_LINEAR, C);
    }
    model_add_param(m, "ln2.weight", C, 0, INIT_NORM_GAIN, 1);
    model_add_param(m, "ln2.bias", C, 0, INIT_NORM_BIAS, 1);
    model_add_param(m, "mlp.fc.weight", 4 * C, C, INIT_LINEAR, C);
    model_add_param(m, "mlp.fc.bias", 4 * C, 0, INIT_LINEAR, C);
    model_add_param(m, "mlp.proj.weight", C, 4 * C, INIT_LINEAR, 4 * C);
    model_add_param(m, "mlp.proj.bias", C, 0, INIT_LINEAR, 4 * C);
    model_add_param(m, "lnf.weight", C, 0, INIT_NORM_GAIN, 1);
    model_add_param(m, "lnf.bias", C, 0, INIT_NORM_BIAS, 1);
    model_add_param(m, "head.weight", V, C, INIT_LINEAR, C);
    m->seq_len = T;
    if ((size_t)m->B * (size_t)T > (size_t)INT_MAX / (size_t)(4 * C > V ? 4 * C : V))
        return ddp_error(DDP_ERR_INVALID, "model %s: batch %d x sequence %d is too many positions for one micro-batch",
                         m->spec[0] ? m->spec : "attn", m->B, T);
    int N = m->B * T;
    {
        size_t n = (size_t)N, c = (size_t)C, btt = (size_t)m->B * (size_t)T * (size_t)T;
        m->act_floats = n * c * 13 + n * 4 * c * 4 + n * (size_t)V * 3 + btt * 2 + n * 6 + n * c * 9;
    }
    m->flops = 4 * model_linear_flops(N, C, C, 1) + model_linear_flops(N, C, 4 * C, 1) +
               model_linear_flops(N, 4 * C, C, 1) + model_linear_flops(N, C, V, 1) +
               3.0 * 2.0 * 2.0 * m->B * (double)T * T * C / 2; /* causal q k^T and att v, fwd + bwd, half masked */
    return DDP_OK;
}

static ddp_status attn_alloc(model *m)
{
    size_t V = (size_t)m->dims[0], T = (size_t)m->dims[1], C = (size_t)m->dims[2];
    size_t N = (size_t)m->B * T, BTT = (size_t)m->B * T * T;
    attn_state *s = calloc(1, sizeof *s);
    if (!s)
        return ddp_error(DDP_ERR_NOMEM, "attn state");
    m->state = s;
    /* act_floats (attn_build) is the sum of every buffer carved out below */
    s->arena = calloc(m->act_floats, sizeof(float));
    if (!s->arena)
        return ddp_error(DDP_ERR_NOMEM, "attn activations (%zu floats)", m->act_floats);
    float *p = s->arena;
#define CARVE(field, n) (s->field = p, p += (n))
    CARVE(x0, N * C);
    CARVE(l1, N * C);
    CARVE(q, N * C);
    CARVE(k, N * C);
    CARVE(v, N * C);
    CARVE(ao, N * C);
    CARVE(ap, N * C);
    CARVE(x1, N * C);
    CARVE(l2, N * C);
    CARVE(mo, N * C);
    CARVE(x2, N * C);
    CARVE(lf, N * C);
    CARVE(dx0, N * C);
    CARVE(f, N * 4 * C);
    CARVE(g, N * 4 * C);
    CARVE(df, N * 4 * C);
    CARVE(dg, N * 4 * C);
    CARVE(logits, N * V);
    CARVE(probs, N * V);
    CARVE(dlogits, N * V);
    CARVE(att, BTT);
    CARVE(datt, BTT);
    CARVE(mean1, N);
    CARVE(rstd1, N);
    CARVE(mean2, N);
    CARVE(rstd2, N);
    CARVE(meanf, N);
    CARVE(rstdf, N);
    CARVE(dl1, N * C);
    CARVE(dq, N * C);
    CARVE(dk, N * C);
    CARVE(dv, N * C);
    CARVE(dao, N * C);
    CARVE(dx1, N * C);
    CARVE(dl2, N * C);
    CARVE(dx2, N * C);
    CARVE(dlf, N * C);
#undef CARVE
    return DDP_OK;
}

static double attn_forward(model *m, const model_batch *b)
{
    attn_state *s = m->state;
    int B = m->B, V = m->dims[0], T = m->dims[1], C = m->dims[2], N = B * T;
    size_t NC = (size_t)N * (size_t)C;
    embedding_forward(s->x0, b->tokens, model_w(m, P_WTE), model_w(m, P_WPE), B, T, C);
    layernorm_forward(s->l1, s->mean1, s->rstd1, s->x0, model_w(m, P_LN1_W), model_w(m, P_LN1_B), N, C);
    linear_forward(s->q, s->l1, model_w(m, P_Q_W), model_w(m, P_Q_B), N, C, C);
    linear_forward(s->k, s->l1, model_w(m, P_K_W), model_w(m, P_K_B), N, C, C);
    linear_forward(s->v, s->l1, model_w(m, P_V_W), model_w(m, P_V_B), N, C, C);
    attention_forward(s->ao, s->att, s->q, s->k, s->v, B, T, C);
    linear_forward(s->ap, s->ao, model_w(m, P_PROJ_W), model_w(m, P_PROJ_B), N, C, C);
    residual_forward(s->x1, s->x0, s->ap, NC);
    layernorm_forward(s->l2, s->mean2, s->rstd2, s->x1, model_w(m, P_LN2_W), model_w(m, P_LN2_B), N, C);
    linear_forward(s->f, s->l2, model_w(m, P_FC_W), model_w(m, P_FC_B), N, C, 4 * C);
    gelu_tanh_forward(s->g, s->f, NC * 4);
    linear_forward(s->mo, s->g, model_w(m, P_MPROJ_W), model_w(m, P_MPROJ_B), N, 4 * C, C);
    residual_forward(s->x2, s->x1, s->mo, NC);
    layernorm_forward(s->lf, s->meanf, s->rstdf, s->x2, model_w(m, P_LNF_W), model_w(m, P_LNF_B), N, C);
    linear_forward(s->logits, s->lf, model_w(m, P_HEAD_W), NULL, N, C, V);
    for (int i = 0; i < P_COUNT; i++)
        m->used[i] = 1;
    if (m->ops->token_loss)
        return crossentropy_sum_forward(s->probs, s->logits, b->targets, N, V);
    return crossentropy_forward(s->probs, s->logits, b->targets, N, V);
}

static void attn_backward(model *m)
{
    attn_state *s = m->state;
    int B = m->B, V = m->dims[0], T = m->dims[1], C = m->dims[2], N = B * T;
    size_t NC = (size_t)N * (size_t)C;
    /* Activation gradients accumulate, so start them from zero. */
    float *zero[] = {s->dx0, s->dl1, s->dq, s->dk, s->dv, s->dao, s->dx1, s->dl2, s->dx2, s->dlf};
    for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++)
        memset(zero[i], 0, NC * sizeof(float));
    memset(s->df, 0, NC * 4 * sizeof(float));
    memset(s->dg, 0, NC * 4 * sizeof(float));

    if (m->ops->token_loss)
        crossentropy_sum_backward(s->dlogits, s->probs, m->batch->targets, N, V, m->token_factor);
    else
        crossentropy_backward(s->dlogits, s->probs, m->batch->targets, N, V);
    linear_backward(s->dlf, model_lg(m, P_HEAD_W), NULL, s->dlogits, s->lf, model_w(m, P_HEAD_W), N, C, V);
    model_param_done(m, P_HEAD_W);
    layernorm_backward(s->dx2, model_lg(m, P_LNF_W), model_lg(m, P_LNF_B), s->dlf, s->x2, model_w(m, P_LNF_W),
                       s->meanf, s->rstdf, N, C);
    model_param_done(m, P_LNF_B);
    model_param_done(m, P_LNF_W);
    /* x2 = x1 + mo: dx1 += dx2, and dmo is dx2 itself. */
    linear_backward(s->dg, model_lg(m, P_MPROJ_W), model_lg(m, P_MPROJ_B), s->dx2, s->g, model_w(m, P_MPROJ_W), N,
                    4 * C, C);
    model_param_done(m, P_MPROJ_B);
    model_param_done(m, P_MPROJ_W);
    gelu_tanh_backward(s->df, s->dg, s->f, NC * 4);
    linear_backward(s->dl2, model_lg(m, P_FC_W), model_lg(m, P_FC_B), s->df, s->l2, model_w(m, P_FC_W), N, C, 4 * C);
    model_param_done(m, P_FC_B);
    model_param_done(m, P_FC_W);
    memcpy(s->dx1, s->dx2, NC * sizeof(float));
    layernorm_backward(s->dx1, model_lg(m, P_LN2_W), model_lg(m, P_LN2_B), s->dl2, s->x1, model_w(m, P_LN2_W),
                       s->mean2, s->rstd2, N, C);
    model_param_done(m, P_LN2_B);
    model_param_done(m, P_LN2_W);
    /* x1 = x0 + ap: dx0 += dx1, and dap is dx1 itself. */
    linear_backward(s->dao, model_lg(m, P_PROJ_W), model_lg(m, P_PROJ_B), s->dx1, s->ao, model_w(m, P_PROJ_W), N, C,
                    C);
    model_param_done(m, P_PROJ_B);
    model_param_done(m, P_PROJ_W);
    attention_backward(s->dq, s->dk, s->dv, s->datt, s->dao, s->att, s->q, s->k, s->v, B, T, C);
    linear_backward(s->dl1, model_lg(m, P_Q_W), model_lg(m, P_Q_B), s->dq, s->l1, model_w(m, P_Q_W), N, C, C);
    model_param_done(m, P_Q_B);
    model_param_done(m, P_Q_W);
    linear_backward(s->dl1, model_lg(m, P_K_W), model_lg(m, P_K_B), s->dk, s->l1, model_w(m, P_K_W), N, C, C);
    model_param_done(m, P_K_B);
    model_param_done(m, P_K_W);
    linear_backward(s->dl1, model_lg(m, P_V_W), model_lg(m, P_V_B), s->dv, s->l1, model_w(m, P_V_W), N, C, C);
    model_param_done(m, P_V_B);
    model_param_done(m, P_V_W);
    memcpy(s->dx0, s->dx1, NC * sizeof(float));
    layernorm_backward(s->dx0, model_lg(m, P_LN1_W), model_lg(m, P_LN1_B), s->dl1, s->x0, model_w(m, P_LN1_W),
                       s->mean1, s->rstd1, N, C);
    model_param_done(m, P_LN1_B);
    model_param_done(m, P_LN1_W);
    embedding_backward(model_lg(m, P_WTE), model_lg(m, P_WPE), s->dx0, m->batch->tokens, B, T, C);
    model_param_done(m, P_WPE);
    model_param_done(m, P_WTE);
}

static void attn_free(model *m)
{
    attn_state *s = m->state;
    if (!s)
        return;
    free(s->arena);
    free(s);
    m->state = NULL;
}

/* Random tokens; the target of a position is a fixed function of the next token, so there is something to learn. */
static void attn_fill(const model *m, model_batch *b, uint64_t key, uint64_t micro)
{
    (void)micro;
    int V = m->dims[0], T = m->dims[1];
    uint64_t kt = rng_key(key, 't');
    for (int i = 0; i < m->B * T; i++)
        b->tokens[i] = (int)rng_below(kt, (uint64_t)i, (uint32_t)V);
    for (int bi = 0; bi < m->B; bi++)
        for (int t = 0; t < T; t++) {
            int next = b->tokens[bi * T + (t + 1) % T];
            b->targets[bi * T + t] = (3 * next + 1) % V;
        }
    b->branch = 0;
}

static int attn_gemms(const model *m, model_gemm *out, int max)
{
    int V = m->dims[0], T = m->dims[1], C = m->dims[2], N = m->B * T, n = 0;
    for (int i = 0; i < 4; i++)
        n = model_linear_gemms(out, n, max, N, C, C, 1);
    n = model_linear_gemms(out, n, max, N, C, 4 * C, 1);
    n = model_linear_gemms(out, n, max, N, 4 * C, C, 1);
    return model_linear_gemms(out, n, max, N, C, V, 1);
}

static void attn_describe(const model *m, char *buf, size_t len)
{
    int V = m->dims[0], T = m->dims[1], C = m->dims[2];
    snprintf(buf, len,
             "[{\"type\": \"embedding\", \"name\": \"wte\", \"num\": %d, \"dim\": %d}, "
             "{\"type\": \"embedding\", \"name\": \"wpe\", \"num\": %d, \"dim\": %d}, "
             "{\"type\": \"layernorm\", \"name\": \"ln1\", \"dim\": %d, \"eps\": 1e-05}, "
             "{\"type\": \"causal_self_attention\", \"name\": \"attn\", \"dim\": %d, \"heads\": 1, "
             "\"linears\": [\"q\", \"k\", \"v\", \"proj\"], \"residual\": true}, "
             "{\"type\": \"layernorm\", \"name\": \"ln2\", \"dim\": %d, \"eps\": 1e-05}, "
             "{\"type\": \"mlp\", \"name\": \"mlp\", \"fc\": [%d, %d], \"activation\": \"gelu_tanh\", "
             "\"proj\": [%d, %d], \"residual\": true}, "
             "{\"type\": \"layernorm\", \"name\": \"lnf\", \"dim\": %d, \"eps\": 1e-05}, "
             "{\"type\": \"linear\", \"name\": \"head\", \"in\": %d, \"out\": %d, \"bias\": false}]",
             V, C, T, C, C, C, C, C, 4 * C, 4 * C, C, C, C, V);
}

/* attn and lm: one network, the loss its only difference. */
#define ATTN_FAMILY(family, loss_name, token)                                                                        \
    {                                                                                                                \
        .name = family, .default_dims = "32-8-16", .min_dims = 3, .max_dims = 3, .build = attn_build,               \
        .alloc = attn_alloc, .forward = attn_forward, .backward = attn_backward, .free_state = attn_free,            \
        .fill = attn_fill, .gemms = attn_gemms, .describe = attn_describe, .loss = loss_name, .token_loss = token,   \
    }

const model_family_ops model_attn_ops = ATTN_FAMILY("attn", "cross_entropy", 0);
const model_family_ops model_lm_ops = ATTN_FAMILY("lm", "cross_entropy_sum", MODEL_TOKENS_RAGGED);
const model_family_ops model_lm_equal_ops = ATTN_FAMILY("lm-equal", "cross_entropy_sum", MODEL_TOKENS_EQUAL);
