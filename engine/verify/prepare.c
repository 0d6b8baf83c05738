/*
 * prepare.c - the directories a run writes, made ready before any rank
 * starts (verify.h): --dump's and --record's, each with its manifest; and
 * --prepare's, a run's inputs alone (its manifest, the initial parameters
 * and every rank's batches) for a front end that runs the same schedule on
 * the same data elsewhere (python/ddpsim_torch).
 */
#include "config.h"
#include "verify.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "dump.h"
#include "impl.h"
#include "record.h"

const char *verify_dump_name(const verify_config *cfg, char *buf, size_t len)
{
    /* A plugin is named by its table, not its path; nothing but the built-in reference writes "reference". */
    const char *n = cfg->impl_ops->name ? cfg->impl_ops->name : "impl";
    if (cfg->impl_ops == &impl_reference_ops) {
        snprintf(buf, len, "reference");
        return buf;
    }
    snprintf(buf, len, "%s%s", strcmp(n, "reference") == 0 ? "impl-" : "", n);
    for (char *q = buf; *q; q++)
        if (*q == '/' || (*q == '.' && q == buf))
            *q = '_';
    return buf;
}

static ddp_status write_dump_manifest(const verify_config *cfg, const char *dir, const char *const *impls,
                                      int nimpls)
{
    dump_manifest_info info = {
        .nranks = cfg->nranks,
        .seed = cfg->seed,
        .model_spec = cfg->model_spec,
        .batch = cfg->batch,
        .ddp = &cfg->ddp,
        .schedule_text = cfg->schedule_text ? cfg->schedule_text : "",
        .schedule = cfg->schedule,
        .impls = impls,
        .nimpls = nimpls,
    };
    manifest_plant planted[VERIFY_MAX_FAULTS];
    info.planted = planted;
    info.nplanted = faults_plants(cfg->faults, cfg->nfaults, planted);
    loss_norm norm = verify_loss_norm(cfg);
    info.loss_norm = norm ? loss_norm_name(norm) : NULL;
    return dump_write_manifest(dir, &info);
}

ddp_status verify_prepare_dump(const verify_config *cfg)
{
    char name[64];
    const char *impls[2] = {"reference", verify_dump_name(cfg, name, sizeof name)};
    int nimpls = cfg->impl_ops == &impl_reference_ops ? 1 : 2;
    if (dump_prepare(cfg->dump_dir, cfg->nranks, impls, nimpls, cfg->dump_force) != DDP_OK)
        return ddp_error_prefix(DDP_ERR_INVALID, "--dump");
    return write_dump_manifest(cfg, cfg->dump_dir, impls, nimpls);
}

/*
 * The recording directory, ready and with its manifest: the run as any
 * framework's test would record it (record.h), so `ddpsim check` can judge
 * it and its verdict be compared with this run's.
 */
ddp_status verify_prepare_record(const verify_config *cfg)
{
    char name[64], by[64];
    const char *impls[1] = {verify_dump_name(cfg, name, sizeof name)};
    if (dump_prepare(cfg->record_dir, cfg->nranks, impls, 1, cfg->dump_force) != DDP_OK)
        return ddp_error_prefix(DDP_ERR_INVALID, "--record");
    model *layout = NULL;
    DDP_CHECK(model_create_layout(cfg->model_spec, cfg->batch, &layout));
    snprintf(by, sizeof by, "ddpsim %s --record", PACKAGE_VERSION);
    manifest_plant planted[VERIFY_MAX_FAULTS];
    record_info info = {.nranks = cfg->nranks, .impl = impls[0], .recorded_by = by, .model = cfg->model_spec,
                        .layout = layout, .ddp = &cfg->ddp, .schedule = cfg->schedule, .shard = cfg->shard,
                        .mesh = mesh_or_flat(&cfg->mesh, cfg->nranks), .planted = planted,
                        .nplanted = faults_plants(cfg->faults, cfg->nfaults, planted),
                        .loss_norm = verify_loss_norm(cfg)};
    ddp_status s = record_write_manifest(cfg->record_dir, &info);
    model_destroy(layout);
    return s;
}

ddp_status verify_prepare_inputs(const verify_config *cfg, const char *dir)
{
    if (verify_loss_norm(cfg) && cfg->inputs_dir) /* before anything is written */
        return ddp_error(DDP_ERR_INVALID, "--model %s: --inputs does not carry the token counts yet",
                         cfg->model_spec);
    DDP_CHECK(dump_prepare(dir, cfg->nranks, NULL, 0, cfg->dump_force)); /* the caller names --prepare */
    DDP_CHECK(write_dump_manifest(cfg, dir, NULL, 0));
    model *m = NULL;
    model_batch b = {0};
    char path[PATH_MAX];
    DDP_CHECK(model_create(cfg->model_spec, cfg->batch, &m));
    ddp_status s = model_batch_alloc(m, &b);
    /* Rank 0's initialisation is what every rank holds after DDP's constructor broadcast. */
    model_init(m, cfg->seed, 0);
    if (s == DDP_OK && cfg->inputs_dir)
        s = dump_read_init(cfg->inputs_dir, m);
    snprintf(path, sizeof path, "%s/init", dir);
    if (s == DDP_OK)
        s = dump_write_tensors(path, m, model_weights(m));
    for (int r = 0; s == DDP_OK && r < cfg->nranks; r++)
        for (uint64_t k = 0; s == DDP_OK && k < cfg->schedule->nfwd; k++) {
            model_batch_fill(m, &b, cfg->seed, r, k);
            if (cfg->inputs_dir)
                s = dump_read_batch(cfg->inputs_dir, r, k, m, &b);
            if (s == DDP_OK)
                s = dump_write_batch(dir, r, k, m, &b);
        }
    model_batch_free(&b);
    model_destroy(m);
    return s;
}
