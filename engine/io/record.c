/*
 * record.c - a recorded run (record.h): read and checked for `ddpsim check`, and written by `ddpsim --record`.
 */
#include "record.h"
#include "manifest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "dump.h"
#include "file.h"
#include "jsonw.h"
#include "json.h"
#include "model.h"
#include "npy.h"

#define RECORD_MAX_MANIFEST ((size_t)64 << 20)
#define RECORD_MAX_USED ((size_t)1 << 20)
/* Room for DIR (PATH_MAX), a relative part (PATH_MAX) and a parameter's name: no path is ever cut. */
#define RECORD_PATH_LEN (2 * PATH_MAX + MODEL_NAME_LEN + 32)

static ddp_status copy_text(const char *path, const json_value *root, const char *key, char *dst, size_t len,
                            int required)
{
    const json_value *v = json_get(root, key);
    if (!v && !required) {
        dst[0] = '\0';
        return DDP_OK;
    }
    DDP_CHECK(json_need(path, root, key, JSON_STRING, &v));
    if (strlen(v->string) >= len || !v->string[0])
        return ddp_error(DDP_ERR_INVALID, "%s: \"%s\" is empty or longer than %zu characters", path, key, len - 1);
    snprintf(dst, len, "%s", v->string);
    return DDP_OK;
}

/* A whole number in [lo, hi] from v. */
static ddp_status whole(const char *path, const char *what, const json_value *v, double lo, double hi, double *out)
{
    if (v->type != JSON_NUMBER || v->number != floor(v->number) || v->number < lo || v->number > hi)
        return ddp_error(DDP_ERR_INVALID, "%s: %s must be a whole number in %.0f..%.0f", path, what, lo, hi);
    *out = v->number;
    return DDP_OK;
}

/* A parameter's name names its files (NAME.npy): one plain component, printable. */
static int usable_name(const char *s)
{
    if (!s[0] || strlen(s) >= MODEL_NAME_LEN || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return 0;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++)
        if (*c == '/' || *c < 0x20 || *c == 0x7f)
            return 0;
    return 1;
}

/*
 * The "params" (required, at least one) or the "buffers" (optional) of the
 * manifest into names and decls from index `first` on (buffers follow the
 * parameters); a name may not repeat across both.
 */
static ddp_status read_decls(const char *path, const json_value *root, record_run *r, int buffers)
{
    const char *key = buffers ? "buffers" : "params", *what = buffers ? "buffer" : "parameter";
    int first = buffers ? r->nparams : 0, lo = buffers ? 0 : 1, hi = buffers ? MODEL_MAX_BUFFERS : MODEL_MAX_PARAMS;
    const json_value *params = json_get(root, key);
    if (buffers && !params)
        return DDP_OK;
    DDP_CHECK(json_need(path, root, key, JSON_ARRAY, &params));
    if (params->n < (size_t)lo || params->n > (size_t)hi)
        return ddp_error(DDP_ERR_INVALID, "%s: %zu %ss, not %d..%d", path, params->n, what, lo, hi);
    for (size_t j = 0; j < params->n; j++) {
        size_t i = (size_t)first + j;
        const json_value *e = &params->items[j], *name, *shape;
        DDP_CHECK(json_need(path, e, "name", JSON_STRING, &name));
        DDP_CHECK(json_need(path, e, "shape", JSON_ARRAY, &shape));
        if (!usable_name(name->string)) {
            /* Printed as JSON writes it: a newline or an escape sequence in it must not reach the terminal raw. */
            char *quoted = NULL;
            size_t qlen = 0;
            FILE *q = open_memstream(&quoted, &qlen);
            if (q) {
                jsonw_string(q, name->string);
                fclose(q);
            }
            ddp_status bad = ddp_error(DDP_ERR_INVALID,
                                       "%s: %s %zu's name %s is empty, \".\" or \"..\", holds a '/' or a control "
                                       "character, or is longer than %d: it names files of the recording",
                                       path, what, j, quoted ? quoted : "(unprintable)", MODEL_NAME_LEN - 1);
            free(quoted);
            return bad;
        }
        for (size_t k = 0; k < i; k++)
            if (strcmp(r->names[k], name->string) == 0)
                return ddp_error(DDP_ERR_INVALID, "%s: \"%s\" is named twice", path, name->string);
        if (shape->n < 1 || shape->n > MODEL_MAX_NDIM)
            return ddp_error(DDP_ERR_INVALID, "%s: %s \"%s\" has %zu dimensions, not 1..%d", path, what,
                             name->string, shape->n, MODEL_MAX_NDIM);
        snprintf(r->names[i], MODEL_NAME_LEN, "%s", name->string);
        model_param_decl *d = &r->decls[i];
        d->name = r->names[i];
        d->ndim = (int)shape->n;
        for (size_t k = 0; k < shape->n; k++) {
            double v;
            DDP_CHECK(whole(path, "a dimension", &shape->items[k], 1, (double)MODEL_MAX_DIM * 1024, &v));
            d->shape[k] = (int)v;
        }
    }
    if (buffers)
        r->nbuffers = (int)params->n;
    else
        r->nparams = (int)params->n;
    return DDP_OK;
}

/* obj's member key: a whole number in 0..hi. */
static ddp_status member_whole(const char *path, const json_value *obj, const char *key, double hi, double *out)
{
    const json_value *v;
    DDP_CHECK(json_need(path, obj, key, JSON_NUMBER, &v));
    return whole(path, key, v, 0, hi, out);
}

/* "joins" and "uneven" (manifest.h manifest_write_uneven), when present, into the schedule's blocks. */
static ddp_status read_uneven(const char *path, const json_value *root, int nranks, sched_join **joins,
                              size_t *njoins, sched_uneven **uneven, size_t *nuneven)
{
    const json_value *js = json_get(root, "joins"), *us = json_get(root, "uneven");
    if ((js && js->type != JSON_ARRAY) || (us && us->type != JSON_ARRAY))
        return ddp_error(DDP_ERR_INVALID, "%s: \"joins\" and \"uneven\" must be arrays", path);
    *njoins = js ? js->n : 0;
    *nuneven = us ? us->n : 0;
    *joins = calloc(*njoins ? *njoins : 1, sizeof **joins);
    *uneven = calloc(*nuneven ? *nuneven : 1, sizeof **uneven);
    if (!*joins || !*uneven)
        return ddp_error(DDP_ERR_NOMEM, "the recorded join blocks");
    double x;
    for (size_t k = 0; k < *njoins; k++) {
        const json_value *j = &js->items[k], *d;
        sched_join *o = &(*joins)[k];
        DDP_CHECK(member_whole(path, j, "enter", SCHED_MAX_OPS, &x));
        o->enter_op = (size_t)x;
        DDP_CHECK(member_whole(path, j, "exit", SCHED_MAX_OPS, &x));
        o->exit_op = (size_t)x;
        o->divide_by_initial_world_size = 1;
        if ((d = json_get(j, "divide_by_initial_world_size"))) {
            if (d->type != JSON_BOOL)
                return ddp_error(DDP_ERR_INVALID, "%s: joins[%zu].divide_by_initial_world_size must be true or false",
                                 path, k);
            o->divide_by_initial_world_size = d->boolean;
        }
    }
    for (size_t k = 0; k < *nuneven; k++) {
        const json_value *u = &us->items[k], *counts;
        sched_uneven *o = &(*uneven)[k];
        DDP_CHECK(member_whole(path, u, "first", SCHED_MAX_OPS, &x));
        o->first_op = (size_t)x;
        DDP_CHECK(member_whole(path, u, "body", SCHED_MAX_OPS, &x));
        o->body_ops = (size_t)x;
        DDP_CHECK(member_whole(path, u, "iterations", SCHED_MAX_COUNT, &x));
        o->iterations = o->count = (uint32_t)x;
        DDP_CHECK(json_need(path, u, "counts", JSON_ARRAY, &counts));
        if (counts->n != (size_t)nranks || nranks > SCHED_MAX_OVERRIDES)
            return ddp_error(DDP_ERR_INVALID, "%s: uneven[%zu].counts has %zu entries for %d ranks (at most %d)", path,
                             k, counts->n, nranks, SCHED_MAX_OVERRIDES);
        for (int r = 0; r < nranks; r++) {
            DDP_CHECK(whole(path, "an uneven count", &counts->items[r], 0, SCHED_MAX_COUNT, &x));
            o->over_rank[r] = r;
            o->over_count[r] = (uint32_t)x;
        }
        o->nover = nranks;
    }
    return DDP_OK;
}

