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
 * one device ("Duplicate GPU detected"). Only the ranks that share a GPU
 * must then look like separate hosts: ranks are grouped in blocks of ngpus
 * (host h holds ranks h*ngpus .. h*ngpus + ngpus - 1, each on its own GPU,
 * rank % ngpus), each block gets its own NCCL_HOSTID, and NCCL talks between
 * blocks over its socket transport on loopback (NCCL_SOCKET_IFNAME=lo,
 * InfiniBand off) and within one as usual. It works, but NVIDIA does not
 * support it; the header says so. A NCCL_HOSTID the user set cannot go to
 * every rank (the blocks would be one host again): each block gets the
 * user's value with "-<block>" appended, and the header says it is derived.
 *
 * Many CUDA contexts on one GPU time-slice without MPS: every NCCL call then
 * waits for the others' turns (about 95 ms a call with 8 ranks on one H200).
 * Above NCCL_ENV_CONTEXTS_WARN ranks per GPU the header warns.
 *
 * Any other variable the user already set is left as it is: theirs wins.
 *
 * In an MPI job over several hosts (--world mpi) the plan is each host's:
 * rank and nranks are the rank's place among its host's ranks, a rank uses
 * GPU local rank % ngpus of its own host, the blocks of one host are
 * told apart by that host's name in their NCCL_HOSTID ("ddpsim-<host>-<h>"),
 * and NCCL's sockets stay on its own choice of interface (loopback cannot
 * reach the other hosts).
 */
#ifndef DDPSIM_NCCL_ENV_H
#define DDPSIM_NCCL_ENV_H

#include <stddef.h>

#include "status.h"

#define NCCL_ENV_MAX 8
#define NCCL_ENV_VALUE_LEN 96
#define NCCL_ENV_CONTEXTS_WARN 4 /* ranks per GPU above which the header warns of time-slicing */

typedef struct nccl_env_var {
    const char *name;
    char value[NCCL_ENV_VALUE_LEN]; /* what the rank runs with */
    int user_set;                   /* already in the environment: left alone */
    int derived;                    /* the user's value made distinct per host block (NCCL_HOSTID) */
    char user_value[NCCL_ENV_VALUE_LEN];
} nccl_env_var;

typedef struct nccl_env_plan {
    int separate_hosts; /* more ranks than GPUs: more than one host block, each its own NCCL_HOSTID */
    int nhosts;         /* host blocks: ceil(nranks / ngpus), the most ranks any GPU holds */
    int host;           /* this rank's block: rank / ngpus */
    int device;         /* the GPU this rank binds: rank % ngpus */
    int n;
    nccl_env_var vars[NCCL_ENV_MAX];
} nccl_env_plan;

/*
 * The plan for `rank` of nranks on ngpus (>= 1) GPUs, reading the current environment; host: NULL when every
 * rank of the job is on this host, else this host's name (rank and nranks then count this host's ranks).
 */
void nccl_env_plan_make(int rank, int nranks, int ngpus, const char *host, nccl_env_plan *out);

/* setenv() every variable the user did not set (DDP_ERR_SYSTEM if that fails). */
ddp_status nccl_env_apply(const nccl_env_plan *p);

/*
 * One line for the report: "NCCL_ALGO=Ring NCCL_PROTO=Simple ...", with the
 * variables the user set shown as "NAME=value (yours)". NCCL_HOSTID is
 * shown as this plan's value with "per host block" (and "derived from
 * yours: X" when the user set it).
 */
void nccl_env_describe(const nccl_env_plan *p, char *buf, size_t len);

#endif
