/*
 * world_mpi.c - an MPI world (world.h, world_impl.h): each process of an
 * MPI job is one rank. The process forks the rank that runs the caller's
 * code and supervises it; it carries out the rank's collectives over MPI
 * with its peers, in ddpsim's summation orders (the sums are coll.c's code,
 * MPI only moves bytes: MPI_Allreduce would sum in the library's order);
 * it copies what the rank publishes into every peer's user area; and rank
 * 0's process decides what the forked world's supervisor decides: a rank
 * that failed, a deadlock, the watchdog.
 *
 * Messages between the processes (on a duplicate of MPI_COMM_WORLD, one tag,
 * so each sender's messages arrive in the order sent):
 *   PUBLISH  to every peer: entries of the rank's publishing log
 *   STATE    to rank 0, while the rank runs: its op, its collective, its progress
 *   FIN      to every peer, after its last PUBLISH: the rank finished, how
 *   FAIL     to rank 0: the rank failed, was interrupted, or its process was
 * The collectives' data goes on a second duplicate, in non-blocking MPI
 * collectives that every process starts in the same order (its rank makes
 * the same calls), so a supervisor waiting for one still reads messages,
 * reaps its rank and, on rank 0, judges.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "coll_impl.h"
#include "world_impl.h"

/* The process's place in the job (one job per process). */
static struct {
    int on, rank, size, local_rank, local_size;
    MPI_Comm ctrl, data;
    char host[64];
    int run_failed; /* a run failed: its peers are still in it, and the job ends with MPI_Abort */
    uint64_t run;   /* world_runs so far in this process */
    struct early_msg *early, **early_tail;
} job;

enum { TAG_CTRL = 7 };
enum { MSG_PUBLISH = 1, MSG_STATE, MSG_FIN, MSG_FAIL };
/* How long a process whose rank failed waits for rank 0 to end the job before it does so itself. */
#define LINGER_S 600.0
/* How long world_mpi_finish waits for every process to get there. */
#define FINISH_S 60.0
/* STATE messages: at most one per this many seconds. */
#define STATE_EVERY_S 0.01
/* How long rank 0 still reads its peers' reports once the run failed, for the account of where each was. */
#define FINAL_WORD_S 0.1
/* The judgement of a deadlock, as in the forked world (world.c). */
#define DEADLOCK_QUIET_S 0.2

typedef struct msg_head {
    uint32_t type;
    int32_t from;
    uint64_t run; /* the sender's world_run, counted over the job: every process counts the same runs */
} msg_head;

/*
 * A message of a run this process has not started yet: a peer that finished a run (it had every FIN) may
 * start the next while this process still waits for a last FIN, and report its rank's state (to rank 0) or
 * publish what its rank writes before its first collective. Kept, in arrival order, until that run starts
 * here (and its parent's side has set up the run's user area); a message is never of a run already left
 * (its sender's FIN came last).
 */
typedef struct early_msg {
    unsigned char *buf;
    size_t len;
    struct early_msg *next;
} early_msg;

/* A rank as its process reports it. */
typedef struct rank_report {
    int64_t pid, maxrss_kib;
    int32_t fate, exit_code, signal, op_index, in_coll, status;
    uint64_t progress, coll_seq, coll_ns, coll_cpu_ns;
    char op_label[WORLD_LABEL_LEN], coll[WORLD_LABEL_LEN], host[64];
    char error[WORLD_ERROR_LEN]; /* the rank's own error message */
    char why[WORLD_ERROR_LEN];   /* FAIL: what the run failed of, as rank 0 will say it */
} rank_report;

typedef struct pending_send {
    MPI_Request req[WORLD_MAX_RANKS];
    int nreq;
    void *buf;
    struct pending_send *next;
} pending_send;

struct world_mpi {
    const sigset_t *watched;
    pid_t pid;
    int alive;            /* the local rank has not been reaped */
    int reported;         /* (not rank 0) this process told rank 0 its rank failed: it waits for the end */
    int *fin;             /* FIN seen from rank r (or sent, for this one) */
    int nfin;
    ddp_status fail;      /* rank 0: the run failed (DDP_OK while it has not) */
    int fail_rank;        /* ... of this rank (-1: a deadlock or the watchdog) */
    char fail_msg[WORLD_ERROR_LEN];
    pending_send *sends;
    uint64_t state_progress;
    int state_in_coll;
    double state_t, slow_t, last_change;
    uint64_t last_sum;
    unsigned char *tmp;   /* what the reductions receive */
    size_t tmp_cap;
    uint64_t *descs;      /* every rank's descriptor */
    int *scount, *sdispl, *rcount, *rdispl;
};

