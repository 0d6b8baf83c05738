/*
 * world.h - the world of ranks: who the ranks are, how they reach each other,
 * and how the supervisor learns what happened to them.
 *
 * A world is N forked processes sharing one POSIX shared-memory segment
 * (the default), or, in a process started with world_mpi_start, one rank in
 * each process of an MPI job (world_mpi.c): the same calls, the same bits.
 * The parent creates the world (the segment), runs a
 * function on every rank, and supervises: a rank that dies stops the others
 * within the supervision tick, a world that makes no progress for
 * timeout_s is ended, SIGINT/SIGTERM end it too, and on every path no
 * rank process and no segment outlives world_run()/world_destroy().
 *
 * Not here: the collectives (coll.h) and everything about models and DDP.
 */
#ifndef DDPSIM_WORLD_H
#define DDPSIM_WORLD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "status.h"

#define WORLD_MAX_RANKS 256
#define WORLD_DEFAULT_SLOT_BYTES ((size_t)1 << 20)
/* The watchdog's limit when none is given (--timeout): no rank progressed for this long. */
#define WORLD_DEFAULT_TIMEOUT_S 60.0
#define WORLD_LABEL_LEN 32
#define WORLD_ERROR_LEN 512

typedef struct world world;           /* the parent's handle */
typedef struct world_rank world_rank; /* a rank's handle, valid inside its main */

typedef struct world_config {
    int nranks;            /* 1 .. WORLD_MAX_RANKS */
    double timeout_s;      /* watchdog: no rank progressed for this long = stuck; <= 0: none */
    size_t slot_bytes;     /* per-rank staging buffer for collectives; 0: WORLD_DEFAULT_SLOT_BYTES */
    size_t user_bytes;     /* shared bytes for the caller's own use (results, snapshots) */
    uint64_t jitter_seed;  /* seeded random delays before each barrier arrival ... */
    unsigned jitter_max_us; /* ... of up to this many microseconds (0: none) */
    /* Called by the supervisor (the parent) at every tick while the ranks run, to take what they produce as they
     * produce it; returns non-zero while it has work or ranks wait for it, and the next tick comes after 1 ms
     * instead of 50. NULL: none. */
    int (*poll)(void *arg);
    void *poll_arg;
    int coll_cpu;          /* count the CPU time ranks spend inside collectives (world_rank_outcome.coll_cpu_ns): two
                            * system calls per collective, so only for benchmarks that report it */
} world_config;

/* What a rank main returns is its status; a non-OK status fails the run. */
typedef ddp_status (*world_rank_main)(world_rank *wr, void *arg);

/* How a rank ended, as the supervisor saw it. */
typedef enum world_fate {
    WORLD_FATE_NOT_STARTED = 0,
    WORLD_FATE_OK,        /* returned DDP_OK */
    WORLD_FATE_FAILED,    /* returned an error or exited non-zero */
    WORLD_FATE_SIGNALED,  /* killed by a signal it did not get from the supervisor */
    WORLD_FATE_STOPPED,   /* killed by the supervisor after another rank failed, a timeout or an interrupt */
} world_fate;

typedef struct world_rank_outcome {
    pid_t pid;
    world_fate fate;
    int exit_code;                 /* WORLD_FATE_FAILED */
    int signal;                    /* WORLD_FATE_SIGNALED / STOPPED */
    int op_index;                  /* last op announced with world_set_op (-1: none) */
    char op_label[WORLD_LABEL_LEN];
    char coll[WORLD_LABEL_LEN];    /* collective it was inside ("" if none) */
    uint64_t coll_seq;             /* how many collectives it had entered */
    uint64_t coll_ns;              /* time it spent inside collectives (finished ones) */
    uint64_t coll_cpu_ns;          /* CPU time its threads used inside them (spinning, reducing, system calls), with
                                    * world_config.coll_cpu; else 0 */
    long maxrss_kib;               /* its peak resident memory, from wait4 */
    char host[64];                 /* the host it ran on (an MPI world's ranks may be on several) */
    char error[WORLD_ERROR_LEN];   /* the message of a failing status */
} world_rank_outcome;

/* ---- parent side ---- */

/* The bytes of shared memory a world of cfg maps (0 for a bad cfg). */
size_t world_segment_bytes(const world_config *cfg);

/*
 * Create a world: validate cfg and create the shared segment (with a unique
 * name, unlinked at once since ranks inherit the mapping). Returns
 * DDP_ERR_INVALID for bad sizes, DDP_ERR_SYSTEM when the segment cannot be
 * created or /dev/shm is too small, DDP_ERR_NOMEM.
 */
