/*
 * schedule.c - a recursive-descent parser for the schedule language
 * (schedule.h), expanding as it goes, then one validating pass.
 */
#include "schedule.h"

#include <sys/types.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_names[] = {"fwd", "bwd", "grab", "zero", "step", "enter", "exit"};

const char *sched_op_name(sched_op op)
{
    return (unsigned)op < sizeof op_names / sizeof op_names[0] ? op_names[op] : "?";
}

typedef struct parser {
    const char *text, *p;
    sched *s;
    size_t cap;
} parser;

/* An error at `at`: "line L, column C: <what> (found '<token>')". */
static ddp_status fail_at(const parser *ps, const char *at, const char *what)
{
    int line, col;
    ddp_text_position(ps->text, at, &line, &col);
    int n = 0;
    while (at[n] && !isspace((unsigned char)at[n]) && n < 12)
        n++;
    if (!*at)
        return ddp_error(DDP_ERR_INVALID, "schedule line %d, column %d: %s (found the end)", line, col, what);
    return ddp_error(DDP_ERR_INVALID, "schedule line %d, column %d: %s (found '%.*s')", line, col, what, n, at);
}

static void skip_space(parser *ps)
{
    for (;;) {
        while (isspace((unsigned char)*ps->p) || *ps->p == ',')
            ps->p++;
        if (*ps->p != '#')
            return;
        while (*ps->p && *ps->p != '\n')
            ps->p++;
    }
}

static ddp_status emit(parser *ps, sched_op op, const char *at)
{
    if (ps->s->nops == SCHED_MAX_OPS)
        return fail_at(ps, at, "the schedule expands to more than 1000000 ops");
    if (ps->s->nops == ps->cap) {
        size_t ncap = ps->cap ? ps->cap * 2 : 64;
        sched_op *n = realloc(ps->s->ops, ncap * sizeof *n);
        if (!n)
            return ddp_error(DDP_ERR_NOMEM, "schedule of %zu ops", ncap);
        ps->s->ops = n;
        ps->cap = ncap;
    }
    ps->s->ops[ps->s->nops++] = op;
    return DDP_OK;
}

static int word_is(const char *p, const char *w)
{
    size_t n = strlen(w);
    return strncmp(p, w, n) == 0 && !isalnum((unsigned char)p[n]) && p[n] != '_';
}

/* Parse items until `close` (or the end when close is 0). */
static ddp_status parse_seq(parser *ps, char close, int depth)
{
    if (depth > SCHED_MAX_DEPTH)
        return fail_at(ps, ps->p, "brackets nested deeper than 64");
    for (;;) {
        skip_space(ps);
        const char *at = ps->p;
        if (*at == '\0') {
            if (close)
                return fail_at(ps, at, close == ')' ? "expected ')'" : "expected '}'");
            return DDP_OK;
        }
        if (*at == close) {
            ps->p++;
            return DDP_OK;
        }
        if (*at == ')' || *at == '}')
            return fail_at(ps, at, "unbalanced bracket");
        if (isdigit((unsigned char)*at)) {
            errno = 0;
            char *end;
            unsigned long long count = strtoull(at, &end, 10);
            if (errno || count > SCHED_MAX_COUNT)
                return fail_at(ps, at, "a repeat count must be 0..100000");
            ps->p = end;
            skip_space(ps);
            if (*ps->p != '*')
                return fail_at(ps, ps->p, "expected '*' after a repeat count");
            ps->p++;
            skip_space(ps);
            if (*ps->p != '(')
                return fail_at(ps, ps->p, "expected '(' after 'N*'");
            ps->p++;
            size_t first = ps->s->nops;
            DDP_CHECK(parse_seq(ps, ')', depth + 1));
            size_t len = ps->s->nops - first;
            if (len == 0)
                return fail_at(ps, at, "a repeated group is empty");
            if (count == 0)
                ps->s->nops = first; /* 0*(...) runs nothing: checked for its grammar, then dropped */
            for (unsigned long long r = 1; r < count; r++)
                for (size_t i = 0; i < len; i++)
                    DDP_CHECK(emit(ps, ps->s->ops[first + i], at));
            continue;
        }
        if (word_is(at, "nosync")) {
            ps->p += 6;
            skip_space(ps);
            if (*ps->p != '{')
                return fail_at(ps, ps->p, "expected '{' after 'nosync'");
            ps->p++;
            DDP_CHECK(emit(ps, OP_ENTER, at));
            DDP_CHECK(parse_seq(ps, '}', depth + 1));
            DDP_CHECK(emit(ps, OP_EXIT, at));
            continue;
        }
        int found = -1;
        for (int k = 0; k < (int)(sizeof op_names / sizeof op_names[0]); k++)
            if (word_is(at, op_names[k]))
                found = k;
        if (found < 0)
            return fail_at(ps, at, "expected an op (fwd bwd grab zero step enter exit), 'nosync{' or 'N*('");
        ps->p += strlen(op_names[found]);
        DDP_CHECK(emit(ps, (sched_op)found, at));
    }
}

