/*
 * explain.c - a failing check's pattern, from what the rank kept (explain.h).
 */
#include "explain.h"

#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "hash.h"

/* The kept elements of every tensor of a model-sized array src into dst (e->kept floats). */
static void pack(const explain_state *e, const model *m, const float *src, float *dst)
{
    for (int p = 0; p < model_nparams(m); p++)
        memcpy(dst + e->koff[p], src + model_param_at(m, p)->offset, e->klen[p] * sizeof *dst);
}

ddp_status explain_init(explain_state *e, const model *m)
{
    memset(e, 0, sizeof *e);
    for (int p = 0; p < model_nparams(m); p++) {
        size_t count = model_param_at(m, p)->count;
        e->koff[p] = e->kept;
        e->klen[p] = count < EXPLAIN_PREFIX ? count : EXPLAIN_PREFIX;
        e->kept += e->klen[p];
    }
    size_t n = e->kept ? e->kept : 1;
    e->pre_sync = malloc(n * sizeof *e->pre_sync);
    e->w_before = malloc(n * sizeof *e->w_before);
    if (!e->pre_sync || !e->w_before) {
        explain_free(e);
        return ddp_error(DDP_ERR_NOMEM, "what explains a divergence: %zu floats", 2 * n);
    }
    return DDP_OK;
}

void explain_free(explain_state *e)
{
    free(e->pre_sync);
    free(e->w_before);
    e->pre_sync = e->w_before = NULL;
}

void explain_backward(explain_state *e, const model *m, int before_sync)
{
    e->window++;
    if (before_sync) {
        pack(e, m, model_grads(m), e->pre_sync);
        e->have_pre_sync = 1;
    }
}

void explain_zero(explain_state *e)
{
    e->window = 0;
    e->have_pre_sync = 0;
}

void explain_before_step(explain_state *e, const model *m)
{
    pack(e, m, model_weights(m), e->w_before);
    e->have_stepped = 0;
}

/* The first diverging tensor of rec, when it is a parameter's elements (not None, padding or a buffer). */
static const model_param *diverged(const explain_state *e, const model *m, const verify_record *rec)
{
    if (!rec->has_first || rec->first_none || rec->first_padding || rec->first_buffer)
        return NULL;
    /* past the kept elements the tensor may still match there: nothing to look at */
    return rec->first_index < e->klen[rec->first_param] ? model_param_at(m, rec->first_param) : NULL;
}

/*
 * The elements a pattern is looked for on, of parameter p: its first klen[p] that the rank holds. Gathered
 * into out[c] from full[c] (model-sized arrays) for c < nfull and from kept[c] (explain_state-sized: packed)
 * after; a NULL source stays unread. The count.
 */
static size_t gather(const explain_state *e, const model_param *par, int p, const held_mask *held,
                     const float *const *full, int nfull, const float *const *kept, int nkept, float **out)
{
    size_t n = 0;
    for (size_t j = 0; j < e->klen[p]; j++) {
        if (held && !held->elem[par->offset + j])
            continue;
        for (int c = 0; c < nfull; c++)
            if (full[c])
                out[c][n] = full[c][par->offset + j];
        for (int c = 0; c < nkept; c++)
            if (kept[c])
                out[nfull + c][n] = kept[c][e->koff[p] + j];
        n++;
    }
    return n;
}

/* This rank's part of a sum over ranks (kept floats, packed), reduced: the average over the world (DDP's
 * fl(1/N) after the sum). */
static ddp_status averaged(world_rank *wr, float *mine, size_t n, int nranks)
{
    DDP_CHECK(coll_allreduce(wr, mine, n, COLL_FLOAT, COLL_SUM, COLL_ORDERED));
    float inv = (float)(1.0 / nranks);
    for (size_t i = 0; i < n; i++)
        mine[i] *= inv;
    return DDP_OK;
}