/* "clips": [{"op": OP, "max_norm": X, "norm_type": 2 | "inf"}, ...] (version 8), in op order; left out: none. */
static ddp_status read_clips(const char *path, const json_value *root, sched_clip **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    const json_value *clips = json_get(root, "clips");
    if (!clips)
        return DDP_OK;
    if (clips->type != JSON_ARRAY)
        return ddp_error(DDP_ERR_INVALID, "%s: \"clips\" must be an array", path);
    if (!(*out = calloc(clips->n ? clips->n : 1, sizeof **out)))
        return ddp_error(DDP_ERR_NOMEM, "%zu clips", clips->n);
    *n = clips->n;
    for (size_t k = 0; k < clips->n; k++) {
        const json_value *c = &clips->items[k], *max = json_get(c, "max_norm"), *type = json_get(c, "norm_type");
        double op = 0;
        DDP_CHECK(member_whole(path, c, "op", SCHED_MAX_OPS, &op));
        (*out)[k].op = (size_t)op;
        if (!max || max->type != JSON_NUMBER || !(max->number > 0) || !isfinite(max->number))
            return ddp_error(DDP_ERR_INVALID, "%s: clip %zu: \"max_norm\" must be a positive finite number", path, k);
        (*out)[k].max_norm = max->number;
        if (type && type->type == JSON_STRING && strcmp(type->string, "inf") == 0)
            (*out)[k].inf_norm = 1;
        else if (type && !(type->type == JSON_NUMBER && type->number == 2))
            return ddp_error(DDP_ERR_INVALID, "%s: clip %zu: \"norm_type\" must be 2 or \"inf\"", path, k);
    }
    return DDP_OK;
}

static ddp_status read_ops(const char *path, const json_value *root, record_run *r)
{
    const json_value *ops;
    DDP_CHECK(json_need(path, root, "ops", JSON_ARRAY, &ops));
    sched_op *list = malloc((ops->n ? ops->n : 1) * sizeof *list);
    if (!list)
        return ddp_error(DDP_ERR_NOMEM, "%zu ops", ops->n);
    for (size_t i = 0; i < ops->n; i++) {
        int op = ops->items[i].type == JSON_STRING ? sched_op_from_name(ops->items[i].string) : -1;
        if (op < 0) {
            free(list);
            return ddp_error(DDP_ERR_INVALID,
                             "%s: op %zu is not one of fwd, bwd, grab, zero, step, enter, exit, join_enter, "
                             "join_exit, clip",
                             path, i);
        }
        list[i] = (sched_op)op;
    }
    sched_join *joins = NULL;
    sched_uneven *uneven = NULL;
    sched_clip *clips = NULL;
    size_t njoins = 0, nuneven = 0, nclips = 0;
    ddp_status s = read_uneven(path, root, r->nranks, &joins, &njoins, &uneven, &nuneven);
    if (s == DDP_OK)
        s = read_clips(path, root, &clips, &nclips);
    if (s == DDP_OK) { /* read_uneven's messages name the file already; the schedule's do not */
        s = sched_from_ops(list, ops->n, uneven, nuneven, joins, njoins, clips, nclips, &r->schedule);
        if (s == DDP_OK && (s = sched_resolve(&r->schedule, r->nranks, NULL)) != DDP_OK)
            sched_free(&r->schedule);
        if (s != DDP_OK)
            s = ddp_error_prefix(s, path);
    }
    free(list);
    free(joins);
    free(uneven);
    free(clips);
    return s;
}

static ddp_status read_options(const char *path, const json_value *root, record_run *r)
{
    manifest_ddp_fields said;
    return manifest_read_ddp(path, root, &r->ddp, &said); /* what a recording leaves out is PyTorch's default */
}

/* "optimizer": {"averages": "parameters"} (record.h): a run whose parameters, not gradients, are averaged. */
static ddp_status read_averaging(const char *path, const json_value *root, record_run *r)
{
    const json_value *opt = json_get(root, "optimizer"), *v = opt ? json_get(opt, "averages") : NULL;
    if (!v)
        return DDP_OK;
    if (v->type != JSON_STRING || strcmp(v->string, "parameters") != 0)
        return ddp_error(DDP_ERR_INVALID, "%s: optimizer.averages must be \"parameters\" (model averaging)", path);
    r->params_averaged = 1;
    const char *why = r->shard != SHARD_NONE                             ? "with \"shard\""
                      : r->ddp.momentum != 0                               ? "with momentum (each rank's own buffer)"
                      : r->ddp.adamw.on                                    ? "with AdamW (each rank's own moments)"
                      : r->ddp.scaler.on                                   ? "with \"loss_scale\" (each rank's own "
                                                                             "unsynced gradients would decide its skip)"
                      : ddp_comm_hook_compresses(r->ddp.comm_hook)          ? "with a compressing communication hook"
                      : r->schedule.nuneven || r->schedule.njoins         ? "with uneven inputs or join"
                      : r->schedule.ngrabs != 0                            ? "with a grab (its .grad is not DDP's)"
                      : r->schedule.nsteps == 0                            ? "without a step to check"
                                                                          : NULL;
    if (why)
        return ddp_error(DDP_ERR_INVALID, "%s: optimizer.averages \"parameters\" %s: only the parameters after "
                                          "each step are compared", path, why);
    return DDP_OK;
}

/* "shard" (record.h), when present: the mode and its mesh, and nothing the sharded reference does not model. */
static ddp_status read_shard(const char *path, const json_value *root, record_run *r)
{
    const json_value *o = json_get(root, "shard");
    r->shard = SHARD_NONE;
    if (!o)
        return DDP_OK;
    const json_value *v;
    if (o->type != JSON_OBJECT)
        return ddp_error(DDP_ERR_INVALID, "%s: \"shard\" is %s, expected {\"mode\": ..., \"mesh\": \"RxS\"}", path,
                         json_type_name(o->type));
    DDP_CHECK(json_need(path, o, "mode", JSON_STRING, &v));
    ddp_status s = shard_mode_parse(v->string, &r->shard);
    if (s != DDP_OK)
        return ddp_error(DDP_ERR_INVALID, "%s: \"shard\".mode \"%s\" is not zero1, zero2, fsdp or hsdp", path,
                         v->string);
    r->mesh = shard_default_mesh(r->shard, r->nranks);
    if ((v = json_get(o, "mesh"))) {
        if (v->type != JSON_STRING)
            return ddp_error(DDP_ERR_INVALID, "%s: \"shard\".mesh is %s, expected \"RxS\"", path,
                             json_type_name(v->type));
        if ((s = mesh_parse(v->string, r->nranks, "\"shard\".mesh", &r->mesh)) == DDP_OK)
            s = shard_check_mesh(r->shard, &r->mesh, r->nranks, "\"shard\".mesh");
        if (s != DDP_OK)
            return ddp_error_prefix(s, path);
    }
    const char *what = shard_unmodelled_option(&r->ddp);
    if (what)
        return ddp_error(DDP_ERR_INVALID, "%s: a %s recording with %s: not modelled by the sharded reference (it "
                                          "reduces every parameter, in order)", path, shard_mode_name(r->shard), what);
    return DDP_OK;
}

