/*
 * faults.c - parsing and striking injected faults (faults.h).
 */
#include "faults.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "clock.h"

static const char *const kind_names[FAULT_NKINDS] = {"crash", "abort", "hang", "slow", "flip", "inf", "nan"};

#define FAULT_MAX_OP 100000000L
#define FAULT_MAX_MS 60000L

const char *fault_kind_name(fault_kind k)
{
    return (unsigned)k < FAULT_NKINDS ? kind_names[k] : "?";
}

/* key=value's value: a decimal integer in [0, max]. */
static ddp_status parse_field(const char *spec, const char *key, const char *val, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (end == val || *end || errno || v < 0 || v > max)
        return ddp_error(DDP_ERR_INVALID, "'%s': %s=%s is not a whole number in 0..%ld", spec, key, val, max);
    *out = v;
    return DDP_OK;
}

ddp_status fault_parse(const char *text, verify_fault *f)
{
    memset(f, 0, sizeof *f);
    f->rank = -1;
    f->op = -1;
    const char *colon = strchr(text, ':');
    int k = -1;
    for (int i = 0; colon && i < FAULT_NKINDS; i++)
        if ((size_t)(colon - text) == strlen(kind_names[i]) && strncmp(text, kind_names[i], strlen(kind_names[i])) == 0)
            k = i;
    if (k < 0)
        return ddp_error(DDP_ERR_INVALID,
                         "'%s': expected crash|abort|hang|flip|inf|nan:rank=R,op=K or slow:rank=R,ms=M", text);
    f->kind = (fault_kind)k;
    long ms = -1;
    for (const char *p = colon + 1; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        if (n >= sizeof item)
            return ddp_error(DDP_ERR_INVALID, "'%s': an item is too long", text);
        memcpy(item, p, n);
        item[n] = '\0';
        char *eq = strchr(item, '=');
        if (!eq)
            return ddp_error(DDP_ERR_INVALID, "'%s': expected key=value, found '%s'", text, item);
        *eq = '\0';
        const char *val = eq + 1;
        long v;
        if (strcmp(item, "rank") == 0) {
            DDP_CHECK(parse_field(text, item, val, 1000000, &v));
            f->rank = (int)v;
        } else if (strcmp(item, "op") == 0 && f->kind != FAULT_SLOW) {
            DDP_CHECK(parse_field(text, item, val, FAULT_MAX_OP, &v));
            f->op = v;
        } else if (strcmp(item, "ms") == 0 && f->kind == FAULT_SLOW) {
            DDP_CHECK(parse_field(text, item, val, FAULT_MAX_MS, &ms));
        } else {
            return ddp_error(DDP_ERR_INVALID, "'%s': unexpected '%s' (%s takes rank= and %s)", text, item,
                             kind_names[k], f->kind == FAULT_SLOW ? "ms=" : "op=");
        }
        p = comma ? comma + 1 : p + n;
    }
    if (f->rank < 0 || (f->kind == FAULT_SLOW ? ms < 0 : f->op < 0))
        return ddp_error(DDP_ERR_INVALID, "'%s': needs rank= and %s", text, f->kind == FAULT_SLOW ? "ms=" : "op=");
    f->ms = (unsigned)(ms < 0 ? 0 : ms);
    return DDP_OK;
}

int faults_before_op(const verify_fault *faults, int nfaults, int rank, size_t op)
{
    int flip = 0;
    for (int i = 0; i < nfaults; i++) {
        const verify_fault *ft = &faults[i];
        if (ft->rank != rank)
            continue;
        if (ft->kind == FAULT_SLOW) {
            clock_sleep_us(ft->ms * 1000u);
            continue;
        }
        if (ft->op != (long)op)
            continue;
        switch (ft->kind) {
        case FAULT_CRASH: raise(SIGKILL); break;
        case FAULT_ABORT: {
            struct rlimit none = {0, 0}; /* no core file left behind */
            setrlimit(RLIMIT_CORE, &none);
            abort();
        }
        case FAULT_HANG:
            for (;;)
                pause(); /* no progress, not in a collective: the watchdog's case */
        case FAULT_FLIP: flip = 1; break;
        case FAULT_SLOW:
        case FAULT_INF:
        case FAULT_NAN: break; /* planted in the backward (faults_planted) */
        }
    }
    return flip;
}

int faults_planted(const verify_fault *faults, int nfaults, int rank, size_t op, float *value)
{
    for (int i = 0; i < nfaults; i++)
        if ((faults[i].kind == FAULT_INF || faults[i].kind == FAULT_NAN) && faults[i].rank == rank &&
            faults[i].op == (long)op) {
            *value = faults[i].kind == FAULT_INF ? INFINITY : NAN;
            return 1;
        }
    return 0;
}

int faults_plant_any(const verify_fault *faults, int nfaults)
{
    for (int i = 0; i < nfaults; i++)
        if (faults[i].kind == FAULT_INF || faults[i].kind == FAULT_NAN)
            return 1;
    return 0;
}

int faults_plants(const verify_fault *faults, int nfaults, manifest_plant *out)
{
    int n = 0;
    for (int i = 0; i < nfaults; i++)
        if (faults[i].kind == FAULT_INF || faults[i].kind == FAULT_NAN)
            out[n++] = (manifest_plant){.nan = faults[i].kind == FAULT_NAN, .rank = faults[i].rank,
                                        .op = (size_t)faults[i].op};
    return n;
}

void faults_from_plants(const manifest_plant *plants, int n, verify_fault *out)
{
    for (int i = 0; i < n; i++)
        out[i] = (verify_fault){.kind = plants[i].nan ? FAULT_NAN : FAULT_INF, .rank = plants[i].rank,
                                .op = (long)plants[i].op};
}
