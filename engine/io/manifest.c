/*
 * manifest.c - the manifests' shared members, one codec (manifest.h).
 */
#include "manifest.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"

/* How each field is named in a manifest and on the command line. */
static const struct {
    const char *key, *option;
} fields[MF_NFIELDS] = {
    [MF_BUCKET_CAP] = {"ddp.bucket_cap", "--bucket-cap"},
    [MF_FIRST_BUCKET_CAP] = {"ddp.first_bucket_cap", "--first-bucket-cap"},
    [MF_FIND_UNUSED] = {"ddp.find_unused_parameters", "--find-unused"},
    [MF_FIND_UNUSED_RULE] = {"ddp.find_unused_rule", "--find-unused-rule"},
    [MF_BUCKET_VIEW] = {"ddp.gradient_as_bucket_view", "--bucket-view"},
    [MF_ALGO] = {"ddp.algo", "--algo"},
    [MF_COMM_HOOK] = {"ddp.comm_hook", "--comm-hook"},
    [MF_STATIC_GRAPH] = {"ddp.static_graph", "--static-graph"},
    [MF_BROADCAST_BUFFERS] = {"ddp.broadcast_buffers", "--broadcast-buffers"},
    [MF_ZERO_GRAD] = {"zero_grad", "--zero-grad"},
    [MF_LR] = {"optimizer.lr", "--lr"},
    [MF_MOMENTUM] = {"optimizer.momentum", "--optimizer"},
    [MF_OPTIMIZER] = {"optimizer.type", "--optimizer"},
    [MF_LOSS_SCALE] = {"loss_scale", "--loss-scale"},
};

static const char *tf(int b)
{
    return b ? "true" : "false";
}

/* A field's value of d as the manifest writes it (JSON text). */
static void field_text(const ddp_config *d, manifest_ddp_field f, char *buf, size_t len)
{
    switch (f) {
    case MF_BUCKET_CAP: snprintf(buf, len, "%zu", d->bucket_cap); break;
    case MF_FIRST_BUCKET_CAP: snprintf(buf, len, "%zu", d->first_bucket_cap); break;
    case MF_FIND_UNUSED: snprintf(buf, len, "%s", tf(d->find_unused)); break;
    case MF_FIND_UNUSED_RULE: snprintf(buf, len, "\"%s\"", ddp_find_unused_rule_name(d)); break;
    case MF_BUCKET_VIEW: snprintf(buf, len, "%s", tf(d->bucket_view)); break;
    case MF_ALGO: snprintf(buf, len, "\"%s\"", coll_algo_name(d->algo)); break;
    case MF_COMM_HOOK: snprintf(buf, len, "\"%s\"", ddp_comm_hook_name(d->comm_hook)); break;
    case MF_STATIC_GRAPH: snprintf(buf, len, "%s", tf(d->static_graph)); break;
    case MF_BROADCAST_BUFFERS: snprintf(buf, len, "%s", tf(!d->no_broadcast_buffers)); break;
    case MF_ZERO_GRAD: snprintf(buf, len, "\"%s\"", d->set_to_none ? "set_to_none" : "fill_zeros"); break;
    case MF_LR: jsonw_float_text(d->lr, buf, len); break;
    case MF_MOMENTUM: jsonw_float_text(d->momentum, buf, len); break;
    case MF_OPTIMIZER:
        if (d->adamw.on) {
            char b1[32], b2[32], eps[32], wd[32];
            jsonw_number_text(d->adamw.beta1, b1, sizeof b1);
            jsonw_number_text(d->adamw.beta2, b2, sizeof b2);
            jsonw_number_text(d->adamw.eps, eps, sizeof eps);
            jsonw_number_text(d->adamw.weight_decay, wd, sizeof wd);
            snprintf(buf, len, "\"adamw\", \"betas\": [%s, %s], \"eps\": %s, \"weight_decay\": %s", b1, b2, eps, wd);
        } else {
            snprintf(buf, len, "\"sgd\"");
        }
        break;
    case MF_LOSS_SCALE: {
        char spec[96];
        scaler_format(&d->scaler, spec, sizeof spec);
        snprintf(buf, len, d->scaler.on ? "\"%s\"" : "null", spec);
        break;
    }
    case MF_NFIELDS: buf[0] = '\0'; break;
    }
}