int world_mpi_built(void) { return 1; }

void world_mpi_describe(char *buf, size_t len)
{
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    MPI_Get_library_version(lib, &n); /* callable before MPI_Init */
    lib[n < (int)sizeof lib ? n : (int)sizeof lib - 1] = '\0';
    char *cut = strpbrk(lib, ",\n"); /* "Open MPI v4.1.4, package: ...": the first part */
    if (cut)
        *cut = '\0';
    snprintf(buf, len, "built with %s (--world mpi)", lib);
}
int world_mpi_active(void) { return job.on; }
int world_mpi_rank(void) { return job.on ? job.rank : -1; }
int world_mpi_size(void) { return job.on ? job.size : 0; }
int world_mpi_local_rank(void) { return job.local_rank; }
int world_mpi_local_size(void) { return job.local_size; }

static ddp_status mpi_failed(const char *what, int rc)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return ddp_error(DDP_ERR_SYSTEM, "%s: %.*s", what, len, text);
}

/*
 * A control message that could not be sent or read: the peers would judge without it, so the job ends here,
 * with what MPI said (on rank 0's terminal when it is rank 0 that saw it; mpirun names the process anyway).
 */
static void control_ok(int rc, const char *what)
{
    if (rc == MPI_SUCCESS)
        return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    fprintf(stderr, "ddpsim: rank %d on %s: %s: %.*s\n", job.rank, job.host, what, len, text);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

ddp_status world_mpi_start(int *argc, char ***argv)
{
    if (job.on)
        return DDP_OK;
    int provided = 0, rc = MPI_Init_thread(argc, argv, MPI_THREAD_SINGLE, &provided);
    if (rc != MPI_SUCCESS)
        return mpi_failed("MPI_Init", rc);
    /* Errors come back as codes: a supervisor says what failed instead of MPI's handler killing the job. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &job.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &job.size);
    if (job.size > WORLD_MAX_RANKS) {
        if (job.rank == 0)
            fprintf(stderr, "ddpsim: --world mpi: the job has %d processes; a world has at most %d ranks\n", job.size,
                    WORLD_MAX_RANKS);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &job.ctrl);
    MPI_Comm_dup(MPI_COMM_WORLD, &job.data);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, job.rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &job.local_rank);
    MPI_Comm_size(local, &job.local_size);
    MPI_Comm_free(&local);
    gethostname(job.host, sizeof job.host - 1);
    job.on = 1;
    /* Rank 0 reports; the others would print the same report again. */
    if (job.rank != 0 && !getenv("DDPSIM_MPI_ALL_OUTPUT")) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            fflush(NULL);
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
    }
    return DDP_OK;
}

int world_mpi_finish(int code)
{
    if (!job.on)
        return code;
    fflush(NULL);
    if (job.run_failed)
        MPI_Abort(MPI_COMM_WORLD, code ? code : 3); /* the peers are still in the failed run */
    /* Every process exits with rank 0's code; one that never gets here (it waits in a run rank 0 left)
     * is ended with the job. */
    int c = code;
    MPI_Request r;
    MPI_Ibcast(&c, 1, MPI_INT, 0, job.ctrl, &r);
    double t0 = clock_now_s();
    for (int done = 0; !done;) {
        MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (!done && clock_now_s() - t0 > FINISH_S)
            MPI_Abort(MPI_COMM_WORLD, code ? code : 3);
        if (!done)
            clock_sleep_us(100);
    }
    MPI_Comm_free(&job.ctrl);
    MPI_Comm_free(&job.data);
    MPI_Finalize();
    job.on = 0;
    return c;
}

