/*
 * world_impl.h - the world's internals, shared by its two implementations
 * (internal to engine/world): world.c, the forked world over one shared
 * segment, and world_mpi.c, where each MPI process is one rank.
 *
 * In an MPI world each MPI process still forks the rank that runs the
 * caller's code, over a segment of its own, and stays its supervisor: a
 * rank that crashes, hangs or aborts never takes the MPI process down, so
 * rank 0's process can always say who failed and why. The rank reaches its
 * peers through its parent (remote_area): it asks for a collective with a
 * descriptor and its data in its slot, and the parent moves the data over
 * MPI and sums in ddpsim's orders (coll_impl.h); what the rank writes into
 * the shared user area for the caller's parent side it publishes
 * (world_publish), and the parent copies it to every other process's area.
 */
#ifndef DDPSIM_WORLD_IMPL_H
#define DDPSIM_WORLD_IMPL_H

#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sync.h"
#include "world.h"

#define ALIGN8(x) (((x) + (size_t)7) & ~(size_t)7)

/* What a collective is, the first word of its descriptor (world_coll_desc, remote_area.desc). */
enum {
    COLL_KIND_ALLREDUCE = 1,
    COLL_KIND_BROADCAST,
    COLL_KIND_ALLGATHER,
    COLL_KIND_BARRIER,
    COLL_KIND_ALLREDUCE_INPLACE,
    COLL_KIND_REDUCE_SCATTER,
    WORLD_REMOTE_BARRIER,       /* world_barrier in an MPI world */
    COLL_KIND_NATIVE_ALLREDUCE, /* MPI_Allreduce itself, for the benchmark's baseline (coll_allreduce_native) */
};

/* The rank's line to its parent in an MPI world (in the segment). */
#define REMOTE_LOG_BYTES ((size_t)1 << 20)
typedef struct remote_area {
    _Alignas(64) _Atomic uint32_t req;   /* requests the rank made */
    _Alignas(64) _Atomic uint32_t done;  /* requests its parent answered (the rank sleeps on it) */
    _Alignas(64) _Atomic uint32_t kick;  /* bumped by the rank at a request or a publish: its parent sleeps on it */
    _Atomic uint32_t parent_asleep;      /* the parent sleeps on kick: a publish must wake it */
    /* the request: what every rank must agree on (coll_impl.h's descriptor), and this piece of it */
    uint64_t desc[WORLD_DESC_WORDS];
    int32_t first;                       /* the call's first piece: the descriptors are compared */
    uint64_t off, len;                   /* elements (reductions) or bytes (broadcast, allgather) */
    /* the answer */
    int32_t status;
    char error[WORLD_ERROR_LEN];
    /* published bytes of the user area, oldest first: entries of (offset, length, bytes), 8-byte aligned */
    _Alignas(64) _Atomic uint64_t log_head; /* written by the rank */
    _Alignas(64) _Atomic uint64_t log_tail; /* taken by the parent */
    _Atomic uint32_t log_word;              /* bumped with log_tail: a rank waiting for room sleeps on it */
    _Alignas(64) unsigned char log[REMOTE_LOG_BYTES];
} remote_area;

#define SEG_MAGIC 0x64647073u /* "ddps" */
#define ALIGN64(x) (((x) + (size_t)63) & ~(size_t)63)

/* What a rank is waiting for (rank_state.wait_kind). */
enum { WAIT_NONE = 0, WAIT_BARRIER, WAIT_FLAG, WAIT_OTHER };

/* Exit codes a rank process uses; anything else came from code it ran. */
enum { RANK_EXIT_FAILED = 1, RANK_EXIT_ORPHANED = 2, RANK_EXIT_ABORTED = 4 };

/* A rank's in_coll: one collective at a time, claimed, then counted in coll_seq (world_enter_coll). */
enum { IN_COLL_ENTERING = 1, IN_COLL_COUNTED = 2 };

/* What a rank publishes about itself. Written by the rank, read by the parent (in an MPI world, for the other
 * processes' ranks, written by the parent from their reports). */