static void param_shape(const record_run *r, int p, size_t shape[MODEL_MAX_NDIM])
{
    for (int k = 0; k < MODEL_MAX_NDIM; k++)
        shape[k] = (size_t)r->decls[p].shape[k];
}

/*
 * The files in DIR/what/ of declarations [lo, hi): parameters below
 * nparams, buffers from there (with used, only the used parameters').
 */
static ddp_status check_files(const record_run *r, const char *what, const unsigned char *used, int lo, int hi)
{
    char path[RECORD_PATH_LEN];
    for (int p = lo; p < hi; p++) {
        if (used && !used[p])
            continue;
        size_t shape[MODEL_MAX_NDIM];
        param_shape(r, p, shape);
        snprintf(path, sizeof path, "%s/%s/%s.npy", r->dir, what, r->names[p]);
        DDP_CHECK(npy_check_header(path, NPY_F4, shape, r->decls[p].ndim));
        int pieces = used ? record_npieces(r, what, p) : 0; /* a local gradient's pieces, if it came in some */
        if (pieces == 1) {
            snprintf(path, sizeof path, "%s/%s/%s.part1.npy", r->dir, what, r->names[p]);
            return ddp_error(DDP_ERR_INVALID, "%s: a gradient in pieces needs two or more (no .part2.npy)", path);
        }
        for (int k = 1; k <= pieces; k++) {
            snprintf(path, sizeof path, "%s/%s/%s.part%d.npy", r->dir, what, r->names[p], k);
            DDP_CHECK(npy_check_header(path, NPY_F4, shape, r->decls[p].ndim));
        }
    }
    return DDP_OK;
}

/* The JSON file at path (at most max bytes) parsed into *out (json_free it); errors name the file. */
static ddp_status read_json(const char *path, size_t max, json_value **out)
{
    char *text;
    size_t len;
    DDP_CHECK(file_read_regular(path, max, &text, &len));
    ddp_status s = json_parse(text, out);
    free(text);
    return s == DDP_OK ? DDP_OK : ddp_error_prefix(s, path);
}

/* ... a file a recording may leave out: *out NULL when it is not there. */
static ddp_status read_optional_json(const char *path, size_t max, json_value **out)
{
    *out = NULL;
    return access(path, F_OK) == 0 ? read_json(path, max, out) : DDP_OK;
}

/* path: a JSON array of parameter names, into flags (flags[p] = 1 for each named). */
static ddp_status read_name_list(const record_run *r, const char *path, unsigned char *flags)
{
    json_value *v = NULL;
    DDP_CHECK(read_json(path, RECORD_MAX_USED, &v));
    ddp_status s = DDP_OK;
    memset(flags, 0, (size_t)r->nparams);
    if (v->type != JSON_ARRAY)
        s = ddp_error(DDP_ERR_INVALID, "%s: expected an array of parameter names", path);
    for (size_t i = 0; s == DDP_OK && i < v->n; i++) {
        int found = -1;
        for (int p = 0; v->items[i].type == JSON_STRING && p < r->nparams && found < 0; p++)
            if (strcmp(r->names[p], v->items[i].string) == 0)
                found = p;
        if (found < 0)
            s = ddp_error(DDP_ERR_INVALID, "%s: item %zu is not the name of a parameter of the manifest", path, i);
        else
            flags[found] = 1;
    }
    json_free(v);
    return s;
}

ddp_status record_used(const record_run *r, int rank, uint64_t micro, unsigned char *used)
{
    char path[RECORD_PATH_LEN];
    snprintf(path, sizeof path, "%s/rank%d/micro%llu/used.json", r->dir, rank, (unsigned long long)micro);
    return read_name_list(r, path, used);
}

ddp_status record_comm(const record_run *r, int rank, uint64_t micro, record_comm_counts *out)
{
    char path[RECORD_PATH_LEN];
    snprintf(path, sizeof path, "%s/rank%d/micro%llu/comm.json", r->dir, rank, (unsigned long long)micro);
    *out = (record_comm_counts){0, 0, RECORD_UNCOUNTED, RECORD_UNCOUNTED, RECORD_UNCOUNTED};
    json_value *v;
    DDP_CHECK(read_optional_json(path, RECORD_MAX_USED, &v));
    if (!(out->known = v != NULL))
        return DDP_OK;
    double n = 0, b = -1, k = -1, kb = -1;
    ddp_status s = member_whole(path, v, "reductions", 1e15, &n);
    if (s == DDP_OK && json_get(v, "bytes"))
        s = member_whole(path, v, "bytes", 1e18, &b);
    if (s == DDP_OK && json_get(v, "scatters"))
        s = member_whole(path, v, "scatters", n, &k);
    if (s == DDP_OK && json_get(v, "scatter_bytes"))
        s = member_whole(path, v, "scatter_bytes", b < 0 ? 1e18 : b, &kb);
    json_free(v);
    out->reductions = (uint64_t)n;
    out->bytes = b < 0 ? RECORD_UNCOUNTED : (uint64_t)b;
    out->scatters = k < 0 ? RECORD_UNCOUNTED : (uint64_t)k;
    out->scatter_bytes = kb < 0 ? RECORD_UNCOUNTED : (uint64_t)kb;
    return s;
}

ddp_status record_write_comm(const char *dir, int rank, uint64_t micro, const record_comm_counts *c)
{
    char path[RECORD_PATH_LEN];
    snprintf(path, sizeof path, "%s/rank%d/micro%llu/comm.json", dir, rank, (unsigned long long)micro);
    FILE *f = fopen(path, "w");
    if (!f)
        return ddp_error(DDP_ERR_SYSTEM, "cannot create %s", path);
    fprintf(f, "{\"reductions\": %llu, \"bytes\": %llu, \"scatters\": %llu, \"scatter_bytes\": %llu}\n",
            (unsigned long long)c->reductions, (unsigned long long)c->bytes, (unsigned long long)c->scatters,
            (unsigned long long)c->scatter_bytes);
    return file_close_written(f, path);
}

/* A float as JSON (a clip's coefficient, a loss scale): a number, or "nan", "inf", "-inf" (JSON has none). */
static void write_coef(FILE *f, float c)
{
    if (isnan(c))
        fprintf(f, "\"nan\"");
    else if (isinf(c))
        fprintf(f, c > 0 ? "\"inf\"" : "\"-inf\"");
    else
        jsonw_number(f, c);
}

/* DIR/<side>/rank<r>/<stem><k>.json opened for writing (its directory made); the path in path. */
static ddp_status create_rank_json(const char *dir, const char *side, int rank, const char *stem, uint64_t k,
                                   char *path, size_t len, FILE **f)
{
    char sub[RECORD_PATH_LEN];
    snprintf(sub, sizeof sub, "%s/%s/rank%d", dir, side, rank);
    DDP_CHECK(dump_mkdirs(sub));
    snprintf(path, len, "%s/%s%llu.json", sub, stem, (unsigned long long)k);
    if (!(*f = fopen(path, "w")))
        return ddp_error(DDP_ERR_SYSTEM, "cannot create %s", path);
    return DDP_OK;
}

/* DIR/<side>/rank<r>/<stem><k>.json: {"<key>": V}, V as write_coef writes it. */
static ddp_status write_rank_float(const char *dir, const char *side, int rank, const char *stem, uint64_t k,
                                   const char *key, float v)
{
    char path[RECORD_PATH_LEN + 32];
    FILE *f;
    DDP_CHECK(create_rank_json(dir, side, rank, stem, k, path, sizeof path, &f));
    fprintf(f, "{\"%s\": ", key);
    write_coef(f, v);
    fprintf(f, "}\n");
    return file_close_written(f, path);
}

ddp_status record_write_clip(const char *dir, const char *side, int rank, uint64_t k, float coef)
{
    return write_rank_float(dir, side, rank, "clip", k, "coef", coef);
}