ddp_status world_mpi_attach(world *w)
{
    int n = w->cfg.nranks;
    if (n != job.size)
        return ddp_error(DDP_ERR_INVALID,
                         "--world mpi: a world of %d ranks in an MPI job of %d processes (mpirun -np %d, or leave "
                         "--ranks out)", n, job.size, n);
    if (job.run_failed)
        return ddp_error(DDP_ERR_RANK_FAILED, "an earlier run of this MPI job failed, and its ranks wait in it: the "
                                              "job runs nothing more");
    if (w->cfg.slot_bytes < (size_t)n)
        return ddp_error(DDP_ERR_INVALID, "--world mpi: a slot of %zu bytes cannot hold a byte per rank",
                         w->cfg.slot_bytes);
    struct world_mpi *m = calloc(1, sizeof *m);
    if (!m)
        return ddp_error(DDP_ERR_NOMEM, "MPI world state");
    m->fin = calloc((size_t)n, sizeof *m->fin);
    m->descs = calloc((size_t)n * WORLD_DESC_WORDS, sizeof *m->descs);
    m->scount = calloc((size_t)n * 4, sizeof *m->scount);
    w->mpi = m; /* before any failure: detach frees what there is */
    if (!m->fin || !m->descs || !m->scount)
        return ddp_error(DDP_ERR_NOMEM, "MPI world state");
    m->sdispl = m->scount + n;
    m->rcount = m->sdispl + n;
    m->rdispl = m->rcount + n;
    w->local_rank = job.rank;
    return DDP_OK;
}

