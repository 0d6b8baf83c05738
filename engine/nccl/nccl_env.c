/*
 * nccl_env.c - the NCCL environment of a rank (nccl_env.h).
 */
#include "nccl_env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add(nccl_env_plan *p, const char *name, const char *value)
{
    nccl_env_var *v = &p->vars[p->n++];
    v->name = name;
    const char *mine = getenv(name);
    v->user_set = mine != NULL;
    snprintf(v->value, sizeof v->value, "%s", mine ? mine : value);
}

/* NCCL_HOSTID of host block h: the user's value made distinct ("X-h"), or ddpsim's ("ddpsim-host<h>", on a host
 * of a job over several "ddpsim-<host>-<h>"). */
static void add_host_id(nccl_env_plan *p, int h, const char *host)
{
    nccl_env_var *v = &p->vars[p->n++];
    v->name = "NCCL_HOSTID";
    const char *mine = getenv("NCCL_HOSTID");
    if (mine && *mine) {
        v->derived = 1;
        snprintf(v->user_value, sizeof v->user_value, "%s", mine);
        snprintf(v->value, sizeof v->value, "%.80s-%d", mine, h);
    } else if (host) {
        snprintf(v->value, sizeof v->value, "ddpsim-%.64s-%d", host, h);
    } else {
        snprintf(v->value, sizeof v->value, "ddpsim-host%d", h);
    }
}

void nccl_env_plan_make(int rank, int nranks, int ngpus, const char *host, nccl_env_plan *out)
{
    memset(out, 0, sizeof *out);
    if (ngpus < 1)
        ngpus = 1;
    out->device = rank % ngpus;
    out->host = rank / ngpus;
    out->nhosts = (nranks + ngpus - 1) / ngpus;
    out->separate_hosts = out->nhosts > 1;
    add(out, "NCCL_ALGO", "Ring");
    add(out, "NCCL_PROTO", "Simple");
    add(out, "NCCL_MIN_NCHANNELS", "1");
    add(out, "NCCL_MAX_NCHANNELS", "1");
    if (out->separate_hosts) {
        add_host_id(out, out->host, host);
        if (!host) { /* one host: the blocks talk over loopback; across hosts NCCL's own choice must reach them */
            add(out, "NCCL_SOCKET_IFNAME", "lo");
            add(out, "NCCL_IB_DISABLE", "1");
        }
    }
}

ddp_status nccl_env_apply(const nccl_env_plan *p)
{
    for (int i = 0; i < p->n; i++)
        if ((!p->vars[i].user_set || p->vars[i].derived) && setenv(p->vars[i].name, p->vars[i].value, 1) != 0)
            return ddp_error(DDP_ERR_SYSTEM, "setenv %s: %s", p->vars[i].name, strerror(errno));
    return DDP_OK;
}

void nccl_env_describe(const nccl_env_plan *p, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < p->n && at < len; i++) {
        const nccl_env_var *v = &p->vars[i];
        char note[NCCL_ENV_VALUE_LEN + 64] = "";
        if (v->derived)
            snprintf(note, sizeof note, " (per host block, derived from yours: %s)", v->user_value);
        else if (v->user_set)
            snprintf(note, sizeof note, " (yours)");
        else if (strcmp(v->name, "NCCL_HOSTID") == 0)
            snprintf(note, sizeof note, " (per host block)");
        int k = snprintf(buf + at, len - at, "%s%s=%s%s", i ? " " : "", v->name, v->value, note);
        if (k < 0)
            break;
        at += (size_t)k;
    }
}
