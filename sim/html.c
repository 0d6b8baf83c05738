/*
 * html.c - the self-contained HTML report (html.h).
 */
#include "html.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "timeline.h"

/* A column of the heatmap: a check. */
typedef struct html_col {
    char name[16];
    char label[SCHED_LABEL_LEN];
    int synced;
} html_col;

/* What a failing record says of its own first divergence (judge_facts_of's), for that cell's title. */
typedef struct html_spot {
    int param;       /* its tensor, -1: none (the record held, or a buffer diverged first) */
    uint64_t element;
    float expected, actual;
    uint32_t ulps;
    char *pattern;   /* its pattern's words (malloc'ed), NULL: none found */
} html_spot;

/* A rank's state at a check. */
enum { RANK_COMPARED, RANK_NEVER_REACHED, RANK_RAN_OUT };

struct html_page {
    tolerance tol;
    int page_ranks; /* the runs' ranks unless html_run_begin_ranks says otherwise */
    int nranks;     /* the run under way's */
    FILE *sections; /* every run's section, rendered as it ends */
    FILE *rows;     /* the scenarios' table */
    int nruns;
    /* the run under way */
    char name[64];
    char trace[PATH_MAX]; /* its trace, for the timeline ("": none) */
    char replay[2048];    /* the command that reruns it ("": not said) */
    size_t trace_share;   /* the timeline's bytes at most */
    const model *layout;
    const sched *s;
    int nparams;
    size_t ncols, cap;
    html_col *cols;
    uint8_t *cells;      /* [col][rank][param][3]: param_ulp, param_bound, param_bad */
    uint8_t *rank_state; /* [col][rank] */
    html_spot *spots;    /* [col][rank] */
};

void html_escape(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc((unsigned char)*s < 0x20 ? ' ' : *s, f);
        }
    }
}

html_page *html_open(const tolerance *tol, int nranks, char *msg, size_t len)
{
    html_page *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(msg, len, "out of memory");
        return NULL;
    }
    h->tol = *tol;
    h->nranks = h->page_ranks = nranks;
    if (!(h->sections = cli_temp_file(msg, len)) || !(h->rows = cli_temp_file(msg, len))) {
        html_close(h);
        return NULL;
    }
    return h;
}

/* The run under way's spots' patterns (its columns x its ranks). */
static void free_spots(html_page *h)
{
    for (size_t i = 0; h->spots && i < h->ncols * (size_t)h->nranks; i++) {
        free(h->spots[i].pattern);
        h->spots[i].pattern = NULL;
    }
}

void html_close(html_page *h)
{
    if (!h)
        return;
    if (h->sections)
        fclose(h->sections);
    if (h->rows)
        fclose(h->rows);
    free_spots(h);
    free(h->cols);
    free(h->cells);
    free(h->rank_state);
    free(h->spots);
    free(h);
}

void html_run_begin(html_page *h, const char *name, const model *layout, const sched *s)
{
    html_run_begin_ranks(h, name, layout, s, h->page_ranks);
}

void html_run_begin_ranks(html_page *h, const char *name, const model *layout, const sched *s, int nranks)
{
    free_spots(h); /* the run before's */
    h->nranks = nranks;
    snprintf(h->name, sizeof h->name, "%s", name ? name : "");
    h->layout = layout;
    h->s = s;
    h->nparams = layout ? model_nparams(layout) : 0;
    if (h->nparams > MODEL_MAX_PARAMS)
        h->nparams = MODEL_MAX_PARAMS;
    h->ncols = 0;
    h->cap = 0; /* the arrays' sizes depend on the parameters: made again for this run's */
    h->replay[0] = '\0';
}

void html_run_replay(html_page *h, const char *command)
{
    snprintf(h->replay, sizeof h->replay, "%s", command ? command : "");
}

static size_t cell_at(const html_page *h, size_t col, int rank, int p)
{
    return ((col * (size_t)h->nranks + (size_t)rank) * (size_t)h->nparams + (size_t)p) * 3;
}

