/*
 * trace.c - writing, merging and loading the event log (trace.h).
 */
#include "trace.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "clock.h"
#include "jsonw.h"
#include "model.h"

/* 2: an end event per rank; the reference's own check has collectives. 3: "us" on every event, and the
 * implementation's collectives and communication thread (the HTML timeline); a replay reads 2 and 3 alike. */
#define TRACE_VERSION 3
#define TRACE_OLDEST_REPLAYED 2

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
    pthread_mutex_init(&w->mu, NULL);
    w->threads[0] = pthread_self();
    w->nthreads = 1;
    w->on = 1;
    world_record_arrivals(wr, 1);
    return DDP_OK;
}

/* The calling thread's number (0: the main thread), under w->mu. */
static int thread_number(trace_writer *w)
{
    pthread_t self = pthread_self();
    for (int k = 0; k < w->nthreads; k++)
        if (pthread_equal(w->threads[k], self))
            return k;
    if (w->nthreads == TRACE_MAX_THREADS)
        return TRACE_MAX_THREADS - 1;
    w->threads[w->nthreads] = self;
    return w->nthreads++;
}

/* One line, under w->mu. */
static void write_event(trace_writer *w, size_t op, const char *ev, const char *extra)
{
    if (!w->f)
        return;
    int th = thread_number(w);
    fprintf(w->f, "{\"t\": %llu, \"rank\": %d, \"op\": %zu, \"ev\": \"%s\", \"us\": %.1f%s%s", (unsigned long long)w->t++,
            w->rank, op, ev, clock_now_ns() / 1e3, extra ? ", " : "", extra ? extra : "");
    if (th > 0)
        fprintf(w->f, ", \"thread\": %d", th);
    fputs("}\n", w->f);
    w->nready += strcmp(ev, "ready") == 0;
    w->narrivals += strcmp(ev, "arrive") == 0;
}

void trace_event(trace_writer *w, size_t op, const char *ev, const char *extra)
{
    if (!w->on)
        return;
    pthread_mutex_lock(&w->mu);
    w->op = op;
    write_event(w, op, ev, extra);
    pthread_mutex_unlock(&w->mu);
}

void trace_event_here(void *writer, const char *ev, const char *extra)
{
    trace_writer *w = writer;
    if (!w || !w->on)
        return;
    pthread_mutex_lock(&w->mu);
    write_event(w, w->op, ev, extra);
    pthread_mutex_unlock(&w->mu);
}