/*
 * One pass over the expanded ops: the rules that make a schedule meaningful,
 * as PyTorch 1.13 DDP accepts and refuses them (distributed.py, checked on
 * real DDP): a backward needs a forward whose graph it has not run through
 * yet ("Trying to backward through the graph a second time"); a forward may
 * follow a forward (an evaluation forward in train mode: its graph is
 * dropped); no_sync nests, each exit restoring the state its enter found, and
 * an exit needs its enter. Which backwards sync follows the reducer's arming
 * (sched_syncs). Whether a step may come between a forward and its backward
 * depends on whether gradients exist: sched_step_conflict.
 */
int sched_arming_step(sched_arming *a, sched_op op)
{
    switch (op) {
    case OP_ENTER: a->depth++; break;
    case OP_EXIT: a->depth -= a->depth > 0; break;
    case OP_FWD:
        if (a->depth == 0) {
            a->armed = 1;
            a->arming_forward = a->forwards;
            a->syncing_forwards++;
        }
        a->forward_in_no_sync = a->depth > 0;
        a->forward_iteration = a->syncing_forwards;
        a->forwards++;
        break;
    case OP_BWD: {
        int syncs = a->armed;
        a->armed = 0;
        return syncs;
    }
    default: break;
    }
    return 0;
}

static ddp_status validate(sched *s)
{
    sched_arming a = {0};
    int fwd_pending = 0;
    for (size_t i = 0; i < s->nops; i++) {
        switch (s->ops[i]) {
        case OP_FWD: fwd_pending = 1; break;
        case OP_BWD:
            if (!fwd_pending)
                return ddp_error(DDP_ERR_INVALID,
                                 "schedule op %zu (bwd): no forward to run backward for (PyTorch: trying to backward "
                                 "through the graph a second time)", i);
            fwd_pending = 0;
            break;
        case OP_EXIT:
            if (a.depth == 0)
                return ddp_error(DDP_ERR_INVALID, "schedule op %zu (exit): not inside no_sync", i);
            break;
        case OP_GRAB: s->ngrabs++; break;
        case OP_STEP: s->nsteps++; break;
        default: break;
        }
        s->nsyncs += (size_t)sched_arming_step(&a, s->ops[i]);
    }
    s->nfwd = a.forwards;
    return DDP_OK;
}

ssize_t sched_step_conflict(const sched *s, int set_to_none)
{
    int fwd_pending = 0, grads = 0;
    for (size_t i = 0; i < s->nops; i++) {
        switch (s->ops[i]) {
        case OP_FWD: fwd_pending = 1; break;
        case OP_BWD:
            fwd_pending = 0;
            grads = 1;
            break;
        case OP_ZERO: grads &= !set_to_none; break;
        case OP_STEP:
            if (fwd_pending && grads)
                return (ssize_t)i;
            break;
        default: break;
        }
    }
    return -1;
}

ssize_t sched_static_graph_conflict(const sched *s)
{
    sched_arming a = {0};
    for (size_t i = 0; i < s->nops; i++) {
        if (s->ops[i] == OP_BWD && !a.armed && a.forward_iteration == 1)
            return (ssize_t)i;
        sched_arming_step(&a, s->ops[i]);
    }
    return -1;
}

ddp_status sched_parse(const char *text, sched *s)
{
    memset(s, 0, sizeof *s);
    if (!text)
        return ddp_error(DDP_ERR_INVALID, "no schedule");
    parser ps = {text, text, s, 0};
    ddp_status st = parse_seq(&ps, 0, 0);
    if (st == DDP_OK)
        st = validate(s);
    if (st != DDP_OK)
        sched_free(s);
    return st;
}