/* A record's own first divergence, as a report would say it were it the run's (a passing record: none). */
static void take_spot(const html_page *h, html_spot *sp, const sched_check *ck, const verify_record *rec, int r)
{
    *sp = (html_spot){.param = -1};
    if (judge_record_ok(rec) || !rec->has_first || rec->first_buffer || rec->first_param >= h->nparams)
        return;
    judgement one = {.verdict = JUDGE_DIVERGES, .first = rec, .first_where = ck, .first_rank = r};
    judge_facts k;
    judge_facts_of(&one, h->layout, &k);
    if (!k.known || !k.has_element)
        return;
    *sp = (html_spot){.param = rec->first_param, .element = k.element, .expected = k.expected, .actual = k.actual,
                      .ulps = k.ulps, .pattern = k.pattern[0] ? strdup(k.pattern) : NULL};
}

void html_run_check(html_page *h, const sched_check *ck, const verify_record *recs, int nranks)
{
    if (nranks != h->nranks)
        return;
    if (h->ncols == h->cap) { /* the run's size was checked against HTML_MAX_CELLS before it started */
        size_t cap = h->cap ? 2 * h->cap : 16;
        html_col *cols = realloc(h->cols, cap * sizeof *cols);
        uint8_t *cells = cols ? realloc(h->cells, cap * (size_t)h->nranks * ((size_t)h->nparams + 1) * 3) : NULL;
        uint8_t *state = cells ? realloc(h->rank_state, cap * (size_t)h->nranks) : NULL;
        html_spot *spots = state ? realloc(h->spots, cap * (size_t)h->nranks * sizeof *spots) : NULL;
        if (cols)
            h->cols = cols;
        if (cells)
            h->cells = cells;
        if (state)
            h->rank_state = state;
        if (spots)
            h->spots = spots;
        if (!cols || !cells || !state || !spots)
            return; /* the column is left out; html_run_end says so */
        h->cap = cap;
    }
    html_col *c = &h->cols[h->ncols];
    sched_check_name(ck, c->name, sizeof c->name);
    snprintf(c->label, sizeof c->label, "%s", ck->label);
    c->synced = recs[0].synced;
    for (int r = 0; r < nranks; r++) {
        const verify_record *rec = &recs[r];
        h->rank_state[h->ncols * (size_t)nranks + (size_t)r] =
            rec->joined ? RANK_RAN_OUT : !rec->done ? RANK_NEVER_REACHED : RANK_COMPARED;
        for (int p = 0; p < h->nparams; p++) {
            uint8_t *cell = h->cells + cell_at(h, h->ncols, r, p);
            cell[0] = rec->param_ulp[p];
            cell[1] = rec->param_bound[p];
            cell[2] = rec->param_bad[p];
        }
        take_spot(h, &h->spots[h->ncols * (size_t)nranks + (size_t)r], ck, rec, r);
    }
    h->ncols++;
}

static void on_check(void *arg, const sched_check *ck, const verify_record *recs, int nranks)
{
    html_run_check(arg, ck, recs, nranks);
}

verify_sink html_sink(html_page *h)
{
    return (verify_sink){.on_check = on_check, .arg = h};
}

/* The colour level of a compared cell that held: 0 the same bits, 1..9 farther (ulps on a log scale, or the
 * fraction of the order tolerance's bound). */
static int level(const html_page *h, const uint8_t *cell)
{
    if (h->tol.kind == TOL_ORDER)
        return cell[1] == 0 ? 0 : 1 + cell[1] * 8 / 255;
    return cell[0] == 0 ? 0 : cell[0] >= 32 ? 9 : 1 + (cell[0] - 1) * 8 / 31;
}