ddp_status world_create(const world_config *cfg, world **out);

/*
 * Run rank_main(wr, arg) on every rank and supervise until all return or one
 * fails. Returns DDP_OK when every rank returned DDP_OK; DDP_ERR_RANK_FAILED
 * when one failed or died (the others are stopped); DDP_ERR_TIMEOUT when no
 * rank progressed for timeout_s; DDP_ERR_INTERRUPTED on SIGINT/SIGTERM
 * (world_interrupt_signal() says which). Every rank process is reaped
 * before it returns. A world can run several times.
 */
ddp_status world_run(world *w, world_rank_main rank_main, void *arg);

/* Outcome of rank r in the last world_run. */
const world_rank_outcome *world_outcome(const world *w, int r);
/* The lowest rank that failed with words of its own in the last world_run (its words into *error), or -1 (w may
 * be NULL). */
int world_first_failed_error(const world *w, const char **error);

/*
 * How the last run failed, in words that hold for a rerun of it (no pid, no
 * source line): the first failing rank's own words, or else where each rank
 * was (its op, the collective it was inside). "" when w is NULL.
 */
void world_failure_words(const world *w, char *buf, size_t len);

/* The signal that interrupted the last run (0 if none). */
int world_interrupt_signal(const world *w);

/*
 * A multi-line account of the last failed run, one line per rank: what
 * happened to it and what it was doing. Writes at most len bytes.
 */
void world_describe(const world *w, char *buf, size_t len);

/* The shared user area (cfg.user_bytes), readable by the parent after a run. */
void *world_user_area(world *w);

int world_nranks(const world *w);

/* Unmap the segment and free the handle; w may be NULL. */
void world_destroy(world *w);

/*
 * ---- an MPI world: each process of an MPI job one rank ----
 *
 * world_mpi_start (MPI_Init) makes every world this process creates an MPI
 * world of world_mpi_size() ranks, this process rank world_mpi_rank(). Every
 * process runs the same program (the same calls, in the same order, with
 * the same results: what the ranks publish reaches every process, see
 * world_publish); rank 0's process reports, the others' stdout and stderr go
 * to /dev/null. A run that fails (a rank died, the watchdog, a deadlock) is
 * the job's last: rank 0's world_run returns the failure for the caller to
 * report, its peers stay in theirs, and world_mpi_finish ends the job with
 * MPI_Abort. Not available: trace and replay of arrival order
 * (world_record_arrivals) and the point-to-point flags (world_flag_*).
 */
int world_mpi_built(void); /* 1 when ddpsim was built with MPI (configure --with-mpi) */
/* "built with Open MPI v4.1.4, ..." or how to build it, for --version. */
void world_mpi_describe(char *buf, size_t len);
/* DDP_ERR_INVALID without MPI (the message says how to build it), DDP_ERR_SYSTEM when MPI_Init fails. */
ddp_status world_mpi_start(int *argc, char ***argv);
int world_mpi_active(void);
int world_mpi_rank(void);
int world_mpi_size(void);
/*
 * End MPI with this process's exit code. After a failed run: print nothing
 * more, end the whole job with MPI_Abort(code), and never return. Otherwise
 * return rank 0's code (every process exits with it). 0 does nothing when
 * MPI was not started.
 */
int world_mpi_finish(int code);

/* ---- rank side ---- */

int world_rank_id(const world_rank *wr);
int world_size(const world_rank *wr);
void *world_rank_user_area(world_rank *wr);
/* The rank's place among the ranks of its host, and how many that host runs (a forked world: one host). */
int world_local_rank(const world_rank *wr);
int world_local_size(const world_rank *wr);

/*
 * The rank wrote these len bytes of the shared user area for the parent's
 * side to read. In a forked world the parent sees them already: nothing to
 * do. In an MPI world they are copied to every process's user area, in the
 * order the rank published them (a record before the counter that says it
 * is there). A rank's parts of the user area must be its own: two ranks
 * never publish the same bytes.
 */
void world_publish(world_rank *wr, const void *p, size_t len);

/* Announce the op this rank is executing, for supervision reports. Counts as progress. */
void world_set_op(world_rank *wr, int op_index, const char *label);

/*
 * The time this rank (any of its threads) has spent inside collectives so
 * far, the one in progress included, in nanoseconds. Read from another
 * thread while a collective ends it may count that one's end at the next
 * call; it never counts anything twice, but two readings may differ by a
 * little the wrong way round (callers clamp).
 */