typedef struct rank_state {
    _Alignas(64) _Atomic uint32_t flag;     /* handoff flag, alone on its cache line (world_flag_*) */
    _Alignas(64) _Atomic uint64_t progress; /* bumped by every op, collective and barrier */
    _Atomic int32_t op_index;
    _Atomic uint32_t in_coll; /* 0, IN_COLL_ENTERING (claimed, not yet counted) or IN_COLL_COUNTED */
    /* What the rank waits for, for the supervisor's deadlock rule: a barrier generation to pass, or rank
     * wait_rank's flag to reach wait_value; WAIT_OTHER for anything it cannot judge (a replayed arrival). */
    _Atomic uint32_t wait_kind;
    _Atomic uint32_t exiting;          /* the rank's main has returned: it is on its way out (not waiting) */
    _Atomic uint32_t wait_gen, wait_value;
    _Atomic int32_t wait_rank;
    _Atomic uint64_t coll_seq;
    _Atomic uint64_t coll_ns;          /* time spent inside collectives */
    _Atomic uint64_t coll_start_ns;    /* when the collective in progress began */
    _Atomic uint64_t coll_cpu_ns;      /* CPU time of the threads inside collectives (waiting and reducing) */
    _Atomic uint64_t coll_cpu_start_ns; /* the calling thread's CPU time as the collective in progress began */
    uint64_t desc[2][WORLD_DESC_WORDS]; /* by parity of coll_seq: see world_coll_desc */
    char op_label[WORLD_LABEL_LEN];
    char coll[WORLD_LABEL_LEN];
    char error[WORLD_ERROR_LEN];
} rank_state;

typedef struct seg_header {
    uint32_t magic;
    int32_t nranks;
    _Alignas(64) _Atomic uint32_t abort_word;
    sync_barrier barrier;
} seg_header;

struct world {
    world_config cfg;
    unsigned char *base;
    size_t total;
    seg_header *hdr;
    rank_state *ranks;
    unsigned char *slots;
    size_t slot_stride;
    unsigned char *result;
    unsigned char *mailboxes; /* 2 x WORLD_MAILBOX_BYTES per rank */
    unsigned char *user;
    remote_area *remote;      /* a world whose peers are other processes (MPI): the rank's line to its parent */
    struct world_mpi *mpi;    /* the parent's side of it (world_mpi.c); NULL in a forked world */
    int local_rank;           /* the one rank this process runs in such a world; -1: all of them (forked) */
    world_rank_outcome *outcomes;
    ddp_status last_status;
    int failed_rank;
    int interrupt_signal;
    double stuck_for_s;
};

struct world_rank {
    world *w;
    int rank;
    rank_state *st;
    uint64_t jitter_key;
    uint64_t jitter_count;
    uint32_t flag_ticket; /* world_flag_next: how many flag handoffs this rank has begun */
    /* arrival positions at barriers: recorded (trace) and/or forced (replay) */
    int recording, rec_lost;
    uint32_t *rec;
    size_t nrec, rec_cap;
    const uint32_t *forced;
    size_t nforced, next_forced;
};

/* How a reaped rank ended (world.c): `stopping` when the supervisor sent it SIGKILL. */
void world_decode_exit(world_rank_outcome *o, int wstatus, int stopping);
/* "deadlock: ranks 1 and 2 have finished, and every other rank waits ...", finished[r] for each of n ranks. */
void world_deadlock_text(const int *finished, int n, char *buf, size_t len);
/* Copy a label, cut to WORLD_LABEL_LEN. */
void world_copy_label(char *dst, const char *src);

/* ---- world_mpi.c (world_mpi_none.c without MPI) ---- */
/* A world is being created in a process that runs under --world mpi: check cfg and attach the MPI state. */
ddp_status world_mpi_attach(world *w);
void world_mpi_detach(world *w);
int world_mpi_local_rank(void);
int world_mpi_local_size(void);
/* Supervise the local rank (already forked as pid) with its peers over MPI; the result of world_run. */
ddp_status world_mpi_supervise(world *w, const sigset_t *watched, pid_t pid);

/* ---- the rank's side of the line to its parent (world.c) ---- */
/* Ask the parent to carry out the request in wr's remote_area (filled by the caller), and wait. */
ddp_status world_remote_call(world_rank *wr);
remote_area *world_remote(world_rank *wr); /* NULL in a forked world */

#endif