void manifest_write_ddp(FILE *f, const ddp_config *d)
{
    char v[256];
    fprintf(f, ",\n \"ddp\": {");
    for (int k = MF_BUCKET_CAP; k <= MF_BROADCAST_BUFFERS; k++) {
        field_text(d, (manifest_ddp_field)k, v, sizeof v);
        fprintf(f, "%s\"%s\": %s", k ? ", " : "", fields[k].key + strlen("ddp."), v);
    }
    field_text(d, MF_ZERO_GRAD, v, sizeof v);
    fprintf(f, "},\n \"zero_grad\": %s,\n \"optimizer\": {\"type\": ", v);
    field_text(d, MF_OPTIMIZER, v, sizeof v);
    fprintf(f, "%s, \"lr\": ", v);
    field_text(d, MF_LR, v, sizeof v);
    fprintf(f, "%s", v);
    if (!d->adamw.on) {
        field_text(d, MF_MOMENTUM, v, sizeof v);
        fprintf(f, ", \"momentum\": %s", v);
    }
    fprintf(f, "}");
    if (d->scaler.on) {
        field_text(d, MF_LOSS_SCALE, v, sizeof v);
        fprintf(f, ",\n \"loss_scale\": %s", v);
    }
}

static ddp_status need_bool(const char *path, const json_value *v, manifest_ddp_field f, int *dst)
{
    if (v->type != JSON_BOOL)
        return ddp_error(DDP_ERR_INVALID, "%s: %s must be true or false", path, fields[f].key);
    *dst = v->boolean;
    return DDP_OK;
}

static ddp_status need_cap(const char *path, const json_value *v, manifest_ddp_field f, size_t *dst)
{
    if (v->type != JSON_NUMBER || v->number != floor(v->number) || v->number < 1 || v->number > 1099511627776.0)
        return ddp_error(DDP_ERR_INVALID, "%s: %s must be a whole number in 1..1099511627776", path, fields[f].key);
    *dst = (size_t)v->number;
    return DDP_OK;
}