static void sends_progress(struct world_mpi *m, int all)
{
    pending_send **p = &m->sends;
    while (*p) {
        pending_send *s = *p;
        int done = 0;
        if (all)
            MPI_Waitall(s->nreq, s->req, MPI_STATUSES_IGNORE);
        else
            control_ok(MPI_Testall(s->nreq, s->req, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
        if (all || done) {
            *p = s->next;
            free(s->buf);
            free(s);
        } else {
            p = &s->next;
        }
    }
}

void world_mpi_detach(world *w)
{
    struct world_mpi *m = w->mpi;
    if (!m)
        return;
    if (!job.run_failed)
        sends_progress(m, 1);
    free(m->fin);
    free(m->descs);
    free(m->scount);
    free(m->tmp);
    free(m);
    w->mpi = NULL;
}

/*
 * Send a message of type to rank `to`, or to every other rank (-1): its payload is a's alen bytes followed by
 * b's blen (a wrapped ring's two parts; b may be NULL). Never blocks.
 */
static void send_msg(struct world_mpi *m, uint32_t type, const void *a, size_t alen, const void *b, size_t blen,
                     int to)
{
    size_t len = alen + blen;
    pending_send *s = calloc(1, sizeof *s);
    unsigned char *buf = malloc(sizeof(msg_head) + len);
    if (!s || !buf || sizeof(msg_head) + len > INT_MAX) {
        free(s);
        free(buf);
        MPI_Abort(MPI_COMM_WORLD, 3); /* a message lost would leave the peers judging without it */
    }
    msg_head h = {.type = type, .from = job.rank, .run = job.run};
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, a, alen);
    if (blen)
        memcpy(buf + sizeof h + alen, b, blen);
    s->buf = buf;
    for (int r = 0; r < job.size; r++)
        if (r != job.rank && (to < 0 || r == to))
            control_ok(MPI_Isend(buf, (int)(sizeof h + len), MPI_BYTE, r, TAG_CTRL, job.ctrl, &s->req[s->nreq++]),
                       "MPI_Isend");
    s->next = m->sends;
    m->sends = s;
}

/* What the local rank published since the last pass, to every peer. */
static void drain_log(world *w)
{
    remote_area *ra = w->remote;
    uint64_t tail = atomic_load_explicit(&ra->log_tail, memory_order_relaxed),
             head = atomic_load_explicit(&ra->log_head, memory_order_acquire);
    if (head == tail)
        return;
    size_t len = (size_t)(head - tail), at = (size_t)(tail % REMOTE_LOG_BYTES);
    size_t first = REMOTE_LOG_BYTES - at < len ? REMOTE_LOG_BYTES - at : len;
    if (job.size > 1) /* straight from the ring into the message */
        send_msg(w->mpi, MSG_PUBLISH, ra->log + at, first, ra->log, len - first, -1);
    atomic_store_explicit(&ra->log_tail, head, memory_order_release);
    atomic_fetch_add_explicit(&ra->log_word, 1, memory_order_release);
    sync_wake_all(&ra->log_word);
}

/* A peer's published entries, into this process's user area. */
static void apply_publish(world *w, const unsigned char *p, size_t len)
{
    size_t user = w->cfg.user_bytes;
    while (len >= 2 * sizeof(uint64_t)) {
        uint64_t hdr[2];
        memcpy(hdr, p, sizeof hdr);
        size_t size = sizeof hdr + ALIGN8((size_t)hdr[1]);
        if (size > len || hdr[0] > user || hdr[1] > user - hdr[0])
            MPI_Abort(MPI_COMM_WORLD, 3); /* cannot happen between processes of one program: say so loudly */
        memcpy(w->user + hdr[0], p + sizeof hdr, (size_t)hdr[1]);
        p += size;
        len -= size;
    }
}

static void report_of(const world *w, rank_report *rep)
{
    int me = job.rank;
    const rank_state *st = &w->ranks[me];
    const world_rank_outcome *o = &w->outcomes[me];
    memset(rep, 0, sizeof *rep);
    rep->pid = o->pid;
    rep->maxrss_kib = o->maxrss_kib;
    rep->fate = o->fate;
    rep->exit_code = o->exit_code;
    rep->signal = o->signal;
    rep->op_index = atomic_load(&st->op_index);
    rep->in_coll = atomic_load(&st->in_coll) != 0;
    rep->progress = atomic_load(&st->progress);
    rep->coll_seq = atomic_load(&st->coll_seq);
    rep->coll_ns = atomic_load(&st->coll_ns);
    rep->coll_cpu_ns = atomic_load(&st->coll_cpu_ns);
    memcpy(rep->op_label, st->op_label, WORLD_LABEL_LEN);
    memcpy(rep->coll, st->coll, WORLD_LABEL_LEN);
    memcpy(rep->error, st->error, WORLD_ERROR_LEN);
    memcpy(rep->host, job.host, sizeof rep->host);
}

/* A peer's report into its mirror: its rank_state (what collect_states and the judgement read), its outcome. */
static void apply_report(world *w, int from, const rank_report *rep, int final)
{
    rank_state *st = &w->ranks[from];
    atomic_store(&st->op_index, rep->op_index);
    atomic_store(&st->in_coll, rep->in_coll ? IN_COLL_COUNTED : 0);
    atomic_store(&st->progress, rep->progress);
    atomic_store(&st->coll_seq, rep->coll_seq);
    atomic_store(&st->coll_ns, rep->coll_ns);
    atomic_store(&st->coll_cpu_ns, rep->coll_cpu_ns);
    memcpy(st->op_label, rep->op_label, WORLD_LABEL_LEN);
    memcpy(st->coll, rep->coll, WORLD_LABEL_LEN);
    memcpy(st->error, rep->error, WORLD_ERROR_LEN);
    world_rank_outcome *o = &w->outcomes[from];
    o->pid = (pid_t)rep->pid;
    memcpy(o->host, rep->host, sizeof o->host);
    o->host[sizeof o->host - 1] = '\0';
    if (final) {
        o->fate = (world_fate)rep->fate;
        o->exit_code = rep->exit_code;
        o->signal = rep->signal;
        o->maxrss_kib = (long)rep->maxrss_kib;
    }
}

/* Rank 0: the run failed; the first account wins. */
static void run_fails(struct world_mpi *m, ddp_status s, int rank, const char *msg)
{
    if (m->fail != DDP_OK)
        return;
    m->fail = s;
    m->fail_rank = rank;
    snprintf(m->fail_msg, sizeof m->fail_msg, "%s", msg);
}

/* One message of this run, taken in. */
static void take_msg(world *w, const unsigned char *buf, size_t len)
{
    struct world_mpi *m = w->mpi;
    msg_head h;
    memcpy(&h, buf, sizeof h);
    const unsigned char *body = buf + sizeof h;
    size_t blen = len - sizeof h;
    rank_report rep;
        if (h.type != MSG_PUBLISH)
            memcpy(&rep, body, blen < sizeof rep ? blen : sizeof rep);
        switch (h.type) {
        case MSG_PUBLISH: apply_publish(w, body, blen); break;
        case MSG_STATE: apply_report(w, h.from, &rep, 0); break;
        case MSG_FIN:
            apply_report(w, h.from, &rep, 1);
            if (!m->fin[h.from]) {
                m->fin[h.from] = 1;
                m->nfin++;
            }
            break;
        case MSG_FAIL:
            apply_report(w, h.from, &rep, 1);
            if (rep.status == DDP_ERR_INTERRUPTED)
                w->interrupt_signal = rep.signal;
            run_fails(m, (ddp_status)rep.status, h.from, rep.why);
            break;
        }
}

static void receive(world *w)
{
    for (;;) {
        int flag = 0, len = 0;
        MPI_Status st;
        control_ok(MPI_Iprobe(MPI_ANY_SOURCE, TAG_CTRL, job.ctrl, &flag, &st), "MPI_Iprobe");
        if (!flag)
            return;
        MPI_Get_count(&st, MPI_BYTE, &len);
        unsigned char *buf = malloc(len > 0 ? (size_t)len : 1);
        if (!buf)
            MPI_Abort(MPI_COMM_WORLD, 3);
        control_ok(MPI_Recv(buf, len, MPI_BYTE, st.MPI_SOURCE, TAG_CTRL, job.ctrl, MPI_STATUS_IGNORE), "MPI_Recv");
        msg_head h;
        if ((size_t)len < sizeof h)
            MPI_Abort(MPI_COMM_WORLD, 3); /* cannot happen between processes of one program */
        memcpy(&h, buf, sizeof h);
        if (h.run == job.run) {
            take_msg(w, buf, (size_t)len);
            free(buf);
            continue;
        }
        early_msg *e = malloc(sizeof *e);
        if (!e || h.run < job.run)
            MPI_Abort(MPI_COMM_WORLD, 3);
        *e = (early_msg){buf, (size_t)len, NULL};
        if (!job.early)
            job.early_tail = &job.early;
        *job.early_tail = e;
        job.early_tail = &e->next;
    }
}

/* A run starts: the messages of it that came early, in the order they came. */
static void take_early(world *w)
{
    early_msg **p = &job.early;
    while (*p) {
        early_msg *e = *p;
        msg_head h;
        memcpy(&h, e->buf, sizeof h);
        if (h.run != job.run) {
            p = &e->next;
            continue;
        }
        take_msg(w, e->buf, e->len);
        *p = e->next;
        free(e->buf);
        free(e);
    }
    job.early_tail = &job.early;
    while (*job.early_tail)
        job.early_tail = &(*job.early_tail)->next;
}

/* The local rank failed, or this process was interrupted: rank 0 decides; the others tell it. */
static void local_failure(world *w, ddp_status s, const char *why)
{
    struct world_mpi *m = w->mpi;
    if (job.rank == 0) {
        run_fails(m, s, 0, why);
        return;
    }
    if (m->reported)
        return;
    rank_report rep;
    report_of(w, &rep);
    rep.status = s;
    if (s == DDP_ERR_INTERRUPTED)
        rep.signal = w->interrupt_signal;
    snprintf(rep.why, sizeof rep.why, "%s", why);
    send_msg(m, MSG_FAIL, &rep, sizeof rep, NULL, 0, 0);
    m->reported = 1;
}

static void reaped(world *w, int ws, const struct rusage *ru, int stopping)
{
    struct world_mpi *m = w->mpi;
    world_rank_outcome *o = &w->outcomes[job.rank];
    o->maxrss_kib = ru->ru_maxrss;
    world_decode_exit(o, ws, stopping);
    m->alive = 0;
    if (stopping)
        return;
    char why[WORLD_ERROR_LEN];
    if (o->fate == WORLD_FATE_OK) {
        drain_log(w); /* all of it, before FIN */
        rank_report rep;
        report_of(w, &rep);
        if (job.size > 1)
            send_msg(m, MSG_FIN, &rep, sizeof rep, NULL, 0, -1);
        m->fin[job.rank] = 1;
        m->nfin++;
        return;
    }
    if (o->fate == WORLD_FATE_SIGNALED)
        snprintf(why, sizeof why, "rank %d was killed by signal %d (%s) on %s", job.rank, o->signal,
                 strsignal(o->signal), job.host);
    else
        snprintf(why, sizeof why, "rank %d failed (exit code %d) on %s", job.rank, o->exit_code, job.host);
    local_failure(w, DDP_ERR_RANK_FAILED, why);
}

/* SIGKILL the local rank if it still runs, and reap it. */
static void stop_local(world *w)
{
    struct world_mpi *m = w->mpi;
    atomic_store(&w->hdr->abort_word, 1);
    if (!m->alive)
        return;
    kill(m->pid, SIGKILL);
    int ws;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(m->pid, &ws, 0, &ru) < 0 && errno == EINTR) {
    }
    reaped(w, ws, &ru, 1);
}

