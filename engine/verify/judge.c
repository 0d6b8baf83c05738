/*
 * judge.c - from records to a verdict (judge.h).
 */
#include "judge.h"
#include "pattern.h"

#include "checker.h"
#include "hash.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int judge_record_ok(const verify_record *r)
{
    return r->done && r->ndiff == 0 && r->nonfinite == 0 && r->unsynced_reductions == 0 && !r->clip.failed &&
           !r->scale.failed && !r->norm.failed;
}


judge_nccl_total judge_nccl_sum(const verify_result *res)
{
    judge_nccl_total t = {.digests_agree = 1};
    for (int r = 0; r < res->nranks; r++) {
        const nccl_figures *f = &res->nccl[r];
        t.calls += f->nallreduce;
        t.elements += f->elements;
        t.ring_same += f->ring_same;
        t.device_ms += f->device_ms;
        t.roundtrip_ms += f->roundtrip_ms;
        if (f->max_roundtrip_ms > t.max_ms)
            t.max_ms = f->max_roundtrip_ms;
        t.digests_agree &= f->digest == res->nccl[0].digest && f->nallreduce == res->nccl[0].nallreduce;
    }
    return t;
}

void judge_tally_init(verify_tally *t)
{
    memset(t, 0, sizeof *t);
    t->first_rank = -1;
    t->ref_fingerprint = t->impl_fingerprint = HASH_INIT;
}

void judge_take_check(verify_tally *t, const sched_check *ck, const verify_record *recs, int nranks)
{
    size_t k = t->checks_taken++;
    int grads = ck->kind == CHECK_GRADS;
    int failed = 0, agree = 1, checked = 0, global_bad = 0, uneven = 0, base = 0;
    uint64_t nonzero = 0;
    int first_here = 0; /* the first failing record is this check's */
    /* Uneven inputs: a rank that had run out has no record to compare, and until every rank zeroes again the
     * ranks' gradients may differ (the reference's too): no agreement across ranks is asked of them. */
    for (int r = 0; r < nranks; r++)
        uneven |= recs[r].joined || recs[r].uneven;
    while (base < nranks - 1 && recs[base].joined)
        base++;
    int ref_own = !t->failed; /* the reference's values are its own up to the first failing check */
    t->ref_checks += (size_t)ref_own;
    for (int r = 0; r < nranks; r++) {
        const verify_record *rec = &recs[r];
        if (ref_own)
            t->ref_fingerprint = hash_word(t->ref_fingerprint, rec->ref_hash);
        t->impl_fingerprint = hash_word(t->impl_fingerprint, rec->impl_hash);
        t->joined_records += (size_t)rec->joined;
        if (rec->bound_ratio > t->bound_worst)
            t->bound_worst = rec->bound_ratio;
        if (!judge_record_ok(rec)) {
            failed = 1;
            /* At the first failing check a rank whose loss scale, skip or clip failed comes first: it made the
             * values every rank's check then saw (one rank's wrong scale changes every rank's sum). */
            int cause = rec->scale.failed || rec->clip.failed || rec->norm.failed;
            if (!t->failed ||
                (first_here && cause && !t->first.scale.failed && !t->first.clip.failed && !t->first.norm.failed)) {
                first_here = 1;
                t->failed = 1;
                t->first = *rec;
                t->first_where = *ck;
                t->first_check = k;
                t->first_rank = r;
            }
        }
        if (!grads)
            continue;
        for (int b = 0; b < TOL_ULP_BINS; b++)
            t->ulp_hist[b] += rec->ulp_hist[b];
        if (rec->max_ulp > t->max_ulp)
            t->max_ulp = rec->max_ulp;
        if (rec->joined)
            continue;
        nonzero += rec->nonzero;
        const verify_record *r0 = &recs[base];
        agree &= uneven || (r0->synced == 1 ? rec->ref_sync_hash == r0->ref_sync_hash : rec->ref_hash == r0->ref_hash);
        if (rec->global_checked) {
            checked = 1;
            if (!(rec->global_ratio <= t->global_worst) && !isnan(t->global_worst))
                t->global_worst = rec->global_ratio; /* NaN sticks */
            global_bad |= !(rec->global_ratio <= 1);
        }
    }
    t->checks_failed += failed;
    if (!grads) {
        t->steps_checked += !ck->at_end;
        t->params_checked++;
        t->params_failed += failed;
        return;
    }
    t->grabs_failed += failed;
    t->informative_grabs += nonzero > 0;
    t->global_checked += checked;
    t->global_failed += global_bad;
    int synced = uneven ? -1 : recs[base].synced; /* the counts of alike and unlike ranks: even runs */
    if (synced == 1) {
        t->synced_grabs++;
        t->synced_disagree += !agree;
    } else if (synced == 0 && nranks > 1) {
        t->local_grabs++;
        t->local_identical += agree;
    }
}

