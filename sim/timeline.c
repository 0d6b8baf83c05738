/*
 * timeline.c - a traced run's timeline as inline SVG (timeline.h).
 */
#include "config.h" /* first: _GNU_SOURCE for open_memstream */
#include "timeline.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "html.h"
#include "world.h"

typedef enum tl_kind { TL_OP, TL_READY, TL_COLL, TL_LAUNCH, TL_REDUCED, TL_END } tl_kind;

typedef struct tl_event {
    tl_kind kind;
    int rank, thread, item, ok;
    size_t op;
    double us, dur;    /* when it was written (a collective's or an item's end) and how long it took */
    size_t bytes;
    char name[48];     /* the op's, the parameter's, the collective's kind, the item's what */
    char group[8];
} tl_event;

typedef struct tl_trace {
    tl_event *ev;
    size_t n, cap;
    double t0, t1;     /* the span drawn */
} tl_trace;

enum { LEFT = 96, PLOT_W = 1100, LANE_H = 15, RANK_GAP = 12, AXIS_H = 22 };
enum { LANE_OPS, LANE_READY, LANE_MAIN }; /* then LANE_MAIN + k for thread k */

/* A string member "key": "value" of line into out ("" when absent). */
static void member_str(const char *line, const char *key, char *out, size_t len)
{
    char pat[32];
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    const char *p = strstr(line, pat);
    size_t n = 0;
    if (p)
        for (p += strlen(pat); *p && *p != '"' && n + 1 < len; p++)
            out[n++] = *p == '\\' && p[1] ? *++p : *p;
    out[n] = '\0';
}

/* A number member "key": v of line, or dflt. */
static double member_num(const char *line, const char *key, double dflt)
{
    char pat[32];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(line, pat);
    double v;
    return p && sscanf(p + strlen(pat), "%lf", &v) == 1 ? v : dflt;
}

/* One event line into tr (arrivals and unknown events are skipped): 0, or -1 with msg. */
static int take_line(tl_trace *tr, const char *line, long lineno, int nranks, char *msg, size_t len)
{
    unsigned long long t;
    tl_event e = {.ok = 1, .item = -1};
    char ev[16];
    int fields = sscanf(line, "{\"t\": %llu, \"rank\": %d, \"op\": %zu, \"ev\": \"%15[^\"]\", \"us\": %lf", &t, &e.rank,
                        &e.op, ev, &e.us);
    if (fields == 4 && strcmp(ev, "end") == 0)
        return 0; /* the supervisor's end of a rank that wrote no event: nothing to draw */
    if (fields != 5 || e.rank < 0 || e.rank >= nranks) {
        snprintf(msg, len, "line %ld is not an event of a trace with times", lineno);
        return -1;
    }
    if (strcmp(ev, "arrive") == 0)
        return 0;
    if (strcmp(ev, "ready") == 0) {
        e.kind = TL_READY;
        member_str(line, "name", e.name, sizeof e.name);
        e.item = (int)member_num(line, "param", -1);
    } else if (strcmp(ev, "coll") == 0) {
        e.kind = TL_COLL;
        member_str(line, "kind", e.name, sizeof e.name);
        member_str(line, "group", e.group, sizeof e.group);
        e.bytes = (size_t)member_num(line, "bytes", 0);
        e.dur = member_num(line, "dur_us", 0);
        e.ok = strstr(line, "\"ok\": false") == NULL;
    } else if (strcmp(ev, "launch") == 0 || strcmp(ev, "reduced") == 0) {
        e.kind = ev[0] == 'l' ? TL_LAUNCH : TL_REDUCED;
        member_str(line, "what", e.name, sizeof e.name);
        e.item = (int)member_num(line, "item", -1);
        e.dur = member_num(line, "dur_us", 0);
    } else if (strcmp(ev, "end") == 0) {
        e.kind = TL_END;
        member_str(line, "how", e.name, sizeof e.name); /* "": the rank finished; else how it stopped */
    } else if (sched_op_from_name(ev) >= 0) {
        e.kind = TL_OP;
        snprintf(e.name, sizeof e.name, "%s", ev);
    } else {
        return 0;
    }
    e.thread = (int)member_num(line, "thread", 0);
    if (e.thread < 0 || e.thread > 64)
        e.thread = 0;
    if (e.dur < 0)
        e.dur = 0;
    if (tr->n == TIMELINE_MAX_EVENTS) {
        snprintf(msg, len, "the trace holds more than %d events to draw", TIMELINE_MAX_EVENTS);
        return -1;
    }
    if (tr->n == tr->cap) {
        size_t cap = tr->cap ? 2 * tr->cap : 256;
        tl_event *p = realloc(tr->ev, cap * sizeof *p);
        if (!p) {
            snprintf(msg, len, "out of memory");
            return -1;
        }
        tr->ev = p;
        tr->cap = cap;
    }
    tr->ev[tr->n++] = e;
    return 0;
}

