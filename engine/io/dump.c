/*
 * dump.c - writing and reading the dump layout (dump.h).
 */
#include "dump.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "jsonw.h"
#include "npy.h"

ddp_status dump_mkdirs(const char *path)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return ddp_error(DDP_ERR_INVALID, "path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return ddp_error(DDP_ERR_SYSTEM, "cannot create directory %s: %s", buf, strerror(errno));
            struct stat st;
            if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
                return ddp_error(DDP_ERR_SYSTEM, "%s exists and is not a directory", buf);
            *p = c;
            if (c == '\0')
                return DDP_OK;
        }
    }
}

ddp_status dump_prepare(const char *dir, int nranks, const char *const *impls, int nimpls)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/init", dir);
    DDP_CHECK(dump_mkdirs(path));
    for (int r = 0; r < nranks; r++) {
        snprintf(path, sizeof path, "%s/rank%d", dir, r);
        DDP_CHECK(dump_mkdirs(path));
        for (int i = 0; i < nimpls; i++) {
            snprintf(path, sizeof path, "%s/%s/rank%d", dir, impls[i], r);
            DDP_CHECK(dump_mkdirs(path));
        }
    }
    return DDP_OK;
}

static void param_shape(const model_param *p, size_t shape[2])
{
    shape[0] = (size_t)p->shape[0];
    shape[1] = (size_t)p->shape[1];
}

ddp_status dump_write_tensors(const char *subdir, const model *m, const float *values)
{
    char path[PATH_MAX];
    for (int i = 0; i < model_nparams(m); i++) {
        const model_param *p = model_param_at(m, i);
        size_t shape[2];
        param_shape(p, shape);
        snprintf(path, sizeof path, "%s/%s.npy", subdir, p->name);
        DDP_CHECK(npy_write(path, NPY_F4, shape, p->ndim, values + p->offset));
    }
    return DDP_OK;
}

/* The x/y arrays of a batch: what they are and their shapes. */
typedef struct batch_arrays {
    npy_dtype dtype;
    void *x, *y;
    size_t xshape[2], yshape[2];
} batch_arrays;

static batch_arrays arrays_of(const model *m, const model_batch *b)
{
    batch_arrays a;
    size_t rows = (size_t)model_batch_rows(m);
    if (b->tokens) {
        /* attn: the sequence length is the shape of wpe (its first parameter after wte) */
        size_t T = (size_t)model_param_at(m, 1)->shape[0];
        a = (batch_arrays){NPY_I4, b->tokens, b->targets, {rows, T}, {rows, T}};
    } else {
        size_t in = (size_t)model_param_at(m, 0)->shape[1];
        size_t out = (size_t)model_param_at(m, model_nparams(m) - 1)->shape[0];
        a = (batch_arrays){NPY_F4, b->x, b->y, {rows, in}, {rows, out}};
    }
    return a;
}

ddp_status dump_write_batch(const char *dir, int rank, uint64_t b, const model *m, const model_batch *batch)
{
    batch_arrays a = arrays_of(m, batch);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/rank%d/batch%llu.x.npy", dir, rank, (unsigned long long)b);
    DDP_CHECK(npy_write(path, a.dtype, a.xshape, 2, a.x));
    snprintf(path, sizeof path, "%s/rank%d/batch%llu.y.npy", dir, rank, (unsigned long long)b);
    return npy_write(path, a.dtype, a.yshape, 2, a.y);
}

/* Read path into dst, checking dtype and element count. */
static ddp_status read_exact(const char *path, npy_dtype dtype, size_t count, void *dst)
{
    npy_array arr;
    DDP_CHECK(npy_read(path, &arr));
    ddp_status s = DDP_OK;
    if (arr.dtype != dtype || arr.count != count)
        s = ddp_error(DDP_ERR_INVALID, "%s: expected %zu elements of %s, found %zu of %s", path, count,
                      dtype == NPY_I4 ? "int32" : "float32", arr.count,
                      arr.dtype == NPY_I4 ? "int32" : arr.dtype == NPY_F4 ? "float32" : "float64");
    else
        memcpy(dst, arr.data, count * npy_dtype_size(dtype));
    npy_free(&arr);
    return s;
}

ddp_status dump_read_init(const char *dir, model *m)
{
    char path[PATH_MAX];
    for (int i = 0; i < model_nparams(m); i++) {
        const model_param *p = model_param_at(m, i);
        snprintf(path, sizeof path, "%s/init/%s.npy", dir, p->name);
        DDP_CHECK(read_exact(path, NPY_F4, p->count, model_weights(m) + p->offset));
    }
    return DDP_OK;
}