/* A cell's title: the check, the rank, the parameter and what was seen there. */
static void cell_title(FILE *f, const html_page *h, size_t col, int r, int p, const judge_facts *first, int is_first)
{
    const html_col *c = &h->cols[col];
    const uint8_t *cell = h->cells + cell_at(h, col, r, p);
    char what[160];
    int state = h->rank_state[col * (size_t)h->nranks + (size_t)r];
    if (state == RANK_NEVER_REACHED)
        snprintf(what, sizeof what, "never reached");
    else if (state == RANK_RAN_OUT)
        snprintf(what, sizeof what, "not checked: this rank had run out of inputs");
    else if (!(cell[2] & VERIFY_PARAM_COMPARED))
        snprintf(what, sizeof what, "not compared (not held by this rank, or no .grad on either side)");
    else if (cell[0] == 0 && !(cell[2] & VERIFY_PARAM_BAD))
        snprintf(what, sizeof what, "the same bits");
    else {
        size_t n = 0;
        if (cell[0] == 255)
            n += (size_t)snprintf(what + n, sizeof what - n, "a non-finite element on one side");
        else if (cell[0])
            n += (size_t)snprintf(what + n, sizeof what - n, "largest distance %s2^%d ulp", cell[0] > 1 ? "above " : "",
                                  cell[0] - 1);
        else
            n += (size_t)snprintf(what + n, sizeof what - n, ".grad None on one side only");
        if (h->tol.kind == TOL_ORDER && n < sizeof what)
            n += (size_t)snprintf(what + n, sizeof what - n, ", %s%.0f%% of the proven bound",
                                  cell[1] == 255 ? "at least " : "", cell[1] / 2.0);
        if (n < sizeof what)
            snprintf(what + n, sizeof what - n, "%s", (cell[2] & VERIFY_PARAM_BAD) ? ": outside the tolerance" : "");
    }
    fprintf(f, "%s (", c->name);
    html_escape(f, c->label);
    fprintf(f, "), rank %d, ", r);
    html_escape(f, model_param_at(h->layout, p)->name);
    fprintf(f, ": %s", what);
    const html_spot *sp = &h->spots[col * (size_t)h->nranks + (size_t)r];
    if (is_first && first->has_element) {
        fprintf(f, "; first divergence: element %llu, expected %.9g, actual %.9g, %u ulp",
                (unsigned long long)first->element, (double)first->expected, (double)first->actual, first->ulps);
        if (first->pattern[0]) {
            fputs("; pattern: ", f);
            html_escape(f, first->pattern);
        }
    } else if (sp->param == p) { /* this check's own first divergence on this rank */
        fprintf(f, "; this check's first divergence on this rank: element %llu, expected %.9g, actual %.9g, %u ulp",
                (unsigned long long)sp->element, (double)sp->expected, (double)sp->actual, sp->ulps);
        if (sp->pattern) {
            fputs("; pattern: ", f);
            html_escape(f, sp->pattern);
        }
    }
}

/* The schedule as a strip of ops, the backwards that sync marked. */
static void op_strip(FILE *f, const sched *s)
{
    if (!s)
        return;
    if (s->nops > 4000) {
        fprintf(f, "<p class=\"note\">The schedule's %zu ops are too many to draw.</p>\n", s->nops);
        return;
    }
    static const char *const glyph[] = {"F", "B", "G", "Z", "S", "[", "]", "J{", "}J", "C"};
    static const char *const cls[] = {"fwd", "bwd", "grab", "zero", "step", "enter", "exit", "join", "join", "clip"};
    fputs("<div class=\"timeline\" title=\"the schedule, op by op (every rank's; F forward, B backward, bold: it "
          "syncs, G grab, S step, Z zero_grad, [ ] no_sync, C clip)\">", f);
    sched_arming a;
    memset(&a, 0, sizeof a);
    for (size_t i = 0; i < s->nops; i++) {
        sched_op op = (sched_op)s->ops[i];
        int syncs = sched_arming_step(&a, op) && op == OP_BWD;
        unsigned k = (unsigned)op < sizeof glyph / sizeof glyph[0] ? (unsigned)op : 0;
        fprintf(f, "<span class=\"op %s%s\" title=\"op %zu: %s%s\">%s</span>", cls[k], syncs ? " sync" : "", i,
                sched_op_name(op), syncs ? " (syncs)" : "", glyph[k]);
    }
    fputs("</div>\n", f);
}