void judge_run(const verify_result *res, judgement *j)
{
    const verify_tally *t = &res->tally;
    memset(j, 0, sizeof *j);
    j->checks_failed = t->checks_failed;
    j->joined_records = t->joined_records;
    j->grabs_failed = t->grabs_failed;
    j->params_failed = t->params_failed;
    j->params_checked = t->params_checked;
    j->first = t->failed ? &t->first : NULL;
    j->first_where = t->failed ? &t->first_where : NULL;
    j->first_check = t->first_check;
    j->first_rank = t->first_rank;
    j->synced_grabs = t->synced_grabs;
    j->synced_disagree = t->synced_disagree;
    j->local_grabs = t->local_grabs;
    j->local_identical = t->local_identical;
    j->global_checked = t->global_checked;
    j->global_failed = t->global_failed;
    j->global_worst = t->global_worst;
    j->informative_grabs = t->informative_grabs;
    j->bound_worst = t->bound_worst;
    j->disagree_rank = -1;
    for (int r = 0; r < res->nranks; r++) {
        const verify_agreement *a = &res->agreement[r];
        if (a->syncs > j->agreement_syncs)
            j->agreement_syncs = a->syncs;
        if (a->differs && !j->disagree) {
            j->disagree = a;
            j->disagree_rank = r;
        }
    }
    j->nccl_agree = !res->nccl || judge_nccl_sum(res).digests_agree;
    if (j->synced_disagree || j->global_failed)
        j->verdict = JUDGE_REFERENCE_BAD;
    else if (j->checks_failed)
        j->verdict = JUDGE_DIVERGES;
    else if (!j->nccl_agree)
        j->verdict = JUDGE_NCCL_DISAGREE;
    else if (j->disagree)
        j->verdict = JUDGE_RANKS_DISAGREE;
    else if (res->params_only ? t->steps_checked == 0 : j->informative_grabs == 0)
        j->verdict = JUDGE_NOTHING;
    else
        j->verdict = JUDGE_PASS;
}

static const char *param_name(const model *layout, int p, char *buf, size_t len)
{
    if (layout && p >= 0 && p < model_nparams(layout))
        return model_param_at(layout, p)->name;
    snprintf(buf, len, "#%d", p);
    return buf;
}