static int load(tl_trace *tr, const char *path, int nranks, char *msg, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(msg, len, "cannot read the trace %s: %s", path, strerror(errno));
        return -1;
    }
    char line[2048];
    long lineno = 0;
    int rc = 0, version = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        if (lineno == 1) {
            if (sscanf(line, "{\"ddpsim_trace\": %d,", &version) != 1 || version < 3) {
                snprintf(msg, len, "%s is not a trace with times (version 3 or later)", path);
                rc = -1;
            }
            continue;
        }
        rc = take_line(tr, line, lineno, nranks, msg, len);
    }
    fclose(f);
    if (rc == 0 && tr->n == 0) {
        snprintf(msg, len, "the trace %s holds no event to draw", path);
        rc = -1;
    }
    if (rc != 0)
        return rc;
    tr->t0 = tr->ev[0].us - tr->ev[0].dur;
    tr->t1 = tr->ev[0].us;
    for (size_t i = 0; i < tr->n; i++) {
        if (tr->ev[i].us - tr->ev[i].dur < tr->t0)
            tr->t0 = tr->ev[i].us - tr->ev[i].dur;
        if (tr->ev[i].us > tr->t1)
            tr->t1 = tr->ev[i].us;
    }
    if (tr->t1 <= tr->t0)
        tr->t1 = tr->t0 + 1;
    return 0;
}

static double x_of(const tl_trace *tr, double us)
{
    return LEFT + (us - tr->t0) * PLOT_W / (tr->t1 - tr->t0);
}

/* A span of time in words: "12.5 us", "3.20 ms". */
static void duration(char *out, size_t len, double us)
{
    if (us < 1000)
        snprintf(out, len, "%.1f us", us);
    else
        snprintf(out, len, "%.2f ms", us / 1e3);
}

static void size_words(char *out, size_t len, size_t bytes)
{
    if (bytes < 1024)
        snprintf(out, len, "%zu B", bytes);
    else if (bytes < 1024 * 1024)
        snprintf(out, len, "%.1f KiB", bytes / 1024.0);
    else
        snprintf(out, len, "%.1f MiB", bytes / 1048576.0);
}

/* A bar on a lane: x0..x1 at least a pixel wide, with a title. */
static void bar(FILE *f, const char *cls, double x0, double x1, double y, double h, const char *title)
{
    fprintf(f, "<rect class=\"%s\" x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%.0f\"><title>", cls, x0, y,
            x1 - x0 < 1 ? 1 : x1 - x0, h);
    html_escape(f, title);
    fputs("</title></rect>", f);
}

static void axis(FILE *f, const tl_trace *tr, double height)
{
    static const double steps[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5,
                                   1e6, 2e6, 5e6, 1e7};
    double span = tr->t1 - tr->t0, step = steps[sizeof steps / sizeof steps[0] - 1];
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (span / steps[i] <= 10) {
            step = steps[i];
            break;
        }
    fputs("<g class=\"axis\">", f);
    for (double t = 0; t <= span; t += step) {
        double x = x_of(tr, tr->t0 + t);
        char label[32] = "0";
        if (t > 0)
            duration(label, sizeof label, t);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\"/><text x=\"%.1f\" y=\"12\">%s</text>", x,
                AXIS_H - 6, x, height, x + 2, label);
    }
    fputs("</g>\n", f);
}

