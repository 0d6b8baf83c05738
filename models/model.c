/*
 * model.c - spec parsing, parameter registry, rank-distinct init and data,
 * and the dispatch to the model families.
 */
#include "model_impl.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "machine.h"
#include "rng.h"

/* Stream names folded into rng keys, so init, data and branches never share values. */
enum { STREAM_INIT = 0x696e6974, STREAM_DATA = 0x64617461, STREAM_TOKENS = 0x746f6b6e };

static const model_family_ops *const families[] = {&model_mlp_ops, &model_branchy_ops, &model_attn_ops,
                                                       &model_lm_ops, &model_lm_equal_ops, &model_bn_ops,
                                                       &model_tied_ops};

static ddp_status parse_dims(model *m, const char *text, const char *spec)
{
    const char *p = text;
    m->ndims = 0;
    for (;;) {
        if (!isdigit((unsigned char)*p))
            return ddp_error(DDP_ERR_INVALID, "model '%s': expected a size at '%s'", spec, p);
        errno = 0;
        char *end;
        long v = strtol(p, &end, 10);
        if (errno || v < 1 || v > MODEL_MAX_DIM)
            return ddp_error(DDP_ERR_INVALID, "model '%s': size %.*s is out of range 1..%d", spec, (int)(end - p), p,
                             MODEL_MAX_DIM);
        if (m->ndims == MODEL_MAX_DIMS)
            return ddp_error(DDP_ERR_INVALID, "model '%s': more than %d sizes", spec, MODEL_MAX_DIMS);
        m->dims[m->ndims++] = (int)v;
        p = end;
        if (*p == '\0')
            return DDP_OK;
        if (*p != '-')
            return ddp_error(DDP_ERR_INVALID, "model '%s': expected '-' between sizes at '%s'", spec, p);
        p++;
    }
}

static void canonical_spec(model *m)
{
    int n = snprintf(m->spec, sizeof m->spec, "%s:", m->ops->name);
    for (int i = 0; i < m->ndims && n > 0 && (size_t)n < sizeof m->spec; i++)
        n += snprintf(m->spec + n, sizeof m->spec - (size_t)n, i ? "-%d" : "%d", m->dims[i]);
}

static ddp_status create(const char *spec, int batch, int with_buffers, model **out)
{
    *out = NULL;
    if (!spec || !*spec)
        return ddp_error(DDP_ERR_INVALID, "empty model spec (examples: %s, branchy, attn)", MODEL_DEFAULT_SPEC);
    if (batch < 1 || batch > MODEL_MAX_DIM)
        return ddp_error(DDP_ERR_INVALID, "batch size %d is out of range 1..%d", batch, MODEL_MAX_DIM);
    const char *colon = strchr(spec, ':');
    size_t flen = colon ? (size_t)(colon - spec) : strlen(spec);
    const model_family_ops *ops = NULL;
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (strlen(families[i]->name) == flen && strncmp(spec, families[i]->name, flen) == 0)
            ops = families[i];
    if (!ops)
        return ddp_error(DDP_ERR_INVALID, "unknown model '%.*s' (choose mlp:IN-H-...-OUT, branchy[:IN-H-OUT], "
                                          "attn[:V-T-C], bn[:IN-H-OUT])", (int)flen, spec);
    model *m = calloc(1, sizeof *m);
    if (!m)
        return ddp_error(DDP_ERR_NOMEM, "model");
    m->ops = ops;
    m->B = batch;
    m->loss_scale = 1.0f;
    m->token_factor = 1.0f;
    const char *dims = colon ? colon + 1 : ops->default_dims;
    ddp_status s = DDP_OK;
    if (!dims)
        s = ddp_error(DDP_ERR_INVALID, "model '%s' needs sizes, e.g. %s", spec, MODEL_DEFAULT_SPEC);
    if (s == DDP_OK)
        s = parse_dims(m, dims, spec);
    if (s == DDP_OK && (m->ndims < ops->min_dims || m->ndims > ops->max_dims))
        s = ops->min_dims == ops->max_dims
                ? ddp_error(DDP_ERR_INVALID, "model '%s': %s takes %d sizes, got %d", spec, ops->name, ops->min_dims,
                            m->ndims)
                : ddp_error(DDP_ERR_INVALID, "model '%s': %s takes %d to %d sizes, got %d", spec, ops->name,
                            ops->min_dims, ops->max_dims, m->ndims);
    if (s == DDP_OK)
        s = ops->build(m);
    if (s == DDP_OK && m->size > MODEL_MAX_FLOATS)
        s = ddp_error(DDP_ERR_INVALID, "model '%s' has %zu parameters, more than %zu", spec, m->size,
                      MODEL_MAX_FLOATS);
    if (s == DDP_OK && m->act_floats > MODEL_MAX_FLOATS)
        s = ddp_error(DDP_ERR_INVALID, "model '%s' with batch %d needs %zu floats of activations, more than %zu", spec,
                      batch, m->act_floats, MODEL_MAX_FLOATS);
    if (s == DDP_OK && with_buffers) {
        m->w = calloc(m->size, sizeof *m->w);
        m->g = calloc(m->size, sizeof *m->g);
        m->lg = calloc(m->size, sizeof *m->lg);
        m->buf = m->buf_size ? calloc(m->buf_size, sizeof *m->buf) : NULL;
        if (!m->w || !m->g || !m->lg || (m->buf_size && !m->buf)) {
            char amount[32];
            s = ddp_error(DDP_ERR_NOMEM, "model '%s': %zu parameters, %s for them, their gradients and buffers", spec,
                          m->size,
                          machine_format_bytes(4.0 * (3.0 * (double)m->size + (double)m->buf_size), amount,
                                               sizeof amount));
        }
    }
    if (s == DDP_OK && with_buffers)
        s = ops->alloc(m);
    if (s != DDP_OK) {
        model_destroy(m);
        return s;
    }
    canonical_spec(m);
    *out = m;
    return DDP_OK;
}

