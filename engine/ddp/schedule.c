/*
 * schedule.c - a recursive-descent parser for the schedule language
 * (schedule.h), expanding as it goes, then one validating pass.
 */
#include "schedule.h"

#include <sys/types.h>

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The ops a schedule may name; join_enter and join_exit come only from join{...} (and recordings). */
static const char *const op_names[] = {"fwd",   "bwd",        "grab",      "zero", "step",
                                       "enter", "exit",       "join_enter", "join_exit", "clip"};
enum { WRITABLE_OPS = 7 };

const char *sched_op_name(sched_op op)
{
    return (unsigned)op < sizeof op_names / sizeof op_names[0] ? op_names[op] : "?";
}

typedef struct parser {
    const char *text, *p;
    sched *s;
    size_t cap, ucap, jcap, ccap;
    int in_join, in_uneven;
} parser;

/* An error at `at`: "line L, column C: <what> (found '<token>')". */
static ddp_status fail_at(const parser *ps, const char *at, const char *what)
{
    int line, col;
    ddp_text_position(ps->text, at, &line, &col);
    /* The token quoted: up to 12 bytes, never a control character (printed raw it would reach the terminal),
     * cut before a UTF-8 character, not inside one. */
    int n = 0;
    const unsigned char *u = (const unsigned char *)at;
    while (u[n] && !isspace(u[n]) && u[n] >= 0x20 && u[n] != 0x7f && n < 12)
        n++;
    if (u[n] >= 0x80)
        while (n > 0 && (u[n] & 0xc0) == 0x80) /* at[n] continues a character: leave that character out */
            n--;
    if (!*at)
        return ddp_error(DDP_ERR_INVALID, "schedule line %d, column %d: %s (found the end)", line, col, what);
    if (n == 0 && (u[0] < 0x20 || u[0] == 0x7f))
        return ddp_error(DDP_ERR_INVALID, "schedule line %d, column %d: %s (found the control character 0x%02x)", line,
                         col, what, u[0]);
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
        return fail_at(ps, at, "the schedule expands to more than 10000000 ops");
    if (ps->s->nops == ps->cap) {
        size_t ncap = ps->cap ? ps->cap * 2 : 64;
        unsigned char *n = realloc(ps->s->ops, ncap * sizeof *n);
        if (!n)
            return ddp_error(DDP_ERR_NOMEM, "schedule of %zu ops", ncap);
        ps->s->ops = n;
        ps->cap = ncap;
    }
    ps->s->ops[ps->s->nops++] = (unsigned char)op;
    return DDP_OK;
}

static int word_is(const char *p, const char *w)
{
    size_t n = strlen(w);
    return strncmp(p, w, n) == 0 && !isalnum((unsigned char)p[n]) && p[n] != '_';
}


static ddp_status parse_seq(parser *ps, char close, int depth);

/* A non-negative count at ps->p (0..SCHED_MAX_COUNT). */
static ddp_status parse_count(parser *ps, uint32_t *out)
{
    const char *at = ps->p;
    if (!isdigit((unsigned char)*at))
        return fail_at(ps, at, "expected a count");
    errno = 0;
    char *end;
    unsigned long long v = strtoull(at, &end, 10);
    if (errno || v > SCHED_MAX_COUNT)
        return fail_at(ps, at, "a repeat count must be 0..100000");
    ps->p = end;
    *out = (uint32_t)v;
    return DDP_OK;
}

/* "[C, r:c ...]": every rank's count, and the named ranks' own (a negative rank counts from the last). */
static ddp_status parse_uneven_counts(parser *ps, sched_uneven *u)
{
    ps->p++; /* '[' */
    skip_space(ps);
    DDP_CHECK(parse_count(ps, &u->count));
    u->iterations = u->count;
    for (;;) {
        skip_space(ps);
        const char *at = ps->p;
        if (*at == ']') {
            ps->p++;
            return DDP_OK;
        }
        int neg = *at == '-';
        if (!isdigit((unsigned char)at[neg]))
            return fail_at(ps, at, "expected ']' or 'RANK:COUNT' (a rank's own count; -1 is the last rank)");
        errno = 0;
        char *end;
        long r = strtol(at, &end, 10);
        if (errno || r > 1000000 || r < -1000000 || (neg && r == 0))
            return fail_at(ps, at, "a rank must be 0..1000000, or -1..-1000000 counted from the last");
        ps->p = end;
        skip_space(ps);
        if (*ps->p != ':')
            return fail_at(ps, ps->p, "expected ':' after the rank of a rank's own count");
        ps->p++;
        skip_space(ps);
        uint32_t c;
        DDP_CHECK(parse_count(ps, &c));
        for (int k = 0; k < u->nover; k++)
            if (u->over_rank[k] == (int)r)
                return fail_at(ps, at, "this rank already has its own count");
        if (u->nover == SCHED_MAX_OVERRIDES)
            return fail_at(ps, at, "at most 64 ranks of their own in one uneven count");
        u->over_rank[u->nover] = (int)r;
        u->over_count[u->nover++] = c;
        if (c > u->iterations)
            u->iterations = c;
    }
}