/* The threads rank r's events name: 1 + the highest "thread". */
static int rank_threads(const tl_trace *tr, int r)
{
    int n = 1;
    for (size_t i = 0; i < tr->n; i++)
        if (tr->ev[i].rank == r && tr->ev[i].thread + 1 > n)
            n = tr->ev[i].thread + 1;
    return n;
}

/* The lane of a launch: the thread that worked that item next, else the main thread's. */
static int launch_thread(const tl_trace *tr, size_t i)
{
    const tl_event *l = &tr->ev[i];
    for (size_t k = i + 1; k < tr->n; k++)
        if (tr->ev[k].rank == l->rank && tr->ev[k].kind == TL_REDUCED && tr->ev[k].item == l->item &&
            strcmp(tr->ev[k].name, l->name) == 0)
            return tr->ev[k].thread;
    return 0;
}

/*
 * Rank r's ops lane: each op from its start to the next's, the op a rank
 * stopped in marked. NULL when the rank finished, else how it stopped (its
 * supervisor-written end's "how", or "stopped" where the trace has no end).
 */
static const char *ops_lane(FILE *f, const tl_trace *tr, int r, double y, const unsigned char *syncs, size_t nops)
{
    const tl_event *open = NULL, *end = NULL;
    double first = -1, last = 0;
    char title[256], d[32], cls[64];
    for (size_t i = 0; i < tr->n && !end; i++) {
        const tl_event *e = &tr->ev[i];
        if (e->rank != r)
            continue;
        if (first < 0)
            first = e->us - e->dur;
        last = e->us;
        if (e->kind != TL_OP && e->kind != TL_END)
            continue;
        if (e->kind == TL_END)
            end = e;
        if (!open && e->us > first) { /* the constructors' collectives, before op 0 */
            duration(d, sizeof d, e->us - first);
            snprintf(title, sizeof title, "setup (the implementation's constructor), %s", d);
            bar(f, "op setup", x_of(tr, first), x_of(tr, e->us), y, LANE_H - 3, title);
        }
        if (end && end->name[0])
            break; /* the open op is the one the rank stopped in */
        if (open) {
            int sync = open->op < nops && syncs[open->op];
            duration(d, sizeof d, e->us - open->us);
            snprintf(title, sizeof title, "op %zu: %s%s, %s", open->op, open->name, sync ? " (syncs)" : "", d);
            snprintf(cls, sizeof cls, "op %s%s", open->name, sync ? " sync" : "");
            bar(f, cls, x_of(tr, open->us), x_of(tr, e->us), y, LANE_H - 3, title);
        }
        open = e->kind == TL_OP ? e : NULL;
    }
    if (end && !end->name[0])
        return NULL;
    const char *how = end ? end->name : "stopped";
    if (open) {
        duration(d, sizeof d, last - open->us);
        snprintf(title, sizeof title, "op %zu: %s, where the rank stopped (%s): its last event %s after the op began",
                 open->op, open->name, how, d);
        snprintf(cls, sizeof cls, "op %s stopped", open->name);
        bar(f, cls, x_of(tr, open->us), x_of(tr, last), y, LANE_H - 3, title);
    }
    return how;
}

/*
 * The ready events of one op from tr->ev[i] on, as one path of ticks whose
 * title gives their order (the order is what a bucketing bug depends on).
 */
static void ready_group(FILE *f, const tl_trace *tr, size_t i, double y)
{
    size_t end = i;
    while (end < tr->n && tr->ev[end].rank == tr->ev[i].rank && tr->ev[end].kind == TL_READY &&
           tr->ev[end].op == tr->ev[i].op)
        end++;
    fputs("<path class=\"ready\" d=\"", f);
    for (size_t k = i; k < end; k++)
        fprintf(f, "M%.1f %.0fv%d", x_of(tr, tr->ev[k].us), y + 1, LANE_H - 4);
    fprintf(f, "\"><title>op %zu: %zu gradients ready, in this order: ", tr->ev[i].op, end - i);
    for (size_t k = i; k < end; k++) {
        html_escape(f, tr->ev[k].name);
        fputs(k + 1 < end ? ", " : "", f);
    }
    fputs("</title></path>", f);
}

