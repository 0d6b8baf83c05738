/*
 * optim.c - the optimizer step of `step` (optim.h).
 */
#include "optim.h"

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

ddp_status ddp_optim_init(ddp_optim *o, float lr, float momentum, size_t n)
{
    memset(o, 0, sizeof *o);
    o->lr = lr;
    o->momentum = momentum;
    o->n = n;
    if (momentum == 0)
        return DDP_OK;
    size_t k = n ? n : 1;
    o->buf = malloc(k * sizeof *o->buf);
    o->prev = malloc(k * sizeof *o->prev);
    o->started = calloc(k, 1);
    o->last = calloc(k, 1);
    if (!o->buf || !o->prev || !o->started || !o->last) {
        ddp_optim_free(o);
        return ddp_error(DDP_ERR_NOMEM, "the momentum buffers: %zu floats", n);
    }
    return DDP_OK;
}

void ddp_optim_free(ddp_optim *o)
{
    free(o->buf);
    free(o->prev);
    free(o->started);
    free(o->last);
    o->buf = o->prev = NULL;
    o->started = o->last = NULL;
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
    if (o->momentum == 0) {
        sgd(w, g, o->n, o->lr);
        return;
    }
    if (!defined) {
        momentum_range(o, w, g, 0, o->n);
        return;
    }
    for (int p = 0; p < model_nparams(m); p++) {
        const model_param *mp = model_param_at(m, p);
        if (defined[p]) {
            momentum_range(o, w, g, mp->offset, mp->offset + mp->count);
            continue;
        }
        memcpy(o->prev + mp->offset, o->buf + mp->offset, mp->count * sizeof *o->prev);
        memset(o->last + mp->offset, OPTIM_SKIPPED, mp->count);
    }
}

const float *ddp_optim_direction(const ddp_optim *o, const float *g)
{
    return o->momentum == 0 ? g : o->buf;
}

const char *ddp_optim_text(float momentum, char *buf, size_t len)
{
    if (momentum == 0)
        return "";
    snprintf(buf, len, ", SGD momentum %g", (double)momentum);
    return buf;
}

void ddp_sgd_step(model *m, float lr)
{
    sgd(model_weights(m), model_grads(m), model_size(m), lr);
}
