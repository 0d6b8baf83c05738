/*
 * trace.c - writing, merging and loading the event log (trace.h).
 */
#include "trace.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "model.h"

ddp_status trace_open(trace_writer *w, const char *path, int rank, world_rank *wr)
{
    memset(w, 0, sizeof *w);
    w->rank = rank;
    if (!path)
        return DDP_OK;
    char part[PATH_MAX];
    snprintf(part, sizeof part, "%s.rank%d", path, rank);
    w->f = fopen(part, "w");
    if (!w->f)
        return ddp_error(DDP_ERR_SYSTEM, "cannot create %s: %s", part, strerror(errno));
    world_record_arrivals(wr, 1);
    return DDP_OK;
}

void trace_event(trace_writer *w, size_t op, const char *ev, const char *extra)
{
    if (w->f)
        fprintf(w->f, "{\"t\": %llu, \"rank\": %d, \"op\": %zu, \"ev\": \"%s\"%s%s}\n", (unsigned long long)w->t++,
                w->rank, op, ev, extra ? ", " : "", extra ? extra : "");
}

ddp_status trace_arrivals(trace_writer *w, size_t op, world_rank *wr)
{
    if (!w->f)
        return DDP_OK;
    const uint32_t *pos;
    int lost;
    size_t n = world_take_arrivals(wr, &pos, &lost);
    if (lost)
        return ddp_error(DDP_ERR_NOMEM, "trace: out of memory recording arrivals");
    for (size_t i = 0; i < n; i++) {
        char extra[64];
        snprintf(extra, sizeof extra, "\"pos\": %u", pos[i]);
        trace_event(w, op, "arrive", extra);
    }
    return DDP_OK;
}

ddp_status trace_close(trace_writer *w)
{
    if (!w->f)
        return DDP_OK;
    int bad = ferror(w->f);
    int closed = fclose(w->f);
    w->f = NULL;
    if (bad || closed != 0)
        return ddp_error(DDP_ERR_SYSTEM, "cannot write the trace of rank %d", w->rank);
    return DDP_OK;
}

ddp_status trace_replay_ready(const verify_replay *rp, int rank, size_t *next, const unsigned char *used,
                              int nparams, int *order, int n)
{
    unsigned char seen[MODEL_MAX_PARAMS] = {0};
    for (int i = 0; i < n; i++) {
        if (*next >= rp->nready[rank])
            return ddp_error(DDP_ERR_INVALID, "replay: the trace has fewer ready events than this run on rank %d", rank);
        int p = rp->ready[rank][(*next)++];
        if (p < 0 || p >= nparams || !used[p] || seen[p])
            return ddp_error(DDP_ERR_INVALID, "replay: ready event %zu of rank %d does not fit this run", *next - 1,
                             rank);
        seen[p] = 1;
        order[i] = p;
    }
    return DDP_OK;
}

ddp_status trace_merge(const char *path, int nranks, const char *run_key, const char *extra_json)
{
    FILE *out = fopen(path, "w");
    if (!out)
        return ddp_error(DDP_ERR_SYSTEM, "cannot create --trace %s: %s", path, strerror(errno));
    fprintf(out, "{\"ddpsim_trace\": 1, \"run\": ");
    jsonw_string(out, run_key);
    fprintf(out, "%s%s}\n", extra_json && *extra_json ? ", " : "", extra_json ? extra_json : "");
    char part[PATH_MAX], buf[65536];
    ddp_status s = DDP_OK;
    for (int r = 0; r < nranks && s == DDP_OK; r++) {
        snprintf(part, sizeof part, "%s.rank%d", path, r);
        FILE *in = fopen(part, "r");
        if (!in) {
            s = ddp_error(DDP_ERR_SYSTEM, "trace: cannot read %s: %s", part, strerror(errno));
            break;
        }
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0)
            if (fwrite(buf, 1, n, out) != n)
                s = ddp_error(DDP_ERR_SYSTEM, "cannot write --trace %s", path);
        fclose(in);
        remove(part);
    }
    if (fclose(out) != 0 && s == DDP_OK)
        s = ddp_error(DDP_ERR_SYSTEM, "cannot write --trace %s", path);
    trace_discard(path, nranks);
    return s;
}