ddp_status record_write_scale(const char *dir, const char *side, int rank, uint64_t micro, float scale)
{
    return write_rank_float(dir, side, rank, "scale", micro, "scale", scale);
}

ddp_status record_write_unscale(const char *dir, const char *side, int rank, uint64_t k, int found_inf)
{
    char path[RECORD_PATH_LEN + 32];
    FILE *f;
    DDP_CHECK(create_rank_json(dir, side, rank, "unscale", k, path, sizeof path, &f));
    fprintf(f, "{\"found_inf\": %s}\n", found_inf ? "true" : "false");
    return file_close_written(f, path);
}

/* <impl>/rank<r>/<stem><k>.json's member `key` (required: missing says what it should have held); *v to json_free. */
static ddp_status read_rank_json(const record_run *r, int rank, const char *stem, uint64_t k, const char *key,
                                 const char *what, char *path, size_t len, json_value **v, const json_value **member)
{
    snprintf(path, len, "%s/%s/rank%d/%s%llu.json", r->dir, r->impl, rank, stem, (unsigned long long)k);
    if (access(path, F_OK) != 0)
        return ddp_error(DDP_ERR_INVALID, "%s: missing: %s (rank %d's %s %llu)", path, what, rank, stem,
                         (unsigned long long)k);
    DDP_CHECK(read_json(path, RECORD_MAX_USED, v));
    *member = json_get(*v, key);
    return DDP_OK;
}

/* A float as write_coef writes it: a number, or "nan", "inf", "-inf". */
static int read_coef(const json_value *c, float *out)
{
    if (c && c->type == JSON_NUMBER)
        *out = (float)c->number;
    else if (c && c->type == JSON_STRING && strcmp(c->string, "nan") == 0)
        *out = NAN;
    else if (c && c->type == JSON_STRING && (strcmp(c->string, "inf") == 0 || strcmp(c->string, "-inf") == 0))
        *out = c->string[0] == '-' ? -INFINITY : INFINITY;
    else
        return -1;
    return 0;
}

/* <impl>/rank<r>/<stem><k>.json's float `key` (read_coef's forms; positive: a positive finite number only). */
static ddp_status read_rank_float(const record_run *r, int rank, const char *stem, uint64_t k, const char *key,
                                  const char *what, int positive, float *out)
{
    char path[RECORD_PATH_LEN];
    json_value *v;
    const json_value *c;
    DDP_CHECK(read_rank_json(r, rank, stem, k, key, what, path, sizeof path, &v, &c));
    ddp_status s = DDP_OK;
    if (read_coef(c, out) != 0 || (positive && !(*out > 0 && isfinite(*out))))
        s = ddp_error(DDP_ERR_INVALID, "%s: \"%s\" must be %s", path, key,
                      positive ? "a positive finite number" : "a number (or \"nan\", \"inf\", \"-inf\")");
    json_free(v);
    return s;
}

ddp_status record_clip(const record_run *r, int rank, uint64_t k, float *coef)
{
    return read_rank_float(r, rank, "clip", k, "coef", "the coefficient the clip applied", 0, coef);
}

ddp_status record_scale(const record_run *r, int rank, uint64_t micro, float *scale)
{
    return read_rank_float(r, rank, "scale", micro, "scale", "the scale the backward multiplied the loss by", 1, scale);
}

ddp_status record_unscale(const record_run *r, int rank, uint64_t k, int *found_inf)
{
    char path[RECORD_PATH_LEN];
    json_value *v;
    const json_value *c;
    DDP_CHECK(read_rank_json(r, rank, "unscale", k, "found_inf", "what the unscale found", path, sizeof path, &v,
                             &c));
    ddp_status s = c && c->type == JSON_BOOL ? DDP_OK
                                             : ddp_error(DDP_ERR_INVALID, "%s: \"found_inf\" must be true or false",
                                                         path);
    if (s == DDP_OK)
        *found_inf = c->boolean;
    json_free(v);
    return s;
}

/* The most sequences a recorded micro-batch may have, and valid tokens one may have. */
#define RECORD_MAX_ROWS 65536
#define RECORD_MAX_SEQ_TOKENS 1e9

ddp_status record_factor(const record_run *r, int rank, uint64_t micro, float *factor, int *mixed_sequence,
                         float *mixed_factor)
{
    DDP_CHECK(read_rank_float(r, rank, "factor", micro, "factor",
                              "the factor the backward multiplied its summed token loss by", 0, factor));
    *mixed_sequence = -1;
    char path[RECORD_PATH_LEN];
    json_value *v;
    const json_value *mixed;
    DDP_CHECK(read_rank_json(r, rank, "factor", micro, "mixed", "", path, sizeof path, &v, &mixed));
    ddp_status s = DDP_OK;
    double seq = 0;
    if (mixed && (mixed->type != JSON_OBJECT || !json_get(mixed, "sequence") ||
                  read_coef(json_get(mixed, "factor"), mixed_factor) != 0))
        s = ddp_error(DDP_ERR_INVALID, "%s: \"mixed\" must be {\"sequence\": S, \"factor\": F}", path);
    else if (mixed && (s = whole(path, "\"mixed\".sequence", json_get(mixed, "sequence"), 0,
                                 r->tokens.rows ? r->tokens.rows - 1 : RECORD_MAX_ROWS, &seq)) == DDP_OK)
        *mixed_sequence = (int)seq;
    json_free(v);
    return s;
}

ddp_status record_write_factor(const char *dir, const char *side, int rank, uint64_t micro, float factor)
{
    return write_rank_float(dir, side, rank, "factor", micro, "factor", factor);
}

ddp_status record_write_tokens(const char *dir, int rank, uint64_t micro, const int *rows, int n)
{
    char path[RECORD_PATH_LEN];
    snprintf(path, sizeof path, "%s/rank%d/micro%llu/tokens.json", dir, rank, (unsigned long long)micro);
    FILE *f = fopen(path, "w");
    if (!f)
        return ddp_error(DDP_ERR_SYSTEM, "cannot create %s", path);
    fprintf(f, "[");
    for (int j = 0; j < n; j++)
        fprintf(f, "%s%d", j ? ", " : "", rows[j]);
    fprintf(f, "]\n");
    return file_close_written(f, path);
}

/*
 * Rank's micro-step m's tokens.json into r->token_counts (made at the first, which fixes the number of
 * sequences every micro-batch of the recording has), and its factor<m>.json read once to be sure it is there.
 */
static ddp_status read_tokens(record_run *r, int rank, uint64_t micro)
{
    char path[RECORD_PATH_LEN];
    snprintf(path, sizeof path, "%s/rank%d/micro%llu/tokens.json", r->dir, rank, (unsigned long long)micro);
    if (access(path, F_OK) != 0)
        return ddp_error(DDP_ERR_INVALID, "%s: missing: the manifest's \"loss_norm\" needs every micro-batch's valid "
                                          "tokens per sequence", path);
    json_value *v;
    DDP_CHECK(read_json(path, RECORD_MAX_USED, &v));
    ddp_status s = DDP_OK;
    if (v->type != JSON_ARRAY || v->n < 1 || v->n > RECORD_MAX_ROWS)
        s = ddp_error(DDP_ERR_INVALID, "%s: expected an array of 1 to %d counts, one per sequence", path,
                      RECORD_MAX_ROWS);
    else if (r->tokens.rows && v->n != (size_t)r->tokens.rows)
        s = ddp_error(DDP_ERR_INVALID, "%s: %zu sequences, where the recording's first micro-batch has %d (every "
                                       "micro-batch must have as many)", path, v->n, r->tokens.rows);
    if (s == DDP_OK && !r->token_counts) {
        r->tokens.rows = (int)v->n;
        if (!(r->token_counts = calloc((size_t)r->nranks * (r->tokens.nbwd + 1) * v->n, sizeof *r->token_counts)))
            s = ddp_error(DDP_ERR_NOMEM, "the token counts of %zu backwards", r->tokens.nbwd);
        r->tokens.counts = r->token_counts;
    }
    for (size_t j = 0; s == DDP_OK && j < v->n; j++) {
        double x;
        s = whole(path, "a sequence's valid tokens", &v->items[j], 0, RECORD_MAX_SEQ_TOKENS, &x);
        if (s == DDP_OK && micro < r->tokens.nbwd)
            r->token_counts[((size_t)rank * r->tokens.nbwd + micro) * v->n + j] = (int)x;
    }
    json_free(v);
    float f, g;
    int seq;
    return s == DDP_OK ? record_factor(r, rank, micro, &f, &seq, &g) : s;
}

