/*
 * judge.c - from records to a verdict (judge.h).
 */
#include "judge.h"

#include <math.h>
#include <string.h>

int judge_record_ok(const verify_record *r)
{
    return r->done && r->ndiff == 0 && r->nonfinite == 0;
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

void judge_run(const verify_result *res, judgement *j)
{
    memset(j, 0, sizeof *j);
    j->first_rank = -1;
    for (size_t k = 0; k < res->ngrabs; k++) {
        int failed = 0, agree = 1, checked = 0, global_bad = 0;
        uint64_t nonzero = 0;
        for (int r = 0; r < res->nranks; r++) {
            const verify_record *rec = verify_at(res, k, r);
            if (!judge_record_ok(rec)) {
                failed = 1;
                if (!j->first) {
                    j->first = rec;
                    j->first_grab = k;
                    j->first_rank = r;
                }
            }
            nonzero += rec->nonzero;
            agree &= rec->ref_hash == verify_at(res, k, 0)->ref_hash;
            if (rec->global_checked) {
                checked = 1;
                if (!(rec->global_ratio <= j->global_worst) && !isnan(j->global_worst))
                    j->global_worst = rec->global_ratio; /* NaN sticks */
                global_bad |= !(rec->global_ratio <= 1);
            }
        }
        j->grabs_failed += failed;
        j->informative_grabs += nonzero > 0;
        j->global_checked += checked;
        j->global_failed += global_bad;
        int synced = verify_at(res, k, 0)->synced;
        if (synced == 1) {
            j->synced_grabs++;
            j->synced_disagree += !agree;
        } else if (synced == 0 && res->nranks > 1) {
            j->local_grabs++;
            j->local_identical += agree;
        }
    }
    j->nccl_agree = !res->nccl || judge_nccl_sum(res).digests_agree;
    if (j->synced_disagree || j->global_failed)
        j->verdict = JUDGE_REFERENCE_BAD;
    else if (j->grabs_failed)
        j->verdict = JUDGE_DIVERGES;
    else if (!j->nccl_agree)
        j->verdict = JUDGE_NCCL_DISAGREE;
    else if (j->informative_grabs == 0)
        j->verdict = JUDGE_NOTHING;
    else
        j->verdict = JUDGE_PASS;
}