/* Rank 0: a deadlock or the watchdog, judged on every rank's last report, as the forked world judges. */
static void judge(world *w, double now)
{
    struct world_mpi *m = w->mpi;
    uint64_t sum = 0;
    int finished = 0, blocked = 1;
    for (int r = 0; r < job.size; r++) {
        const rank_state *st = &w->ranks[r];
        sum += atomic_load_explicit(&st->progress, memory_order_relaxed);
        if (m->fin[r])
            finished++;
        else if (r == job.rank)
            blocked &= m->alive && atomic_load(&w->remote->req) != atomic_load(&w->remote->done);
        else
            blocked &= atomic_load(&st->in_coll) != 0;
    }
    if (sum != m->last_sum) {
        m->last_sum = sum;
        m->last_change = now;
    }
    char msg[WORLD_ERROR_LEN];
    if (finished > 0 && finished < job.size && blocked && now - m->last_change >= DEADLOCK_QUIET_S) {
        world_deadlock_text(m->fin, job.size, msg, sizeof msg);
        run_fails(m, DDP_ERR_DEADLOCK, -1, msg);
    } else if (w->cfg.timeout_s > 0 && now - m->last_change > w->cfg.timeout_s) {
        w->stuck_for_s = now - m->last_change;
        snprintf(msg, sizeof msg, "no rank made progress for %.1f s (--timeout %g)", w->stuck_for_s,
                 w->cfg.timeout_s);
        run_fails(m, DDP_ERR_TIMEOUT, -1, msg);
    }
}