/* "loss_norm" (version 10): a token loss and its intended normalization; what it is not modelled with, refused. */
static ddp_status read_loss_norm(const char *path, const json_value *root, record_run *r)
{
    const json_value *v = json_get(root, "loss_norm");
    if (!v)
        return DDP_OK;
    if (v->type != JSON_STRING)
        return ddp_error(DDP_ERR_INVALID, "%s: \"loss_norm\" must be a string", path);
    if (loss_norm_parse(v->string, &r->loss_norm) != DDP_OK)
        return ddp_error(DDP_ERR_INVALID, "%s: \"loss_norm\" \"%s\" is not global-tokens, micro-batch-mean or sum",
                         path, v->string);
    const char *with = r->ddp.scaler.on ? "\"loss_scale\"" : r->shard != SHARD_NONE ? "\"shard\""
                     : r->params_averaged ? "averaged parameters" : r->schedule.nuneven || r->schedule.njoins
                     ? "uneven inputs or join" : NULL;
    if (with)
        return ddp_error(DDP_ERR_INVALID, "%s: \"loss_norm\" with %s: not modelled", path, with);
    for (size_t i = 0; i < r->schedule.nops; i++)
        r->tokens.nbwd += r->schedule.ops[i] == OP_BWD;
    return DDP_OK;
}

ddp_status record_grad_none(const record_run *r, const char *what, unsigned char *none, int *known)
{
    char path[RECORD_PATH_LEN];
    snprintf(path, sizeof path, "%s/%s/none.json", r->dir, what);
    *known = access(path, F_OK) == 0;
    if (!*known) {
        memset(none, 0, (size_t)r->nparams);
        return DDP_OK;
    }
    return read_name_list(r, path, none);
}

ddp_status record_read(const record_run *r, const char *what, int param, float *dst, int finite_only)
{
    char path[RECORD_PATH_LEN];
    size_t shape[MODEL_MAX_NDIM];
    param_shape(r, param, shape);
    snprintf(path, sizeof path, "%s/%s/%s.npy", r->dir, what, r->names[param]);
    return npy_read_exact(path, NPY_F4, shape, r->decls[param].ndim, dst, finite_only);
}

int record_npieces(const record_run *r, const char *what, int param)
{
    char path[RECORD_PATH_LEN];
    int k = 0;
    for (;; k++) {
        snprintf(path, sizeof path, "%s/%s/%s.part%d.npy", r->dir, what, r->names[param], k + 1);
        if (access(path, F_OK) != 0)
            return k;
    }
}

ddp_status record_read_piece(const record_run *r, const char *what, int param, int k, float *dst)
{
    char path[RECORD_PATH_LEN];
    size_t shape[MODEL_MAX_NDIM];
    param_shape(r, param, shape);
    snprintf(path, sizeof path, "%s/%s/%s.part%d.npy", r->dir, what, r->names[param], k + 1);
    return npy_read_exact(path, NPY_F4, shape, r->decls[param].ndim, dst, 1);
}

/* Every file rank's part of the run needs: what it ran (a rank that ran out has no grab, step or micro-step
 * files for what it skipped, and none at the end when it ran out outside join). */
static ddp_status check_params_held(record_run *r, int rank, record_values kind, uint64_t k);

static ddp_status check_rank_files(record_run *r, int rank, const uint32_t *counts, unsigned char *used,
                                   char *what, size_t wlen)
{
    int np = r->nparams, all = r->nparams + r->nbuffers, in_join = 0, syncs = 0;
    uint64_t micro = 0, grab = 0, step = 0, fwd = 0;
    sched_arming arming = {0};
    for (size_t i = 0; i < r->schedule.nops; i++) {
        in_join = r->schedule.ops[i] == OP_JOIN_ENTER ? 1 : r->schedule.ops[i] == OP_JOIN_EXIT ? 0 : in_join;
        if (!sched_runs(&r->schedule, counts, r->nranks, i, rank)) {
            if (!in_join)
                return DDP_OK;
            grab += r->schedule.ops[i] == OP_GRAB;
            step += r->schedule.ops[i] == OP_STEP;
            continue;
        }
        syncs = sched_arming_step(&arming, r->schedule.ops[i]);
        switch (r->schedule.ops[i]) {
        case OP_FWD:
            for (int k = 0; k < 2 && r->nbuffers; k++) {
                snprintf(what, wlen, "rank%d/fwd%llu/%s", rank, (unsigned long long)fwd,
                         k ? "after" : "seen");
                DDP_CHECK(check_files(r, what, NULL, np, all));
            }
            fwd++;
            break;
        case OP_BWD:
            DDP_CHECK(record_used(r, rank, micro, used));
            record_comm_counts comm;
            DDP_CHECK(record_comm(r, rank, micro, &comm)); /* one that is there must be right */
            /* The reference's rule (ddp_ref.c sync_gradients), found here rather than in a rank; a sharded run
             * reduces every parameter, used or not (shard_ref.h). */
            for (int p = 0; syncs && !r->ddp.find_unused && r->shard == SHARD_NONE && p < np; p++)
                if (!used[p])
                    return ddp_error(DDP_ERR_INVALID,
                                     "%s/rank%d/micro%llu/used.json: parameter '%s' was not used by the forward of "
                                     "a syncing backward (op %zu), and the manifest's DDP has "
                                     "find_unused_parameters false: PyTorch DDP fails there",
                                     r->dir, rank, (unsigned long long)micro, r->names[p], i);
            if (r->loss_norm)
                DDP_CHECK(read_tokens(r, rank, micro));
            snprintf(what, wlen, "rank%d/micro%llu", rank, (unsigned long long)micro++);
            DDP_CHECK(check_files(r, what, used, 0, np));
            break;
        case OP_GRAB: {
            snprintf(what, wlen, "%s/rank%d/grab%llu", r->impl, rank, (unsigned long long)grab++);
            DDP_CHECK(check_files(r, what, NULL, 0, np));
            int known;
            DDP_CHECK(record_grad_none(r, what, used, &known)); /* a none.json that is there must be right */
            break;
        }
        case OP_STEP:
            snprintf(what, wlen, "%s/rank%d/step%llu", r->impl, rank, (unsigned long long)step);
            DDP_CHECK(check_files(r, what, NULL, 0, np));
            DDP_CHECK(check_params_held(r, rank, RECORD_STEP, step++));
            break;
        default: break;
        }
    }
    snprintf(what, wlen, "%s/rank%d/end", r->impl, rank);
    DDP_CHECK(check_files(r, what, NULL, 0, np));
    return check_params_held(r, rank, RECORD_END, 0);
}

static ddp_status check_grab_cover(record_run *r);

/* Every file the schedule will read, for every rank, headers only. */
static ddp_status check_all(record_run *r)
{
    char what[PATH_MAX];
    unsigned char used[MODEL_MAX_PARAMS];
    DDP_CHECK(check_files(r, "init", NULL, 0, r->nparams + r->nbuffers));
    uint32_t *counts = malloc((r->schedule.nuneven ? r->schedule.nuneven : 1) * (size_t)r->nranks * sizeof *counts);
    if (!counts)
        return ddp_error(DDP_ERR_NOMEM, "the uneven counts of %d ranks", r->nranks);
    ddp_status s = sched_resolve(&r->schedule, r->nranks, counts);
    for (int rank = 0; s == DDP_OK && rank < r->nranks; rank++)
        s = check_rank_files(r, rank, counts, used, what, sizeof what);
    free(counts);
    return s == DDP_OK ? check_grab_cover(r) : s;
}


