/*
 * bench_ddp.c - an unverified data-parallel run (bench_ddp.h).
 */
#include "bench_ddp.h"

#include "checker.h"
#include "clock.h"
#include "model.h"
#include "world.h"

static ddp_status run_ops(const bench_ddp_config *cfg, world_rank *wr, ddp_ref *d, model *m, model_batch *b)
{
    const sched *s = cfg->schedule;
    uint64_t micro = 0;
    for (size_t i = 0; i < s->nops; i++) {
        world_set_op(wr, (int)i, "bench ddp");
        switch (s->ops[i]) {
        case OP_ENTER: DDP_CHECK(ddp_ref_no_sync_enter(d)); break;
        case OP_EXIT: DDP_CHECK(ddp_ref_no_sync_exit(d)); break;
        case OP_FWD: /* the batch is made as a verified run makes it: a data loader's share of the step */
            model_batch_fill(m, b, cfg->seed, world_rank_id(wr), micro++);
            DDP_CHECK(ddp_ref_forward(d, b));
            break;
        case OP_BWD: DDP_CHECK(ddp_ref_backward(d)); break;
        case OP_GRAB: break; /* nothing reads the gradients: there is no verifier */
        case OP_ZERO: ddp_ref_zero_grad(d); break;
        case OP_STEP: ddp_ref_step(d); break;
        default: return ddp_error(DDP_ERR_INVALID, "bench ddp: op %d of a join", (int)s->ops[i]);
        }
    }
    return DDP_OK;
}

static ddp_status ddp_rank(world_rank *wr, void *arg)
{
    const bench_ddp_config *cfg = arg;
    model *m = NULL;
    ddp_ref *d = NULL;
    model_batch b = {0};
    model_runtime_init();
    ddp_status s = model_create(cfg->model_spec, cfg->batch, &m);
    if (s == DDP_OK) {
        model_init(m, cfg->seed, world_rank_id(wr)); /* rank-distinct, as a verified run's: the broadcast fixes it */
        s = ddp_ref_create(&cfg->ddp, m, wr, &d);
    }
    if (s == DDP_OK)
        s = ddp_ref_broadcast_params(d);
    if (s == DDP_OK)
        s = model_batch_alloc(m, &b);
    if (s == DDP_OK)
        s = run_ops(cfg, wr, d, m, &b);
    if (s == DDP_OK)
        ((uint64_t *)world_rank_user_area(wr))[world_rank_id(wr)] = checker_hash(m, model_weights(m), NULL);
    model_batch_free(&b);
    ddp_ref_destroy(d);
    model_destroy(m);
    return s;
}

ddp_status bench_ddp_run(const bench_ddp_config *cfg, double *wall_s, uint64_t *params_digest)
{
    if (cfg->schedule->nuneven || cfg->schedule->njoins)
        return ddp_error(DDP_ERR_INVALID, "bench ddp: an uneven or join schedule");
    world_config wc = {.nranks = cfg->nranks, .timeout_s = 600, .user_bytes = (size_t)cfg->nranks * sizeof(uint64_t)};
    world *w = NULL;
    DDP_CHECK(world_create(&wc, &w));
    double t0 = clock_now_s();
    ddp_status s = world_run(w, ddp_rank, (void *)cfg);
    *wall_s = clock_now_s() - t0;
    for (int r = 0; s != DDP_OK && r < cfg->nranks; r++)
        if (world_outcome(w, r)->error[0]) {
            s = ddp_error(s, "bench ddp %s: rank %d: %s", cfg->model_spec, r, world_outcome(w, r)->error);
            break;
        }
    const uint64_t *digest = world_user_area(w);
    *params_digest = digest[0];
    for (int r = 1; s == DDP_OK && r < cfg->nranks; r++)
        if (digest[r] != digest[0])
            s = ddp_error(DDP_ERR_MISMATCH, "bench ddp %s: rank %d's final parameters differ from rank 0's (digest "
                          "%016llx against %016llx)", cfg->model_spec, r, (unsigned long long)digest[r],
                          (unsigned long long)digest[0]);
    world_destroy(w);
    return s;
}
