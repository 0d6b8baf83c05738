/*
 * dump.c - writing and reading the dump layout (dump.h).
 */
#include "config.h" /* first: _GNU_SOURCE (AC_USE_SYSTEM_EXTENSIONS) for nftw */

#include "dump.h"
#include "manifest.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "json.h"
#include "jsonw.h"
#include "npy.h"

#define DUMP_MAX_MANIFEST ((size_t)64 << 20)
#define DUMP_MANIFEST_VERSION 3 /* 2: the ddp options, zero_grad and the optimizer; 3: every option (manifest.h) */

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

/* 1 when the tree below dir holds a file (anything but a directory); -1 when it cannot be read. */
static int holds_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    int found = 0;
    struct dirent *e;
    char path[PATH_MAX];
    while (!found && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0)
            found = -1;
        else if (S_ISDIR(st.st_mode))
            found = holds_files(path);
        else
            found = 1;
    }
    closedir(d);
    return found;
}

/* 1 when DIR/manifest.json says it is a ddpsim dump. */
static int is_ddpsim_dump(const char *dir)
{
    char path[PATH_MAX], text[4096];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return strstr(text, "\"format\": \"ddpsim-dump\"") != NULL || strstr(text, "\"format\": \"ddpsim-record\"") != NULL;
}

/*
 * The rule for every output path: ddpsim creates only its last component, in a directory that exists (as mkdir
 * and a shell's > do). A mistyped parent is an error to see, not a tree to find later somewhere else.
 */