static int held_order(const void *a, const void *b)
{
    const record_held *x = a, *y = b;
    if (x->param != y->param)
        return x->param < y->param ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

static size_t decl_count(const record_run *r, int p)
{
    size_t count = 1;
    for (int d = 0; d < r->decls[p].ndim; d++)
        count *= (size_t)r->decls[p].shape[d];
    return count;
}

/*
 * A JSON object {param: [[START, COUNT], ...]} (a rank's "grad_shards"
 * entry, or a grab's held.json) into *out (malloc'd, sorted by parameter
 * and start): the names the manifest's, the ranges inside their tensor, a
 * parameter's ranges not overlapping. `where` names the object in messages.
 */
static ddp_status parse_held(const char *path, const char *where, const json_value *obj, const record_run *r,
                             record_held **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (obj->type != JSON_OBJECT)
        return ddp_error(DDP_ERR_INVALID, "%s: %s is %s, expected an object of parameter names", path, where,
                         json_type_name(obj->type));
    size_t ranges = 0;
    for (size_t k = 0; k < obj->n; k++)
        ranges += obj->items[k].type == JSON_ARRAY ? obj->items[k].n : 0;
    record_held *h = malloc((ranges ? ranges : 1) * sizeof *h);
    if (!h)
        return ddp_error(DDP_ERR_NOMEM, "%s: %zu ranges", path, ranges);
    ddp_status s = DDP_OK;
    size_t m = 0;
    for (size_t k = 0; s == DDP_OK && k < obj->n; k++) {
        const json_value *e = &obj->items[k];
        int p = -1;
        for (int q = 0; q < r->nparams && p < 0; q++)
            if (strcmp(r->names[q], e->key) == 0)
                p = q;
        if (p < 0) {
            s = ddp_error(DDP_ERR_INVALID, "%s: %s names \"%s\", not a parameter of the manifest", path, where, e->key);
            break;
        }
        if (e->type != JSON_ARRAY) {
            s = ddp_error(DDP_ERR_INVALID, "%s: %s.%s is %s, expected [[START, COUNT], ...]", path, where, e->key,
                          json_type_name(e->type));
            break;
        }
        size_t count = decl_count(r, p);
        for (size_t j = 0; s == DDP_OK && j < e->n; j++) {
            const json_value *x = &e->items[j];
            double a = 0, c = 0;
            char what[MODEL_NAME_LEN + 96];
            if (x->type != JSON_ARRAY || x->n != 2) {
                s = ddp_error(DDP_ERR_INVALID, "%s: %s.%s[%zu] is not [START, COUNT]", path, where, e->key, j);
                break;
            }
            snprintf(what, sizeof what, "%s.%s[%zu]'s start", where, e->key, j);
            s = whole(path, what, &x->items[0], 0, (double)count - 1, &a);
            snprintf(what, sizeof what, "%s.%s[%zu]'s count", where, e->key, j);
            if (s == DDP_OK)
                s = whole(path, what, &x->items[1], 1, (double)count - a, &c);
            if (s == DDP_OK)
                h[m++] = (record_held){p, (size_t)a, (size_t)c};
        }
    }
    if (s == DDP_OK) {
        qsort(h, m, sizeof *h, held_order);
        for (size_t i = 1; i < m && s == DDP_OK; i++)
            if (h[i - 1].param == h[i].param && h[i - 1].start + h[i - 1].count > h[i].start)
                s = ddp_error(DDP_ERR_INVALID, "%s: %s: %s's ranges overlap at element %zu", path, where,
                              r->names[h[i].param], h[i].start);
    }
    if (s != DDP_OK) {
        free(h);
        return s;
    }
    *out = h;
    *n = m;
    return DDP_OK;
}

/* Which elements some rank holds, flat over the parameters in order (offsets[p]: parameter p's first). */
typedef struct held_cover {
    unsigned char *covered;
    size_t offsets[MODEL_MAX_PARAMS + 1];
} held_cover;

static ddp_status cover_init(held_cover *c, const record_run *r)
{
    size_t total = 0;
    for (int p = 0; p < r->nparams; p++) {
        c->offsets[p] = total;
        total += decl_count(r, p);
    }
    c->offsets[r->nparams] = total;
    if (!(c->covered = calloc(total ? total : 1, 1)))
        return ddp_error(DDP_ERR_NOMEM, "which elements are held: %zu", total);
    return DDP_OK;
}

static void cover_add(held_cover *c, const record_held *h, size_t n)
{
    for (size_t i = 0; i < n; i++)
        memset(c->covered + c->offsets[h[i].param] + h[i].start, 1, h[i].count);
}

/* Every element held by some rank, else no check would read it. */
static ddp_status cover_check(held_cover *c, const record_run *r, const char *path, const char *where)
{
    for (int p = 0; p < r->nparams; p++) {
        const unsigned char *hole = memchr(c->covered + c->offsets[p], 0, c->offsets[p + 1] - c->offsets[p]);
        if (hole)
            return ddp_error(DDP_ERR_INVALID, "%s: %s: element %zu of %s is held by no rank, so no check would "
                                              "read it", path, where, (size_t)(hole - c->covered - c->offsets[p]),
                             r->names[p]);
    }
    return DDP_OK;
}

/* "grad_shards" (record.h), when present: which elements of each .grad each rank holds. */
static ddp_status read_held(const char *path, const json_value *root, record_run *r)
{
    const json_value *g = json_get(root, "grad_shards");
    if (!g)
        return DDP_OK;
    if (g->type != JSON_ARRAY || g->n != (size_t)r->nranks)
        return ddp_error(DDP_ERR_INVALID, "%s: \"grad_shards\" must be an array of %d objects, one per rank", path,
                         r->nranks);
    held_cover c;
    DDP_CHECK(cover_init(&c, r));
    ddp_status s = DDP_OK;
    size_t n = 0;
    if (!(r->held_at = malloc(((size_t)r->nranks + 1) * sizeof *r->held_at)))
        s = ddp_error(DDP_ERR_NOMEM, "%s: \"grad_shards\"", path);
    for (int rank = 0; s == DDP_OK && rank < r->nranks; rank++) {
        char where[48];
        snprintf(where, sizeof where, "\"grad_shards\"[%d]", rank);
        record_held *h, *grown;
        size_t m;
        r->held_at[rank] = n;
        if ((s = parse_held(path, where, &g->items[rank], r, &h, &m)) != DDP_OK)
            break;
        if (!(grown = realloc(r->held, (n + m + 1) * sizeof *grown))) {
            free(h);
            s = ddp_error(DDP_ERR_NOMEM, "%s: \"grad_shards\"", path);
            break;
        }
        r->held = grown;
        memcpy(r->held + n, h, m * sizeof *h);
        n += m;
        cover_add(&c, h, m);
        free(h);
    }
    if (s == DDP_OK) {
        r->held_at[r->nranks] = n;
        s = cover_check(&c, r, path, "\"grad_shards\"");
    }
    free(c.covered);
    return s;
}

ddp_status record_check_held(const record_run *r, int rank, record_values kind, uint64_t k, record_held **out,
                             size_t *n, int *known)
{
    char what[32], path[RECORD_PATH_LEN];
    record_values_name(kind, k, what, sizeof what);
    snprintf(path, sizeof path, "%s/%s/rank%d/%s/held.json", r->dir, r->impl, rank, what);
    *out = NULL;
    *n = 0;
    json_value *v;
    DDP_CHECK(read_optional_json(path, RECORD_MAX_MANIFEST, &v));
    if (!(*known = v != NULL))
        return DDP_OK;
    ddp_status s = parse_held(path, "held.json", v, r, out, n);
    json_free(v);
    return s;
}

/*
 * A parameter check's held.json, when there, parses; only a sharded recording may have one (a rank holding a
 * part of its parameters is what FSDP does; judged as DDP it would leave elements unchecked).
 */
static ddp_status check_params_held(record_run *r, int rank, record_values kind, uint64_t k)
{
    record_held *h;
    size_t n;
    int known;
    DDP_CHECK(record_check_held(r, rank, kind, k, &h, &n, &known));
    free(h);
    if (known && r->shard == SHARD_NONE) {
        char what[32];
        return ddp_error(DDP_ERR_INVALID, "%s/%s/rank%d/%s/held.json: the rank held a part of its parameters, "
                                          "which the manifest's \"shard\" must say (fsdp or hsdp)",
                         r->dir, r->impl, rank, record_values_name(kind, k, what, sizeof what));
    }
    r->params_held |= known;
    return DDP_OK;
}

/*
 * At every grab, what the ranks that reached it hold (their held.json, else grad_shards, else everything) must
 * cover every element. Only when the recording says what ranks hold somewhere.
 */
static ddp_status check_grab_cover(record_run *r)
{
    char dir[RECORD_PATH_LEN], where[48];
    for (uint64_t k = 0; !r->held_by_grab && k < r->schedule.ngrabs; k++)
        for (int rank = 0; !r->held_by_grab && rank < r->nranks; rank++) {
            snprintf(dir, sizeof dir, "%s/%s/rank%d/grab%llu/held.json", r->dir, r->impl, rank, (unsigned long long)k);
            r->held_by_grab = access(dir, F_OK) == 0;
        }
    if (!r->held_at && !r->held_by_grab)
        return DDP_OK;
    held_cover c;
    DDP_CHECK(cover_init(&c, r));
    ddp_status s = DDP_OK;
    for (uint64_t k = 0; s == DDP_OK && k < r->schedule.ngrabs; k++) {
        memset(c.covered, 0, c.offsets[r->nparams]);
        int reached = 0;
        for (int rank = 0; s == DDP_OK && rank < r->nranks; rank++) {
            snprintf(dir, sizeof dir, "%s/%s/rank%d/grab%llu", r->dir, r->impl, rank, (unsigned long long)k);
            if (access(dir, F_OK) != 0)
                continue; /* a rank that ran out before this grab */
            reached = 1;
            record_held *h;
            size_t n;
            int known;
            if ((s = record_check_held(r, rank, RECORD_GRAB, k, &h, &n, &known)) != DDP_OK)
                break;
            if (known)
                cover_add(&c, h, n);
            else if (r->held_at)
                cover_add(&c, r->held + r->held_at[rank], r->held_at[rank + 1] - r->held_at[rank]);
            else
                memset(c.covered, 1, c.offsets[r->nparams]);
            free(h);
        }
        snprintf(where, sizeof where, "grab %llu", (unsigned long long)k);
        if (s == DDP_OK && reached)
            s = cover_check(&c, r, r->dir, where);
    }
    free(c.covered);
    return s;
}

/* rank<digits>: the name of a rank's own directory, which an implementation's cannot take. */
static int is_rank_dir(const char *name)
{
    return strncmp(name, "rank", 4) == 0 && name[4] && strspn(name + 4, "0123456789") == strlen(name + 4);
}

ddp_status record_open(const char *dir, record_run *out)
{
    memset(out, 0, sizeof *out);
    if (strlen(dir) + 64 >= sizeof out->dir)
        return ddp_error(DDP_ERR_INVALID, "%s: the path is too long", dir);
    snprintf(out->dir, sizeof out->dir, "%s", dir);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ddp_error(DDP_ERR_INVALID, "%s: not a directory", dir);
    char path[RECORD_PATH_LEN], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    DDP_CHECK(file_read_regular(path, RECORD_MAX_MANIFEST, &text, &len));
    json_value *root = NULL;
    ddp_status s = json_parse(text, &root);
    free(text);
    if (s != DDP_OK)
        return ddp_error_prefix(s, path);
    const json_value *v;
    double x;
    s = json_need(path, root, "format", JSON_STRING, &v);
    if (s == DDP_OK && strcmp(v->string, "ddpsim-record") != 0)
        s = ddp_error(DDP_ERR_INVALID, "%s: format \"%s\", expected \"ddpsim-record\" (a recorded run)", path, v->string);
    if (s == DDP_OK && (s = json_need(path, root, "version", JSON_NUMBER, &v)) == DDP_OK && (v->number < 1 ||
        v->number > RECORD_VERSION || v->number != floor(v->number)))
        s = ddp_error(DDP_ERR_INVALID, "%s: version %g; this ddpsim reads versions 1 to %d", path, v->number,
                      RECORD_VERSION);
    if (s == DDP_OK && (s = json_need(path, root, "ranks", JSON_NUMBER, &v)) == DDP_OK &&
        (s = whole(path, "\"ranks\"", v, 1, 256, &x)) == DDP_OK)
        out->nranks = (int)x;
    if (s == DDP_OK)
        s = copy_text(path, root, "impl", out->impl, sizeof out->impl, 1);
    if (s == DDP_OK && (strchr(out->impl, '/') || strcmp(out->impl, "init") == 0 || strcmp(out->impl, ".") == 0 ||
                        strcmp(out->impl, "..") == 0 || is_rank_dir(out->impl)))
        s = ddp_error(DDP_ERR_INVALID, "%s: \"impl\" \"%s\" cannot name its directory", path, out->impl);
    if (s == DDP_OK)
        s = copy_text(path, root, "recorded_by", out->recorded_by, sizeof out->recorded_by, 0);
    if (s == DDP_OK)
        s = copy_text(path, root, "model", out->model, sizeof out->model, 0);
    if (s == DDP_OK)
        s = read_decls(path, root, out, 0);
    if (s == DDP_OK)
        s = read_decls(path, root, out, 1);
    if (s == DDP_OK)
        s = read_options(path, root, out);
    if (s == DDP_OK)
        s = read_ops(path, root, out);
    if (s == DDP_OK)
        s = manifest_read_plants(path, root, &out->schedule, out->nranks, out->planted, &out->nplanted);
    if (s == DDP_OK && out->nplanted && !out->ddp.scaler.on)
        s = ddp_error(DDP_ERR_INVALID, "%s: \"planted\" needs \"loss_scale\" (without a scaler nothing skips the "
                                       "step the inf or NaN reaches)", path);
    if (s == DDP_OK && out->ddp.scaler.on && (out->schedule.nuneven || out->schedule.njoins))
        s = ddp_error(DDP_ERR_INVALID, "%s: \"loss_scale\" with uneven inputs or join: torch's GradScaler has no "
                                       "join hook (a rank that ran out misses its peers' updates)", path);
    if (s == DDP_OK)
        s = read_shard(path, root, out);
    if (s == DDP_OK && out->shard != SHARD_NONE && (out->schedule.nuneven || out->schedule.njoins))
        s = ddp_error(DDP_ERR_INVALID, "%s: a %s recording with uneven inputs or join: not modelled by the sharded "
                                       "reference", path, shard_mode_name(out->shard));
    if (s == DDP_OK)
        s = read_averaging(path, root, out);
    if (s == DDP_OK)
        s = read_held(path, root, out);
    if (s == DDP_OK)
        s = read_loss_norm(path, root, out);
    ssize_t clash = s == DDP_OK ? sched_step_conflict(&out->schedule, out->ddp.set_to_none) : -1;
    if (clash >= 0)
        s = ddp_error(DDP_ERR_INVALID, "%s: op %zd (step) comes between a forward and its backward while gradients "
                                       "exist (PyTorch's autograd refuses that backward)", path, clash);
    json_free(root);
    if (s == DDP_OK)
        s = check_all(out);
    if (s != DDP_OK)
        record_close(out);
    return s;
}

void record_close(record_run *r)
{
    sched_free(&r->schedule);
    free(r->held);
    free(r->held_at);
    free(r->token_counts);
    r->held = NULL;
    r->held_at = NULL;
    r->token_counts = NULL;
    r->tokens.counts = NULL;
}

ddp_status record_write_manifest(const char *dir, const record_info *info)
{
    char path[RECORD_PATH_LEN];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return ddp_error(DDP_ERR_SYSTEM, "cannot create %s", path);
    const model *m = info->layout;
    const ddp_config *d = info->ddp;
    fprintf(f, "{\"format\": \"ddpsim-record\", \"version\": %d, \"ranks\": %d,\n \"impl\": ", RECORD_VERSION,
            info->nranks);
    jsonw_string(f, info->impl);
    fprintf(f, ", \"recorded_by\": ");
    jsonw_string(f, info->recorded_by);
    fprintf(f, ", \"model\": ");
    jsonw_string(f, info->model);
    char math[160];
    fprintf(f, ", \"math\": ");
    jsonw_string(f, model_math(math, sizeof math));
    fprintf(f, ",\n \"params\": ");
    manifest_write_params(f, m);
    if (model_nbuffers(m)) {
        fprintf(f, ",\n \"buffers\": ");
        manifest_write_buffers(f, m);
    }
    manifest_write_ddp(f, d);
    fprintf(f, ",\n \"ops\": [");
    for (size_t i = 0; i < info->schedule->nops; i++)
        fprintf(f, "%s\"%s\"", i ? ", " : "", sched_op_name(info->schedule->ops[i]));
    fprintf(f, "]");
    if (info->schedule->nclips) {
        fprintf(f, ",\n \"clips\": [");
        for (size_t k = 0; k < info->schedule->nclips; k++) {
            const sched_clip *c = &info->schedule->clips[k];
            fprintf(f, "%s{\"op\": %zu, \"max_norm\": ", k ? ", " : "", c->op);
            jsonw_number(f, c->max_norm);
            fprintf(f, ", \"norm_type\": %s}", c->inf_norm ? "\"inf\"" : "2");
        }
        fprintf(f, "]");
    }
    manifest_write_uneven(f, info->schedule, info->nranks);
    manifest_write_plants(f, info->planted, info->nplanted);
    if (info->shard != SHARD_NONE)
        fprintf(f, ",\n \"shard\": {\"mode\": \"%s\", \"mesh\": \"%dx%d\"}", shard_mode_name(info->shard),
                info->mesh.replicas, info->mesh.shards);
    if (info->loss_norm)
        fprintf(f, ",\n \"loss_norm\": \"%s\"", loss_norm_name(info->loss_norm));
    fprintf(f, "}\n");
    return file_close_written(f, path);
}

const char *record_values_name(record_values kind, uint64_t k, char *buf, size_t len)
{
    switch (kind) {
    case RECORD_GRAB: snprintf(buf, len, "grab%llu", (unsigned long long)k); break;
    case RECORD_STEP: snprintf(buf, len, "step%llu", (unsigned long long)k); break;
    case RECORD_END: snprintf(buf, len, "end"); break;
    }
    return buf;
}

ddp_status record_write_forward_buffers(const char *dir, int rank, uint64_t k, const char *which, const model *m)
{
    char sub[PATH_MAX];
    snprintf(sub, sizeof sub, "%s/rank%d/fwd%llu/%s", dir, rank, (unsigned long long)k, which);
    DDP_CHECK(dump_mkdirs(sub));
    return dump_write_buffer_tensors(sub, m, model_buffers(m));
}

/* path: the names of m's parameters p with flags[p] == want, as a JSON array. */
static ddp_status write_name_list(const char *path, const model *m, const unsigned char *flags, int want)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return ddp_error(DDP_ERR_SYSTEM, "cannot create %s", path);
    fprintf(f, "[");
    for (int p = 0, k = 0; p < model_nparams(m); p++)
        if ((flags[p] != 0) == want) {
            fprintf(f, "%s", k++ ? ", " : "");
            jsonw_string(f, model_param_at(m, p)->name);
        }
    fprintf(f, "]\n");
    return file_close_written(f, path);
}