uint64_t world_coll_ns(world_rank *wr);
/* The CPU time this rank's threads used inside its finished collectives (world_config.coll_cpu; else 0). */
uint64_t world_coll_cpu_ns(world_rank *wr);

/*
 * Mark the rank inside / outside a named collective (the name must be a
 * literal). DDP_ERR_INVALID when another thread of this rank is inside one
 * already: a rank's collectives are made one at a time, or the ranks could
 * not agree on their order.
 */
ddp_status world_enter_coll(world_rank *wr, const char *name);
void world_leave_coll(world_rank *wr);

/*
 * A function this process calls as each of its threads begins anything with
 * other ranks (a collective, each barrier and flag wait inside one), whether
 * it will have to wait or not (NULL: none); not world_wait_change, which
 * waits for the parent a varying number of times. --sched lets the rank's other
 * threads go first (interleave.h): at the start, not where a wait turns out
 * to be needed, which depends on who arrives last.
 */
void world_set_meet_hook(void (*hook)(void));

/* End this rank now as failed, for why (the caller cannot unwind: a deadlock of the implementation's threads). */
_Noreturn void world_rank_fail_now(world_rank *wr, const char *why);

/* 1 once the world is being aborted (a peer failed, a timeout, an interrupt): a
 * rank waiting on something outside the world (a GPU) polls this to give up. */
int world_aborted(world_rank *wr);

/*
 * Where rank r is, as the supervisor would report it: 1 when it is inside a
 * collective (how many it has entered in *seq), 0 otherwise. For ordering
 * events in tests and for diagnostics; it synchronizes nothing.
 */
int world_peer_in_coll(world_rank *wr, int r, uint64_t *seq);

/* All ranks meet. Returns DDP_OK or DDP_ERR_ABORTED when the world was aborted. */
ddp_status world_barrier(world_rank *wr);

/*
 * Point-to-point handoff without a full barrier: each rank owns one flag
 * word on its own cache line. world_flag_set publishes a value (with release
 * order: what the rank wrote before is visible to whoever sees the value);
 * world_flag_wait waits until rank r's flag reaches value (counting with
 * wrap-around), or the world aborts (DDP_ERR_ABORTED). A collective that
 * hands off this way takes its value from world_flag_next, a count kept in
 * the rank's own state: every rank that makes the same calls gets the same
 * values.
 */
uint32_t world_flag_next(world_rank *wr); /* the value of this rank's next handoff: 1, 2, ... */
void world_flag_set(world_rank *wr, uint32_t value);
ddp_status world_flag_wait(world_rank *wr, int r, uint32_t value);

/*
 * Wait until *word (shared memory the caller owns) is no longer old, as the
 * collectives wait: a short spin, then the kernel. DDP_ERR_ABORTED when the
 * world is stopped meanwhile.
 */
ddp_status world_wait_change(world_rank *wr, _Atomic uint32_t *word, uint32_t old);


/*
 * Trace and replay of arrival order. Recording: every barrier appends the
 * number of ranks that had arrived before this one (0 = first);
 * world_take_arrivals hands over what was appended since the last call
 * (valid until the next barrier; *lost is set if memory ran out). Forcing:
 * the i-th barrier of this rank waits until exactly pos[i] ranks have
 * arrived, so a recorded order happens again (pos must outlive the run).
 */
void world_record_arrivals(world_rank *wr, int on);
size_t world_take_arrivals(world_rank *wr, const uint32_t **pos, int *lost);
void world_force_arrivals(world_rank *wr, const uint32_t *pos, size_t n);

/* Rank r's staging buffer (slot_bytes, 64-byte aligned) and the shared result buffer. */
void *world_slot(world_rank *wr, int r);
void *world_result(world_rank *wr);
size_t world_slot_bytes(const world_rank *wr);

/*
 * Rank r's mailbox for the collective the caller is in (since
 * world_enter_coll): WORLD_MAILBOX_BYTES, 64-byte aligned, one of two per
 * rank alternating with the collective count, and used by no other
 * collective than the small allreduce. A rank may fill its mailbox before
 * the collective's opening barrier while others still read its previous one.
 */
#define WORLD_MAILBOX_BYTES ((size_t)16 << 10)
void *world_mailbox(world_rank *wr, int r);

/* Rank r's descriptor of the collective the caller is in (since world_enter_coll):
 * WORLD_DESC_WORDS words a collective publishes so every rank can check that
 * all ranks made the same call. */
#define WORLD_DESC_WORDS 5
uint64_t *world_coll_desc(world_rank *wr, int r);

#endif
