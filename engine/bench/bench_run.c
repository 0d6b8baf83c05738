/*
 * bench_run.c - verified runs and the battery, timed (bench_run.h).
 */
#include "bench_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "battery.h"
#include "bench_ddp.h"
#include "bench_model.h"
#include "clock.h"
#include "model.h"
#include "schedule.h"
#include "stats.h"

/* One timed verification run of vc: its wall time, the share of it in collectives, the overlap, the rank spread. */
typedef struct run_sample {
    double wall_s, coll_share, hidden, cpu_spread;
    double cost_s[COST_N]; /* the average rank's */
} run_sample;

static ddp_status run_timed(const verify_config *vc, run_sample *out, verify_result *failed)
{
    verify_result res;
    ddp_status st = verify_run(vc, &res);
    if (st != DDP_OK) {
        *failed = res;
        return st;
    }
    double coll = 0, hid = 0, exposed = 0, cpu[WORLD_MAX_RANKS], most = 0;
    for (int k = 0; k < COST_N; k++) {
        out->cost_s[k] = 0;
        for (int r = 0; r < res.nranks; r++)
            out->cost_s[k] += (double)res.figures[r].cost_ns[k] * 1e-9 / res.nranks;
    }
    for (int r = 0; r < res.nranks; r++) {
        const world_rank_outcome *o = world_outcome(res.w, r);
        coll += (double)o->coll_ns * 1e-9;
        hid += (double)res.figures[r].impl_comm_hidden_ns;
        exposed += (double)res.figures[r].impl_comm_exposed_ns;
        cpu[r] = verify_rank_cpu_ops_s(&res, r);
        most = cpu[r] > most ? cpu[r] : most;
    }
    out->wall_s = res.wall_s;
    out->coll_share = coll / res.nranks / res.wall_s;
    out->hidden = hid + exposed > 0 ? hid / (hid + exposed) : 0;
    double typical = stats_median(cpu, (size_t)res.nranks);
    out->cpu_spread = typical > 0 ? most / typical : 0;
    verify_result_free(&res);
    return DDP_OK;
}

static size_t count_backwards(const sched *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->nops; i++)
        n += s->ops[i] == OP_BWD;
    return n;
}

size_t bench_run_default_steps(void)
{
    sched s;
    if (sched_parse(SCHED_DEFAULT, &s) != DDP_OK)
        return 0; /* ddpsim's own default: it parses */
    size_t n = count_backwards(&s);
    sched_free(&s);
    return n;
}

/* Every round's samples, one array per figure. */
enum { S_WALL, S_WALL3, S_SHARE, S_HIDDEN, S_SPREAD, S_DDP, S_DDP3, S_COST, S_COST3 = S_COST + COST_N,
       S_NFIGS = S_COST3 + COST_N };

ddp_status bench_run_measure(const verify_config *base, int iters, bench_run_result *out, verify_result *failed)
{
    memset(out, 0, sizeof *out);
    memset(failed, 0, sizeof *failed);
    if (iters < 1)
        return ddp_error(DDP_ERR_INVALID, "bench run: %d rounds", iters);
    sched s = {0}, s3 = {0};
    DDP_CHECK(sched_parse(SCHED_DEFAULT, &s));
    ddp_status st = sched_parse("3*( " SCHED_DEFAULT " )", &s3);
    double *fig = st == DDP_OK ? malloc((size_t)S_NFIGS * (size_t)iters * sizeof *fig) : NULL;
    if (st == DDP_OK && !fig)
        st = ddp_error(DDP_ERR_NOMEM, "the samples of %d rounds", iters);
    out->steps = count_backwards(&s);
    out->steps3 = count_backwards(&s3);
    verify_config vc = *base;
    bench_ddp_config dc = {.model_spec = vc.model_spec, .nranks = vc.nranks, .batch = vc.batch, .seed = vc.seed,
                           .ddp = vc.ddp};
    for (int it = 0; st == DDP_OK && it < iters; it++) {
        run_sample once, thrice;
        uint64_t digest;
        vc.schedule = &s;
        if ((st = run_timed(&vc, &once, failed)) != DDP_OK)
            break;
        vc.schedule = &s3;
        if ((st = run_timed(&vc, &thrice, failed)) != DDP_OK)
            break;
        dc.schedule = &s;
        if ((st = bench_ddp_run(&dc, &fig[S_DDP * iters + it], &digest)) != DDP_OK)
            break;
        dc.schedule = &s3;
        if ((st = bench_ddp_run(&dc, &fig[S_DDP3 * iters + it], &digest)) != DDP_OK)
            break;
        fig[S_WALL * iters + it] = once.wall_s;
        fig[S_WALL3 * iters + it] = thrice.wall_s;
        fig[S_SHARE * iters + it] = thrice.coll_share;
        fig[S_HIDDEN * iters + it] = thrice.hidden;
        fig[S_SPREAD * iters + it] = thrice.cpu_spread;
        for (int k = 0; k < COST_N; k++) {
            fig[(S_COST + k) * iters + it] = once.cost_s[k];
            fig[(S_COST3 + k) * iters + it] = thrice.cost_s[k];
        }
    }
    if (st == DDP_OK) {
        double med[S_NFIGS];
        for (int k = 0; k < S_NFIGS; k++)
            med[k] = stats_median(fig + (size_t)k * (size_t)iters, (size_t)iters);
        double more = (double)(out->steps3 - out->steps);
        out->run_s = med[S_WALL];
        out->step_ms = (med[S_WALL3] - med[S_WALL]) * 1e3 / more;
        out->ddp_ms = (med[S_DDP3] - med[S_DDP]) * 1e3 / more;
        out->x_verify = out->step_ms > 0 && out->ddp_ms > 0 ? out->step_ms / out->ddp_ms : 0;
        out->coll_share = med[S_SHARE];
        out->hidden = med[S_HIDDEN];
        out->cpu_spread = med[S_SPREAD];
        for (int k = 0; k < COST_N; k++)
            out->cost_ms[k] = (med[S_COST3 + k] - med[S_COST + k]) * 1e3 / more;
        model *m = NULL;
        if (model_create_layout(vc.model_spec, vc.batch, &m) == DDP_OK)
            out->params = model_size(m);
        model_destroy(m);
    }
    free(fig);
    sched_free(&s3);
    sched_free(&s);
    return st;
}