/* Walk s and hand every grab's label to label_out, in order. */
static void walk_grab_labels(const sched *s, void (*label_out)(void *ctx, const char *label), void *ctx)
{
    enum { NONE, AFTER_BWD, AFTER_ZERO } last = NONE;
    sched_arming a = {0};
    int fwd_in = 0, bwd_in = 0, stepped = 0, synced = 0;
    unsigned acc = 0;
    for (size_t i = 0; i < s->nops; i++) {
        int syncs = sched_arming_step(&a, s->ops[i]);
        switch (s->ops[i]) {
        case OP_ENTER:
        case OP_EXIT:
        case OP_FWD: break;
        case OP_BWD:
            fwd_in = a.forward_in_no_sync;
            bwd_in = a.depth > 0;
            synced = syncs;
            last = AFTER_BWD;
            acc++;
            stepped = 0;
            break;
        case OP_ZERO:
            last = AFTER_ZERO;
            acc = 0;
            break;
        case OP_STEP: stepped = 1; break;
        case OP_GRAB: {
            char l[SCHED_LABEL_LEN];
            if (last == NONE) {
                snprintf(l, sizeof l, "before any backward");
            } else if (last == AFTER_ZERO) {
                snprintf(l, sizeof l, "after zero_grad");
            } else {
                const char *what = fwd_in && synced ? "no_sync fwd+bwd, armed"
                                   : fwd_in && bwd_in ? "no_sync fwd+bwd"
                                   : fwd_in          ? "no_sync fwd, bwd outside"
                                   : bwd_in          ? "fwd, bwd in no_sync"
                                                     : "fwd+bwd";
                char accs[24] = "";
                if (acc > 1)
                    snprintf(accs, sizeof accs, " (%u acc)", acc);
                snprintf(l, sizeof l, "after %s%s%s", what, accs, stepped ? ", step" : "");
            }
            label_out(ctx, l);
            break;
        }
        }
    }
}

typedef struct label_sink {
    char (*labels)[SCHED_LABEL_LEN];
    sched_check *checks;
    size_t next;
} label_sink;

static void to_labels(void *ctx, const char *label)
{
    label_sink *k = ctx;
    snprintf(k->labels[k->next++], SCHED_LABEL_LEN, "%s", label);
}

void sched_grab_labels(const sched *s, char (*labels)[SCHED_LABEL_LEN])
{
    label_sink k = {.labels = labels};
    walk_grab_labels(s, to_labels, &k);
}

/* The next grab's label goes to the next check of kind CHECK_GRADS. */
static void to_checks(void *ctx, const char *label)
{
    label_sink *k = ctx;
    while (k->checks[k->next].kind != CHECK_GRADS)
        k->next++;
    snprintf(k->checks[k->next++].label, SCHED_LABEL_LEN, "%s", label);
}

size_t sched_nchecks(const sched *s)
{
    return s->ngrabs + s->nsteps + 1;
}

void sched_checks(const sched *s, sched_check *out)
{
    size_t k = 0, grab = 0, step = 0;
    for (size_t i = 0; i < s->nops; i++) {
        if (s->ops[i] == OP_GRAB)
            out[k++] = (sched_check){.kind = CHECK_GRADS, .op = i, .index = grab++};
        else if (s->ops[i] == OP_STEP)
            out[k++] = (sched_check){.kind = CHECK_PARAMS, .op = i, .index = step++, .label = "parameters after step"};
    }
    out[k] = (sched_check){.kind = CHECK_PARAMS, .op = s->nops, .index = s->nsteps, .at_end = 1,
                         .label = "parameters at the end"};
    label_sink sink = {.checks = out};
    walk_grab_labels(s, to_checks, &sink);
}

const char *sched_check_name(const sched_check *c, char *buf, size_t len)
{
    if (c->kind == CHECK_GRADS)
        snprintf(buf, len, "grab %zu", c->index);
    else if (c->at_end)
        snprintf(buf, len, "end");
    else
        snprintf(buf, len, "step %zu", c->index);
    return buf;
}

int sched_op_from_name(const char *name)
{
    for (size_t i = 0; i < sizeof op_names / sizeof op_names[0]; i++)
        if (strcmp(op_names[i], name) == 0)
            return (int)i;
    return -1;
}

ddp_status sched_from_ops(const sched_op *ops, size_t n, sched *s)
{
    memset(s, 0, sizeof *s);
    if (n > SCHED_MAX_OPS)
        return ddp_error(DDP_ERR_INVALID, "%zu ops, more than %d", n, SCHED_MAX_OPS);
    s->ops = malloc((n ? n : 1) * sizeof *s->ops);
    if (!s->ops)
        return ddp_error(DDP_ERR_NOMEM, "%zu ops", n);
    memcpy(s->ops, ops, n * sizeof *ops);
    s->nops = n;
    ddp_status st = validate(s);
    if (st != DDP_OK)
        sched_free(s);
    return st;
}

void sched_free(sched *s)
{
    free(s->ops);
    memset(s, 0, sizeof *s);
}