void trace_flush(trace_writer *w)
{
    if (!w->on)
        return;
    pthread_mutex_lock(&w->mu);
    if (w->f)
        fflush(w->f);
    pthread_mutex_unlock(&w->mu);
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

ddp_status trace_close(trace_writer *w, size_t op, int complete)
{
    if (!w->on)
        return DDP_OK;
    pthread_mutex_lock(&w->mu);
    if (complete) {
        char extra[96];
        snprintf(extra, sizeof extra, "\"ready\": %llu, \"arrivals\": %llu", (unsigned long long)w->nready,
                 (unsigned long long)w->narrivals);
        write_event(w, op, "end", extra);
    }
    int bad = ferror(w->f);
    int closed = fclose(w->f);
    w->f = NULL;
    pthread_mutex_unlock(&w->mu);
    if (bad || closed != 0)
        return ddp_error(DDP_ERR_SYSTEM, "cannot write the trace of rank %d", w->rank);
    return DDP_OK;
}

void trace_release(trace_writer *w)
{
    if (w->on)
        pthread_mutex_destroy(&w->mu);
    w->on = 0;
}

/* How rank r ended, as its supervisor-written end says it (world_fate), for a rank that wrote no end itself. */
static const char *fate_word(const world *w, int r)
{
    if (!w)
        return "unknown";
    switch (world_outcome(w, r)->fate) {
    case WORLD_FATE_NOT_STARTED: return "not-started";
    case WORLD_FATE_FAILED: return "failed";
    case WORLD_FATE_SIGNALED: return "signaled";
    case WORLD_FATE_STOPPED: return "stopped";
    case WORLD_FATE_OK: break;
    }
    return "unknown"; /* returned DDP_OK yet wrote no end: its file could not be written */
}

/*
 * Rank r's part onto out, line by line: a last line cut mid-write (the rank
 * was killed) is dropped, and a rank that wrote no end of its own gets one
 * from its supervisor, with its counts and how it ended.
 */
static ddp_status merge_part(FILE *out, FILE *in, int r, const world *w)
{
    char line[4096];
    unsigned long long t = 0, op = 0, nready = 0, narr = 0;
    double us = -1;
    int ended = 0;
    while (fgets(line, sizeof line, in)) {
        size_t n = strlen(line);
        if (n == 0 || line[n - 1] != '\n')
            break; /* killed mid-write (or longer than any event ddpsim writes): not an event */
        if (fputs(line, out) == EOF)
            return DDP_ERR_SYSTEM;
        sscanf(line, "{\"t\": %llu, \"rank\": %*d, \"op\": %llu, \"ev\": \"%*[^\"]\", \"us\": %lf", &t, &op, &us);
        t++;
        nready += strstr(line, "\"ev\": \"ready\"") != NULL;
        narr += strstr(line, "\"ev\": \"arrive\"") != NULL;
        ended |= strstr(line, "\"ev\": \"end\"") != NULL;
    }
    if (ended)
        return DDP_OK;
    fprintf(out, "{\"t\": %llu, \"rank\": %d, \"op\": %llu, \"ev\": \"end\"", t, r, op);
    if (us >= 0)
        fprintf(out, ", \"us\": %.1f", us); /* it did nothing after its last event, as far as anyone knows */
    fprintf(out, ", \"ready\": %llu, \"arrivals\": %llu, \"how\": \"%s\"}\n", nready, narr, fate_word(w, r));
    return ferror(out) ? DDP_ERR_SYSTEM : DDP_OK;
}

ddp_status trace_merge(const char *path, int nranks, const char *run_key, const char *extra_json, const world *w)
{
    FILE *out = fopen(path, "w");
    if (!out)
        return ddp_error(DDP_ERR_SYSTEM, "cannot create --trace %s: %s", path, strerror(errno));
    fprintf(out, "{\"ddpsim_trace\": %d, \"run\": ", TRACE_VERSION);
    jsonw_string(out, run_key);
    fprintf(out, "%s%s}\n", extra_json && *extra_json ? ", " : "", extra_json ? extra_json : "");
    char part[PATH_MAX];
    ddp_status s = DDP_OK;
    for (int r = 0; r < nranks && s == DDP_OK; r++) {
        snprintf(part, sizeof part, "%s.rank%d", path, r);
        FILE *in = fopen(part, "r");
        if (!in) {
            s = ddp_error(DDP_ERR_SYSTEM, "trace: cannot read %s: %s", part, strerror(errno));
            break;
        }
        if (merge_part(out, in, r, w) != DDP_OK)
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

/* What one rank's events must add up to. */
typedef struct rank_log {
    uint64_t next_t;        /* the next event's logical time */
    int ended;
    unsigned long long end_ready, end_arrivals;
} rank_log;

#define BAD(...) ddp_error(DDP_ERR_INVALID, __VA_ARGS__)

/* One event line of the trace into out and logs. */
static ddp_status load_event(const char *path, long lineno, const char *line, int nranks, verify_replay *out,
                             rank_log *logs, size_t *cap_ready, size_t *cap_arr)
{
    unsigned long long t;
    int rank, used;
    size_t op;
    char ev[16];
    if (sscanf(line, "{\"t\": %llu, \"rank\": %d, \"op\": %zu, \"ev\": \"%15[^\"]\"%n", &t, &rank, &op, ev, &used) < 4)
        return BAD("%s line %ld: not an event of this trace format", path, lineno);
    if (rank < 0 || rank >= nranks)
        return BAD("%s line %ld: rank %d is not a rank of this run (0..%d)", path, lineno, rank, nranks - 1);
    rank_log *lg = &logs[rank];
    if (lg->ended)
        return BAD("%s line %ld: an event of rank %d after its end", path, lineno, rank);
    if (t != lg->next_t)
        return BAD("%s line %ld: rank %d's event %llu follows its event %llu (events are missing)", path,
                   lineno, rank, t, (unsigned long long)lg->next_t - 1);
    lg->next_t++;
    if (strcmp(ev, "ready") == 0) {
        int p;
        const char *q = strstr(line + used, "\"param\": ");
        if (!q || sscanf(q, "\"param\": %d", &p) != 1 || p < 0 || p >= MODEL_MAX_PARAMS)
            return BAD("%s line %ld: a ready event without a parameter index", path, lineno);
        if (push_i32(&out->ready[rank], &out->nready[rank], &cap_ready[rank], p))
            return ddp_error(DDP_ERR_NOMEM, "trace: ready events");
    } else if (strcmp(ev, "arrive") == 0) {
        unsigned pos;
        const char *q = strstr(line + used, "\"pos\": ");
        if (!q || sscanf(q, "\"pos\": %u", &pos) != 1 || pos >= (unsigned)nranks)
            return BAD("%s line %ld: an arrival without a position 0..%d", path, lineno, nranks - 1);
        if (push_i32((int32_t **)&out->arrivals[rank], &out->narrivals[rank], &cap_arr[rank], (int32_t)pos))
            return ddp_error(DDP_ERR_NOMEM, "trace: arrivals");
    } else if (strcmp(ev, "end") == 0) {
        const char *q = strstr(line + used, "\"ready\": ");
        if (!q || sscanf(q, "\"ready\": %llu, \"arrivals\": %llu", &lg->end_ready, &lg->end_arrivals) != 2)
            return BAD("%s line %ld: an end event without its counts", path, lineno);
        const char *how = strstr(line + used, "\"how\": \"");
        if (how && sscanf(how, "\"how\": \"%15[a-z-]\"", out->how[rank]) != 1)
            return BAD("%s line %ld: an end event whose \"how\" is not a word", path, lineno);
        lg->ended = 1;
    }
    return DDP_OK;
}

/*
 * A whole and consistent trace: every rank ended with what it wrote, and every barrier seen alike by all. A run
 * that did not finish keeps the barriers every rank passed: its ranks stopped at different ones.
 */
static ddp_status check_whole(const char *path, int nranks, verify_replay *out, const rank_log *logs)
{
    size_t common = SIZE_MAX;
    for (int r = 0; r < nranks; r++) {
        out->stopped |= out->how[r][0] != '\0';
        if (out->narrivals[r] < common)
            common = out->narrivals[r];
    }
    for (int r = 0; r < nranks; r++) {
        if (logs[r].next_t == 0)
            return BAD("%s has no events of rank %d", path, r);
        if (!logs[r].ended)
            return BAD("%s is cut short: rank %d has no end event (the run it recorded did not finish, or "
                       "the file was truncated)",
                       path, r);
        if (logs[r].end_ready != out->nready[r] || logs[r].end_arrivals != out->narrivals[r])
            return BAD("%s: rank %d wrote %llu ready events and %llu arrivals, but the file holds %zu and %zu",
                       path, r, logs[r].end_ready, logs[r].end_arrivals, out->nready[r], out->narrivals[r]);
        if (!out->stopped && out->narrivals[r] != out->narrivals[0])
            return BAD("%s: rank %d passed %zu barriers, rank 0 %zu; every barrier is every rank's", path, r,
                       out->narrivals[r], out->narrivals[0]);
    }
    if (out->stopped)
        for (int r = 0; r < nranks; r++)
            out->narrivals[r] = common;
    unsigned char seen[WORLD_MAX_RANKS];
    for (size_t k = 0; k < out->narrivals[0]; k++) {
        memset(seen, 0, sizeof seen);
        for (int r = 0; r < nranks; r++) {
            uint32_t pos = out->arrivals[r][k];
            if (seen[pos])
                return BAD("%s: at barrier %zu two ranks arrived in position %u; positions 0..%d must each "
                           "appear once, or forcing them deadlocks",
                           path, k, pos, nranks - 1);
            seen[pos] = 1;
        }
    }
    return DDP_OK;
}

/* The JSON string member "key" of line, unescaped into out ("" when absent; a \\u escape past ASCII is '?'). */
static void json_member_string(const char *line, const char *key, char *out, size_t len)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    const char *p = strstr(line, pat);
    size_t n = 0;
    for (p = p ? p + strlen(pat) : ""; *p && *p != '"' && n + 1 < len; p++) {
        char c = *p;
        if (c == '\\' && p[1]) {
            c = *++p;
            if (c == 'n')
                c = '\n';
            else if (c == 't')
                c = '\t';
            else if (c == 'r')
                c = '\r';
            else if (c == 'u') {
                unsigned v;
                c = sscanf(p + 1, "%4x", &v) == 1 && v < 0x80 ? (char)v : '?';
                for (int k = 0; k < 4 && p[1]; k++)
                    p++;
            }
        }
        out[n++] = c;
    }
    out[n] = '\0';
}

ddp_status trace_load(const char *path, const char *run_key, int nranks, verify_replay *out)
{
    memset(out, 0, sizeof *out);
    out->nranks = nranks;
    struct stat st;
    if (stat(path, &st) != 0)
        return BAD("cannot open %s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return BAD("%s is a directory, not a trace file", path);
    FILE *f = fopen(path, "r");
    if (!f)
        return BAD("cannot open %s: %s", path, strerror(errno));
    size_t cap_ready[WORLD_MAX_RANKS] = {0}, cap_arr[WORLD_MAX_RANKS] = {0};
    rank_log *logs = calloc((size_t)nranks, sizeof *logs);
    char line[8192]; /* the header holds the command line and the failure's words */
    long lineno = 0;
    ddp_status s = logs ? DDP_OK : ddp_error(DDP_ERR_NOMEM, "trace: %d ranks", nranks);
    while (s == DDP_OK && fgets(line, sizeof line, f)) {
        lineno++;
        int whole = strchr(line, '\n') != NULL;
        if (!whole && feof(f) && lineno > 1) {
            s = BAD("%s is cut short at line %ld: its last line is incomplete (the file was truncated)", path,
                    lineno);
            break;
        }
        if (lineno == 1) {
            int version;
            const char *k = strstr(line, "\"run\": \"");
            size_t klen = strlen(run_key);
            if (!whole || sscanf(line, "{\"ddpsim_trace\": %d,", &version) != 1 || !k)
                s = BAD("%s is not a ddpsim trace (its first line is not a ddpsim_trace header)", path);
            else if (version < TRACE_OLDEST_REPLAYED || version > TRACE_VERSION)
                s = BAD("%s is trace version %d; this ddpsim reads versions %d to %d: record it again", path,
                        version, TRACE_OLDEST_REPLAYED, TRACE_VERSION);
            else if (strncmp(k + 8, run_key, klen) != 0 || k[8 + klen] != '"') {
                const char *end = strchr(k + 8, '"'); /* the recorded run's key ends at its quote */
                s = BAD("%s was recorded for another run; replay it with the same ranks, seed, model, batch, "
                        "schedule and --impl, and a scheduled run's --sched and --chaos (recorded: %.*s; this run: %s)",
                        path, end ? (int)(end - (k + 8)) : 0, k + 8, run_key);
            }
            json_member_string(line, "failure", out->failure, sizeof out->failure);
            continue;
        }
        if (!whole)
            s = BAD("%s line %ld: longer than any event ddpsim writes", path, lineno);
        else
            s = load_event(path, lineno, line, nranks, out, logs, cap_ready, cap_arr);
    }
    if (s == DDP_OK && ferror(f))
        s = BAD("cannot read %s", path);
    if (s == DDP_OK && lineno == 0)
        s = BAD("%s is empty", path);
    if (s == DDP_OK)
        s = check_whole(path, nranks, out, logs);
    fclose(f);
    free(logs);
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