ddp_status record_write_grad_none(const char *dir, const char *side, int rank, const char *what, const model *m,
                                  const unsigned char *defined)
{
    char path[RECORD_PATH_LEN];
    snprintf(path, sizeof path, "%s/%s/rank%d/%s/none.json", dir, side, rank, what);
    return write_name_list(path, m, defined, 0);
}

ddp_status record_write_held(const char *dir, const char *side, int rank, const char *what, const model *m,
                             const unsigned char *held)
{
    char path[RECORD_PATH_LEN];
    snprintf(path, sizeof path, "%s/%s/rank%d/%s/held.json", dir, side, rank, what);
    FILE *f = fopen(path, "w");
    if (!f)
        return ddp_error(DDP_ERR_SYSTEM, "cannot create %s", path);
    fprintf(f, "{");
    for (int p = 0, named = 0; p < model_nparams(m); p++) {
        const model_param *par = model_param_at(m, p);
        const unsigned char *e = held + par->offset;
        size_t ranges = 0;
        for (size_t j = 0; j < par->count;) {
            if (!e[j]) {
                j++;
                continue;
            }
            size_t start = j;
            while (j < par->count && e[j])
                j++;
            if (!ranges++) {
                fprintf(f, "%s", named++ ? ", " : "");
                jsonw_string(f, par->name);
                fprintf(f, ": [");
            }
            fprintf(f, "%s[%zu, %zu]", ranges > 1 ? ", " : "", start, j - start);
        }
        if (ranges)
            fprintf(f, "]");
    }
    fprintf(f, "}\n");
    return file_close_written(f, path);
}