/*
 * One pass of the supervisor: messages in, what the rank published out, a
 * STATE to rank 0 when the rank moved, the caller's poll; every millisecond
 * also the rank's exit, signals and (rank 0) the judgement.
 */
static void service(world *w)
{
    struct world_mpi *m = w->mpi;
    receive(w);
    drain_log(w);
    sends_progress(m, 0);
    double now = clock_now_s();
    if (job.rank != 0 && m->alive && now - m->state_t >= STATE_EVERY_S) {
        const rank_state *st = &w->ranks[job.rank];
        uint64_t p = atomic_load_explicit(&st->progress, memory_order_relaxed);
        int in = atomic_load(&st->in_coll) != 0;
        if (p != m->state_progress || in != m->state_in_coll) {
            rank_report rep;
            report_of(w, &rep);
            send_msg(m, MSG_STATE, &rep, sizeof rep, NULL, 0, 0);
            m->state_progress = p;
            m->state_in_coll = in;
            m->state_t = now;
        }
    }
    if (w->cfg.poll)
        w->cfg.poll(w->cfg.poll_arg);
    if (now - m->slow_t < 1e-3)
        return;
    m->slow_t = now;
    if (m->alive) {
        int ws;
        struct rusage ru;
        if (wait4(m->pid, &ws, WNOHANG, &ru) == m->pid)
            reaped(w, ws, &ru, 0);
    }
    struct timespec zero = {0, 0};
    int sig = sigtimedwait(m->watched, NULL, &zero);
    if (sig == SIGINT || sig == SIGTERM) {
        w->interrupt_signal = sig;
        stop_local(w);
        char why[128];
        snprintf(why, sizeof why, "interrupted by %s (rank %d, on %s)", strsignal(sig), job.rank, job.host);
        local_failure(w, DDP_ERR_INTERRUPTED, why);
    }
    if (job.rank == 0 && m->fail == DDP_OK)
        judge(w, now);
}

/* A collective's MPI call failed: the rank's collective fails with MPI's words, and so does the run. */
static ddp_status collective_failed(world *w, int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING], why[WORLD_ERROR_LEN];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    snprintf(why, sizeof why, "rank %d on %s: %s: %.*s", job.rank, job.host, what, len, text);
    local_failure(w, DDP_ERR_SYSTEM, why);
    return ddp_error(DDP_ERR_SYSTEM, "%s", why);
}

/*
 * Wait for the non-blocking MPI call `what` (its return code rc, its request *r), serving meanwhile;
 * DDP_ERR_ABORTED when rank 0 learns the run failed.
 */