/* A stale value is bitwise an earlier grab's, the reference's or the implementation's own. */
static int stale(const explain_state *e, const model_param *par, int p, const float *actual, verify_record *rec)
{
    uint64_t h = hash_floats(0, actual + par->offset, e->klen[p]) | 1;
    for (int i = 0; i < EXPLAIN_HISTORY; i++) {
        const explain_grab_digests *d = &e->hist[(e->next + EXPLAIN_HISTORY - 1 - i) % EXPLAIN_HISTORY];
        if (!d->valid || d->ref[p] == 0 || (h != d->ref[p] && h != d->impl[p]))
            continue;
        rec->pattern = (verify_pattern){.kind = h == d->ref[p] ? PATTERN_STALE : PATTERN_UNCHANGED, .check = d->grab};
        return 1;
    }
    return 0;
}

ddp_status explain_grab(explain_state *e, world_rank *wr, int all_running, const model *m, const float *expected,
                        const float *actual, const held_mask *held, const pattern_constants *k, verify_record *rec)
{
    const model_param *par = rec->ndiff ? diverged(e, m, rec) : NULL;
    int p = par ? rec->first_param : -1;
    int nranks = world_size(wr);
    /* The sums over ranks, where every rank can take part and some rank's record needs them. */
    int reduce = 0;
    if (all_running && nranks > 1) {
        float any = par != NULL;
        DDP_CHECK(coll_allreduce(wr, &any, 1, COLL_FLOAT, COLL_SUM, COLL_ORDERED));
        reduce = any > 0;
    }
    const float *acc = rec->synced == 1 ? (e->have_pre_sync ? e->pre_sync : NULL) : NULL; /* packed */
    float *avg = NULL; /* [0, kept): the window's local sums averaged; [kept, 2 kept): the last micro-steps' */
    if (reduce) { /* every rank the same calls, in the same order */
        if (!(avg = malloc((e->kept ? e->kept : 1) * 2 * sizeof *avg)))
            return ddp_error(DDP_ERR_NOMEM, "what explains a divergence: %zu floats", 2 * e->kept);
        if (acc)
            memcpy(avg, acc, e->kept * sizeof *avg);
        else
            pack(e, m, model_grads(m), avg); /* unsynced: the reference's gradients are the local sum */
        pack(e, m, model_local_grads(m), avg + e->kept);
        ddp_status st = averaged(wr, avg, 2 * e->kept, nranks);
        if (st != DDP_OK) {
            free(avg);
            return st;
        }
    }
    enum { EXP, ACT, LAST, LOCAL, ACC_AVG, LAST_AVG, STEPPED, MIX1, MIX2, ONTO, NARR };
    float *buf = par ? malloc((e->klen[p] ? e->klen[p] : 1) * NARR * sizeof *buf) : NULL;
    if (!buf) {
        free(avg);
        return DDP_OK; /* no pattern here (or no memory for one: the verdict stands without it) */
    }
    float *out[NARR];
    for (int c = 0; c < NARR; c++)
        out[c] = buf + (size_t)c * e->klen[p];
    const float *full[] = {expected, actual, model_local_grads(m)};
    const float *kept[] = {acc, avg && rec->synced != 1 ? avg : NULL, avg ? avg + e->kept : NULL,
                           e->have_stepped ? e->w_before : NULL};
    size_t n = gather(e, par, p, held, full, 3, kept, 4, out);
    /* this rank's local sum over the window: kept at a synced grab, the reference's own at an unsynced one */
    const float *window = acc ? out[LOCAL] : rec->synced != 1 ? out[EXP] : NULL;
    int mixes = window && avg && e->window > 1;
    for (size_t j = 0; mixes && j < n; j++) {
        /* the last micro-step reduced, the earlier ones local; the earlier ones reduced, the last local */
        out[MIX1][j] = out[LAST_AVG][j] + (window[j] - out[LAST][j]);
        out[MIX2][j] = out[EXP][j] - out[LAST_AVG][j] + out[LAST][j]; /* at a synced grab: expected is the average */
    }
    for (size_t j = 0; kept[3] && j < n; j++)
        out[ONTO][j] = out[EXP][j] + out[STEPPED][j];
    pattern_candidate cands[] = {
        {PATTERN_LOCAL, acc ? out[LOCAL] : NULL, 0},
        {PATTERN_REDUCED_UNSYNCED, kept[1] ? out[ACC_AVG] : NULL, 0},
        {PATTERN_LAST_MICRO, e->window > 1 ? out[LAST] : NULL, 0},
        {PATTERN_LAST_REDUCED, avg && e->window > 1 ? out[LAST_AVG] : NULL, 0},
        {PATTERN_LAST_REDUCED_EARLIER_LOCAL, mixes ? out[MIX1] : NULL, 0},
        {PATTERN_EARLIER_REDUCED_LAST_LOCAL, mixes && rec->synced == 1 ? out[MIX2] : NULL, 0},
        {PATTERN_ONTO_STEPPED, kept[3] ? out[ONTO] : NULL, 0},
    };
    pattern_explain(out[EXP], out[ACT], n, cands, (int)(sizeof cands / sizeof cands[0]), k, &rec->pattern);
    /* A sum of the local gradients says more than an earlier value that equals it; an earlier value more than a
     * factor (a stale buffer read twice is twice, by chance). */
    int weak = rec->pattern.kind == PATTERN_FACTOR || rec->pattern.kind == PATTERN_ROUNDING ||
               rec->pattern.kind == PATTERN_NOT_FOUND;
    if (weak && (!held || held->param[p] == HELD_ALL))
        stale(e, par, p, actual, rec);
    free(buf);
    free(avg);
    return DDP_OK;
}