void model_runtime_init(void)
{
    layers_blas_single_thread();
}

int model_blas_threads(void)
{
    return layers_blas_threads();
}

size_t model_blas_buffer_bytes(void)
{
    return layers_blas_buffer_bytes();
}

void model_set_portable_math(int on)
{
    layers_set_portable(on);
}

const char *model_math(char *buf, size_t len)
{
    return layers_math(buf, len);
}

ddp_status model_create(const char *spec, int batch, model **out)
{
    return create(spec, batch, 1, out);
}

ddp_status model_create_layout(const char *spec, int batch, model **out)
{
    return create(spec, batch, 0, out);
}

void model_describe(const model *m, char *buf, size_t len)
{
    m->ops->describe(m, buf, len);
}

void model_destroy(model *m)
{
    if (!m)
        return;
    if (m->ops && m->ops->free_state)
        m->ops->free_state(m);
    free(m->w);
    free(m->g);
    free(m->lg);
    free(m->buf);
    for (int i = 0; i < MODEL_MAX_PARAMS; i++)
        free(m->parts[i]);
    free(m);
}

int model_add_param(model *m, const char *name, int rows, int cols, init_kind init, int fan_in)
{
    if (m->nparams == MODEL_MAX_PARAMS)
        return -1;
    int i = m->nparams++;
    model_param *p = &m->params[i];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = cols ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols ? cols : 1;
    p->shape[2] = p->shape[3] = 1;
    p->offset = m->size;
    p->count = (size_t)rows * (size_t)(cols ? cols : 1);
    m->size += p->count;
    m->init[i] = init;
    m->fan_in[i] = fan_in;
    return i;
}

int model_add_buffer(model *m, const char *name, int count, float base, float spread)
{
    if (m->nbuffers == MODEL_MAX_BUFFERS)
        return -1;
    int i = m->nbuffers++;
    model_buffer *b = &m->buffers[i];
    snprintf(b->name, sizeof b->name, "%s", name);
    b->offset = m->buf_size;
    b->count = (size_t)count;
    m->buf_size += b->count;
    m->buf_base[i] = base;
    m->buf_spread[i] = spread;
    return i;
}

size_t model_memory_bytes(const model *m)
{
    size_t batch = (size_t)m->B * ((size_t)m->x_cols + (size_t)m->y_cols + 2 * (size_t)m->seq_len);
    return (3 * m->size + m->buf_size + m->act_floats + batch) * sizeof(float);
}