void trace_discard(const char *path, int nranks)
{
    char part[PATH_MAX];
    for (int r = 0; r < nranks; r++) {
        snprintf(part, sizeof part, "%s.rank%d", path, r);
        remove(part);
    }
}

static int push_i32(int32_t **a, size_t *n, size_t *cap, int32_t v)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        int32_t *p = realloc(*a, c * sizeof *p);
        if (!p)
            return -1;
        *a = p;
        *cap = c;
    }
    (*a)[(*n)++] = v;
    return 0;
}

ddp_status trace_load(const char *path, const char *run_key, int nranks, verify_replay *out)
{
    memset(out, 0, sizeof *out);
    out->nranks = nranks;
    FILE *f = fopen(path, "r");
    if (!f)
        return ddp_error(DDP_ERR_INVALID, "cannot open --replay %s: %s", path, strerror(errno));
    size_t cap_ready[WORLD_MAX_RANKS] = {0}, cap_arr[WORLD_MAX_RANKS] = {0};
    char line[1024];
    long lineno = 0;
    ddp_status s = DDP_OK;
    while (s == DDP_OK && fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            s = ddp_error(DDP_ERR_INVALID, "--replay %s line %ld: too long", path, lineno);
            break;
        }
        if (lineno == 1) {
            const char *k = strstr(line, "\"run\": \"");
            size_t klen = strlen(run_key);
            if (strncmp(line, "{\"ddpsim_trace\": 1,", 19) != 0 || !k)
                s = ddp_error(DDP_ERR_INVALID, "--replay %s is not a ddpsim trace (version 1)", path);
            else if (strncmp(k + 8, run_key, klen) != 0 || k[8 + klen] != '"')
                s = ddp_error(DDP_ERR_INVALID,
                              "--replay %s was recorded for another run; replay it with the same ranks, seed, "
                              "model, batch, schedule and --impl (this run: %s)",
                              path, run_key);
            continue;
        }
        unsigned long long t;
        int rank, used;
        size_t op;
        char ev[16];
        if (sscanf(line, "{\"t\": %llu, \"rank\": %d, \"op\": %zu, \"ev\": \"%15[^\"]\"%n", &t, &rank, &op, ev, &used) <
                4 ||
            rank < 0 || rank >= nranks) {
            s = ddp_error(DDP_ERR_INVALID, "--replay %s line %ld: not an event of a rank 0..%d", path, lineno,
                          nranks - 1);
            break;
        }
        if (strcmp(ev, "ready") == 0) {
            int p;
            const char *q = strstr(line + used, "\"param\": ");
            if (!q || sscanf(q, "\"param\": %d", &p) != 1 || p < 0) {
                s = ddp_error(DDP_ERR_INVALID, "--replay %s line %ld: a ready event without a parameter", path, lineno);
                break;
            }
            if (push_i32(&out->ready[rank], &out->nready[rank], &cap_ready[rank], p))
                s = ddp_error(DDP_ERR_NOMEM, "--replay: ready events");
        } else if (strcmp(ev, "arrive") == 0) {
            unsigned pos;
            const char *q = strstr(line + used, "\"pos\": ");
            if (!q || sscanf(q, "\"pos\": %u", &pos) != 1 || pos >= (unsigned)nranks) {
                s = ddp_error(DDP_ERR_INVALID, "--replay %s line %ld: an arrival without a position 0..%d", path,
                              lineno, nranks - 1);
                break;
            }
            if (push_i32((int32_t **)&out->arrivals[rank], &out->narrivals[rank], &cap_arr[rank], (int32_t)pos))
                s = ddp_error(DDP_ERR_NOMEM, "--replay: arrivals");
        }
    }
    if (s == DDP_OK && lineno == 0)
        s = ddp_error(DDP_ERR_INVALID, "--replay %s is empty", path);
    fclose(f);
    if (s != DDP_OK)
        trace_free(out);
    return s;
}

void trace_free(verify_replay *r)
{
    for (int i = 0; i < WORLD_MAX_RANKS; i++) {
        free(r->ready[i]);
        free(r->arrivals[i]);
    }
    memset(r, 0, sizeof *r);
}