void explain_after_step(explain_state *e, const model *m, const float *grads)
{
    pack(e, m, grads, e->w_before);
    e->have_stepped = 1;
}

void explain_remember_grab(explain_state *e, const model *m, uint64_t grab, const float *expected,
                           const float *actual, const held_mask *held)
{
    explain_grab_digests *d = &e->hist[e->next];
    e->next = (e->next + 1) % EXPLAIN_HISTORY;
    d->valid = 1;
    d->grab = grab;
    for (int p = 0; p < model_nparams(m); p++) {
        const model_param *par = model_param_at(m, p);
        int whole = !held || held->param[p] == HELD_ALL;
        d->ref[p] = whole ? hash_floats(0, expected + par->offset, e->klen[p]) | 1 : 0;
        d->impl[p] = whole ? hash_floats(0, actual + par->offset, e->klen[p]) | 1 : 0;
    }
}

void explain_step(const explain_state *e, const model *m, const float *after, const float *actual,
                  const float *plain_grads, verify_pattern_kind plain_kind, float lr, const held_mask *held,
                  const pattern_constants *k, verify_record *rec)
{
    const model_param *par = diverged(e, m, rec);
    if (!par)
        return;
    int p = rec->first_param;
    enum { AFTER, ACT, GRAD, BEFORE, NARR };
    float *buf = malloc((e->klen[p] ? e->klen[p] : 1) * NARR * sizeof *buf);
    if (!buf)
        return;
    float *out[NARR];
    for (int c = 0; c < NARR; c++)
        out[c] = buf + (size_t)c * e->klen[p];
    const float *full[] = {after, actual, plain_grads};
    const float *kept[] = {e->w_before};
    size_t n = gather(e, par, p, held, full, 3, kept, 1, out);
    const float neg_lr = -lr;
    for (size_t j = 0; j < n; j++) { /* the updates: exact differences of nearby floats (Sterbenz) mostly */
        out[AFTER][j] -= out[BEFORE][j];
        out[ACT][j] -= out[BEFORE][j];
        if (plain_grads) /* what plain SGD would have moved it by */
            out[GRAD][j] = (out[BEFORE][j] + neg_lr * out[GRAD][j]) - out[BEFORE][j];
    }
    pattern_candidate plain = {.kind = plain_kind, .values = out[GRAD]};
    pattern_explain(out[AFTER], out[ACT], n, plain_grads ? &plain : NULL, plain_grads ? 1 : 0, k, &rec->pattern);
    rec->pattern.on_update = 1;
    free(buf);
}