const char *model_spec(const model *m) { return m->spec; }
const char *model_family(const model *m) { return m->ops->name; }
int model_grads_in_pieces(const model *m) { return m->ops->grads_in_pieces; }
const char *model_loss_name(const model *m) { return m->ops->loss; }
int model_batch_rows(const model *m) { return m->B; }
void model_batch_cols(const model *m, int *x_cols, int *y_cols, int *seq_len)
{
    *x_cols = m->x_cols;
    *y_cols = m->y_cols;
    *seq_len = m->seq_len;
}
int model_nparams(const model *m) { return m->nparams; }
const model_param *model_param_at(const model *m, int i) { return &m->params[i]; }
size_t model_size(const model *m) { return m->size; }
float *model_weights(const model *m) { return m->w; }
float *model_grads(const model *m) { return m->g; }
const unsigned char *model_used(const model *m) { return m->used; }
double model_flops(const model *m) { return m->flops; }
int model_nbuffers(const model *m) { return m->nbuffers; }
const model_buffer *model_buffer_at(const model *m, int i) { return &m->buffers[i]; }
size_t model_buffers_size(const model *m) { return m->buf_size; }
float *model_buffers(const model *m) { return m->buf; }

int model_param_find(const model *m, const char *name)
{
    for (int i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i].name, name) == 0)
            return i;
    return -1;
}

void model_init(model *m, uint64_t seed, int rank)
{
    uint64_t rank_key = rng_key(rng_key(seed, STREAM_INIT), (uint64_t)rank);
    for (int i = 0; i < m->nparams; i++) {
        uint64_t key = rng_key(rank_key, (uint64_t)i);
        float *w = model_w(m, i);
        float bound = m->init[i] == INIT_LINEAR      ? 1.0f / sqrtf((float)m->fan_in[i])
                      : m->init[i] == INIT_EMBEDDING ? 1.0f
                                                     : 0.1f;
        float base = m->init[i] == INIT_NORM_GAIN ? 1.0f : 0.0f;
        for (size_t j = 0; j < m->params[i].count; j++)
            w[j] = base + bound * (2.0f * rng_uniform_f(key, j) - 1.0f);
    }
    /* Buffers rank-distinct too (PyTorch's start equal), so that the constructor's broadcast of the buffers is
     * checked as the parameters' is; their streams follow the parameters'. */
    for (int i = 0; i < m->nbuffers; i++) {
        uint64_t key = rng_key(rank_key, (uint64_t)(MODEL_MAX_PARAMS + i));
        float *v = model_buf(m, i);
        for (size_t j = 0; j < m->buffers[i].count; j++)
            v[j] = m->buf_base[i] + m->buf_spread[i] * (2.0f * rng_uniform_f(key, j) - 1.0f);
    }
}

ddp_status model_batch_alloc(const model *m, model_batch *b)
{
    memset(b, 0, sizeof *b);
    b->B = m->B;
    size_t rows = (size_t)m->B;
    if (m->x_cols) {
        b->x = calloc(rows * (size_t)m->x_cols, sizeof *b->x);
        b->y = calloc(rows * (size_t)m->y_cols, sizeof *b->y);
        if (!b->x || !b->y)
            goto nomem;
    }
    if (m->seq_len) {
        b->tokens = calloc(rows * (size_t)m->seq_len, sizeof *b->tokens);
        b->targets = calloc(rows * (size_t)m->seq_len, sizeof *b->targets);
        if (!b->tokens || !b->targets)
            goto nomem;
    }
    return DDP_OK;
nomem:
    model_batch_free(b);
    return ddp_error(DDP_ERR_NOMEM, "batch of %d rows", m->B);
}

void model_batch_free(model_batch *b)
{
    free(b->x);
    free(b->y);
    free(b->tokens);
    free(b->targets);
    memset(b, 0, sizeof *b);
}

static uint64_t tokens_key(uint64_t seed, int rank, uint64_t micro)
{
    return rng_key(rng_key(rng_key(rng_key(seed, STREAM_DATA), (uint64_t)rank), micro), STREAM_TOKENS);
}

/* Sequence r's valid tokens: the sparse rank 1 has a few, and none at all in every third micro-batch; every other
 * rank has one fully padded sequence per micro-batch and 1 to T valid tokens in the others. */