static ddp_status wait_mpi(world *w, int rc, MPI_Request *r, const char *what)
{
    struct world_mpi *m = w->mpi;
    if (rc != MPI_SUCCESS)
        return collective_failed(w, rc, what);
    for (unsigned spins = 0;; spins++) {
        int done = 0;
        rc = MPI_Test(r, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return collective_failed(w, rc, what);
        if (done)
            return DDP_OK;
        service(w);
        if (m->fail != DDP_OK)
            return DDP_ERR_ABORTED;
        /* Not a busy loop for long: the ranks computing on this machine need its cores more. */
        if (spins > 256)
            clock_sleep_us(spins > 4096 ? 200 : 20);
    }
}

static ddp_status reduce_piece(world *w, const uint64_t *d, size_t off, size_t len)
{
    struct world_mpi *m = w->mpi;
    int n = job.size, me = job.rank;
    size_t count = (size_t)d[1];
    coll_dtype type = (coll_dtype)(d[2] & 0xff);
    coll_op op = (coll_op)(d[2] >> 8);
    coll_algo algo = (coll_algo)d[3];
    size_t esz = coll_dtype_size(type);
    /* Who sums what: allreduce, a share of the piece each (as coll.c); reduce-scatter, each rank its own slice
     * of the whole vector, where it meets the piece. */
    size_t lo[WORLD_MAX_RANKS], hi[WORLD_MAX_RANKS];
    for (int r = 0; r < n; r++) {
        if (d[0] == COLL_KIND_REDUCE_SCATTER)
            coll_split_in_piece(count, n, r, off, len, &lo[r], &hi[r]);
        else
            coll_split(len, n, r, &lo[r], &hi[r]);
    }
    size_t mine = hi[me] - lo[me], need = (size_t)n * mine * esz;
    if (need > INT_MAX)
        return ddp_error(DDP_ERR_INVALID, "--world mpi: a piece of %zu bytes per rank is too large for MPI's counts",
                         mine * esz);
    if (need > m->tmp_cap) {
        unsigned char *t = realloc(m->tmp, need);
        if (!t)
            return ddp_error(DDP_ERR_NOMEM, "%zu bytes to reduce", need);
        m->tmp = t;
        m->tmp_cap = need;
    }
    for (int r = 0; r < n; r++) {
        m->scount[r] = (int)((hi[r] - lo[r]) * esz);
        m->sdispl[r] = (int)(lo[r] * esz);
        m->rcount[r] = (int)(mine * esz);
        m->rdispl[r] = (int)((size_t)r * mine * esz);
    }
    unsigned char *slot = w->slots;
    MPI_Request req;
    int rc = MPI_Ialltoallv(slot, m->scount, m->sdispl, MPI_BYTE, m->tmp, m->rcount, m->rdispl, MPI_BYTE, job.data, &req);
    DDP_CHECK(wait_mpi(w, rc, &req, "MPI_Ialltoallv"));
    if (mine > 0) {
        void *src[WORLD_MAX_RANKS];
        for (int r = 0; r < n; r++)
            src[r] = m->tmp + (size_t)r * mine * esz;
        unsigned char *dst = slot + lo[me] * esz;
        coll_reduce_slice(dst, src, n, type, algo, off + lo[me], count, 0, mine);
        if (op == COLL_AVG)
            coll_divide_slice(dst, type, n, 0, mine);
    }
    if (d[0] == COLL_KIND_REDUCE_SCATTER)
        return DDP_OK;
    rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, slot, m->scount, m->sdispl, MPI_BYTE, job.data, &req);
    return wait_mpi(w, rc, &req, "MPI_Iallgatherv");
}

/* Carry out the local rank's request with the peers. */
static ddp_status serve_request(world *w)
{
    struct world_mpi *m = w->mpi;
    remote_area *ra = w->remote;
    uint64_t d[WORLD_DESC_WORDS];
    memcpy(d, ra->desc, sizeof d);
    size_t off = (size_t)ra->off, len = (size_t)ra->len;
    MPI_Request req;
    if (ra->first) { /* every rank called the same thing? (also the barrier every collective starts with) */
        int rc = MPI_Iallgather(d, WORLD_DESC_WORDS, MPI_UINT64_T, m->descs, WORLD_DESC_WORDS, MPI_UINT64_T, job.data,
                                &req);
        DDP_CHECK(wait_mpi(w, rc, &req, "MPI_Iallgather"));
        for (int r = 1; r < job.size; r++)
            if (memcmp(m->descs + (size_t)r * WORLD_DESC_WORDS, m->descs, sizeof d) != 0) {
                char a[128], b[128];
                coll_describe_call(m->descs, a, sizeof a);
                coll_describe_call(m->descs + (size_t)r * WORLD_DESC_WORDS, b, sizeof b);
                return ddp_error(DDP_ERR_INVALID, "ranks disagree on a collective: rank 0 called %s, rank %d called %s",
                                 a, r, b);
            }
    }
    switch (d[0]) {
    case COLL_KIND_BARRIER:
    case WORLD_REMOTE_BARRIER: return DDP_OK; /* the descriptors' exchange was the meeting */
    case COLL_KIND_BROADCAST:
        return wait_mpi(w, MPI_Ibcast(w->slots, (int)len, MPI_BYTE, (int)d[2], job.data, &req), &req, "MPI_Ibcast");
    case COLL_KIND_ALLGATHER:
        return wait_mpi(w, MPI_Iallgather(w->slots, (int)len, MPI_BYTE, w->result, (int)len, MPI_BYTE, job.data, &req),
                        &req, "MPI_Iallgather");
    case COLL_KIND_ALLREDUCE:
    case COLL_KIND_ALLREDUCE_INPLACE:
    case COLL_KIND_REDUCE_SCATTER: return reduce_piece(w, d, off, len);
    case COLL_KIND_NATIVE_ALLREDUCE: { /* the benchmark's baseline: the library's own, blocking, as users call it */
        int rc = MPI_Allreduce(MPI_IN_PLACE, w->slots, (int)len, (coll_dtype)d[2] == COLL_DOUBLE ? MPI_DOUBLE : MPI_FLOAT,
                               MPI_SUM, job.data);
        return rc == MPI_SUCCESS ? DDP_OK : collective_failed(w, rc, "MPI_Allreduce");
    }
    }
    return ddp_error(DDP_ERR_INVALID, "unknown collective %llu", (unsigned long long)d[0]);
}

