/*
 * recorded.c - a model without math (model.h, model_create_recorded): its
 * parameters are declared by name and shape, and its backward hands back
 * the local gradients a recorded run measured, which parameters got one and
 * their values coming from the source it was given. The reference DDP runs
 * on it unchanged: this is what `ddpsim check` replays.
 *
 * Micro-step m is the m-th backward. A forward asks the source which
 * parameters the next backward's micro-step used (a forward that never gets
 * a backward, an evaluation forward, is recorded by nobody: it takes the
 * next backward's); the backward fills those parameters' local gradients
 * from the source, last registered first, each reported complete as it is
 * filled, and moves to the next micro-step. A source error is kept (the first one)
 * and read with model_recorded_status; the gradient it could not give is
 * zero.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_impl.h"

typedef struct recorded_state {
    model_grad_source src;
    uint64_t next;      /* the micro-step of the next backward */
    ddp_status error;   /* the source's first failure */
    char message[512];
} recorded_state;

static void keep_error(recorded_state *s, ddp_status st)
{
    if (st == DDP_OK || s->error != DDP_OK)
        return;
    s->error = st;
    snprintf(s->message, sizeof s->message, "%s", ddp_error_text());
}

static double recorded_forward(model *m, const model_batch *b)
{
    (void)b;
    recorded_state *s = m->state;
    keep_error(s, s->src.used(s->src.ctx, s->next, m->used));
    return 0.0;
}

/* A gradient recorded in pieces (model_grad_source.npieces): each piece, to be accumulated on its own. */
static void read_pieces(model *m, recorded_state *s, int p)
{
    m->nparts[p] = 0;
    int k = s->src.npieces ? s->src.npieces(s->src.ctx, s->next, p) : 0;
    if (k < 2)
        return;
    size_t need = (size_t)k * m->params[p].count;
    if (need > m->parts_cap[p]) {
        float *grown = realloc(m->parts[p], need * sizeof(float));
        if (!grown) {
            keep_error(s, ddp_error(DDP_ERR_NOMEM, "%d pieces of %s's gradient", k, m->params[p].name));
            return;
        }
        m->parts[p] = grown;
        m->parts_cap[p] = need;
    }
    for (int j = 0; j < k; j++) {
        ddp_status st = s->src.piece(s->src.ctx, s->next, p, j, m->parts[p] + (size_t)j * m->params[p].count);
        if (st != DDP_OK) {
            keep_error(s, st);
            return;
        }
    }
    m->nparts[p] = k;
}

static void recorded_backward(model *m)
{
    recorded_state *s = m->state;
    for (int p = m->nparams - 1; p >= 0; p--) {
        m->nparts[p] = 0;
        if (!m->used[p])
            continue;
        ddp_status st = s->src.grad(s->src.ctx, s->next, p, model_lg(m, p));
        if (st != DDP_OK) {
            keep_error(s, st);
            memset(model_lg(m, p), 0, m->params[p].count * sizeof(float));
        }
        read_pieces(m, s, p);
        model_param_done(m, p);
    }
    s->next++;
}

static ddp_status recorded_alloc(model *m)
{
    (void)m;
    return DDP_OK; /* the state comes with model_create_recorded */
}

static void recorded_free(model *m)
{
    free(m->state);
    m->state = NULL;
}

static void recorded_fill(const model *m, model_batch *b, uint64_t key, uint64_t micro)
{
    (void)m, (void)b, (void)key, (void)micro; /* no data: the gradients are recorded */
}

static int recorded_gemms(const model *m, model_gemm *out, int max)
{
    (void)m, (void)out, (void)max;
    return 0;
}

static void recorded_describe(const model *m, char *buf, size_t len)
{
    snprintf(buf, len, "recorded: %d parameter tensors, %zu parameters, gradients from a recorded run", m->nparams,
             m->size);
}

static const model_family_ops model_recorded_ops = {
    .name = "recorded",
    .alloc = recorded_alloc,
    .forward = recorded_forward,
    .backward = recorded_backward,
    .free_state = recorded_free,
    .fill = recorded_fill,
    .gemms = recorded_gemms,
    .describe = recorded_describe,
    .loss = "recorded",
};