ddp_status dump_check_parent(const char *path)
{
    char parent[PATH_MAX];
    if (snprintf(parent, sizeof parent, "%s", path) >= (int)sizeof parent)
        return ddp_error(DDP_ERR_INVALID, "path too long: %s", path);
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/') /* "rec/" is rec */
        parent[--n] = '\0';
    char *slash = strrchr(parent, '/');
    if (!slash)
        return DDP_OK; /* in the working directory */
    if (slash == parent)
        slash[1] = '\0'; /* "/rec": the root */
    else
        *slash = '\0';
    struct stat st;
    if (stat(parent, &st) != 0)
        return ddp_error(DDP_ERR_INVALID, "cannot create %s: %s: %s (ddpsim creates only the last component of an "
                                          "output path)", path, parent, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return ddp_error(DDP_ERR_INVALID, "cannot create %s: %s is not a directory", path, parent);
    return DDP_OK;
}

ddp_status dump_check_dir(const char *dir, int force)
{
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
        return ddp_error(DDP_ERR_INVALID, "%s exists and is not a directory", dir);
    DDP_CHECK(dump_check_parent(dir));
    int files = holds_files(dir);
    if (files < 0 && errno == ENOTDIR) /* a part of the path is a file: the directory can never be made */
        return ddp_error(DDP_ERR_INVALID, "cannot create directory %s: %s", dir, strerror(errno));
    if (files < 0)
        return ddp_error(DDP_ERR_INVALID, "cannot read %s: %s", dir, strerror(errno));
    if (files == 0)
        return DDP_OK;
    if (!is_ddpsim_dump(dir))
        return ddp_error(DDP_ERR_INVALID, "%s is not empty and holds no ddpsim dump: choose an empty or a new directory",
                         dir);
    if (!force)
        return ddp_error(DDP_ERR_INVALID, "%s holds an earlier ddpsim dump; give --force to replace it", dir);
    return DDP_OK;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    return ftw->level == 0 ? 0 : remove(path); /* everything below the directory, not the directory itself */
}

ddp_status dump_prepare(const char *dir, int nranks, const char *const *impls, int nimpls, int force)
{
    DDP_CHECK(dump_check_dir(dir, force));
    if (holds_files(dir) > 0 && nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return ddp_error(DDP_ERR_SYSTEM, "cannot clear the earlier dump in %s: %s", dir, strerror(errno));
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

ddp_status dump_write_buffer_tensors(const char *subdir, const model *m, const float *values)
{
    char path[PATH_MAX];
    for (int i = 0; i < model_nbuffers(m); i++) {
        const model_buffer *b = model_buffer_at(m, i);
        size_t shape[1] = {b->count};
        snprintf(path, sizeof path, "%s/%s.npy", subdir, b->name);
        DDP_CHECK(npy_write(path, NPY_F4, shape, 1, values + b->offset));
    }
    return DDP_OK;
}

void dump_param_shape(const model_param *p, size_t shape[MODEL_MAX_NDIM])
{
    for (int k = 0; k < MODEL_MAX_NDIM; k++)
        shape[k] = (size_t)p->shape[k];
}

ddp_status dump_write_tensors(const char *subdir, const model *m, const float *values)
{
    char path[PATH_MAX];
    for (int i = 0; i < model_nparams(m); i++) {
        const model_param *p = model_param_at(m, i);
        size_t shape[MODEL_MAX_NDIM];
        dump_param_shape(p, shape);
        snprintf(path, sizeof path, "%s/%s.npy", subdir, p->name);
        DDP_CHECK(npy_write(path, NPY_F4, shape, p->ndim, values + p->offset));
    }
    return DDP_OK;
}

ddp_status dump_write_rank_tensors(const char *dir, const char *side, int rank, const char *what, const model *m,
                                   const float *values)
{
    char sub[PATH_MAX];
    if (snprintf(sub, sizeof sub, "%s/%s/rank%d/%s", dir, side, rank, what) >= (int)sizeof sub)
        return ddp_error(DDP_ERR_INVALID, "path too long: %s/%s/rank%d/%s", dir, side, rank, what);
    DDP_CHECK(dump_mkdirs(sub));
    return dump_write_tensors(sub, m, values);
}

ddp_status dump_write_init(const char *dir, const model *m, int with_buffers)
{
    char sub[PATH_MAX];
    snprintf(sub, sizeof sub, "%s/init", dir);
    DDP_CHECK(dump_write_tensors(sub, m, model_weights(m)));
    return with_buffers ? dump_write_buffer_tensors(sub, m, model_buffers(m)) : DDP_OK;
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
    int in, out, T;
    model_batch_cols(m, &in, &out, &T);
    if (b->tokens)
        a = (batch_arrays){NPY_I4, b->tokens, b->targets, {rows, (size_t)T}, {rows, (size_t)T}};
    else
        a = (batch_arrays){NPY_F4, b->x, b->y, {rows, (size_t)in}, {rows, (size_t)out}};
    return a;
}

ddp_status dump_write_batch(const char *dir, int rank, uint64_t b, const model *m, const model_batch *batch)
{
    batch_arrays a = arrays_of(m, batch);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/rank%d/batch%llu.x.npy", dir, rank, (unsigned long long)b);
    DDP_CHECK(npy_write(path, a.dtype, a.xshape, 2, a.x));
    snprintf(path, sizeof path, "%s/rank%d/batch%llu.y.npy", dir, rank, (unsigned long long)b);
    DDP_CHECK(npy_write(path, a.dtype, a.yshape, 2, a.y));
    if (!batch->branch)
        return DDP_OK; /* a model without branches */
    size_t one[1] = {1};
    snprintf(path, sizeof path, "%s/rank%d/batch%llu.branch.npy", dir, rank, (unsigned long long)b);
    return npy_write(path, NPY_I4, one, 1, &batch->branch);
}

ddp_status dump_read_init(const char *dir, model *m)
{
    char path[PATH_MAX];
    for (int i = 0; i < model_nparams(m); i++) {
        const model_param *p = model_param_at(m, i);
        size_t shape[MODEL_MAX_NDIM];
        dump_param_shape(p, shape);
        snprintf(path, sizeof path, "%s/init/%s.npy", dir, p->name);
        DDP_CHECK(npy_read_exact(path, NPY_F4, shape, p->ndim, model_weights(m) + p->offset, 1));
    }
    return DDP_OK;
}

ddp_status dump_read_batch(const char *dir, int rank, uint64_t b, const model *m, model_batch *batch)
{
    batch_arrays a = arrays_of(m, batch);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/rank%d/batch%llu.x.npy", dir, rank, (unsigned long long)b);
    DDP_CHECK(npy_read_exact(path, a.dtype, a.xshape, 2, a.x, 1));
    snprintf(path, sizeof path, "%s/rank%d/batch%llu.y.npy", dir, rank, (unsigned long long)b);
    DDP_CHECK(npy_read_exact(path, a.dtype, a.yshape, 2, a.y, 1));
    if (batch->tokens) {
        int V = model_param_at(m, 0)->shape[0];
        size_t n = a.xshape[0] * a.xshape[1];
        for (size_t i = 0; i < n; i++)
            if (batch->tokens[i] < 0 || batch->tokens[i] >= V || batch->targets[i] < 0 || batch->targets[i] >= V)
                return ddp_error(DDP_ERR_INVALID, "%s: a token or target outside 0..%d", path, V - 1);
    }
    if (!batch->branch)
        return DDP_OK;
    /* A model with branches: the dump's branch when it has one (an older dump's come from the seed). */
    size_t one[1] = {1};
    int branch;
    snprintf(path, sizeof path, "%s/rank%d/batch%llu.branch.npy", dir, rank, (unsigned long long)b);
    if (access(path, F_OK) != 0)
        return DDP_OK;
    DDP_CHECK(npy_read_exact(path, NPY_I4, one, 1, &branch, 1));
    if (branch < 1 || branch > 3)
        return ddp_error(DDP_ERR_INVALID, "%s: branch %d, expected 1 (head_a), 2 (head_b) or 3 (both)", path, branch);
    batch->branch = branch;
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
    fprintf(f, "{\n \"format\": \"ddpsim-dump\",\n \"version\": %d,\n \"ranks\": %d,\n \"seed\": %llu,\n",
            DUMP_MANIFEST_VERSION, info->nranks, (unsigned long long)info->seed);
    char math[160];
    fprintf(f, " \"math\": "); /* what computed the products: two dumps' bits compare only under the same */
    jsonw_string(f, model_math(math, sizeof math));
    fprintf(f, ",\n \"model\": {\"name\": ");
    jsonw_string(f, model_spec(m));
    fprintf(f, ", \"layers\": %s, \"loss\": ", layers);
    jsonw_string(f, model_loss_name(m));
    fprintf(f, "},\n \"params\": ");
    manifest_write_params(f, m);
    const ddp_config *d = info->ddp;
    fprintf(f, ",\n \"find_unused_parameters\": %s", d->find_unused ? "true" : "false"); /* also where version 1 had it */
    manifest_write_ddp(f, d);
    fprintf(f, ",\n \"schedule\": ");
    jsonw_string(f, info->schedule_text);
    fprintf(f, ",\n \"batch\": %d,\n \"lr\": ", info->batch);
    jsonw_float(f, d->lr);
    fprintf(f, ",\n \"producer\": \"ddpsim %s reference DDP\",\n \"ops\": [", PACKAGE_VERSION);
    size_t b = 0, k = 0;
    sched_arming arming = {0}; /* which backward syncs, and which forward armed it: a front end asks, not recomputes */
    for (size_t i = 0; i < info->schedule->nops; i++) {
        fprintf(f, "%s\n  ", i ? "," : "");
        size_t armed_by = arming.arming_forward;
        int syncs = sched_arming_step(&arming, info->schedule->ops[i]);
        switch (info->schedule->ops[i]) {
        case OP_FWD: fprintf(f, "{\"op\": \"forward\", \"batch\": %zu}", b++); break;
        case OP_BWD:
            if (syncs)
                fprintf(f, "{\"op\": \"backward\", \"syncs\": true, \"armed_by\": %zu}", armed_by);
            else
                fprintf(f, "{\"op\": \"backward\", \"syncs\": false}");
            break;
        case OP_GRAB: fprintf(f, "{\"op\": \"grab\", \"grab\": %zu}", k++); break;
        case OP_ZERO: fprintf(f, "{\"op\": \"zero_grad\"}"); break;
        case OP_STEP:
            fprintf(f, "{\"op\": \"step\", \"lr\": ");
            jsonw_float(f, d->lr);
            fprintf(f, "}");
            break;
        case OP_ENTER: fprintf(f, "{\"op\": \"no_sync_enter\"}"); break;
        case OP_EXIT: fprintf(f, "{\"op\": \"no_sync_exit\"}"); break;
        case OP_JOIN_ENTER:
            fprintf(f, "{\"op\": \"join_enter\", \"divide_by_initial_world_size\": %s}",
                    info->schedule->joins[sched_join_of(info->schedule, i)].divide_by_initial_world_size ? "true"
                                                                                                          : "false");
            break;
        case OP_JOIN_EXIT: fprintf(f, "{\"op\": \"join_exit\"}"); break;
        case OP_CLIP: {
            const sched_clip *c = sched_clip_at(info->schedule, i);
            fprintf(f, "{\"op\": \"clip\", \"max_norm\": ");
            jsonw_number(f, c->max_norm);
            fprintf(f, ", \"norm_type\": %s}", c->inf_norm ? "\"inf\"" : "2");
            break;
        }
        }
    }
    fprintf(f, "\n ]");
    manifest_write_uneven(f, info->schedule, info->nranks);
    manifest_write_plants(f, info->planted, info->nplanted);
    if (info->loss_norm)
        fprintf(f, ",\n \"loss_norm\": \"%s\"", info->loss_norm);
    fprintf(f, ",\n \"impls\": [");
    for (int i = 0; i < info->nimpls; i++) {
        fprintf(f, "%s", i ? ", " : "");
        jsonw_string(f, info->impls[i]);
    }
    fprintf(f, "]\n}\n");
    model_destroy(m);
    return file_close_written(f, path);
}

/* ---- checking a manifest against the run that reads the dump ---- */

#define CONFLICT(...) ddp_error(DDP_ERR_INVALID, __VA_ARGS__)


/* An integer member (present and whole) equal to want. */
static ddp_status check_int(const char *path, const json_value *v, const char *key, double want, const char *opt)
{
    const json_value *x;
    DDP_CHECK(json_need(path, v, key, JSON_NUMBER, &x));
    if (x->number != floor(x->number))
        return CONFLICT("%s: \"%s\" is %g, not a whole number", path, key, x->number);
    if (x->number != want)
        return CONFLICT("%s: the dump was made with %s %.0f, this run has %s %.0f", path, key, x->number, opt, want);
    return DDP_OK;
}

static ddp_status check_params(const char *path, const json_value *root, const model *m)
{
    const json_value *params;
    DDP_CHECK(json_need(path, root, "params", JSON_ARRAY, &params));
    if (params->n != (size_t)model_nparams(m))
        return CONFLICT("%s: the dump has %zu parameters, model %s has %d", path, params->n, model_spec(m),
                        model_nparams(m));
    for (int i = 0; i < model_nparams(m); i++) {
        const model_param *p = model_param_at(m, i);
        const json_value *e = &params->items[i], *name, *shape;
        DDP_CHECK(json_need(path, e, "name", JSON_STRING, &name));
        DDP_CHECK(json_need(path, e, "shape", JSON_ARRAY, &shape));
        if (strcmp(name->string, p->name) != 0)
            return CONFLICT("%s: parameter %d is \"%s\" in the dump, \"%s\" in model %s", path, i, name->string,
                            p->name, model_spec(m));
        int same = shape->n == (size_t)p->ndim;
        for (size_t k = 0; same && k < shape->n; k++)
            same = shape->items[k].type == JSON_NUMBER && shape->items[k].number == p->shape[k];
        if (!same) {
            size_t want[MODEL_MAX_NDIM];
            dump_param_shape(p, want);
            char w[64];
            npy_format_shape(want, p->ndim, w, sizeof w);
            return CONFLICT("%s: parameter %s has another shape in the dump than in model %s (%s)", path, p->name,
                            model_spec(m), w);
        }
    }
    return DDP_OK;
}

static ddp_status check_root(const char *path, const json_value *root, const dump_manifest_info *run, const model *m)
{
    const json_value *format, *version;
    if (root->type != JSON_OBJECT)
        return CONFLICT("%s: the manifest is %s, expected an object", path, json_type_name(root->type));
    DDP_CHECK(json_need(path, root, "format", JSON_STRING, &format));
    if (strcmp(format->string, "ddpsim-dump") != 0)
        return CONFLICT("%s: format \"%s\", expected \"ddpsim-dump\"", path, format->string);
    DDP_CHECK(json_need(path, root, "version", JSON_NUMBER, &version));
    if (version->number != 1 && version->number != 2 && version->number != DUMP_MANIFEST_VERSION)
        return CONFLICT("%s: manifest version %g; this ddpsim reads 1 to %d", path, version->number,
                        DUMP_MANIFEST_VERSION);
    DDP_CHECK(check_int(path, root, "ranks", run->nranks, "--ranks"));
    DDP_CHECK(check_int(path, root, "batch", run->batch, "--batch"));
    DDP_CHECK(check_params(path, root, m));
    /* What changes bits, read with the recordings' codec and compared field by field: each one the file says
     * (version 1, as PyTorch scripts write it: find_unused_parameters and lr; version 2 the "ddp" section without
     * broadcast_buffers; version 3 all). Version 2 always wrote "algo" and "zero_grad": they are required there. */
    ddp_config file;
    manifest_ddp_fields said;
    DDP_CHECK(manifest_read_ddp(path, root, &file, &said));
    if (version->number >= 2) {
        const json_value *ddp, *x;
        DDP_CHECK(json_need(path, root, "ddp", JSON_OBJECT, &ddp));
        DDP_CHECK(json_need(path, ddp, "algo", JSON_STRING, &x));
        DDP_CHECK(json_need(path, root, "zero_grad", JSON_STRING, &x));
    }
    return manifest_ddp_compare(path, "dump", &file, run->ddp, said);
}

ddp_status dump_check_manifest(const char *dir, const dump_manifest_info *run)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *text = NULL;
    size_t len;
    ddp_status s = file_read_regular(path, DUMP_MAX_MANIFEST, &text, &len);
    if (s != DDP_OK && access(path, F_OK) != 0)
        return CONFLICT("%s: %s (a dump directory has a manifest.json saying what it holds; see ddpsim(1), FILES)",
                        path, strerror(errno));
    if (s == DDP_OK && strlen(text) != len)
        s = CONFLICT("%s contains a NUL byte", path);
    json_value *root = NULL;
    if (s == DDP_OK && json_parse(text, &root) != DDP_OK)
        s = ddp_error_prefix(DDP_ERR_INVALID, path);
    if (s != DDP_OK)
        s = DDP_ERR_INVALID; /* the message names the file and why */
    free(text);
    model *m = NULL;
    if (s == DDP_OK)
        s = model_create_layout(run->model_spec, run->batch, &m);
    if (s == DDP_OK)
        s = check_root(path, root, run, m);
    model_destroy(m);
    json_free(root);
    return s;
}
