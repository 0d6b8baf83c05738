/*
 * optim.c - the optimizer step of `step` (optim.h).
 */
#include "optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* p = p + (-lr) * g over n elements: PyTorch's p.add_(g, alpha=-lr), two roundings. */
static void sgd(float *w, const float *g, size_t n, float lr)
{
    const float neg_lr = -lr;
    for (size_t i = 0; i < n; i++)
        w[i] = w[i] + neg_lr * g[i];
}

ddp_adamw ddp_adamw_default(void)
{
    return (ddp_adamw){.on = 1, .beta1 = DDP_DEFAULT_BETA1, .beta2 = DDP_DEFAULT_BETA2, .eps = DDP_DEFAULT_ADAM_EPS,
                       .weight_decay = DDP_DEFAULT_WEIGHT_DECAY};
}

/* torch/optim/adamw.py's constructor refuses the same, except that it lets eps be 0: ddpsim's bound of a step
 * divides by it (budget_adamw), and with eps 0 a zero moment makes the update 0 / 0 (NaN) in PyTorch too. */
const char *ddp_adamw_invalid(const ddp_adamw *a)
{
    if (!(a->beta1 >= 0 && a->beta1 < 1))
        return "beta1 must be in [0, 1)";
    if (!(a->beta2 >= 0 && a->beta2 < 1))
        return "beta2 must be in [0, 1)";
    if (!(a->eps >= 1e-30 && a->eps <= 1e30))
        return "eps must be a number in [1e-30, 1e30] (with eps 0 a zero moment makes the update 0 / 0)";
    if (!(a->weight_decay >= 0 && isfinite(a->weight_decay)))
        return "the weight decay must be a finite number >= 0";
    return NULL;
}

ddp_status ddp_optim_init(ddp_optim *o, float lr, float momentum, const ddp_adamw *adamw, size_t n)
{
    memset(o, 0, sizeof *o);
    o->lr = lr;
    o->momentum = adamw && adamw->on ? 0 : momentum;
    if (adamw && adamw->on)
        o->adamw = *adamw;
    o->n = n;
    if (!ddp_optim_stateful(o))
        return DDP_OK;
    size_t k = n ? n : 1;
    o->buf = calloc(k, sizeof *o->buf); /* AdamW's moments start at zero (torch.zeros_like) */
    o->prev = malloc(k * sizeof *o->prev);
    o->started = calloc(k, 1);
    o->last = calloc(k, 1);
    int ok = o->buf && o->prev && o->started && o->last;
    if (ok && o->adamw.on) {
        o->sq = calloc(k, sizeof *o->sq);
        o->prev_sq = malloc(k * sizeof *o->prev_sq);
        o->t = calloc(k, sizeof *o->t);
        ok = o->sq && o->prev_sq && o->t;
    }
    if (!ok) {
        ddp_optim_free(o);
        return ddp_error(DDP_ERR_NOMEM, "the optimizer's state: %zu elements", n);
    }
    return DDP_OK;
}

int ddp_optim_stateful(const ddp_optim *o)
{
    return o->momentum != 0 || o->adamw.on;
}

void ddp_optim_free(ddp_optim *o)
{
    free(o->buf);
    free(o->prev);
    free(o->started);
    free(o->last);
    free(o->sq);
    free(o->prev_sq);
    free(o->t);
    o->buf = o->prev = o->sq = o->prev_sq = NULL;
    o->started = o->last = NULL;
    o->t = NULL;
}

ddp_adamw_scalars ddp_adamw_scalars_at(const ddp_adamw *a, float lr, uint32_t t)
{
    double bc1 = 1 - pow(a->beta1, (double)t), bc2 = 1 - pow(a->beta2, (double)t);
    return (ddp_adamw_scalars){.b1 = (float)a->beta1,
                               .a1 = (float)(1 - a->beta1),
                               .b2 = (float)a->beta2,
                               .a2 = (float)(1 - a->beta2),
                               .decay = (float)(1 - (double)lr * a->weight_decay),
                               .c2 = (float)sqrt(bc2),
                               .eps = (float)a->eps,
                               .neg_step = (float)(-(double)lr / bc1)};
}

/* Elements lo..hi of one parameter with a .grad: its count, then the AdamW step of each element. */
static void adamw_range(ddp_optim *o, float *w, const float *g, size_t lo, size_t hi)
{
    uint32_t cached = 0;
    ddp_adamw_scalars s = {0};
    for (size_t i = lo; i < hi; i++) {
        uint32_t t = ++o->t[i];
        if (t != cached) /* a parameter's elements share their count: the scalars change at most once per range */
            s = ddp_adamw_scalars_at(&o->adamw, o->lr, cached = t);
        o->prev[i] = o->buf[i];
        o->prev_sq[i] = o->sq[i];
        ddp_adamw_element(&s, &w[i], &o->buf[i], &o->sq[i], g[i]);
        o->last[i] = t == 1 ? OPTIM_STARTED : OPTIM_ADVANCED;
    }
}

/* Elements lo..hi of one parameter with a .grad: the buffer, then the parameter along it. */
static void momentum_range(ddp_optim *o, float *w, const float *g, size_t lo, size_t hi)
{
    const float m = o->momentum, neg_lr = -o->lr;
    for (size_t i = lo; i < hi; i++) {
        o->prev[i] = o->buf[i];
        if (o->started[i]) {
            float decayed = m * o->buf[i]; /* buf.mul_(m): rounded before the add, as two kernels do it */
            o->buf[i] = decayed + g[i];
            o->last[i] = OPTIM_ADVANCED;
        } else {
            o->buf[i] = g[i]; /* torch.clone(grad): a -0 stays -0 */
            o->started[i] = 1;
            o->last[i] = OPTIM_STARTED;
        }
        w[i] = w[i] + neg_lr * o->buf[i];
    }
}

void ddp_optim_step(ddp_optim *o, const model *m, const unsigned char *defined, float *w, const float *g)
{
    if (!ddp_optim_stateful(o)) {
        sgd(w, g, o->n, o->lr);
        return;
    }
    void (*range)(ddp_optim *, float *, const float *, size_t, size_t) = o->adamw.on ? adamw_range : momentum_range;
    if (!defined) {
        range(o, w, g, 0, o->n);
        return;
    }
    for (int p = 0; p < model_nparams(m); p++) {
        const model_param *mp = model_param_at(m, p);
        if (defined[p]) {
            range(o, w, g, mp->offset, mp->offset + mp->count);
            continue;
        }
        memcpy(o->prev + mp->offset, o->buf + mp->offset, mp->count * sizeof *o->prev);
        if (o->sq)
            memcpy(o->prev_sq + mp->offset, o->sq + mp->offset, mp->count * sizeof *o->prev_sq);
        memset(o->last + mp->offset, OPTIM_SKIPPED, mp->count);
    }
}

const float *ddp_optim_direction(const ddp_optim *o, const float *g)
{
    return o->momentum == 0 ? g : o->buf;
}

const char *ddp_optim_text(float momentum, const ddp_adamw *adamw, char *buf, size_t len)
{
    if (adamw && adamw->on)
        snprintf(buf, len, ", AdamW betas (%g, %g), eps %g, weight decay %g", adamw->beta1, adamw->beta2, adamw->eps,
                 adamw->weight_decay);
    else if (momentum != 0)
        snprintf(buf, len, ", SGD momentum %g", (double)momentum);
    else
        return "";
    return buf;
}

void ddp_sgd_step(model *m, float lr)
{
    sgd(model_weights(m), model_grads(m), model_size(m), lr);
}