/* Which rank's table shows first: the first divergence's, else rank 0. */
static int shown_rank(const judge_facts *first)
{
    return first && first->known ? first->rank : 0;
}

static void heatmap(FILE *f, const html_page *h, int run, int r, const judge_facts *first)
{
    fprintf(f, "<table class=\"heatmap\" data-rank=\"%d\"%s>\n<thead><tr><th>parameter</th>", r,
            r == shown_rank(first) ? "" : " hidden");
    for (size_t c = 0; c < h->ncols; c++) {
        fprintf(f, "<th class=\"%s\" title=\"%s (", h->cols[c].synced == 1 ? "synced" : "", h->cols[c].name);
        html_escape(f, h->cols[c].label);
        fprintf(f, ")\">%s</th>", h->cols[c].name);
    }
    fputs("</tr></thead>\n<tbody>\n", f);
    for (int p = 0; p < h->nparams; p++) {
        fputs("<tr><th>", f);
        html_escape(f, model_param_at(h->layout, p)->name);
        fputs("</th>", f);
        for (size_t c = 0; c < h->ncols; c++) {
            const uint8_t *cell = h->cells + cell_at(h, c, r, p);
            int state = h->rank_state[c * (size_t)h->nranks + (size_t)r];
            int is_first = first && first->known && first->has_element && first->rank == r &&
                           strcmp(first->check, h->cols[c].name) == 0 &&
                           strcmp(first->tensor, model_param_at(h->layout, p)->name) == 0;
            const char *kind = state != RANK_COMPARED ? "na" : !(cell[2] & VERIFY_PARAM_COMPARED) ? "nc"
                               : (cell[2] & VERIFY_PARAM_BAD) ? "bad" : NULL;
            if (kind)
                fprintf(f, "<td class=\"c %s%s\"", kind, is_first ? " first" : "");
            else
                fprintf(f, "<td class=\"c l%d%s\"", level(h, cell), is_first ? " first" : "");
            if (is_first)
                fprintf(f, " id=\"first-%d\"", run);
            fputs(" title=\"", f);
            cell_title(f, h, c, r, p, first, is_first);
            fputs("\"></td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</tbody></table>\n", f);
}

void html_run_end(html_page *h, const char *verdict, const char *summary, const judge_facts *first)
{
    FILE *f = h->sections;
    int n = ++h->nruns;
    const char *word = verdict ? verdict : "?";
    fprintf(f, "<section class=\"run\" id=\"run-%d\" data-verdict=\"", n);
    html_escape(f, word);
    fputs("\">\n<h2>", f);
    html_escape(f, h->name[0] ? h->name : "the run");
    fprintf(f, ": <span class=\"verdict v-%s\">", strcmp(word, "PASS") == 0 ? "pass" : "fail");
    html_escape(f, word);
    fputs("</span></h2>\n", f);
    if (summary && *summary && strcmp(summary, "-") != 0) {
        fputs("<p class=\"summary\">", f);
        html_escape(f, summary);
        fputs("</p>\n", f);
    }
    if (h->replay[0] && strcmp(word, "PASS") != 0) {
        fputs("<p class=\"replay\">replay: <code>", f);
        html_escape(f, h->replay);
        fputs("</code></p>\n", f);
    }
    op_strip(f, h->s);
    if (h->trace[0]) {
        char why[256];
        if (timeline_svg(f, h->trace, h->nranks, h->s, h->trace_share, why, sizeof why) != 0) {
            fputs("<p class=\"note\">No timeline: ", f);
            html_escape(f, why);
            fputs(".</p>\n", f);
        }
    }
    if (h->layout && h->ncols && h->nparams) {
        fputs("<p>rank <select class=\"rank\">", f);
        for (int r = 0; r < h->nranks; r++)
            fprintf(f, "<option value=\"%d\"%s>%d</option>", r, r == shown_rank(first) ? " selected" : "", r);
        fputs("</select> <span class=\"detail\">click a cell for its figures</span></p>\n", f);
        for (int r = 0; r < h->nranks; r++)
            heatmap(f, h, n, r, first);
    } else {
        fputs("<p class=\"note\">No check was recorded: nothing to draw.</p>\n", f);
    }
    fputs("</section>\n", f);
    /* the scenarios' table */
    fprintf(h->rows, "<tr><td><a href=\"#run-%d\">", n);
    html_escape(h->rows, h->name[0] ? h->name : "the run");
    fprintf(h->rows, "</a></td><td class=\"verdict v-%s\">", strcmp(word, "PASS") == 0 ? "pass" : "fail");
    html_escape(h->rows, word);
    fputs("</td><td>", h->rows);
    html_escape(h->rows, summary && strcmp(summary, "-") != 0 ? summary : "");
    fputs("</td></tr>\n", h->rows);
    h->layout = NULL;
    h->s = NULL;
    h->trace[0] = '\0';
}

void html_run_trace(html_page *h, const char *trace_path, size_t share)
{
    snprintf(h->trace, sizeof h->trace, "%s", trace_path ? trace_path : "");
    h->trace_share = share;
}

void html_matrix_begin(html_page *h, const char *title, int ncols, const char *const *names)
{
    FILE *f = h->sections;
    fputs("<section class=\"matrix\">\n<h2>", f);
    html_escape(f, title);
    fputs("</h2>\n<table class=\"matrix\"><thead><tr><th>implementation</th><th>result</th>", f);
    for (int k = 0; k < ncols; k++) {
        fputs("<th title=\"", f);
        html_escape(f, names[k]);
        fprintf(f, "\">%d</th>", k + 1);
    }
    fputs("<th>first catch</th><th>first divergence</th></tr></thead>\n<tbody>\n", f);
}

void html_matrix_row(html_page *h, const char *name, const char *result, int bad, const unsigned char *cells,
                     int ncols, const char *first, const char *where)
{
    FILE *f = h->sections;
    fputs("<tr class=\"impl\"><th>", f);
    html_escape(f, name);
    fprintf(f, "</th><td class=\"verdict v-%s\">", bad ? "fail" : "pass");
    html_escape(f, result);
    fputs("</td>", f);
    for (int k = 0; k < ncols; k++)
        fprintf(f, "<td class=\"m %s\">%s</td>", cells[k] == 2 ? "caught" : cells[k] == 1 ? "missed" : "absent",
                cells[k] == 2 ? "x" : cells[k] == 1 ? "." : "");
    fputs("<td>", f);
    html_escape(f, first);
    fputs("</td><td>", f);
    html_escape(f, where);
    fputs("</td></tr>\n", f);
}

void html_matrix_end(html_page *h)
{
    fputs("</tbody></table>\n</section>\n", h->sections);
}

static const char STYLE[] =
    "body{font:14px/1.4 sans-serif;margin:1em 2em;color:#222}"
    "h1 .v-pass,td.v-pass,span.v-pass{color:#1b5e20}h1 .v-fail,td.v-fail,span.v-fail{color:#b71c1c}"
    "table.facts td{padding:0 1em 0 0;vertical-align:top}table.facts td:first-child{color:#666}"
    "table.scenarios{border-collapse:collapse}table.scenarios td,table.scenarios th{border:1px solid #ddd;"
    "padding:2px 6px;text-align:left}"
    "table.heatmap{border-collapse:collapse;margin:.5em 0}table.heatmap th{font-weight:normal;font-size:12px;"
    "padding:0 4px;text-align:left;white-space:nowrap}table.heatmap thead th{writing-mode:vertical-rl}"
    "table.heatmap thead th.synced{font-weight:bold}"
    "td.c{width:14px;height:14px;border:1px solid #fff;cursor:pointer}"
    "td.l0{background:#a5d6a7}td.l1{background:#fff9c4}td.l2{background:#fff59d}td.l3{background:#fff176}"
    "td.l4{background:#ffee58}td.l5{background:#ffca28}td.l6{background:#ffb300}td.l7{background:#ffa000}"
    "td.l8{background:#ff8f00}td.l9{background:#ff6f00}td.bad{background:#d32f2f}td.na{background:#9e9e9e}"
    "td.nc{background:#eee}td.first{outline:3px solid #000;outline-offset:-2px}"
    ".timeline{font:11px monospace;margin:.3em 0;line-height:1.8}.op{display:inline-block;min-width:1.2em;"
    "text-align:center;margin:0 1px;border:1px solid #ccc;background:#fafafa}.op.bwd{background:#e3f2fd}"
    ".op.sync{border:2px solid #0d47a1;font-weight:bold}.op.grab{background:#f3e5f5}.op.step{background:#e8f5e9}"
    ".note,.detail{color:#555}.summary{font-family:monospace}.legend span{display:inline-block;padding:0 .5em;"
    "margin-right:.3em}"
    "table.matrix{border-collapse:collapse;font-size:12px}table.matrix td,table.matrix th{border:1px solid #ddd;"
    "padding:1px 4px;text-align:left}td.m{text-align:center}td.caught{background:#ef9a9a}td.absent{background:#eee}";

static const char SCRIPT[] =
    "document.querySelectorAll('select.rank').forEach(function(s){s.addEventListener('change',function(){"
    "s.closest('section').querySelectorAll('table.heatmap').forEach(function(t){"
    "t.hidden=t.getAttribute('data-rank')!==s.value;});});});"
    "document.addEventListener('click',function(e){var td=e.target.closest('td.c');if(!td)return;"
    "td.closest('section').querySelector('.detail').textContent=td.title;});"
    "document.querySelectorAll('select.zoom').forEach(function(s){s.addEventListener('change',function(){"
    "var svg=s.closest('.timeline-svg').querySelector('svg');"
    "svg.setAttribute('width',(100*Number(s.value))+'%');});});";

int html_write(html_page *h, FILE *out, const char *title, const char *verdict, const char *const *facts)
{
    int pass = verdict && strncmp(verdict, "PASS", 4) == 0;
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>", out);
    html_escape(out, title);
    fprintf(out, "</title><style>%s%s</style></head>\n<body>\n<h1>ddpsim: <span class=\"v-%s\">", STYLE,
            timeline_style(), pass ? "pass" : "fail");
    html_escape(out, verdict);
    fputs("</span></h1>\n<table class=\"facts\">\n", out);
    for (int i = 0; facts && facts[i] && facts[i + 1]; i += 2) {
        fputs("<tr><td>", out);
        html_escape(out, facts[i]);
        fputs("</td><td>", out);
        html_escape(out, facts[i + 1]);
        fputs("</td></tr>\n", out);
    }
    fputs("</table>\n", out);
    if (h->nruns > 0)
        fputs("<p class=\"legend\">cells: <span class=\"l0\" style=\"background:#a5d6a7\">the same bits</span>"
          "<span style=\"background:#fff176\">close</span><span style=\"background:#ff6f00\">farther (ulps on a log "
          "scale; under the order tolerance, the share of the proven bound)</span><span style=\"background:#d32f2f;"
          "color:#fff\">outside the tolerance</span><span style=\"background:#9e9e9e\">not reached</span><span "
          "style=\"background:#eee\">not compared</span>; outlined: the first divergence; bold columns: after a "
          "backward that synced. After a failed step the reference goes on from the implementation's parameters, so "
          "each window (zero_grad to step) is judged from where it starts (a sharded run carries a wrong step "
          "on)</p>\n",
              out);
    if (h->nruns > 1) {
        fputs("<table class=\"scenarios\"><thead><tr><th>scenario</th><th>verdict</th><th>first divergence</th></tr>"
              "</thead><tbody>\n", out);
        if (cli_copy_temp(h->rows, out) != 0)
            return -1;
        fputs("</tbody></table>\n", out);
    }
    if (cli_copy_temp(h->sections, out) != 0)
        return -1;
    fprintf(out, "<script>%s</script>\n</body></html>\n", SCRIPT);
    return fflush(out) != 0 || ferror(out) ? -1 : 0;
}
