/*
 * pattern.c - what a diverging tensor's values are (pattern.h).
 */
#include "pattern.h"

#include <math.h>
#include <stdio.h>

/* The largest |x| of a tensor. */
static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)x[i]) > m)
            m = fabs((double)x[i]);
    return m;
}

/* Every element of actual within PATTERN_REL of c * x, relative to the tensor's largest |c * x| (exact when 0). */
static int matches(const float *actual, const float *x, double c, size_t n)
{
    double scale = fabs(c) * max_abs(x, n), allow = PATTERN_REL * scale;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)actual[i] - c * (double)x[i]);
        if (!(d <= allow)) /* NaN fails */
            return 0;
    }
    return 1;
}

static int near(double c, double want)
{
    return fabs(c - want) <= 1e-3 * fabs(want);
}

void pattern_name_factor(double c, const pattern_constants *k, verify_pattern *p)
{
    double n = k->nranks;
    struct { double value; int name; } named[] = {
        {-1, PNAME_NEG},
        {n, PNAME_N},
        {n > 0 ? 1 / n : 0, PNAME_INV_N},
        {(double)k->window, PNAME_K},
        {k->window ? 1.0 / (double)k->window : 0, PNAME_INV_K},
        {k->running > 0 && k->running < k->nranks ? (double)k->nranks / k->running : 0, PNAME_N_OVER_RUNNING},
        {k->running > 0 && k->running < k->nranks ? (double)k->running / k->nranks : 0, PNAME_RUNNING_OVER_N},
        {k->replicas, PNAME_R},
        {k->replicas > 0 ? 1.0 / k->replicas : 0, PNAME_INV_R},
        {k->shards, PNAME_S},
        {k->shards > 0 ? 1.0 / k->shards : 0, PNAME_INV_S},
        {sqrt(n), PNAME_SQRT_N},
        {n > 0 ? 1 / sqrt(n) : 0, PNAME_INV_SQRT_N},
        {k->replicas > 0 ? sqrt(k->replicas) : 0, PNAME_SQRT_R},
        {k->replicas > 0 ? 1 / sqrt(k->replicas) : 0, PNAME_INV_SQRT_R},
        {k->shards > 0 ? sqrt(k->shards) : 0, PNAME_SQRT_S},
        {k->shards > 0 ? 1 / sqrt(k->shards) : 0, PNAME_INV_SQRT_S},
        {k->growth, PNAME_GROWTH},
        {k->growth > 0 ? 1 / k->growth : 0, PNAME_INV_GROWTH},
        {k->loss_scale, PNAME_LOSS_SCALE},
        {k->loss_scale > 0 ? 1 / k->loss_scale : 0, PNAME_INV_LOSS_SCALE},
    };
    p->name = PNAME_NONE;
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (named[i].value > 1 + 1e-9 || (named[i].value < 1 - 1e-9 && named[i].value != 0))
            if (near(c, named[i].value)) {
                p->name = named[i].name;
                p->window = k->window;
                return;
            }
    for (int j = -24; j <= 24; j++) /* 2^-16: a loss scale of 65536 */
        if (j && near(c, ldexp(1, j))) {
            p->name = PNAME_POW2;
            p->exponent = j;
            return;
        }
}

void pattern_explain(const float *expected, const float *actual, size_t count, const pattern_candidate *cands,
                     int ncands, const pattern_constants *k, verify_pattern *out)
{
    *out = (verify_pattern){.kind = PATTERN_NOT_FOUND};
    double me = max_abs(expected, count), ma = max_abs(actual, count);
    if (me != 0 && ma == 0) {
        out->kind = PATTERN_ZERO;
        return;
    }
    for (int c = 0; c < ncands; c++)
        if (cands[c].values && max_abs(cands[c].values, count) != 0 &&
            matches(actual, cands[c].values, 1, count)) {
            out->kind = (int)cands[c].kind;
            out->check = cands[c].check;
            return;
        }
    double xx = 0, ax = 0;
    for (size_t i = 0; i < count; i++) {
        xx += (double)expected[i] * expected[i];
        ax += (double)actual[i] * expected[i];
    }
    if (!(xx > 0) || !isfinite(ax))
        return;
    double c = ax / xx;
    if (!matches(actual, expected, c, count)) {
        if (ma <= PATTERN_REL * me) /* no factor, but less than the reference's last bits: as good as nothing */
            out->kind = PATTERN_ZERO;
        return;
    }
    if (fabs(c - 1) <= PATTERN_REL) {
        out->kind = PATTERN_ROUNDING;
        return;
    }
    out->kind = PATTERN_FACTOR;
    out->factor = c;
    pattern_name_factor(c, k, out);
}