/* A tensor of par's shape to path, each value times factor (1: as it is; a power of two: exact). */
static ddp_status write_times(const char *path, const model_param *par, const float *v, float factor)
{
    size_t shape[MODEL_MAX_NDIM];
    dump_param_shape(par, shape);
    if (factor == 1.0f)
        return npy_write(path, NPY_F4, shape, par->ndim, v);
    float *t = malloc((par->count ? par->count : 1) * sizeof *t);
    if (!t)
        return ddp_error(DDP_ERR_NOMEM, "%s: %zu floats", path, par->count);
    for (size_t j = 0; j < par->count; j++)
        t[j] = v[j] * factor;
    ddp_status s = npy_write(path, NPY_F4, shape, par->ndim, t);
    free(t);
    return s;
}

ddp_status record_write_micro(const char *dir, int rank, uint64_t micro, const model *m, const float *local,
                              const unsigned char *used, float factor)
{
    char sub[RECORD_PATH_LEN], path[RECORD_PATH_LEN + MODEL_NAME_LEN + 32];
    snprintf(sub, sizeof sub, "%s/rank%d/micro%llu", dir, rank, (unsigned long long)micro);
    DDP_CHECK(dump_mkdirs(sub));
    snprintf(path, sizeof path, "%s/used.json", sub);
    DDP_CHECK(write_name_list(path, m, used, 1));
    for (int p = 0; p < model_nparams(m); p++) {
        if (!used[p])
            continue;
        const model_param *par = model_param_at(m, p);
        snprintf(path, sizeof path, "%s/%s.npy", sub, par->name);
        DDP_CHECK(write_times(path, par, local + par->offset, factor));
        for (int k = 0; k < model_npieces(m, p); k++) { /* a gradient in pieces: each, as record.h lays them out */
            snprintf(path, sizeof path, "%s/%s.part%d.npy", sub, par->name, k + 1);
            DDP_CHECK(write_times(path, par, model_piece(m, p, k), factor));
        }
    }
    return DDP_OK;
}