/* One member of "ddp" (or the two outside it) into out. */
static ddp_status read_field(const char *path, const json_value *v, manifest_ddp_field f, ddp_config *out)
{
    int b = 0;
    switch (f) {
    case MF_BUCKET_CAP: return need_cap(path, v, f, &out->bucket_cap);
    case MF_FIRST_BUCKET_CAP: return need_cap(path, v, f, &out->first_bucket_cap);
    case MF_FIND_UNUSED: return need_bool(path, v, f, &out->find_unused);
    case MF_BUCKET_VIEW: return need_bool(path, v, f, &out->bucket_view);
    case MF_STATIC_GRAPH: return need_bool(path, v, f, &out->static_graph);
    case MF_BROADCAST_BUFFERS:
        DDP_CHECK(need_bool(path, v, f, &b));
        out->no_broadcast_buffers = !b;
        return DDP_OK;
    case MF_FIND_UNUSED_RULE:
        if (v->type != JSON_STRING || (strcmp(v->string, "window") != 0 && strcmp(v->string, "syncing-backward") != 0))
            return ddp_error(DDP_ERR_INVALID, "%s: %s must be \"window\" or \"syncing-backward\"", path, fields[f].key);
        out->find_unused_syncing_backward = strcmp(v->string, "syncing-backward") == 0;
        return DDP_OK;
    case MF_ALGO:
        if (v->type != JSON_STRING || coll_algo_parse(v->string, &out->algo) != DDP_OK)
            return ddp_error(DDP_ERR_INVALID, "%s: %s is not an algorithm of this ddpsim (see --algo)", path,
                             fields[f].key);
        return DDP_OK;
    case MF_COMM_HOOK:
        if (v->type != JSON_STRING || ddp_comm_hook_parse(v->string, &out->comm_hook) != DDP_OK)
            return ddp_error(DDP_ERR_INVALID, "%s: %s must be \"none\", \"allreduce\", \"fp16\" or \"bf16\"", path,
                             fields[f].key);
        return DDP_OK;
    case MF_ZERO_GRAD:
        if (v->type != JSON_STRING || (strcmp(v->string, "fill_zeros") != 0 && strcmp(v->string, "set_to_none") != 0))
            return ddp_error(DDP_ERR_INVALID, "%s: \"zero_grad\" must be \"fill_zeros\" or \"set_to_none\"", path);
        out->set_to_none = strcmp(v->string, "set_to_none") == 0;
        return DDP_OK;
    case MF_LR:
        if (v->type != JSON_NUMBER || !isfinite(v->number) || fabs(v->number) > 1e6)
            return ddp_error(DDP_ERR_INVALID, "%s: optimizer.lr must be a finite number", path);
        out->lr = (float)v->number;
        return DDP_OK;
    case MF_MOMENTUM:
        if (v->type != JSON_NUMBER || !(v->number >= 0 && v->number < 1))
            return ddp_error(DDP_ERR_INVALID, "%s: optimizer.momentum must be a number in [0, 1)", path);
        out->momentum = (float)v->number;
        return DDP_OK;
    case MF_LOSS_SCALE: {
        char err[160];
        if (v->type == JSON_NULL) {
            out->scaler.on = 0;
            return DDP_OK;
        }
        if (v->type != JSON_STRING || scaler_parse(v->string, &out->scaler, err, sizeof err) != 0)
            return ddp_error(DDP_ERR_INVALID, "%s: \"loss_scale\" must be null or a --loss-scale spec (\"S\" or "
                             "\"dynamic:INIT,GROWTH,BACKOFF,INTERVAL\")%s%s", path, v->type == JSON_STRING ? ": " : "",
                             v->type == JSON_STRING ? err : "");
        return DDP_OK;
    }
    case MF_OPTIMIZER:
    case MF_NFIELDS: break; /* read_optimizer */
    }
    return DDP_OK;
}

/* A number of "optimizer" into *dst, when the member is there. */
static ddp_status optional_number(const char *path, const json_value *opt, const char *key, double *dst)
{
    const json_value *v = json_get(opt, key);
    if (!v)
        return DDP_OK;
    if (v->type != JSON_NUMBER)
        return ddp_error(DDP_ERR_INVALID, "%s: optimizer.%s must be a number", path, key);
    *dst = v->number;
    return DDP_OK;
}

/* optimizer.type: "sgd" (its momentum read as a field of its own), or "adamw" and its hyperparameters. */
static ddp_status read_optimizer(const char *path, const json_value *opt, ddp_config *out, int *given)
{
    const json_value *type = json_get(opt, "type"), *betas = json_get(opt, "betas");
    *given = type != NULL;
    if (!type || (type->type == JSON_STRING && strcmp(type->string, "sgd") == 0))
        return DDP_OK;
    if (type->type != JSON_STRING || strcmp(type->string, "adamw") != 0)
        return ddp_error(DDP_ERR_INVALID,
                         "%s: optimizer.type: \"sgd\" (torch.optim.SGD, with \"momentum\" or without) and \"adamw\" "
                         "(torch.optim.AdamW) are checked",
                         path);
    if (json_get(opt, "momentum"))
        return ddp_error(DDP_ERR_INVALID, "%s: optimizer.momentum belongs to \"sgd\", not \"adamw\"", path);
    out->adamw = ddp_adamw_default();
    if (betas) {
        if (betas->type != JSON_ARRAY || betas->n != 2 || betas->items[0].type != JSON_NUMBER ||
            betas->items[1].type != JSON_NUMBER)
            return ddp_error(DDP_ERR_INVALID, "%s: optimizer.betas must be an array of two numbers", path);
        out->adamw.beta1 = betas->items[0].number;
        out->adamw.beta2 = betas->items[1].number;
    }
    DDP_CHECK(optional_number(path, opt, "eps", &out->adamw.eps));
    DDP_CHECK(optional_number(path, opt, "weight_decay", &out->adamw.weight_decay));
    const char *bad = ddp_adamw_invalid(&out->adamw);
    if (bad)
        return ddp_error(DDP_ERR_INVALID, "%s: optimizer (adamw): %s", path, bad);
    return DDP_OK;
}