const char *pattern_kind_name(verify_pattern_kind k)
{
    switch (k) {
    case PATTERN_NONE: return "";
    case PATTERN_NOT_FOUND: return "none_found";
    case PATTERN_ZERO: return "zero";
    case PATTERN_LOCAL: return "local";
    case PATTERN_LAST_MICRO: return "last_micro_step";
    case PATTERN_REDUCED_UNSYNCED: return "reduced_unsynced";
    case PATTERN_LAST_REDUCED: return "last_micro_step_reduced";
    case PATTERN_LAST_REDUCED_EARLIER_LOCAL: return "last_reduced_earlier_local";
    case PATTERN_EARLIER_REDUCED_LAST_LOCAL: return "earlier_reduced_last_local";
    case PATTERN_ONTO_STEPPED: return "onto_stepped";
    case PATTERN_STALE: return "stale";
    case PATTERN_UNCHANGED: return "unchanged";
    case PATTERN_FACTOR: return "factor";
    case PATTERN_ROUNDING: return "rounding";
    case PATTERN_NO_MOMENTUM: return "no_momentum";
    case PATTERN_SGD_UPDATE: return "sgd_update";
    }
    return "?";
}

const char *pattern_factor_name(const verify_pattern *p, char *buf, size_t len)
{
    static const char *const names[] = {"", "-1", "N", "1/N", "k", "1/k", "R", "1/R", "S", "1/S", "sqrt(N)",
                                        "1/sqrt(N)", "", "N/running", "running/N", "sqrt(R)", "1/sqrt(R)",
                                        "sqrt(S)", "1/sqrt(S)", "G", "1/G", "scale", "1/scale"};
    if (p->kind != PATTERN_FACTOR)
        snprintf(buf, len, "%s", "");
    else if (p->name == PNAME_POW2)
        snprintf(buf, len, "2^%d", p->exponent);
    else
        snprintf(buf, len, "%s", (unsigned)p->name < sizeof names / sizeof names[0] ? names[p->name] : "");
    return buf;
}

/* What a named factor usually means, for the text. */
static const char *factor_meaning(const verify_pattern *p)
{
    switch (p->name) {
    case PNAME_NEG: return "negated";
    case PNAME_N: return p->on_update ? "N: the update N times" : "N: summed, not averaged";
    case PNAME_INV_N: return p->on_update ? "1/N" : "1/N: averaged twice, or one rank's share";
    case PNAME_K: return "k, the micro-steps since zero_grad: each added the whole window";
    case PNAME_INV_K: return "1/k, the micro-steps since zero_grad: divided by the window";
    case PNAME_R: return "R, the replica groups";
    case PNAME_INV_R: return "1/R, the replica groups";
    case PNAME_S: return "S, the shard group's size";
    case PNAME_INV_S: return "1/S, the shard group's size";
    case PNAME_N_OVER_RUNNING: return "N over the ranks still running: divided by those running, not by N";
    case PNAME_RUNNING_OVER_N: return "the ranks still running over N";
    case PNAME_SQRT_N: return "sqrt(N)";
    case PNAME_INV_SQRT_N: return "1/sqrt(N)";
    case PNAME_SQRT_R: return "sqrt(R), the replica groups: each shard counted once per replica";
    case PNAME_INV_SQRT_R: return "1/sqrt(R), the replica groups";
    case PNAME_SQRT_S: return "sqrt(S), the shard group's size";
    case PNAME_INV_SQRT_S: return "1/sqrt(S), the shard group's size: one shard's share";
    case PNAME_GROWTH: return "G, the loss scale's growth: unscaled by the scale before it grew";
    case PNAME_INV_GROWTH: return "1/G, the loss scale's growth: unscaled by the grown scale";
    case PNAME_LOSS_SCALE: return "the loss scale: never unscaled";
    case PNAME_INV_LOSS_SCALE: return "1/the loss scale: unscaled twice, or never scaled";
    default: return NULL;
    }
}