ddp_status bench_battery_measure(const verify_config *vc, const verify_config *sharded, int iters,
                                 bench_battery_result *out)
{
    memset(out, 0, sizeof *out);
    int n = battery_count(), nr = vc->nranks;
    int ns = sharded ? battery_count_for(sharded->shard) : 0;
    if (iters < 1 || nr < 1 || nr > WORLD_MAX_RANKS)
        return ddp_error(DDP_ERR_INVALID, "bench battery: %d rounds at %d ranks", iters, nr);
    out->nscenarios = n;
    out->nranks = nr;
    /* per round: the battery, classic alone, each scenario, each rank's ops and setup; the sharded battery and its
     * scenarios */
    size_t per = (size_t)2 + (size_t)n + 2 * (size_t)nr + 1 + (size_t)ns;
    double *fig = malloc(per * (size_t)iters * sizeof *fig);
    out->scenario_s = calloc((size_t)n, sizeof *out->scenario_s);
    out->sharded_n = ns;
    out->sharded_scenario_s = calloc((size_t)ns + 1, sizeof *out->sharded_scenario_s);
    if (!fig || !out->scenario_s || !out->sharded_scenario_s) {
        free(fig);
        bench_battery_free(out);
        return ddp_error(DDP_ERR_NOMEM, "the samples of %d rounds of %d scenarios", iters, n);
    }
#define FIG(k, it) fig[(size_t)(k) * (size_t)iters + (size_t)(it)]
    enum { TOTAL = 0, CLASSIC = 1, EACH = 2 };
    size_t ops0 = (size_t)EACH + (size_t)n, setup0 = ops0 + (size_t)nr, stotal = setup0 + (size_t)nr,
           seach = stotal + 1;
    battery_given none = {0};
    for (int it = 0; it < iters; it++) {
        battery_outcome o;
        double t0 = clock_now_s();
        battery_run_one(vc, &none, battery_at(0), &o); /* the baseline: classic alone */
        FIG(CLASSIC, it) = clock_now_s() - t0;
        if (battery_failed(&o)) {
            snprintf(out->failed, sizeof out->failed, "classic did not pass: %.440s", o.first);
            free(fig);
            return DDP_ERR_MISMATCH;
        }
        for (int r = 0; r < nr; r++)
            FIG(ops0 + (size_t)r, it) = FIG(setup0 + (size_t)r, it) = 0;
        t0 = clock_now_s();
        for (int k = 0; k < n; k++) {
            double s0 = clock_now_s();
            battery_run_one(vc, &none, battery_at(k), &o);
            FIG(EACH + k, it) = clock_now_s() - s0;
            for (int r = 0; r < nr; r++) {
                FIG(ops0 + (size_t)r, it) += o.rank_cpu_s[r];
                FIG(setup0 + (size_t)r, it) += o.rank_setup_cpu_s[r];
            }
        }
        FIG(TOTAL, it) = clock_now_s() - t0;
        t0 = clock_now_s();
        for (int k = 0; k < ns; k++) {
            double s0 = clock_now_s();
            battery_run_one(sharded, &none, battery_at_for(sharded->shard, k), &o);
            FIG(seach + (size_t)k, it) = clock_now_s() - s0;
            if (battery_failed(&o)) {
                snprintf(out->failed, sizeof out->failed, "sharded %s did not pass: %.400s",
                         battery_at_for(sharded->shard, k)->name, o.first);
                free(fig);
                return DDP_ERR_MISMATCH;
            }
        }
        if (ns)
            FIG(stotal, it) = clock_now_s() - t0;
    }
    if (ns)
        out->sharded_total_s = stats_median(&FIG(stotal, 0), (size_t)iters);
    for (int k = 0; k < ns; k++)
        out->sharded_scenario_s[k] = stats_median(&FIG(seach + (size_t)k, 0), (size_t)iters);
    out->total_s = stats_median(&FIG(TOTAL, 0), (size_t)iters);
    out->classic_s = stats_median(&FIG(CLASSIC, 0), (size_t)iters);
    for (int k = 0; k < n; k++)
        out->scenario_s[k] = stats_median(&FIG(EACH + k, 0), (size_t)iters);
    for (int r = 0; r < nr; r++) {
        out->rank_ops_s[r] = stats_median(&FIG(ops0 + (size_t)r, 0), (size_t)iters);
        out->rank_setup_s[r] = stats_median(&FIG(setup0 + (size_t)r, 0), (size_t)iters);
    }
#undef FIG
    free(fig);
    return DDP_OK;
}

void bench_battery_free(bench_battery_result *r)
{
    free(r->sharded_scenario_s);
    r->sharded_scenario_s = NULL;
    free(r->scenario_s);
    r->scenario_s = NULL;
}