static int row_count(const model *m, uint64_t key, int rank, uint64_t micro, int r)
{
    int T = m->seq_len;
    if (m->ops->token_loss != MODEL_TOKENS_RAGGED)
        return T;
    if (rank == 1)
        return micro % 3 == 1 ? 0 : (int)rng_below(key, (uint64_t)r, 2);
    return (uint64_t)r == micro % (uint64_t)m->B ? 0 : 1 + (int)rng_below(key, (uint64_t)r, (uint32_t)T);
}

void model_batch_fill(const model *m, model_batch *b, uint64_t seed, int rank, uint64_t micro)
{
    uint64_t key = rng_key(rng_key(rng_key(seed, STREAM_DATA), (uint64_t)rank), micro);
    m->ops->fill(m, b, key, micro);
    if (!m->ops->token_loss)
        return;
    int T = m->seq_len;
    uint64_t tk = tokens_key(seed, rank, micro);
    for (int r = 0; r < m->B; r++) /* padding past a sequence's valid tokens: its targets are ignored */
        for (int t = row_count(m, tk, rank, micro, r); t < T; t++)
            b->targets[(size_t)r * (size_t)T + (size_t)t] = LAYERS_IGNORE_TARGET;
}

int model_has_token_loss(const model *m) { return m->ops->token_loss; }

void model_row_tokens(const model *m, uint64_t seed, int rank, uint64_t micro, int *rows)
{
    uint64_t tk = tokens_key(seed, rank, micro);
    for (int r = 0; r < m->B; r++)
        rows[r] = row_count(m, tk, rank, micro, r);
}

void model_set_token_factor(model *m, float factor) { m->token_factor = factor; }
float model_token_factor(const model *m) { return m->token_factor; }

ddp_status model_forward(model *m, const model_batch *b, double *loss)
{
    if (b->B != m->B)
        return ddp_error(DDP_ERR_INVALID, "batch of %d rows for a model built for %d", b->B, m->B);
    memset(m->used, 0, sizeof m->used);
    m->batch = b;
    double l = m->ops->forward(m, b);
    if (loss)
        *loss = l;
    if (!isfinite(l))
        return ddp_error(DDP_ERR_INVALID, "model %s: the loss is not finite (%g)", m->spec, l);
    return DDP_OK;
}

/* GradScaler's scale and a planted fault, into parameter i's local gradient (and its pieces) as it completes. */
static void scale_and_fault(model *m, int i)
{
    size_t count = m->params[i].count;
    float *lg = model_lg(m, i);
    if (m->loss_scale != 1.0f) {
        for (size_t j = 0; j < count; j++)
            lg[j] = lg[j] * m->loss_scale;
        for (size_t j = 0; j < (size_t)m->nparts[i] * count; j++)
            m->parts[i][j] = m->parts[i][j] * m->loss_scale;
    }
    if (m->fault_armed && count > 0) {
        m->fault_armed = 0;
        lg[0] = m->fault_value;
        if (m->nparts[i] >= 2) /* the last piece carries it: AccumulateGrad adds the pieces, not lg */
            m->parts[i][(size_t)(m->nparts[i] - 1) * count] = m->fault_value;
    }
}

void model_set_loss_scale(model *m, float scale)
{
    m->loss_scale = scale;
}

float model_loss_scale(const model *m)
{
    return m->loss_scale;
}

void model_plant_fault(model *m, float value)
{
    m->fault_armed = 1;
    m->fault_value = value;
}

void model_param_done(model *m, int i)
{
    if (m->done[i])
        return; /* a family reports a parameter once; a second report would be a bug, not a second event */
    m->done[i] = 1;
    scale_and_fault(m, i);
    if (m->ready)
        m->ready(m->ready_ctx, i);
}

void model_backward_local(model *m, model_ready_fn ready, void *ctx)
{
    /* Autograd computes each micro-step's gradient fresh; the layers accumulate into zeros. */
    for (int i = 0; i < m->nparams; i++)
        if (m->used[i])
            memset(model_lg(m, i), 0, m->params[i].count * sizeof(float));
    memset(m->done, 0, sizeof m->done);
    m->ready = ready;
    m->ready_ctx = ctx;
    m->ops->backward(m);
    /* Every used parameter is complete by now; one a family forgot to report still gets its event. */
    for (int i = m->nparams - 1; i >= 0; i--)
        if (m->used[i] && !m->done[i])
            model_param_done(m, i);
    m->ready = NULL;
    m->ready_ctx = NULL;
}