const char *pattern_text(const verify_pattern *p, char *buf, size_t len)
{
    const char *its = p->on_update ? "its update" : "its gradient";
    char name[32];
    switch ((verify_pattern_kind)p->kind) {
    case PATTERN_NONE: snprintf(buf, len, "%s", ""); break;
    case PATTERN_NOT_FOUND:
        snprintf(buf, len, "none found: %s is not a constant times the reference's, nor zero, nor a sum of the "
                           "local gradients or an earlier value", its);
        break;
    case PATTERN_ZERO:
        snprintf(buf, len, "%s", p->on_update ? "no update: its parameters are as before the step (to within "
                                                "2^-14 of the reference's update)"
                                              : "its gradient is zero (to within 2^-14 of the reference's): dropped");
        break;
    case PATTERN_LOCAL: snprintf(buf, len, "its gradient is this rank's own local sum since zero_grad: never reduced"); break;
    case PATTERN_LAST_MICRO:
        snprintf(buf, len, "its gradient is the last micro-step's local gradient alone: nothing reduced, the "
                           "accumulation lost");
        break;
    case PATTERN_REDUCED_UNSYNCED:
        snprintf(buf, len, "its gradient is the average over ranks of the local sum, where DDP's is the local sum: "
                           "reduced in a backward that does not sync");
        break;
    case PATTERN_LAST_REDUCED:
        snprintf(buf, len, "its gradient is the average over ranks of the last micro-step alone: the window's "
                           "earlier micro-steps dropped");
        break;
    case PATTERN_LAST_REDUCED_EARLIER_LOCAL:
        snprintf(buf, len, "its gradient is the last micro-step averaged over ranks plus the earlier ones "
                           "unreduced: only the syncing backward's own gradient reduced");
        break;
    case PATTERN_EARLIER_REDUCED_LAST_LOCAL:
        snprintf(buf, len, "its gradient is the earlier micro-steps averaged over ranks plus the last one "
                           "unreduced: the syncing backward's own gradient left out of the reduction");
        break;
    case PATTERN_ONTO_STEPPED:
        snprintf(buf, len, "its gradient is the reference's plus the gradient the last step took: not zeroed "
                           "after the step");
        break;
    case PATTERN_STALE:
        snprintf(buf, len, "%s is the reference's at grab %llu: stale", its, (unsigned long long)p->check);
        break;
    case PATTERN_UNCHANGED:
        snprintf(buf, len, "%s is its own at grab %llu: nothing changed since", its, (unsigned long long)p->check);
        break;
    case PATTERN_FACTOR: {
        const char *meaning = factor_meaning(p);
        if (p->name == PNAME_K)
            snprintf(buf, len, "%s is %.4g x the reference's (k = %llu, %s)", its, p->factor,
                     (unsigned long long)p->window, meaning);
        else if (meaning)
            snprintf(buf, len, "%s is %.4g x the reference's (%s)", its, p->factor, meaning);
        else if (p->name == PNAME_POW2)
            snprintf(buf, len, "%s is %.4g x the reference's (%s)", its, p->factor,
                     pattern_factor_name(p, name, sizeof name));
        else
            snprintf(buf, len, "%s is %.6g x the reference's (no constant of the run)", its, p->factor);
        break;
    }
    case PATTERN_ROUNDING:
        snprintf(buf, len, "%s is the reference's rounded otherwise: the same sums in another order", its);
        break;
    case PATTERN_NO_MOMENTUM:
        snprintf(buf, len, "its update is -lr times the gradient alone: plain SGD, the momentum buffer not applied");
        break;
    case PATTERN_SGD_UPDATE:
        snprintf(buf, len, "its update is -lr times the gradient: plain SGD's, not AdamW's");
        break;
    }
    return buf;
}

const char *pattern_short(const verify_pattern *p, char *buf, size_t len)
{
    char name[32];
    switch ((verify_pattern_kind)p->kind) {
    case PATTERN_NONE:
    case PATTERN_NOT_FOUND: snprintf(buf, len, "%s", ""); break;
    case PATTERN_ZERO: snprintf(buf, len, "%s", p->on_update ? "no update" : "zero (dropped)"); break;
    case PATTERN_LOCAL: snprintf(buf, len, "local, never reduced"); break;
    case PATTERN_LAST_MICRO: snprintf(buf, len, "the last micro-step alone"); break;
    case PATTERN_REDUCED_UNSYNCED: snprintf(buf, len, "reduced where DDP does not sync"); break;
    case PATTERN_LAST_REDUCED: snprintf(buf, len, "only the last micro-step, reduced"); break;
    case PATTERN_LAST_REDUCED_EARLIER_LOCAL: snprintf(buf, len, "last micro-step reduced, earlier ones local"); break;
    case PATTERN_EARLIER_REDUCED_LAST_LOCAL: snprintf(buf, len, "earlier micro-steps reduced, last one local"); break;
    case PATTERN_ONTO_STEPPED: snprintf(buf, len, "added onto the stepped gradient"); break;
    case PATTERN_STALE: snprintf(buf, len, "stale: the reference's at grab %llu", (unsigned long long)p->check); break;
    case PATTERN_UNCHANGED: snprintf(buf, len, "unchanged since grab %llu", (unsigned long long)p->check); break;
    case PATTERN_FACTOR:
        pattern_factor_name(p, name, sizeof name);
        snprintf(buf, len, "%.4g x the reference's%s%s%s%s", p->factor, p->on_update ? " update" : "",
                 name[0] ? " (" : "", name, name[0] ? ")" : "");
        break;
    case PATTERN_ROUNDING: snprintf(buf, len, "rounding only (another order)"); break;
    case PATTERN_NO_MOMENTUM: snprintf(buf, len, "momentum not applied"); break;
    case PATTERN_SGD_UPDATE: snprintf(buf, len, "plain SGD, not AdamW"); break;
    }
    return buf;
}