static void rank_lanes(FILE *f, const tl_trace *tr, int r, double y, int nthreads, const unsigned char *syncs,
                       size_t nops)
{
    fprintf(f, "<g class=\"rank\" data-rank=\"%d\">", r);
    const char *how = ops_lane(f, tr, r, y + LANE_OPS * LANE_H, syncs, nops);
    fprintf(f, "<text class=\"rank-label\" x=\"2\" y=\"%.1f\">rank %d", y + 10, r);
    if (how) {
        fputs(" (stopped", f);
        if (strcmp(how, "stopped") != 0) {
            fputs(": ", f);
            html_escape(f, how);
        }
        fputc(')', f);
    }
    fputs("</text>", f);
    static const char *const lane_name[] = {"ready", "main"};
    for (int k = LANE_READY; k <= LANE_MAIN; k++)
        fprintf(f, "<text class=\"lane\" x=\"12\" y=\"%.1f\">%s</text>", y + k * LANE_H + 10, lane_name[k - 1]);
    for (int k = 1; k < nthreads; k++)
        fprintf(f, "<text class=\"lane\" x=\"12\" y=\"%.1f\">thread %d</text>", y + (LANE_MAIN + k) * LANE_H + 10, k);
    char title[200], d[32], sz[32];
    for (size_t i = 0; i < tr->n; i++) {
        const tl_event *e = &tr->ev[i];
        if (e->rank != r)
            continue;
        double x = x_of(tr, e->us);
        if (e->kind == TL_READY) {
            if (i == 0 || tr->ev[i - 1].rank != r || tr->ev[i - 1].kind != TL_READY || tr->ev[i - 1].op != e->op)
                ready_group(f, tr, i, y + LANE_READY * LANE_H);
        } else if (e->kind == TL_COLL) {
            duration(d, sizeof d, e->dur);
            size_words(sz, sizeof sz, e->bytes);
            char who[24] = "";
            if (e->thread)
                snprintf(who, sizeof who, ", thread %d", e->thread);
            snprintf(title, sizeof title, "op %zu: %s over the %s group, %s, %s%s%s", e->op, e->name, e->group, sz,
                     d, who, e->ok ? "" : ": it failed");
            char cls[64];
            snprintf(cls, sizeof cls, "coll k-%s%s", e->name, e->ok ? "" : " failed");
            bar(f, cls, x_of(tr, e->us - e->dur), x, y + (LANE_MAIN + e->thread) * LANE_H + 2, LANE_H - 7, title);
        } else if (e->kind == TL_REDUCED) {
            duration(d, sizeof d, e->dur);
            snprintf(title, sizeof title, "op %zu: %s %d worked by thread %d for %s", e->op, e->name, e->item,
                     e->thread, d);
            bar(f, "item", x_of(tr, e->us - e->dur), x, y + (LANE_MAIN + e->thread) * LANE_H, LANE_H - 3, title);
        } else if (e->kind == TL_LAUNCH) {
            double yl = y + (LANE_MAIN + launch_thread(tr, i)) * LANE_H;
            fprintf(f, "<path class=\"launch\" d=\"M%.1f %.1fl-4 -5h8z\"><title>", x, yl + 5);
            snprintf(title, sizeof title, "op %zu: %s %d launched", e->op, e->name, e->item);
            html_escape(f, title);
            fputs("</title></path>", f);
        }
    }
    fputs("</g>\n", f);
}

