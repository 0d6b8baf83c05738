/*
 * catalogue.c - the bug-catalogue configurations and their runs (catalogue.h).
 */
#include "catalogue.h"

#include <stdio.h>
#include <string.h>

#include "judge.h"

static const catalogue_config configs[] = {
    {"default", MODEL_DEFAULT_SPEC, SCHED_DEFAULT, 3, 0},
    {"no_sync edges", MODEL_DEFAULT_SPEC,
     "enter fwd exit bwd grab fwd bwd grab step zero fwd enter bwd exit grab step zero", 3, 0},
    {"branchy, head used earlier", "branchy",
     "2*( nosync{fwd bwd} grab nosync{fwd bwd} grab fwd bwd grab step zero )", 4, 1},
    {"single-element tensor", "mlp:8-16-1", SCHED_DEFAULT, 3, 0},
};
#define NCONFIGS ((int)(sizeof configs / sizeof configs[0]))

int catalogue_nconfigs(void) { return NCONFIGS; }
const catalogue_config *catalogue_config_at(int i) { return &configs[i]; }

/* One configuration with one tolerance: fills failed/fault/where. */
static void run_config(const verify_config *base, const ddpsim_impl_ops *ops, const catalogue_config *cc,
                       const char *tol, catalogue_outcome *o)
{
    o->failed = o->fault = 0;
    o->where[0] = '\0';
    sched s;
    if (sched_parse(cc->schedule, &s) != DDP_OK) {
        o->failed = o->fault = 1;
        snprintf(o->where, sizeof o->where, "bad schedule: %s", ddp_error_text());
        return;
    }
    verify_config c = *base;
    c.nranks = cc->ranks;
    c.model_spec = cc->model;
    c.schedule = &s;
    c.ddp.find_unused = cc->find_unused;
    c.impl = ops->name;
    c.impl_ops = ops;
    c.dump_dir = c.inputs_dir = NULL;
    c.timeout_s = CATALOGUE_TIMEOUT_S;
    tol_parse(tol, &c.tol);
    verify_result res;
    if (verify_run(&c, &res) != DDP_OK) {
        o->failed = o->fault = 1;
        snprintf(o->where, sizeof o->where, "fault: %s", ddp_error_text());
    }
    judgement j;
    memset(&j, 0, sizeof j);
    if (!o->failed) {
        judge_run(&res, &j);
        o->failed = j.verdict != JUDGE_PASS;
    }
    if (!o->fault && o->failed) {
        model *m = NULL;
        if (model_create_layout(cc->model, c.batch, &m) != DDP_OK)
            m = NULL;
        judge_summary(&res, &j, m, o->where, sizeof o->where);
        model_destroy(m);
    }
    verify_result_free(&res);
    sched_free(&s);
}

void catalogue_run(const verify_config *base, const ddpsim_impl_ops *ops, catalogue_outcome *out)
{
    memset(out, 0, sizeof *out);
    out->config = -1;
    for (int k = 0; k < NCONFIGS; k++) {
        run_config(base, ops, &configs[k], "bitwise", out);
        if (out->failed) {
            out->config = k;
            break;
        }
    }
    if (out->failed && !out->fault) {
        catalogue_outcome loose;
        run_config(base, ops, &configs[out->config], CATALOGUE_LOOSE_TOLERANCE, &loose);
        out->bitwise_only = !loose.failed;
    }
}