const char *judge_summary(const judgement *j, const model *layout, char *buf, size_t len)
{
    char where[32], pn[16];
    switch (j->verdict) {
    case JUDGE_PASS: snprintf(buf, len, "-"); break;
    case JUDGE_REFERENCE_BAD: snprintf(buf, len, "the reference failed its own sanity checks"); break;
    case JUDGE_NCCL_DISAGREE: snprintf(buf, len, "NCCL gave the ranks different bits"); break;
    case JUDGE_NOTHING: snprintf(buf, len, "nothing verified"); break;
    case JUDGE_RANKS_DISAGREE: {
        const verify_agreement *a = j->disagree;
        snprintf(buf, len, "ranks %d and %d differ after op %zu, %s[%llu]", a->base, j->disagree_rank, a->op,
                 param_name(layout, a->param, pn, sizeof pn), (unsigned long long)a->index);
        break;
    }
    case JUDGE_DIVERGES: {
        const verify_record *f = j->first;
        sched_check_name(j->first_where, where, sizeof where);
        if (!f->done)
            snprintf(buf, len, "%s, rank %d: never reached", where, j->first_rank);
        else if (f->norm.failed)
            snprintf(buf, len, "loss normalization at op %llu, rank %d: %.6g x the intended factor",
                     (unsigned long long)f->norm.op, j->first_rank,
                     f->norm.ref_factor ? (double)f->norm.factor / (double)f->norm.ref_factor : (double)f->norm.factor);
        else if (f->scale.failed == VERIFY_SCALE_APPLIED)
            snprintf(buf, len, "loss scale at op %llu, rank %d: %.6g x reference's", (unsigned long long)f->scale.op,
                     j->first_rank, (double)f->scale.scale / (double)f->scale.ref_scale);
        else if (f->scale.failed)
            snprintf(buf, len, "unscale at op %llu, rank %d: %s, reference %s", (unsigned long long)f->scale.op,
                     j->first_rank, f->scale.found_inf ? "skips" : "steps", f->scale.ref_found_inf ? "skips" : "steps");
        else if (f->clip.failed == VERIFY_CLIP_RANKS)
            snprintf(buf, len, "clip before %s: rank %d %.6g, rank %d %.6g", where, j->first_rank,
                     (double)f->clip.coef, f->clip.other_rank, (double)f->clip.other_coef);
        else if (f->clip.failed) {
            char name[32] = "";
            if (f->clip.norm.kind == PATTERN_FACTOR)
                pattern_factor_name(&f->clip.norm, name, sizeof name);
            if (name[0])
                snprintf(buf, len, "clip before %s, rank %d: norm %s x reference's", where, j->first_rank, name);
            else
                snprintf(buf, len, "clip before %s, rank %d: %.6g x reference's", where, j->first_rank,
                         (double)f->clip.coef / (double)f->clip.ref_coef);
        }
        else if (!f->has_first && f->unsynced_reductions)
            snprintf(buf, len, "%s, rank %d: reduced at unsynced op %llu", where, j->first_rank,
                     (unsigned long long)f->unsynced_op);
        else if (f->has_first && f->first_padding)
            snprintf(buf, len, "%s, rank %d, unit %d padding[%llu] = %g, not 0", where, j->first_rank, f->first_param,
                     (unsigned long long)f->first_index, (double)f->first_actual);
        else if (f->has_first && f->first_none)
            snprintf(buf, len, "%s, rank %d, %s: .grad %s", where, j->first_rank,
                     layout ? checker_first_name(layout, f) : param_name(NULL, f->first_param, pn, sizeof pn),
                     f->first_none == VERIFY_NONE_ACTUAL ? "None" : "not None");
        else if (f->has_first) {
            char pat[96];
            pattern_short(&f->pattern, pat, sizeof pat);
            snprintf(buf, len, "%s, rank %d, %s%s[%llu]%s%s", where, j->first_rank, f->first_buffer ? "buffer " : "",
                     layout ? checker_first_name(layout, f) : param_name(NULL, f->first_param, pn, sizeof pn),
                     (unsigned long long)f->first_index, pat[0] ? ": " : "", pat);
        }
        else
            snprintf(buf, len, "%s, rank %d", where, j->first_rank);
        break;
    }
    }
    return buf;
}

void judge_facts_of(const judgement *j, const model *layout, judge_facts *out)
{
    memset(out, 0, sizeof *out);
    const verify_record *f = j->first;
    if (j->verdict != JUDGE_DIVERGES || !f || !j->first_where)
        return;
    out->known = 1;
    out->rank = j->first_rank;
    sched_check_name(j->first_where, out->check, sizeof out->check);
    snprintf(out->label, sizeof out->label, "%s", j->first_where->label);
    if (!f->done || !f->has_first || f->first_padding || f->first_none)
        return;
    char pn[16];
    out->has_element = 1;
    snprintf(out->tensor, sizeof out->tensor, "%s",
             layout ? checker_first_name(layout, f) : param_name(NULL, f->first_param, pn, sizeof pn));
    out->element = f->first_index;
    out->expected = f->first_expected;
    out->actual = f->first_actual;
    out->ulps = f->first_ulp;
    if (f->pattern.kind != PATTERN_NONE)
        pattern_text(&f->pattern, out->pattern, sizeof out->pattern);
}