ddp_status manifest_read_ddp(const char *path, const json_value *root, ddp_config *out, manifest_ddp_fields *read)
{
    *out = ddp_config_default();
    *read = 0;
    const json_value *ddp = json_get(root, "ddp"), *opt = json_get(root, "optimizer"), *v;
    if (ddp && ddp->type != JSON_OBJECT)
        return ddp_error(DDP_ERR_INVALID, "%s: \"ddp\" is %s, expected an object", path, json_type_name(ddp->type));
    if (opt && opt->type != JSON_OBJECT)
        return ddp_error(DDP_ERR_INVALID, "%s: \"optimizer\" is %s, expected an object", path,
                         json_type_name(opt->type));
    for (int k = MF_BUCKET_CAP; ddp && k <= MF_BROADCAST_BUFFERS; k++)
        if ((v = json_get(ddp, fields[k].key + strlen("ddp.")))) {
            DDP_CHECK(read_field(path, v, (manifest_ddp_field)k, out));
            *read |= 1u << k;
        }
    if ((v = json_get(root, "zero_grad"))) {
        DDP_CHECK(read_field(path, v, MF_ZERO_GRAD, out));
        *read |= 1u << MF_ZERO_GRAD;
    }
    if ((v = opt ? json_get(opt, "lr") : NULL) || (v = json_get(root, "lr"))) { /* version 1 dumps: at the top */
        DDP_CHECK(read_field(path, v, MF_LR, out));
        *read |= 1u << MF_LR;
    }
    if ((v = opt ? json_get(opt, "momentum") : NULL)) {
        DDP_CHECK(read_field(path, v, MF_MOMENTUM, out));
        *read |= 1u << MF_MOMENTUM;
    }
    if (!(*read & (1u << MF_FIND_UNUSED)) && (v = json_get(root, "find_unused_parameters"))) {
        DDP_CHECK(read_field(path, v, MF_FIND_UNUSED, out));
        *read |= 1u << MF_FIND_UNUSED;
    }
    if ((v = json_get(root, "loss_scale"))) {
        DDP_CHECK(read_field(path, v, MF_LOSS_SCALE, out));
        *read |= 1u << MF_LOSS_SCALE;
    }
    int typed = 0;
    if (opt)
        DDP_CHECK(read_optimizer(path, opt, out, &typed));
    if (typed)
        *read |= 1u << MF_OPTIMIZER;
    return DDP_OK;
}

ddp_status manifest_ddp_compare(const char *path, const char *what, const ddp_config *file, const ddp_config *run,
                                manifest_ddp_fields which)
{
    char a[256], b[256];
    for (int k = 0; k < MF_NFIELDS; k++) {
        if (!(which & (1u << k)))
            continue;
        field_text(file, (manifest_ddp_field)k, a, sizeof a);
        field_text(run, (manifest_ddp_field)k, b, sizeof b);
        if (strcmp(a, b) != 0)
            return ddp_error(DDP_ERR_INVALID, "%s: the %s was made with %s %s, this run has %s (%s)", path, what,
                             fields[k].key, a, b, fields[k].option);
    }
    return DDP_OK;
}

void manifest_write_plants(FILE *f, const manifest_plant *p, int n)
{
    if (!n)
        return;
    fprintf(f, ",\n \"planted\": [");
    for (int i = 0; i < n; i++)
        fprintf(f, "%s{\"kind\": \"%s\", \"rank\": %d, \"op\": %zu}", i ? ", " : "", p[i].nan ? "nan" : "inf",
                p[i].rank, p[i].op);
    fprintf(f, "]");
}