/* A process whose rank failed: rank 0 ends the job once it has said so; wait for that, serving. */
_Noreturn static void linger(world *w)
{
    double t0 = clock_now_s();
    for (;;) {
        receive(w);
        sends_progress(w->mpi, 0);
        if (clock_now_s() - t0 > LINGER_S)
            MPI_Abort(MPI_COMM_WORLD, 3);
        clock_sleep_us(1000);
    }
}

/* The parent sleeps until its rank asks or publishes, or a millisecond (MPI cannot wake it). */
static void nap(world *w)
{
    remote_area *ra = w->remote;
    uint32_t k = atomic_load_explicit(&ra->kick, memory_order_seq_cst);
    atomic_store_explicit(&ra->parent_asleep, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&ra->req, memory_order_seq_cst) == atomic_load(&ra->done) &&
        atomic_load_explicit(&ra->log_head, memory_order_seq_cst) == atomic_load(&ra->log_tail) &&
        atomic_load_explicit(&ra->kick, memory_order_seq_cst) == k)
        sync_wait_for(&ra->kick, k, 1000000);
    atomic_store_explicit(&ra->parent_asleep, 0, memory_order_relaxed);
}

ddp_status world_mpi_supervise(world *w, const sigset_t *watched, pid_t pid)
{
    struct world_mpi *m = w->mpi;
    remote_area *ra = w->remote;
    int me = job.rank;
    m->watched = watched;
    m->pid = pid;
    m->alive = 1;
    m->reported = 0;
    memset(m->fin, 0, (size_t)job.size * sizeof *m->fin);
    m->nfin = 0;
    m->fail = DDP_OK;
    m->fail_rank = -1;
    m->state_progress = UINT64_MAX;
    m->state_t = m->slow_t = 0;
    m->last_sum = UINT64_MAX;
    m->last_change = clock_now_s();
    w->outcomes[me].pid = pid;
    job.run++;
    take_early(w);
    for (;;) {
        service(w);
        if (m->fail != DDP_OK)
            break;
        if (m->reported)
            linger(w);
        if (m->alive && atomic_load_explicit(&ra->req, memory_order_acquire) != atomic_load(&ra->done)) {
            uint32_t t = atomic_load(&ra->req);
            ddp_status s = serve_request(w);
            if (m->fail != DDP_OK)
                break;
            ra->status = s;
            if (s != DDP_OK)
                snprintf(ra->error, sizeof ra->error, "%s", ddp_error_text());
            atomic_store_explicit(&ra->done, t, memory_order_release);
            sync_wake_all(&ra->done);
            continue;
        }
        if (m->fin[me] && m->nfin == job.size && !m->alive) {
            sends_progress(m, 1);
            return DDP_OK;
        }
        nap(w);
    }
    /* Rank 0, the run failed: stop the local rank; the peers are ended with the job (world_mpi_finish). What
     * they reported a moment later still makes the account (where each was). */
    job.run_failed = 1;
    stop_local(w);
    for (double t0 = clock_now_s(); clock_now_s() - t0 < FINAL_WORD_S;) {
        receive(w);
        clock_sleep_us(1000);
    }
    for (int r = 0; r < job.size; r++) {
        world_rank_outcome *o = &w->outcomes[r];
        if (r != me && r != m->fail_rank && o->fate == WORLD_FATE_NOT_STARTED)
            o->fate = WORLD_FATE_STOPPED;
    }
    if (w->outcomes[me].fate == WORLD_FATE_NOT_STARTED)
        w->outcomes[me].fate = WORLD_FATE_STOPPED;
    return ddp_error(m->fail, "%s", m->fail_msg);
}
