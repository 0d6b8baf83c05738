/*
 * nccl_env.h - the NCCL environment a rank of `--backend nccl` runs with:
 * which variables ddpsim sets and why. Pure bookkeeping, no CUDA: the plan
 * is made (and tested) on machines without NCCL too.
 *
 * Always, for determinism (NCCL's tuner may otherwise pick another
 * algorithm, protocol or channel count per size, and with it another
 * summation order): NCCL_ALGO=Ring, NCCL_PROTO=Simple, one channel.
 *
 * When there are more ranks than GPUs, NCCL refuses two ranks of one host on
 * one device ("Duplicate GPU detected"). Each rank then gets its own
 * NCCL_HOSTID, so NCCL sees separate hosts talking over its socket transport
 * on loopback (NCCL_SOCKET_IFNAME=lo, InfiniBand off). It works, but NVIDIA
 * does not support it; the header says so.
 *
 * A variable the user already set is left as it is: theirs wins.
 */
#ifndef DDPSIM_NCCL_ENV_H
#define DDPSIM_NCCL_ENV_H

#include <stddef.h>

#include "status.h"

#define NCCL_ENV_MAX 8
#define NCCL_ENV_VALUE_LEN 64

typedef struct nccl_env_var {
    const char *name;
    char value[NCCL_ENV_VALUE_LEN]; /* what ddpsim would set */
    int user_set;                   /* already in the environment: left alone */
} nccl_env_var;

typedef struct nccl_env_plan {
    int separate_hosts; /* more ranks than GPUs: one NCCL_HOSTID per rank */
    int device;         /* the GPU this rank binds: rank % ngpus */
    int n;
    nccl_env_var vars[NCCL_ENV_MAX];
} nccl_env_plan;

/* The plan for `rank` of nranks on ngpus (>= 1) GPUs, reading the current environment. */
void nccl_env_plan_make(int rank, int nranks, int ngpus, nccl_env_plan *out);

/* setenv() every variable the user did not set (DDP_ERR_SYSTEM if that fails). */
ddp_status nccl_env_apply(const nccl_env_plan *p);

/*
 * One line for the report: "NCCL_ALGO=Ring NCCL_PROTO=Simple ...", with the
 * variables the user set shown as "NAME=value (yours)". NCCL_HOSTID is
 * shown as its rank-0 value with "per rank".
 */
void nccl_env_describe(const nccl_env_plan *p, char *buf, size_t len);

#endif
