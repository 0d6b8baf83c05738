/*
 * judge.c - from records to a verdict (judge.h).
 */
#include "judge.h"

#include <string.h>

int judge_record_ok(const verify_record *r)
{
    return r->done && r->ndiff == 0 && r->nonfinite == 0;
}

static int global_ok(const verify_record *r)
{
    return r->global_err <= VERIFY_GLOBAL_RTOL * r->global_scale;
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
        int failed = 0, agree = 1;
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
            agree &= rec->ref_hash == verify_at(res, k, 0)->ref_hash;
            if (rec->global_checked) {
                j->global_checked++;
                double ratio = rec->global_scale > 0 ? rec->global_err / rec->global_scale : rec->global_err;
                if (!(ratio <= j->global_worst))
                    j->global_worst = ratio;
                j->global_failed += !global_ok(rec);
            }
        }
        j->grabs_failed += failed;
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
    int sane = j->synced_disagree == 0 && j->global_failed == 0;
    if (j->grabs_failed)
        j->verdict = JUDGE_DIVERGES;
    else if (!sane)
        j->verdict = JUDGE_REFERENCE_BAD;
    else if (!j->nccl_agree)
        j->verdict = JUDGE_NCCL_DISAGREE;
    else
        j->verdict = JUDGE_PASS;
}