ddp_status manifest_read_plants(const char *path, const json_value *root, const sched *s, int nranks,
                                manifest_plant *out, int *n)
{
    *n = 0;
    const json_value *list = json_get(root, "planted");
    if (!list)
        return DDP_OK;
    if (list->type != JSON_ARRAY || list->n > MANIFEST_MAX_PLANTS)
        return ddp_error(DDP_ERR_INVALID, "%s: \"planted\" must be an array of at most %d objects", path,
                         MANIFEST_MAX_PLANTS);
    for (size_t i = 0; i < list->n; i++) {
        const json_value *e = &list->items[i], *kind = json_get(e, "kind"), *rank = json_get(e, "rank"),
                         *op = json_get(e, "op");
        if (!kind || kind->type != JSON_STRING || (strcmp(kind->string, "inf") != 0 && strcmp(kind->string, "nan") != 0))
            return ddp_error(DDP_ERR_INVALID, "%s: planted %zu: \"kind\" must be \"inf\" or \"nan\"", path, i);
        if (!rank || rank->type != JSON_NUMBER || rank->number != floor(rank->number) || rank->number < 0 ||
            rank->number >= nranks)
            return ddp_error(DDP_ERR_INVALID, "%s: planted %zu: \"rank\" must be a rank of the run (0..%d)", path, i,
                             nranks - 1);
        if (!op || op->type != JSON_NUMBER || op->number != floor(op->number) || op->number < 0 ||
            op->number >= (double)s->nops || s->ops[(size_t)op->number] != OP_BWD)
            return ddp_error(DDP_ERR_INVALID, "%s: planted %zu: \"op\" must be the index of a backward (bwd) among "
                             "the %zu ops", path, i, s->nops);
        out[i] = (manifest_plant){.nan = kind->string[0] == 'n', .rank = (int)rank->number, .op = (size_t)op->number};
    }
    *n = (int)list->n;
    return DDP_OK;
}

void manifest_write_params(FILE *f, const model *m)
{
    fprintf(f, "[");
    for (int i = 0; i < model_nparams(m); i++) {
        const model_param *p = model_param_at(m, i);
        fprintf(f, "%s\n  {\"name\": ", i ? "," : "");
        jsonw_string(f, p->name);
        fprintf(f, ", \"shape\": [");
        for (int k = 0; k < p->ndim; k++)
            fprintf(f, "%s%d", k ? ", " : "", p->shape[k]);
        fprintf(f, "]}");
    }
    fprintf(f, "\n ]");
}

void manifest_write_buffers(FILE *f, const model *m)
{
    fprintf(f, "[");
    for (int i = 0; i < model_nbuffers(m); i++) {
        const model_buffer *b = model_buffer_at(m, i);
        fprintf(f, "%s\n  {\"name\": ", i ? "," : "");
        jsonw_string(f, b->name);
        fprintf(f, ", \"shape\": [%zu]}", b->count);
    }
    fprintf(f, "\n ]");
}

void manifest_write_uneven(FILE *f, const sched *s, int nranks)
{
    if (s->njoins) {
        fprintf(f, ",\n \"joins\": [");
        for (size_t k = 0; k < s->njoins; k++)
            fprintf(f, "%s{\"enter\": %zu, \"exit\": %zu, \"divide_by_initial_world_size\": %s}", k ? ", " : "",
                    s->joins[k].enter_op, s->joins[k].exit_op,
                    s->joins[k].divide_by_initial_world_size ? "true" : "false");
        fprintf(f, "]");
    }
    if (!s->nuneven)
        return;
    uint32_t *counts = malloc(s->nuneven * (size_t)nranks * sizeof *counts);
    if (!counts || sched_resolve(s, nranks, counts) != DDP_OK) {
        free(counts);
        return; /* checked before: cannot happen */
    }
    fprintf(f, ",\n \"uneven\": [");
    for (size_t k = 0; k < s->nuneven; k++) {
        const sched_uneven *u = &s->uneven[k];
        fprintf(f, "%s{\"first\": %zu, \"body\": %zu, \"iterations\": %u, \"counts\": [", k ? ", " : "",
                u->first_op, u->body_ops, u->iterations);
        for (int r = 0; r < nranks; r++)
            fprintf(f, "%s%u", r ? ", " : "", counts[k * (size_t)nranks + (size_t)r]);
        fprintf(f, "]}");
    }
    fprintf(f, "]");
    free(counts);
}