ddp_status dump_read_batch(const char *dir, int rank, uint64_t b, const model *m, model_batch *batch)
{
    batch_arrays a = arrays_of(m, batch);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/rank%d/batch%llu.x.npy", dir, rank, (unsigned long long)b);
    DDP_CHECK(read_exact(path, a.dtype, a.xshape[0] * a.xshape[1], a.x));
    snprintf(path, sizeof path, "%s/rank%d/batch%llu.y.npy", dir, rank, (unsigned long long)b);
    DDP_CHECK(read_exact(path, a.dtype, a.yshape[0] * a.yshape[1], a.y));
    if (batch->tokens) {
        int V = model_param_at(m, 0)->shape[0];
        size_t n = a.xshape[0] * a.xshape[1];
        for (size_t i = 0; i < n; i++)
            if (batch->tokens[i] < 0 || batch->tokens[i] >= V || batch->targets[i] < 0 || batch->targets[i] >= V)
                return ddp_error(DDP_ERR_INVALID, "%s: a token or target outside 0..%d", path, V - 1);
    }
    return DDP_OK;
}

ddp_status dump_write_manifest(const char *dir, const dump_manifest_info *info)
{
    model *m = NULL;
    DDP_CHECK(model_create_layout(info->model_spec, info->batch, &m));
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        model_destroy(m);
        return ddp_error(DDP_ERR_SYSTEM, "cannot create %s: %s", path, strerror(errno));
    }
    char layers[4096];
    model_describe(m, layers, sizeof layers);
    fprintf(f, "{\n \"format\": \"ddpsim-dump\",\n \"version\": 1,\n \"ranks\": %d,\n \"seed\": %llu,\n", info->nranks,
            (unsigned long long)info->seed);
    fprintf(f, " \"model\": {\"name\": ");
    jsonw_string(f, model_spec(m));
    fprintf(f, ", \"layers\": %s, \"loss\": ", layers);
    jsonw_string(f, model_loss_name(m));
    fprintf(f, "},\n \"params\": [");
    for (int i = 0; i < model_nparams(m); i++) {
        const model_param *p = model_param_at(m, i);
        fprintf(f, "%s\n  {\"name\": ", i ? "," : "");
        jsonw_string(f, p->name);
        if (p->ndim == 1)
            fprintf(f, ", \"shape\": [%d]}", p->shape[0]);
        else
            fprintf(f, ", \"shape\": [%d, %d]}", p->shape[0], p->shape[1]);
    }
    fprintf(f, "\n ],\n \"find_unused_parameters\": %s,\n \"schedule\": ", info->find_unused ? "true" : "false");
    jsonw_string(f, info->schedule_text);
    fprintf(f, ",\n \"batch\": %d,\n \"lr\": ", info->batch);
    jsonw_number(f, info->lr);
    fprintf(f, ",\n \"producer\": \"ddpsim %s reference DDP\",\n \"ops\": [", PACKAGE_VERSION);
    size_t b = 0, k = 0;
    for (size_t i = 0; i < info->schedule->nops; i++) {
        fprintf(f, "%s\n  ", i ? "," : "");
        switch (info->schedule->ops[i]) {
        case OP_FWD: fprintf(f, "{\"op\": \"forward\", \"batch\": %zu}", b++); break;
        case OP_BWD: fprintf(f, "{\"op\": \"backward\"}"); break;
        case OP_GRAB: fprintf(f, "{\"op\": \"grab\", \"grab\": %zu}", k++); break;
        case OP_ZERO: fprintf(f, "{\"op\": \"zero_grad\"}"); break;
        case OP_STEP:
            fprintf(f, "{\"op\": \"step\", \"lr\": ");
            jsonw_number(f, info->lr);
            fprintf(f, "}");
            break;
        case OP_ENTER: fprintf(f, "{\"op\": \"no_sync_enter\"}"); break;
        case OP_EXIT: fprintf(f, "{\"op\": \"no_sync_exit\"}"); break;
        }
    }
    fprintf(f, "\n ],\n \"impls\": [");
    for (int i = 0; i < info->nimpls; i++) {
        fprintf(f, "%s", i ? ", " : "");
        jsonw_string(f, info->impls[i]);
    }
    fprintf(f, "]\n}\n");
    model_destroy(m);
    if (ferror(f) | (fclose(f) != 0))
        return ddp_error(DDP_ERR_SYSTEM, "cannot write %s", path);
    return DDP_OK;
}