/* One AccumulateGrad: a None .grad takes the values (a copy: -0 stays -0), a tensor adds them; each value times
 * factor first unless it is 1 (model_accumulate_times). */
static void accumulate_piece(model *dst, int i, const float *l, float factor)
{
    const model_param *p = &dst->params[i];
    float *g = dst->g + p->offset;
    if (!dst->defined[i]) {
        if (factor == 1.0f)
            memcpy(g, l, p->count * sizeof *g);
        else
            for (size_t j = 0; j < p->count; j++)
                g[j] = l[j] * factor;
        dst->defined[i] = 1;
        return;
    }
    if (factor == 1.0f)
        for (size_t j = 0; j < p->count; j++)
            g[j] = g[j] + l[j];
    else
        for (size_t j = 0; j < p->count; j++)
            g[j] = g[j] + l[j] * factor;
}

void model_accumulate_times(model *dst, const model *src, int i, float factor)
{
    size_t n = (size_t)src->nparts[i] * dst->params[i].count;
    if (dst != src) { /* dst's last backward came in the same pieces: keep them where dst's owner can see them */
        dst->nparts[i] = src->nparts[i] >= 2 && dst->parts_cap[i] >= n ? src->nparts[i] : 0;
        if (dst->nparts[i])
            memcpy(dst->parts[i], src->parts[i], n * sizeof(float));
    }
    if (src->nparts[i] < 2) {
        accumulate_piece(dst, i, src->lg + dst->params[i].offset, factor);
        return;
    }
    for (int k = 0; k < src->nparts[i]; k++) /* one AccumulateGrad per piece, in order: their roundings */
        accumulate_piece(dst, i, src->parts[i] + (size_t)k * dst->params[i].count, factor);
}

void model_accumulate(model *dst, const model *src, int i)
{
    model_accumulate_times(dst, src, i, 1.0f);
}

int model_npieces(const model *m, int p)
{
    return m->nparts[p];
}

const float *model_piece(const model *m, int p, int k)
{
    return m->parts[p] + (size_t)k * m->params[p].count;
}

static void accumulate_own(void *ctx, int i)
{
    model *m = ctx;
    model_accumulate(m, m, i);
}

void model_backward(model *m)
{
    model_backward_local(m, accumulate_own, m);
}

const float *model_local_grads(const model *m)
{
    return m->lg;
}

unsigned char *model_grad_defined(model *m)
{
    return m->defined;
}

void model_zero_grad_as(model *m, int set_to_none)
{
    memset(m->g, 0, m->size * sizeof *m->g);
    if (set_to_none)
        memset(m->defined, 0, sizeof m->defined);
}

void model_zero_grad(model *m)
{
    model_zero_grad_as(m, 0);
}

int model_gemms(const model *m, model_gemm *out, int max)
{
    return m->ops->gemms(m, out, max);
}

void model_fill_uniform(const model *m, model_batch *b, uint64_t key, uint64_t micro)
{
    (void)micro;
    uint64_t kx = rng_key(key, 'x'), ky = rng_key(key, 'y');
    for (size_t i = 0; i < (size_t)m->B * (size_t)m->x_cols; i++)
        b->x[i] = 2.0f * rng_uniform_f(kx, i) - 1.0f;
    for (size_t i = 0; i < (size_t)m->B * (size_t)m->y_cols; i++)
        b->y[i] = 2.0f * rng_uniform_f(ky, i) - 1.0f;
    b->branch = 0;
}

int model_gemm_add(model_gemm *out, int n, int max, int M, int N, int K, int transA, int transB)
{
    if (n < max)
        out[n] = (model_gemm){M, N, K, transA, transB};
    return n + 1;
}

int model_linear_gemms(model_gemm *out, int n, int max, int rows, int in, int outf, int with_dinp)
{
    n = model_gemm_add(out, n, max, rows, outf, in, 0, 1); /* forward: x W^T */
    if (with_dinp)
        n = model_gemm_add(out, n, max, rows, in, outf, 0, 0); /* dinp = dout W */
    return model_gemm_add(out, n, max, outf, in, rows, 1, 0);  /* dW = dout^T x */
}

double model_linear_flops(int rows, int in, int outf, int with_dinp)
{
    return 2.0 * rows * in * outf * (with_dinp ? 3 : 2);
}