/* Room for one more of *n items of size bytes in *arr (capacity *cap): grown by doubling. */
static ddp_status grow(void **arr, size_t *cap, size_t n, size_t size, const char *what)
{
    if (n < *cap)
        return DDP_OK;
    size_t ncap = *cap ? *cap * 2 : 4;
    void *g = realloc(*arr, ncap * size);
    if (!g)
        return ddp_error(DDP_ERR_NOMEM, "%zu %s", ncap, what);
    *arr = g;
    *cap = ncap;
    return DDP_OK;
}

static ddp_status push_uneven(parser *ps, const sched_uneven *u)
{
    sched *s = ps->s;
    DDP_CHECK(grow((void **)&s->uneven, &ps->ucap, s->nuneven, sizeof *u, "uneven repetitions"));
    s->uneven[s->nuneven++] = *u;
    return DDP_OK;
}

static ddp_status push_join(parser *ps, const sched_join *j)
{
    sched *s = ps->s;
    DDP_CHECK(grow((void **)&s->joins, &ps->jcap, s->njoins, sizeof *j, "join blocks"));
    s->joins[s->njoins++] = *j;
    return DDP_OK;
}

static ddp_status push_clip(parser *ps, const sched_clip *c)
{
    sched *s = ps->s;
    DDP_CHECK(grow((void **)&s->clips, &ps->ccap, s->nclips, sizeof *c, "clip ops"));
    s->clips[s->nclips++] = *c;
    return DDP_OK;
}

/* "clip:MAX" or "clip:MAX:inf" / "clip:MAX:2" at ps->p: the op and its arguments. */
static ddp_status parse_clip(parser *ps, const char *at)
{
    ps->p += 4;
    if (*ps->p != ':')
        return fail_at(ps, ps->p, "expected ':MAX' after 'clip' (clip_grad_norm_'s max_norm: clip:1.0)");
    ps->p++;
    errno = 0;
    char *end;
    double max = strtod(ps->p, &end);
    if (end == ps->p || errno || !isfinite(max) || !(max > 0) || isalpha((unsigned char)*end))
        return fail_at(ps, ps->p, "clip's max_norm must be a positive finite number");
    ps->p = end;
    sched_clip c = {.op = ps->s->nops, .max_norm = max};
    if (*ps->p == ':') {
        ps->p++;
        if (word_is(ps->p, "inf"))
            c.inf_norm = 1;
        else if (!word_is(ps->p, "2"))
            return fail_at(ps, ps->p, "clip's norm type must be 2 or inf (clip:MAX:inf)");
        ps->p += c.inf_norm ? 3 : 1;
    }
    if (*ps->p && !isspace((unsigned char)*ps->p) && !strchr(",#)}", *ps->p))
        return fail_at(ps, ps->p, "unexpected text after a clip op");
    DDP_CHECK(push_clip(ps, &c));
    return emit(ps, OP_CLIP, at);
}

/*
 * "N*( ... )" or "[C, r:c ...]*( ... )": the body parsed once, then copied
 * (with the uneven repetitions, join blocks and clip ops inside it) until the largest
 * count. 0*(...) is checked for its grammar, then dropped.
 */
static ddp_status parse_repeat(parser *ps, const char *at, int depth)
{
    sched *s = ps->s;
    sched_uneven u = {.join = -1};
    int uneven = *at == '[';
    if (uneven) {
        if (ps->in_uneven)
            return fail_at(ps, at, "uneven repetitions do not nest");
        ddp_text_position(ps->text, at, &u.line, &u.col);
        DDP_CHECK(parse_uneven_counts(ps, &u));
    } else {
        DDP_CHECK(parse_count(ps, &u.count));
        u.iterations = u.count;
    }
    skip_space(ps);
    if (*ps->p != '*')
        return fail_at(ps, ps->p, "expected '*' after a repeat count");
    ps->p++;
    skip_space(ps);
    if (*ps->p != '(')
        return fail_at(ps, ps->p, "expected '(' after 'N*'");
    ps->p++;
    size_t first = s->nops, u0 = s->nuneven, j0 = s->njoins, c0 = s->nclips;
    ps->in_uneven += uneven;
    ddp_status st = parse_seq(ps, ')', depth + 1);
    ps->in_uneven -= uneven;
    DDP_CHECK(st);
    size_t len = s->nops - first, u1 = s->nuneven, j1 = s->njoins, c1 = s->nclips;
    if (len == 0)
        return fail_at(ps, at, "a repeated group is empty");
    if (u.iterations == 0) {
        s->nops = first;
        s->nuneven = u0;
        s->njoins = j0;
        s->nclips = c0;
        return DDP_OK;
    }
    for (uint32_t r = 1; r < u.iterations; r++) {
        for (size_t i = 0; i < len; i++)
            DDP_CHECK(emit(ps, s->ops[first + i], at));
        for (size_t k = u0; k < u1; k++) {
            sched_uneven c = s->uneven[k];
            c.first_op += r * len;
            DDP_CHECK(push_uneven(ps, &c));
        }
        for (size_t k = j0; k < j1; k++) {
            sched_join c = s->joins[k];
            c.enter_op += r * len;
            c.exit_op += r * len;
            DDP_CHECK(push_join(ps, &c));
        }
        for (size_t k = c0; k < c1; k++) {
            sched_clip c = s->clips[k];
            c.op += r * len;
            DDP_CHECK(push_clip(ps, &c));
        }
    }
    if (uneven) {
        u.first_op = first;
        u.body_ops = len;
        DDP_CHECK(push_uneven(ps, &u));
    }
    return DDP_OK;
}