ddp_status model_create_recorded(const model_param_decl *decls, int n, const model_grad_source *src, model **out)
{
    *out = NULL;
    if (n < 1 || n > MODEL_MAX_PARAMS)
        return ddp_error(DDP_ERR_INVALID, "a recorded model has %d parameter tensors, not 1..%d", n, MODEL_MAX_PARAMS);
    model *m = calloc(1, sizeof *m);
    recorded_state *s = calloc(1, sizeof *s);
    if (!m || !s) {
        free(m);
        free(s);
        return ddp_error(DDP_ERR_NOMEM, "recorded model");
    }
    m->ops = &model_recorded_ops;
    m->B = 1;
    m->loss_scale = 1.0f; /* a recording's local gradients are already what the backward made, scaled or not */
    m->state = s;
    s->src = *src;
    for (int i = 0; i < n; i++) {
        const model_param_decl *d = &decls[i];
        if (d->ndim < 1 || d->ndim > MODEL_MAX_NDIM || strlen(d->name) >= MODEL_NAME_LEN) {
            model_destroy(m);
            return ddp_error(DDP_ERR_INVALID, "recorded parameter %d ('%s'): %d dimensions or a name longer than %d",
                             i, d->name, d->ndim, MODEL_NAME_LEN - 1);
        }
        size_t count = 1;
        for (int k = 0; k < d->ndim; k++) {
            if (d->shape[k] < 1 || d->shape[k] > MODEL_MAX_DIM * 1024) {
                model_destroy(m);
                return ddp_error(DDP_ERR_INVALID, "recorded parameter '%s': dimension %d is %d", d->name, k,
                                 d->shape[k]);
            }
            count *= (size_t)d->shape[k];
        }
        model_param *p = &m->params[m->nparams++];
        snprintf(p->name, sizeof p->name, "%s", d->name);
        p->ndim = d->ndim;
        for (int k = 0; k < MODEL_MAX_NDIM; k++)
            p->shape[k] = k < d->ndim ? d->shape[k] : 1;
        p->offset = m->size;
        p->count = count;
        m->size += count;
        if (m->size > MODEL_MAX_FLOATS) {
            model_destroy(m);
            return ddp_error(DDP_ERR_INVALID, "a recorded model of more than %zu parameters", MODEL_MAX_FLOATS);
        }
    }
    m->w = calloc(m->size, sizeof *m->w);
    m->g = calloc(m->size, sizeof *m->g);
    m->lg = calloc(m->size, sizeof *m->lg);
    if (!m->w || !m->g || !m->lg) {
        model_destroy(m);
        return ddp_error(DDP_ERR_NOMEM, "recorded model of %zu parameters", m->size);
    }
    snprintf(m->spec, sizeof m->spec, "recorded");
    *out = m;
    return DDP_OK;
}

ddp_status model_recorded_add_buffers(model *m, const model_param_decl *decls, int n)
{
    if (n < 0 || n > MODEL_MAX_BUFFERS || m->nbuffers)
        return ddp_error(DDP_ERR_INVALID, "%d recorded buffers (at most %d, declared once)", n, MODEL_MAX_BUFFERS);
    for (int i = 0; i < n; i++) {
        size_t count = 1;
        for (int k = 0; k < decls[i].ndim; k++)
            count *= (size_t)decls[i].shape[k];
        if (count > MODEL_MAX_FLOATS - m->buf_size)
            return ddp_error(DDP_ERR_INVALID, "recorded buffers of more than %zu floats", MODEL_MAX_FLOATS);
        model_add_buffer(m, decls[i].name, (int)count, 0.0f, 0.0f);
    }
    if (m->buf_size && !(m->buf = calloc(m->buf_size, sizeof *m->buf)))
        return ddp_error(DDP_ERR_NOMEM, "recorded buffers of %zu floats", m->buf_size);
    return DDP_OK;
}

ddp_status model_recorded_status(const model *m, char *msg, size_t len)
{
    const recorded_state *s = m->ops == &model_recorded_ops ? m->state : NULL;
    if (!s || s->error == DDP_OK)
        return DDP_OK;
    snprintf(msg, len, "%s", s->message);
    return s->error;
}