/* The SVG of a loaded trace onto f. */
static void draw(FILE *f, const tl_trace *tr, int nranks, const sched *s, const unsigned char *syncs)
{
    size_t nops = s ? s->nops : 0;
    int threads[WORLD_MAX_RANKS];
    double height = AXIS_H;
    for (int r = 0; r < nranks && r < WORLD_MAX_RANKS; r++) {
        threads[r] = rank_threads(tr, r);
        height += (LANE_MAIN + threads[r]) * LANE_H + RANK_GAP;
    }
    char total[32];
    duration(total, sizeof total, tr->t1 - tr->t0);
    fprintf(f, "<div class=\"timeline-svg\"><p>timeline, %s: zoom <select class=\"zoom\"><option>1</option>"
               "<option>4</option><option>16</option><option>64</option></select> <span class=\"note\">hover for "
               "figures; bold outline: a backward that syncs; green ticks: gradients ready; bars on main and thread "
               "lanes: the implementation's collectives; outlined: a bucket worked by its thread; a triangle: where "
               "it was launched</span></p><div class=\"scroll\"><svg class=\"timeline\" "
               "xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %.0f\" width=\"100%%\">\n",
            total, LEFT + PLOT_W + 8, height);
    axis(f, tr, height);
    double y = AXIS_H;
    for (int r = 0; r < nranks && r < WORLD_MAX_RANKS; r++) {
        rank_lanes(f, tr, r, y, threads[r], syncs, nops);
        y += (LANE_MAIN + threads[r]) * LANE_H + RANK_GAP;
    }
    fputs("</svg></div></div>\n", f);
}

int timeline_svg(FILE *out, const char *path, int nranks, const sched *s, size_t max_bytes, char *msg, size_t len)
{
    tl_trace tr = {0};
    if (load(&tr, path, nranks, msg, len) != 0) {
        free(tr.ev);
        return -1;
    }
    size_t nops = s ? s->nops : 0;
    unsigned char *syncs = calloc(nops + 1, 1);
    char *svg = NULL;
    size_t svg_len = 0;
    FILE *mem = syncs ? open_memstream(&svg, &svg_len) : NULL;
    int rc = -1;
    if (!mem) {
        snprintf(msg, len, "out of memory");
    } else {
        sched_arming a;
        memset(&a, 0, sizeof a);
        for (size_t i = 0; i < nops; i++)
            syncs[i] = sched_arming_step(&a, (sched_op)s->ops[i]) && s->ops[i] == OP_BWD;
        draw(mem, &tr, nranks, s, syncs);
        if (fclose(mem) != 0 || !svg)
            snprintf(msg, len, "out of memory");
        else if (svg_len > max_bytes)
            snprintf(msg, len, "it would take %zu KiB of the page, more than this run's share (%zu KiB)",
                     svg_len / 1024, max_bytes / 1024);
        else
            rc = fwrite(svg, 1, svg_len, out) == svg_len ? 0 : -1;
    }
    free(svg);
    free(syncs);
    free(tr.ev);
    return rc;
}

const char *timeline_style(void)
{
    return ".timeline-svg .scroll{overflow-x:auto;max-width:100%}svg.timeline{font:10px sans-serif;min-width:800px}"
           "svg.timeline .axis line{stroke:#eee}svg.timeline .axis text{fill:#777}"
           "svg.timeline rect.op{fill:#eceff1;stroke:#b0bec5;stroke-width:.5}svg.timeline rect.op.bwd{fill:#bbdefb}"
           "svg.timeline rect.op.fwd{fill:#e1f5fe}svg.timeline rect.op.grab{fill:#e1bee7}"
           "svg.timeline rect.op.step{fill:#c8e6c9}svg.timeline rect.op.setup{fill:#f5f5f5}"
           "svg.timeline rect.op.sync{stroke:#0d47a1;stroke-width:2}svg.timeline rect.op.stopped{fill:#ffcdd2;"
           "stroke:#b71c1c}svg.timeline path.ready{stroke:#2e7d32;fill:none}svg.timeline rect.coll{fill:#ef6c00}"
           "svg.timeline rect.coll.failed{fill:#b71c1c}svg.timeline rect.item{fill:none;stroke:#6a1b9a}"
           "svg.timeline path.launch{fill:#6a1b9a}svg.timeline .rank-label{font-weight:bold}"
           "svg.timeline .lane{fill:#666}";
}