/* "join{ ... }", or "join(divide_by_initial_world_size=false){ ... }": join_enter ... join_exit. */
static ddp_status parse_join(parser *ps, const char *at, int depth)
{
    if (ps->in_join)
        return fail_at(ps, at, "join does not nest");
    if (ps->in_uneven)
        return fail_at(ps, at, "a join block inside an uneven repetition (the join block holds the repetition)");
    sched_join j = {.divide_by_initial_world_size = 1, .uneven = -1};
    ps->p += 4;
    skip_space(ps);
    if (*ps->p == '(') {
        ps->p++;
        skip_space(ps);
        if (!word_is(ps->p, "divide_by_initial_world_size"))
            return fail_at(ps, ps->p, "expected 'divide_by_initial_world_size=true|false' (model.join()'s option)");
        ps->p += strlen("divide_by_initial_world_size");
        skip_space(ps);
        if (*ps->p != '=')
            return fail_at(ps, ps->p, "expected '=' after 'divide_by_initial_world_size'");
        ps->p++;
        skip_space(ps);
        if (word_is(ps->p, "true") || word_is(ps->p, "True"))
            j.divide_by_initial_world_size = 1;
        else if (word_is(ps->p, "false") || word_is(ps->p, "False"))
            j.divide_by_initial_world_size = 0;
        else
            return fail_at(ps, ps->p, "expected 'true' or 'false'");
        while (isalpha((unsigned char)*ps->p))
            ps->p++;
        skip_space(ps);
        if (*ps->p != ')')
            return fail_at(ps, ps->p, "expected ')'");
        ps->p++;
        skip_space(ps);
    }
    if (*ps->p != '{')
        return fail_at(ps, ps->p, "expected '{' after 'join'");
    ps->p++;
    j.enter_op = ps->s->nops;
    DDP_CHECK(emit(ps, OP_JOIN_ENTER, at));
    size_t k = ps->s->njoins;
    DDP_CHECK(push_join(ps, &j));
    ps->in_join = 1;
    ddp_status st = parse_seq(ps, '}', depth + 1);
    ps->in_join = 0;
    DDP_CHECK(st);
    ps->s->joins[k].exit_op = ps->s->nops;
    return emit(ps, OP_JOIN_EXIT, at);
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
        if (isdigit((unsigned char)*at) || *at == '[') {
            DDP_CHECK(parse_repeat(ps, at, depth));
            continue;
        }
        if (word_is(at, "join")) {
            DDP_CHECK(parse_join(ps, at, depth));
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
        if (strncmp(at, "clip", 4) == 0 && (at[4] == ':' || !isalnum((unsigned char)at[4]))) {
            DDP_CHECK(parse_clip(ps, at));
            continue;
        }
        int found = -1;
        for (int k = 0; k < WRITABLE_OPS; k++)
            if (word_is(at, op_names[k]))
                found = k;
        if (found < 0)
            return fail_at(ps, at, "expected an op (fwd bwd grab zero step enter exit clip:MAX), 'nosync{', 'join{' or 'N*('");
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

/* "line L, column C" of an uneven repetition, or "op N" for a recorded one. */
static const char *uneven_where(const sched_uneven *u, char *buf, size_t len)
{
    if (u->line)
        snprintf(buf, len, "schedule line %d, column %d", u->line, u->col);
    else
        snprintf(buf, len, "the uneven repetition at op %zu", u->first_op);
    return buf;
}

static int by_first_op(const void *a, const void *b)
{
    const sched_uneven *x = a, *y = b;
    return x->first_op < y->first_op ? -1 : x->first_op > y->first_op;
}

/*
 * The join blocks and uneven repetitions against the ops: each join block's
 * ops where it says, not nested; an uneven repetition inside a join block
 * ends it and is the block's only one (a rank that runs out goes on to what
 * follows the repetition, and only at the end of the with-block does
 * Join.__exit__ shadow its peers).
 */
static ddp_status validate_structure(sched *s)
{
    if (s->nuneven > 1)
        qsort(s->uneven, s->nuneven, sizeof *s->uneven, by_first_op);
    char w[64];
    for (size_t k = 0; k < s->njoins; k++) {
        sched_join *j = &s->joins[k];
        if (j->enter_op >= j->exit_op || j->exit_op >= s->nops || s->ops[j->enter_op] != OP_JOIN_ENTER ||
            s->ops[j->exit_op] != OP_JOIN_EXIT || (k > 0 && j->enter_op <= s->joins[k - 1].exit_op))
            return ddp_error(DDP_ERR_INVALID, "join block %zu does not match the schedule's join ops", k);
        j->uneven = -1;
    }
    size_t nenter = 0;
    for (size_t i = 0; i < s->nops; i++)
        nenter += s->ops[i] == OP_JOIN_ENTER || s->ops[i] == OP_JOIN_EXIT;
    if (nenter != 2 * s->njoins)
        return ddp_error(DDP_ERR_INVALID, "the schedule's join ops do not match its join blocks");
    for (size_t k = 0; k < s->nuneven; k++) {
        sched_uneven *u = &s->uneven[k];
        size_t end = u->first_op + (size_t)u->iterations * u->body_ops;
        if (u->body_ops == 0 || u->iterations == 0 || end > s->nops || end < u->first_op ||
            (k > 0 && u->first_op < s->uneven[k - 1].first_op + (size_t)s->uneven[k - 1].iterations *
                                                                     s->uneven[k - 1].body_ops))
            return ddp_error(DDP_ERR_INVALID, "%s: its ops do not fit the schedule", uneven_where(u, w, sizeof w));
        u->join = -1;
        for (size_t q = 0; q < s->njoins; q++) {
            sched_join *j = &s->joins[q];
            if (end <= j->enter_op || u->first_op > j->exit_op)
                continue;
            if (u->first_op <= j->enter_op)
                return ddp_error(DDP_ERR_INVALID, "%s: a join block inside an uneven repetition",
                                 uneven_where(u, w, sizeof w));
            if (end != j->exit_op)
                return ddp_error(DDP_ERR_INVALID,
                                 "%s: inside join, an uneven repetition must end the block: a rank that runs out "
                                 "goes on to the ops after it while its peers still iterate (PyTorch's Join "
                                 "shadows them only from the end of the with-block, join.py __exit__)",
                                 uneven_where(u, w, sizeof w));
            u->join = (int)q;
            j->uneven = (int)k;
        }
    }
    return DDP_OK;
}

/*
 * One pass over the expanded ops: the rules that make a schedule meaningful,
 * as PyTorch 1.13 DDP accepts and refuses them (validate's comment above
 * sched_arming_step), and what uneven inputs need: every iteration of an
 * uneven repetition whole (no_sync as it found it, no forward waiting for
 * its backward at its edges), and inside join each forward outside no_sync
 * followed by its own backward before the next forward. The joined rank's
 * shadow (distributed.py _DDPJoinHook.main_hook) allreduces zeros for the
 * backward when its peers' forward says it will sync; a second forward
 * before that backward, or a backward synced by an earlier forward, would
 * pair the shadow's allreduces with the wrong collectives.
 */
static ddp_status validate(sched *s)
{
    DDP_CHECK(validate_structure(s));
    sched_arming a = {0};
    int fwd_pending = 0, in_join = 0;
    ssize_t needs_bwd = -1; /* inside join: a forward outside no_sync waiting for its backward */
    size_t uk = 0, start_depth = 0, nclip = 0;
    int synced_grads = 0, clipped = 0; /* the last backward since zero_grad synced; a clip since */
    char w[64];
    for (size_t i = 0; i <= s->nops; i++) {
        while (uk < s->nuneven && i > s->uneven[uk].first_op + (size_t)s->uneven[uk].iterations * s->uneven[uk].body_ops)
            uk++;
        for (size_t q = uk; q < s->nuneven && q <= uk + 1; q++) { /* this one's edge, and the next one's start */
            const sched_uneven *u = &s->uneven[q];
            if (i < u->first_op || (i - u->first_op) % u->body_ops != 0 ||
                i > u->first_op + (size_t)u->iterations * u->body_ops)
                continue;
            if (i == u->first_op)
                start_depth = a.depth;
            if (fwd_pending || a.depth != start_depth)
                return ddp_error(DDP_ERR_INVALID,
                                 "%s: each iteration of an uneven repetition must be whole: %s at its edge (op %zu)",
                                 uneven_where(u, w, sizeof w),
                                 fwd_pending ? "a forward waits for its backward" : "no_sync is not as it found it", i);
        }
        if (i == s->nops)
            break;
        switch (s->ops[i]) {
        case OP_FWD:
            if (in_join && needs_bwd >= 0)
                return ddp_error(DDP_ERR_INVALID,
                                 "schedule op %zu (fwd): inside join, the forward at op %zd ran outside no_sync, so "
                                 "it needs its own backward before another forward (a joined rank shadows that "
                                 "backward's allreduces when the forward announces them)", i, needs_bwd);
            if (in_join && a.depth == 0)
                needs_bwd = (ssize_t)i;
            fwd_pending = 1;
            break;
        case OP_BWD:
            if (!fwd_pending)
                return ddp_error(DDP_ERR_INVALID,
                                 "schedule op %zu (bwd): no forward to run backward for (PyTorch: trying to backward "
                                 "through the graph a second time)", i);
            if (clipped)
                return ddp_error(DDP_ERR_INVALID,
                                 "schedule op %zu (bwd): a backward onto clipped gradients (ddpsim checks a clip "
                                 "between the window's last backward and zero_grad)", i);
            if (in_join && a.armed && needs_bwd < 0)
                return ddp_error(DDP_ERR_INVALID,
                                 "schedule op %zu (bwd): inside join, a backward synced by a forward before the join "
                                 "block", i);
            fwd_pending = 0;
            needs_bwd = -1;
            break;
        case OP_EXIT:
            if (a.depth == 0)
                return ddp_error(DDP_ERR_INVALID, "schedule op %zu (exit): not inside no_sync", i);
            break;
        case OP_GRAB: s->ngrabs++; break;
        case OP_STEP: s->nsteps++; break;
        case OP_CLIP:
            if (nclip >= s->nclips || s->clips[nclip].op != i)
                return ddp_error(DDP_ERR_INVALID, "schedule op %zu (clip): no max_norm for it", i);
            if (in_join)
                return ddp_error(DDP_ERR_INVALID,
                                 "schedule op %zu (clip): clipping inside join is not supported (a rank that ran "
                                 "out would have to take part in the norm's collective)", i);
            if (!synced_grads)
                return ddp_error(DDP_ERR_INVALID,
                                 "schedule op %zu (clip): clipping needs the gradients of a syncing backward (the "
                                 "last backward since zero_grad must sync, as before a training step)", i);
            clipped = 1;
            nclip++;
            break;
        case OP_ZERO: synced_grads = clipped = 0; break;
        case OP_JOIN_ENTER:
            in_join = 1;
            needs_bwd = -1;
            break;
        case OP_JOIN_EXIT:
            if (needs_bwd >= 0)
                return ddp_error(DDP_ERR_INVALID,
                                 "schedule op %zu (join_exit): inside join, the forward at op %zd ran outside no_sync "
                                 "and the block ends before its backward", i, needs_bwd);
            in_join = 0;
            break;
        default: break;
        }
        int syncs = sched_arming_step(&a, s->ops[i]);
        if (s->ops[i] == OP_BWD)
            synced_grads = syncs;
        s->nsyncs += (size_t)syncs;
    }
    if (nclip != s->nclips)
        return ddp_error(DDP_ERR_INVALID, "the schedule's clip arguments do not match its clip ops");
    s->nfwd = a.forwards;
    return DDP_OK;
}

/* Where op i of s goes once a clip stands before every step: after the steps before it, and their clips. */
static size_t shifted(const size_t *steps_before, size_t i)
{
    return i + steps_before[i];
}

/*
 * Which steps --clip clips (into clip[i] for a step at op i): those a training loop clips before, where the last
 * backward since zero_grad synced, outside join, and no backward comes before the next zero_grad.
 */
static void clippable_steps(const sched *s, unsigned char *clip)
{
    int bwd_ahead = 0;
    for (size_t i = s->nops; i-- > 0;) {
        bwd_ahead = s->ops[i] == OP_BWD ? 1 : s->ops[i] == OP_ZERO ? 0 : bwd_ahead;
        clip[i] = s->ops[i] == OP_STEP && !bwd_ahead;
    }
    sched_arming a = {0};
    int synced = 0, in_join = 0;
    for (size_t i = 0; i < s->nops; i++) {
        in_join = s->ops[i] == OP_JOIN_ENTER ? 1 : s->ops[i] == OP_JOIN_EXIT ? 0 : in_join;
        synced = s->ops[i] == OP_ZERO ? 0 : synced;
        clip[i] &= synced && !in_join;
        int syncs = sched_arming_step(&a, s->ops[i]);
        if (s->ops[i] == OP_BWD)
            synced = syncs;
    }
}

/* Whether every iteration of each uneven repetition of s would be clipped as its first (the body copied once). */
static int uneven_clipped_alike(const sched *s, const unsigned char *clip, size_t *where)
{
    for (size_t q = 0; q < s->nuneven; q++) {
        const sched_uneven *u = &s->uneven[q];
        for (size_t j = u->body_ops; j < (size_t)u->iterations * u->body_ops; j++)
            if (clip[u->first_op + j] != clip[u->first_op + j % u->body_ops]) {
                *where = u->first_op;
                return 0;
            }
    }
    return 1;
}

ddp_status sched_clip_steps(sched *s, double max_norm, int inf_norm)
{
    if (s->nclips)
        return ddp_error(DDP_ERR_INVALID, "--clip: the schedule has clip ops of its own");
    if (!isfinite(max_norm) || !(max_norm > 0))
        return ddp_error(DDP_ERR_INVALID, "--clip: max_norm must be a positive finite number");
    if (s->nops + s->nsteps > SCHED_MAX_OPS)
        return ddp_error(DDP_ERR_INVALID, "--clip: the schedule would expand to more than %d ops", SCHED_MAX_OPS);
    size_t n = s->nops + s->nsteps, where = 0;
    size_t *before = malloc((s->nops + 1) * sizeof *before);
    unsigned char *ops = malloc((n ? n : 1) * sizeof *ops), *clip = malloc(s->nops ? s->nops : 1);
    sched_clip *clips = malloc((s->nsteps ? s->nsteps : 1) * sizeof *clips);
    ddp_status st = DDP_OK;
    if (!before || !ops || !clips || !clip) {
        st = ddp_error(DDP_ERR_NOMEM, "a schedule of %zu ops", n);
        goto out;
    }
    clippable_steps(s, clip);
    if (!uneven_clipped_alike(s, clip, &where)) {
        st = ddp_error(DDP_ERR_INVALID, "--clip: the iterations of the uneven repetition at op %zu would not all be "
                       "clipped alike: write clip ops in the schedule instead", where);
        goto out;
    }
    size_t k = 0, c = 0;
    for (size_t i = 0; i <= s->nops; i++) {
        before[i] = c;
        if (i == s->nops)
            break;
        if (clip[i]) {
            clips[c++] = (sched_clip){.op = k, .max_norm = max_norm, .inf_norm = inf_norm};
            ops[k++] = OP_CLIP;
        }
        ops[k++] = s->ops[i];
    }
    for (size_t q = 0; q < s->nuneven; q++) { /* every iteration has the same ops: the first one's clips count */
        sched_uneven *u = &s->uneven[q];
        u->body_ops += before[u->first_op + u->body_ops] - before[u->first_op];
        u->first_op = shifted(before, u->first_op);
    }
    for (size_t q = 0; q < s->njoins; q++) {
        s->joins[q].enter_op = shifted(before, s->joins[q].enter_op);
        s->joins[q].exit_op = shifted(before, s->joins[q].exit_op);
    }
    free(s->ops);
    s->ops = ops;
    s->nops = k;
    s->clips = clips;
    s->nclips = c;
    ops = NULL;
    clips = NULL;
    s->ngrabs = s->nsteps = s->nsyncs = 0;
    st = validate(s);
out:
    free(before);
    free(clip);
    free(ops);
    free(clips);
    return st;
}

const sched_clip *sched_clip_at(const sched *s, size_t op)
{
    size_t lo = 0, hi = s->nclips;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->clips[mid].op < op)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->nclips && s->clips[lo].op == op ? &s->clips[lo] : NULL;
}

static ddp_status resolve_each(const sched *s, int nranks, size_t first_sync, uint32_t *counts, uint32_t *mine,
                               int *named)
{
    char w[64];
    for (size_t k = 0; k < s->nuneven; k++) {
        const sched_uneven *u = &s->uneven[k];
        for (int r = 0; r < nranks; r++) {
            mine[r] = u->count;
            named[r] = 0;
        }
        for (int q = 0; q < u->nover; q++) {
            int r = u->over_rank[q] < 0 ? nranks + u->over_rank[q] : u->over_rank[q];
            if (r < 0 || r >= nranks)
                return ddp_error(DDP_ERR_INVALID, "%s: the uneven count names rank %d, but the run has %d rank%s",
                                 uneven_where(u, w, sizeof w), u->over_rank[q], nranks, nranks == 1 ? "" : "s");
            if (named[r])
                return ddp_error(DDP_ERR_INVALID, "%s: the uneven count names rank %d twice at %d ranks",
                                 uneven_where(u, w, sizeof w), r, nranks);
            named[r] = 1;
            mine[r] = u->over_count[q];
        }
        uint32_t most = 0;
        for (int r = 0; r < nranks; r++)
            most = mine[r] > most ? mine[r] : most;
        if (most != u->iterations)
            return ddp_error(DDP_ERR_INVALID, "%s: at %d rank%s no rank runs the repetition %u times",
                             uneven_where(u, w, sizeof w), nranks, nranks == 1 ? "" : "s", u->iterations);
        for (int r = 0; r < nranks; r++) {
            size_t out = u->first_op + (size_t)mine[r] * u->body_ops;
            if (mine[r] < most && first_sync != SIZE_MAX && out <= first_sync)
                return ddp_error(DDP_ERR_INVALID,
                                 "%s: rank %d runs out at op %zu, before the run's first syncing backward (op %zu): "
                                 "DDP rebuilds its buckets after that backward, and a joined rank's part in the "
                                 "rebuild is not modelled; let every rank run until then",
                                 uneven_where(u, w, sizeof w), r, out, first_sync);
            if (counts)
                counts[k * (size_t)nranks + (size_t)r] = mine[r];
        }
    }
    return DDP_OK;
}

ddp_status sched_resolve(const sched *s, int nranks, uint32_t *counts)
{
    /* the first syncing backward: no rank may have run out before it (the bucket rebuild that follows it) */
    sched_arming a = {0};
    size_t first_sync = SIZE_MAX;
    for (size_t i = 0; i < s->nops && first_sync == SIZE_MAX; i++)
        if (sched_arming_step(&a, s->ops[i]))
            first_sync = i;
    uint32_t *mine = malloc((size_t)(nranks > 0 ? nranks : 1) * (sizeof *mine + sizeof(int)));
    if (!mine)
        return ddp_error(DDP_ERR_NOMEM, "the uneven counts of %d ranks", nranks);
    int *named = (int *)(mine + (nranks > 0 ? nranks : 1));
    ddp_status st = resolve_each(s, nranks, first_sync, counts, mine, named);
    free(mine);
    return st;
}

int sched_uneven_of(const sched *s, size_t op, uint32_t *iteration)
{
    size_t lo = 0, hi = s->nuneven;
    while (lo < hi) { /* the last repetition starting at or before op */
        size_t mid = (lo + hi) / 2;
        if (s->uneven[mid].first_op <= op)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return -1;
    const sched_uneven *u = &s->uneven[lo - 1];
    size_t rel = op - u->first_op;
    if (rel >= (size_t)u->iterations * u->body_ops)
        return -1;
    *iteration = (uint32_t)(rel / u->body_ops);
    return (int)(lo - 1);
}

int sched_runs(const sched *s, const uint32_t *counts, int nranks, size_t op, int rank)
{
    uint32_t it;
    int k = sched_uneven_of(s, op, &it);
    return k < 0 || it < counts[(size_t)k * (size_t)nranks + (size_t)rank];
}

int sched_participants(const sched *s, const uint32_t *counts, int nranks, size_t op, unsigned char *active,
                       int *highest)
{
    /* Every op of every run asks this on every rank: find op's repetition once, not once per rank. */
    uint32_t it = 0;
    int k = sched_uneven_of(s, op, &it);
    const uint32_t *mine = k < 0 ? NULL : counts + (size_t)k * (size_t)nranks;
    int n = 0;
    *highest = 0;
    for (int r = 0; r < nranks; r++) {
        int runs = !mine || it < mine[r];
        if (active)
            active[r] = (unsigned char)runs;
        n += runs;
        *highest = runs ? r : *highest;
    }
    return n;
}

int sched_last_joiner(const sched *s, const uint32_t *counts, int nranks, int k)
{
    int u = s->joins[k].uneven, last = nranks - 1;
    while (u >= 0 && last > 0 && counts[(size_t)u * (size_t)nranks + (size_t)last] != s->uneven[u].iterations)
        last--;
    return last;
}

int sched_join_of(const sched *s, size_t op)
{
    for (size_t k = 0; k < s->njoins; k++)
        if (s->joins[k].enter_op <= op && op <= s->joins[k].exit_op)
            return (int)k;
    return -1;
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

ssize_t sched_static_graph_conflict(const sched *s, int first_iteration)
{
    sched_arming a = {0};
    for (size_t i = 0; i < s->nops; i++) {
        if (s->ops[i] == OP_BWD && !first_iteration)
            return a.armed ? -1 : (ssize_t)i; /* only the first backward queues the delayed allreduce */
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
    parser ps = {.text = text, .p = text, .s = s};
    ddp_status st = parse_seq(&ps, 0, 0);
    if (st == DDP_OK)
        st = validate(s);
    if (st != DDP_OK)
        sched_free(s);
    return st;
}

void sched_check_iter_init(sched_check_iter *it)
{
    memset(it, 0, sizeof *it);
}

/* A grab's label from what came before it (sched_grab_labels). */
static void grab_label(const sched_check_iter *it, char *l, size_t len)
{
    if (it->last == 0) {
        snprintf(l, len, "before any backward");
    } else if (it->last == 2) {
        snprintf(l, len, "after zero_grad");
    } else {
        const char *what = it->fwd_in && it->synced ? "no_sync fwd+bwd, armed"
                           : it->fwd_in && it->bwd_in ? "no_sync fwd+bwd"
                           : it->fwd_in               ? "no_sync fwd, bwd outside"
                           : it->bwd_in               ? "fwd, bwd in no_sync"
                                                      : "fwd+bwd";
        char accs[24] = "";
        if (it->acc > 1)
            snprintf(accs, sizeof accs, " (%u acc)", it->acc);
        snprintf(l, len, "after %s%s%s", what, accs, it->stepped ? ", step" : "");
    }
}

int sched_check_next(const sched *s, sched_check_iter *it, sched_check *out)
{
    for (; it->op < s->nops; it->op++) {
        size_t i = it->op;
        int syncs = sched_arming_step(&it->arming, s->ops[i]);
        switch (s->ops[i]) {
        case OP_BWD:
            it->fwd_in = it->arming.forward_in_no_sync;
            it->bwd_in = it->arming.depth > 0;
            it->synced = syncs;
            it->last = 1;
            it->acc++;
            it->stepped = 0;
            break;
        case OP_ZERO:
            it->last = 2;
            it->acc = 0;
            break;
        case OP_STEP:
            it->stepped = 1;
            it->op++;
            *out = (sched_check){.kind = CHECK_PARAMS, .op = i, .index = it->step++, .label = "parameters after step"};
            return 1;
        case OP_GRAB:
            it->op++;
            *out = (sched_check){.kind = CHECK_GRADS, .op = i, .index = it->grab++};
            grab_label(it, out->label, sizeof out->label);
            return 1;
        default: break;
        }
    }
    if (it->ended)
        return 0;
    it->ended = 1;
    *out = (sched_check){.kind = CHECK_PARAMS, .op = s->nops, .index = s->nsteps, .at_end = 1,
                         .label = "parameters at the end"};
    return 1;
}

void sched_grab_labels(const sched *s, char (*labels)[SCHED_LABEL_LEN])
{
    sched_check_iter it;
    sched_check c;
    size_t k = 0;
    sched_check_iter_init(&it);
    while (sched_check_next(s, &it, &c))
        if (c.kind == CHECK_GRADS)
            memcpy(labels[k++], c.label, SCHED_LABEL_LEN);
}

size_t sched_nchecks(const sched *s)
{
    return s->ngrabs + s->nsteps + 1;
}

void sched_checks(const sched *s, sched_check *out)
{
    sched_check_iter it;
    size_t k = 0;
    sched_check_iter_init(&it);
    while (sched_check_next(s, &it, &out[k]))
        k++;
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

ddp_status sched_from_ops(const sched_op *ops, size_t n, const sched_uneven *uneven, size_t nuneven,
                          const sched_join *joins, size_t njoins, const sched_clip *clips, size_t nclips, sched *s)
{
    memset(s, 0, sizeof *s);
    if (n > SCHED_MAX_OPS)
        return ddp_error(DDP_ERR_INVALID, "%zu ops, more than %d", n, SCHED_MAX_OPS);
    s->ops = malloc((n ? n : 1) * sizeof *s->ops);
    s->uneven = malloc((nuneven ? nuneven : 1) * sizeof *s->uneven);
    s->joins = malloc((njoins ? njoins : 1) * sizeof *s->joins);
    s->clips = malloc((nclips ? nclips : 1) * sizeof *s->clips);
    if (!s->ops || !s->uneven || !s->joins || !s->clips) {
        sched_free(s);
        return ddp_error(DDP_ERR_NOMEM, "%zu ops", n);
    }
    for (size_t i = 0; i < n; i++)
        s->ops[i] = (unsigned char)ops[i];
    s->nops = n;
    if (nuneven)
        memcpy(s->uneven, uneven, nuneven * sizeof *uneven);
    s->nuneven = nuneven;
    if (njoins)
        memcpy(s->joins, joins, njoins * sizeof *joins);
    s->njoins = njoins;
    for (size_t k = 0; k < nclips; k++) {
        if (!isfinite(clips[k].max_norm) || !(clips[k].max_norm > 0) || (k > 0 && clips[k].op <= clips[k - 1].op)) {
            sched_free(s);
            return ddp_error(DDP_ERR_INVALID, "clip %zu: a max_norm that is positive and finite, at an op after the "
                             "clip before it", k);
        }
        s->clips[k] = clips[k];
    }
    s->nclips = nclips;
    ddp_status st = validate(s);
    if (st != DDP_OK)
        sched_free(s);
    return st;
}

void sched_free(sched *s)
{
    free(s->ops);
    free(s->uneven);
    free(s->joins);
    free(s->clips);
    memset(s, 0, sizeof *s);
}
