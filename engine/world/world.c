/*
 * world.c - the forked-process world over one POSIX shared-memory segment,
 * and its supervisor; and the rank's side of an MPI world (world_impl.h),
 * whose supervisor is world_mpi.c.
 *
 * Segment layout (every part 64-byte aligned):
 *   seg_header | rank_state[nranks] | slot[0..nranks-1] | result
 *   | mailbox[nranks][2] | user area
 * (a slot and the result are slot_bytes each; a mailbox WORLD_MAILBOX_BYTES,
 * two per rank used alternately, see world_mailbox). An MPI world's segment
 * serves its process's one rank: one slot, no mailboxes, and after the user
 * area the rank's line to its parent (remote_area); the other ranks'
 * rank_state are the parent's copies of what their processes report.
 * The segment is created, sized with posix_fallocate (so a too-small
 * /dev/shm is an error now, not a SIGBUS later), mapped, and unlinked at
 * once: ranks inherit the mapping through fork(), so the name exists only for
 * microseconds and nothing survives even a SIGKILL of the parent.
 */
#include "config.h" /* DDPSIM_COVERAGE */
#include "world.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "rng.h"
#include "sync.h"
#include "world_impl.h"

static ddp_status segment_map(world *w)
{
    static _Atomic unsigned counter;
    char name[64];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(name, sizeof name, "/ddpsim-%ld-%u-%lx", (long)getpid(), atomic_fetch_add(&counter, 1),
             (unsigned long)ts.tv_nsec);

    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return ddp_error(DDP_ERR_SYSTEM, "shm_open(%s): %s", name, strerror(errno));
    /* Unlink first: from here on the only references are the fd and the mapping. */
    shm_unlink(name);
    if (ftruncate(fd, (off_t)w->total) != 0) {
        int e = errno;
        close(fd);
        return ddp_error(DDP_ERR_SYSTEM, "ftruncate of a %zu-byte segment: %s", w->total, strerror(e));
    }
    int e = posix_fallocate(fd, 0, (off_t)w->total);
    if (e != 0) {
        close(fd);
        return ddp_error(DDP_ERR_SYSTEM,
                         "cannot reserve %zu bytes of shared memory: %s (is /dev/shm large enough? "
                         "try a smaller --ranks or model)",
                         w->total, strerror(e));
    }
    void *p = mmap(NULL, w->total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return ddp_error(DDP_ERR_SYSTEM, "mmap of %zu bytes: %s", w->total, strerror(e));
    w->base = p;
    return DDP_OK;
}

/* Where each part of the segment starts (see the layout at the top). */
typedef struct segment_layout {
    size_t slot_stride, off_ranks, off_slots, off_result, off_mail, off_user, off_remote, total;
} segment_layout;

/* remote: an MPI world's segment, for its one local rank: one slot, no mailboxes, the line to the parent. */
static void layout_of(const world_config *cfg, int remote, segment_layout *l)
{
    size_t n = (size_t)cfg->nranks, slot = cfg->slot_bytes ? cfg->slot_bytes : WORLD_DEFAULT_SLOT_BYTES;
    size_t local = remote ? 1 : n;
    l->slot_stride = ALIGN64(slot);
    l->off_ranks = ALIGN64(sizeof(seg_header));
    l->off_slots = l->off_ranks + ALIGN64(n * sizeof(rank_state));
    l->off_result = l->off_slots + local * l->slot_stride;
    l->off_mail = l->off_result + l->slot_stride;
    l->off_user = l->off_mail + (remote ? 0 : n * 2 * WORLD_MAILBOX_BYTES);
    l->off_remote = l->off_user + ALIGN64(cfg->user_bytes ? cfg->user_bytes : 1);
    l->total = l->off_remote + (remote ? ALIGN64(sizeof(remote_area)) : 0);
}

size_t world_segment_bytes(const world_config *cfg)
{
    if (cfg->nranks < 1 || cfg->nranks > WORLD_MAX_RANKS)
        return 0;
    segment_layout l;
    layout_of(cfg, world_mpi_active(), &l);
    return l.total;
}

ddp_status world_create(const world_config *cfg, world **out)
{
    *out = NULL;
    if (cfg->nranks < 1 || cfg->nranks > WORLD_MAX_RANKS)
        return ddp_error(DDP_ERR_INVALID, "number of ranks %d is out of range 1..%d", cfg->nranks,
                         WORLD_MAX_RANKS);
    size_t slot = cfg->slot_bytes ? cfg->slot_bytes : WORLD_DEFAULT_SLOT_BYTES;
    if (slot < 64 || slot > ((size_t)1 << 30))
        return ddp_error(DDP_ERR_INVALID, "slot size %zu bytes is out of range 64 B .. 1 GiB", slot);
    if (cfg->user_bytes > ((size_t)1 << 40))
        return ddp_error(DDP_ERR_INVALID, "shared user area of %zu bytes is too large", cfg->user_bytes);

    world *w = calloc(1, sizeof *w);
    if (!w)
        return ddp_error(DDP_ERR_NOMEM, "world handle");
    w->cfg = *cfg;
    w->cfg.slot_bytes = slot;
    w->outcomes = calloc((size_t)cfg->nranks, sizeof *w->outcomes);
    if (!w->outcomes) {
        free(w);
        return ddp_error(DDP_ERR_NOMEM, "rank outcomes");
    }
    segment_layout lay;
    int remote = world_mpi_active();
    layout_of(cfg, remote, &lay);
    w->slot_stride = lay.slot_stride;
    w->total = lay.total;

    ddp_status s = segment_map(w);
    if (s != DDP_OK) {
        free(w->outcomes);
        free(w);
        return s;
    }
    w->hdr = (seg_header *)w->base;
    w->ranks = (rank_state *)(w->base + lay.off_ranks);
    w->slots = w->base + lay.off_slots;
    w->result = w->base + lay.off_result;
    w->mailboxes = w->base + lay.off_mail;
    w->user = w->base + lay.off_user;
    w->remote = remote ? (remote_area *)(w->base + lay.off_remote) : NULL;
    w->local_rank = -1;
    w->hdr->magic = SEG_MAGIC;
    w->hdr->nranks = cfg->nranks;
    if (remote && (s = world_mpi_attach(w)) != DDP_OK) {
        world_destroy(w);
        return s;
    }
    *out = w;
    return DDP_OK;
}

void world_destroy(world *w)
{
    if (!w)
        return;
    world_mpi_detach(w);
    if (w->base)
        munmap(w->base, w->total);
    free(w->outcomes);
    free(w);
}

int world_nranks(const world *w) { return w->cfg.nranks; }
void *world_user_area(world *w) { return w->user; }
const world_rank_outcome *world_outcome(const world *w, int r) { return &w->outcomes[r]; }
int world_interrupt_signal(const world *w) { return w->interrupt_signal; }

int world_first_failed_error(const world *w, const char **error)
{
    for (int r = 0; w && r < world_nranks(w); r++)
        if (w->outcomes[r].fate == WORLD_FATE_FAILED && w->outcomes[r].error[0]) {
            *error = w->outcomes[r].error;
            return r;
        }
    return -1;
}

void world_failure_words(const world *w, char *buf, size_t len)
{
    const char *own;
    buf[0] = '\0';
    if (world_first_failed_error(w, &own) >= 0) {
        snprintf(buf, len, "%s", ddp_error_without_location(own));
        return;
    }
    size_t n = 0;
    for (int r = 0; w && r < world_nranks(w) && n < len; r++) {
        const world_rank_outcome *o = &w->outcomes[r];
        if (o->coll[0])
            n += (size_t)snprintf(buf + n, len - n, "%srank %d in op %d (%s), inside %s #%llu", r ? "; " : "", r,
                                  o->op_index, o->op_label, o->coll, (unsigned long long)o->coll_seq);
        else
            n += (size_t)snprintf(buf + n, len - n, "%srank %d in op %d (%s), not in a collective", r ? "; " : "", r,
                                  o->op_index, o->op_label);
    }
}

/* ---- the rank process ---- */

void world_copy_label(char *dst, const char *src)
{
    size_t i = 0;
    for (; src && src[i] && i + 1 < WORLD_LABEL_LEN; i++)
        dst[i] = src[i];
    dst[i] = '\0';
}

/*
 * A coverage build (--enable-coverage): gcov writes its counts at exit(), which a rank never reaches (_exit:
 * the parent's atexit handlers and buffers are not the rank's), so the rank writes them itself.
 */
#if DDPSIM_COVERAGE
void __gcov_dump(void);
static void flush_coverage(void)
{
    __gcov_dump();
}
#else
static void flush_coverage(void)
{
}
#endif

_Noreturn static void rank_process(world *w, int r, world_rank_main rank_main, void *arg, pid_t parent)
{
    /* Signals first: the terminal's SIGINT goes to the whole process group and
     * is the supervisor's to handle; everything else gets its default action. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = SIG_DFL;
    /* ... the crash signals too: a handler the parent's libraries installed (MPI prints a backtrace and tries
     * to take the job down) must not run in a rank, whose crash the supervisor reports. */
    static const int defaults[] = {SIGTERM, SIGCHLD, SIGPIPE, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        sigaction(defaults[i], &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* If the supervisor dies, so do we; check that it did not die before this line. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(RANK_EXIT_ORPHANED);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    sync_set_spin_ns(w->cfg.nranks <= cores ? SYNC_SPIN_OWN_CORE_NS : 0); /* sync.c: why */

    world_rank wr = {
        .w = w,
        .rank = r,
        .st = &w->ranks[r],
        .jitter_key = rng_key(rng_key(w->cfg.jitter_seed, 0x6a697474 /* "jitt" */), (uint64_t)r),
    };
    ddp_status s = rank_main(&wr, arg);
    flush_coverage(); /* before the supervisor can see this rank exiting and stop the world */
    atomic_store_explicit(&wr.st->exiting, 1, memory_order_release);
    if (s == DDP_ERR_ABORTED)
        _exit(RANK_EXIT_ABORTED); /* the supervisor is stopping the world: not this rank's failure */
    if (s != DDP_OK) {
        const char *msg = ddp_error_last();
        snprintf(wr.st->error, sizeof wr.st->error, "%s", msg[0] ? msg : ddp_status_str(s));
        _exit(RANK_EXIT_FAILED);
    }
    _exit(0);
}

_Noreturn void world_rank_fail_now(world_rank *wr, const char *why)
{
    flush_coverage();
    snprintf(wr->st->error, sizeof wr->st->error, "%s", why);
    atomic_store_explicit(&wr->st->exiting, 1, memory_order_release);
    _exit(RANK_EXIT_FAILED);
}

int world_rank_id(const world_rank *wr) { return wr->rank; }
int world_size(const world_rank *wr) { return wr->w->cfg.nranks; }
void *world_rank_user_area(world_rank *wr) { return wr->w->user; }
int world_local_rank(const world_rank *wr) { return wr->w->mpi ? world_mpi_local_rank() : wr->rank; }
int world_local_size(const world_rank *wr) { return wr->w->mpi ? world_mpi_local_size() : wr->w->cfg.nranks; }
size_t world_slot_bytes(const world_rank *wr) { return wr->w->cfg.slot_bytes; }
/* An MPI world's segment holds the local rank's slot only. */
void *world_slot(world_rank *wr, int r) { return wr->w->slots + (size_t)(wr->w->remote ? 0 : r) * wr->w->slot_stride; }
remote_area *world_remote(world_rank *wr) { return wr->w->remote; }
void *world_result(world_rank *wr) { return wr->w->result; }
void *world_mailbox(world_rank *wr, int r)
{
    /* By parity, as the descriptors (below): two calls in a row never share a mailbox, and
     * between two that do, every rank has passed a barrier after reading the first. */
    uint64_t seq = atomic_load_explicit(&wr->st->coll_seq, memory_order_relaxed);
    return wr->w->mailboxes + ((size_t)r * 2 + (size_t)(seq & 1)) * WORLD_MAILBOX_BYTES;
}

uint64_t *world_coll_desc(world_rank *wr, int r)
{
    /* Two descriptors, alternating by the caller's collective count: a fast rank
     * may publish its next call while slow ones still read this one, but it
     * cannot get two calls ahead without passing a barrier they are part of. */
    uint64_t seq = atomic_load_explicit(&wr->st->coll_seq, memory_order_relaxed);
    return wr->w->ranks[r].desc[seq & 1];
}

void world_set_op(world_rank *wr, int op_index, const char *label)
{
    world_copy_label(wr->st->op_label, label);
    atomic_store_explicit(&wr->st->op_index, op_index, memory_order_relaxed);
    atomic_fetch_add_explicit(&wr->st->progress, 1, memory_order_relaxed);
}

int world_peer_in_coll(world_rank *wr, int r, uint64_t *seq)
{
    if (wr->w->remote && r != wr->rank) { /* another process's rank: not known here */
        *seq = 0;
        return 0;
    }
    const rank_state *st = &wr->w->ranks[r];
    /* IN_COLL_COUNTED is stored after the count (release): seen, the count includes the collective in progress */
    int in = atomic_load_explicit(&st->in_coll, memory_order_acquire) == IN_COLL_COUNTED;
    *seq = atomic_load_explicit(&st->coll_seq, memory_order_acquire);
    return in;
}

int world_aborted(world_rank *wr)
{
    return atomic_load_explicit(&wr->w->hdr->abort_word, memory_order_acquire) != 0;
}

uint64_t world_coll_cpu_ns(world_rank *wr)
{
    return atomic_load_explicit(&wr->st->coll_cpu_ns, memory_order_acquire);
}

uint64_t world_coll_ns(world_rank *wr)
{
    /* The finished ones first, then the one in progress: a collective that ends in between is missed for now
     * (counted at the next call), never counted twice. */
    uint64_t done = atomic_load_explicit(&wr->st->coll_ns, memory_order_acquire);
    if (atomic_load_explicit(&wr->st->in_coll, memory_order_acquire)) {
        uint64_t start = atomic_load_explicit(&wr->st->coll_start_ns, memory_order_relaxed), now = clock_now_ns();
        if (now > start)
            done += now - start;
    }
    return done;
}

static void (*meet_hook)(void);

void world_set_meet_hook(void (*hook)(void))
{
    meet_hook = hook;
}

static void meeting(void)
{
    if (meet_hook)
        meet_hook();
}

ddp_status world_enter_coll(world_rank *wr, const char *name)
{
    meeting();
    uint32_t was = 0;
    if (!atomic_compare_exchange_strong_explicit(&wr->st->in_coll, &was, IN_COLL_ENTERING, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        /* the other thread's collective: counted already, or about to be (the next number) */
        uint64_t seq = atomic_load_explicit(&wr->st->coll_seq, memory_order_acquire) + (was == IN_COLL_ENTERING);
        return ddp_error(DDP_ERR_INVALID,
                         "rank %d called %s while another of its threads was inside collective #%llu: a rank makes "
                         "its collectives one at a time, in the same order as every other rank",
                         wr->rank, name, (unsigned long long)seq);
    }
    atomic_store_explicit(&wr->st->coll_start_ns, clock_now_ns(), memory_order_relaxed);
    if (wr->w->cfg.coll_cpu)
        atomic_store_explicit(&wr->st->coll_cpu_start_ns, clock_thread_cpu_ns(), memory_order_relaxed);
    world_copy_label(wr->st->coll, name);
    atomic_fetch_add_explicit(&wr->st->coll_seq, 1, memory_order_relaxed);
    atomic_store_explicit(&wr->st->in_coll, IN_COLL_COUNTED, memory_order_release);
    atomic_fetch_add_explicit(&wr->st->progress, 1, memory_order_relaxed);
    return DDP_OK;
}

void world_leave_coll(world_rank *wr)
{
    atomic_fetch_add_explicit(&wr->st->coll_ns,
                              clock_now_ns() - atomic_load_explicit(&wr->st->coll_start_ns, memory_order_relaxed),
                              memory_order_relaxed);
    if (wr->w->cfg.coll_cpu)
        atomic_fetch_add_explicit(&wr->st->coll_cpu_ns,
                                  clock_thread_cpu_ns() - atomic_load_explicit(&wr->st->coll_cpu_start_ns,
                                                                               memory_order_relaxed),
                                  memory_order_relaxed);
    atomic_store_explicit(&wr->st->in_coll, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&wr->st->progress, 1, memory_order_relaxed);
}

/* Seeded delay before arriving at a barrier (chaos): changes who arrives last, never what is computed. */
static void jitter(world_rank *wr)
{
    if (wr->w->cfg.jitter_max_us)
        clock_sleep_us(rng_below(wr->jitter_key, wr->jitter_count++, wr->w->cfg.jitter_max_us + 1));
}

ddp_status world_barrier(world_rank *wr)
{
    meeting();
    world *w = wr->w;
    if (w->remote) {
        uint64_t desc[WORLD_DESC_WORDS] = {WORLD_REMOTE_BARRIER, 0, 0, 0, 0};
        memcpy(w->remote->desc, desc, sizeof desc);
        w->remote->first = 1;
        w->remote->off = w->remote->len = 0;
        return world_remote_call(wr);
    }
    jitter(wr);
    atomic_fetch_add_explicit(&wr->st->progress, 1, memory_order_relaxed);
    if (wr->forced && wr->next_forced < wr->nforced) {
        atomic_store_explicit(&wr->st->wait_kind, WAIT_OTHER, memory_order_release);
        /* Replay: arrive only when exactly as many ranks are in as arrived before us when recorded. */
        uint32_t want = wr->forced[wr->next_forced++];
        while (atomic_load_explicit(&w->hdr->barrier.arrived, memory_order_acquire) != want) {
            if (atomic_load_explicit(&w->hdr->abort_word, memory_order_relaxed))
                return ddp_error(DDP_ERR_ABORTED, "world aborted while waiting for a replayed arrival");
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
    uint32_t pos = 0;
    /* The generation cannot move before this rank arrives: it is the one sync_barrier_wait_pos waits on. */
    atomic_store_explicit(&wr->st->wait_gen, atomic_load(&w->hdr->barrier.generation), memory_order_relaxed);
    atomic_store_explicit(&wr->st->wait_kind, WAIT_BARRIER, memory_order_release);
    ddp_status s = sync_barrier_wait_pos(&w->hdr->barrier, &w->hdr->abort_word, &pos);
    atomic_store_explicit(&wr->st->wait_kind, WAIT_NONE, memory_order_release);
    if (wr->recording) {
        if (wr->nrec == wr->rec_cap) {
            size_t cap = wr->rec_cap ? wr->rec_cap * 2 : 256;
            uint32_t *n = realloc(wr->rec, cap * sizeof *n);
            if (n) {
                wr->rec = n;
                wr->rec_cap = cap;
            }
        }
        if (wr->nrec < wr->rec_cap)
            wr->rec[wr->nrec++] = pos;
        else
            wr->rec_lost = 1;
    }
    atomic_fetch_add_explicit(&wr->st->progress, 1, memory_order_relaxed);
    return s;
}

uint32_t world_flag_next(world_rank *wr)
{
    return ++wr->flag_ticket;
}

void world_flag_set(world_rank *wr, uint32_t value)
{
    /* In an MPI world no peer reads this flag: world_flag_wait refuses to wait on another process's. */
    atomic_store_explicit(&wr->st->flag, value, memory_order_release);
    sync_wake_all(&wr->st->flag);
}

ddp_status world_wait_change(world_rank *wr, _Atomic uint32_t *word, uint32_t old)
{
    return sync_wait_change(word, old, &wr->w->hdr->abort_word);
}

ddp_status world_flag_wait(world_rank *wr, int r, uint32_t value)
{
    if (wr->w->remote && r != wr->rank)
        return ddp_error(DDP_ERR_INVALID, "rank %d waits on rank %d's flag, which is in another MPI process: an MPI "
                                          "world hands off through its collectives only", wr->rank, r);
    _Atomic uint32_t *f = &wr->w->ranks[r].flag;
    meeting();
    atomic_fetch_add_explicit(&wr->st->progress, 1, memory_order_relaxed);
    atomic_store_explicit(&wr->st->wait_rank, r, memory_order_relaxed);
    atomic_store_explicit(&wr->st->wait_value, value, memory_order_relaxed);
    atomic_store_explicit(&wr->st->wait_kind, WAIT_FLAG, memory_order_release);
    ddp_status s = DDP_OK;
    for (;;) {
        uint32_t v = atomic_load_explicit(f, memory_order_acquire);
        if ((int32_t)(v - value) >= 0) /* reached or passed (counters may wrap) */
            break;
        s = sync_wait_change(f, v, &wr->w->hdr->abort_word);
        if (s != DDP_OK)
            break;
    }
    atomic_store_explicit(&wr->st->wait_kind, WAIT_NONE, memory_order_release);
    return s;
}

/* ---- the rank's line to its parent in an MPI world ---- */

ddp_status world_remote_call(world_rank *wr)
{
    remote_area *ra = wr->w->remote;
    jitter(wr);
    uint32_t t = atomic_load_explicit(&ra->req, memory_order_relaxed) + 1;
    atomic_fetch_add_explicit(&wr->st->progress, 1, memory_order_relaxed);
    atomic_store_explicit(&wr->st->wait_kind, WAIT_OTHER, memory_order_release);
    atomic_store_explicit(&ra->req, t, memory_order_release);
    atomic_fetch_add_explicit(&ra->kick, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&ra->parent_asleep, memory_order_seq_cst))
        sync_wake_all(&ra->kick);
    ddp_status s = DDP_OK;
    for (;;) {
        uint32_t d = atomic_load_explicit(&ra->done, memory_order_acquire);
        if (d == t)
            break;
        s = sync_wait_change(&ra->done, d, &wr->w->hdr->abort_word);
        if (s != DDP_OK)
            break;
    }
    atomic_store_explicit(&wr->st->wait_kind, WAIT_NONE, memory_order_release);
    atomic_fetch_add_explicit(&wr->st->progress, 1, memory_order_relaxed);
    if (s == DDP_OK && ra->status != DDP_OK)
        return ddp_error((ddp_status)ra->status, "%s", ra->error);
    return s;
}

/* Copy len bytes into the log's ring at byte position pos (mod its size). */
static void log_put(remote_area *ra, uint64_t pos, const void *p, size_t len)
{
    size_t at = (size_t)(pos % REMOTE_LOG_BYTES), first = REMOTE_LOG_BYTES - at < len ? REMOTE_LOG_BYTES - at : len;
    memcpy(ra->log + at, p, first);
    memcpy(ra->log, (const unsigned char *)p + first, len - first);
}

void world_publish(world_rank *wr, const void *p, size_t len)
{
    remote_area *ra = wr->w->remote;
    if (!ra || len == 0)
        return;
    size_t off = (size_t)((const unsigned char *)p - wr->w->user);
    /* Pieces that fit the log a quarter at a time, each entry a header and its bytes, 8-byte aligned. */
    const size_t most = REMOTE_LOG_BYTES / 4;
    for (size_t done = 0; done < len;) {
        size_t piece = len - done < most ? len - done : most;
        uint64_t hdr[2] = {off + done, piece}, size = sizeof hdr + ALIGN8(piece);
        uint64_t head = atomic_load_explicit(&ra->log_head, memory_order_relaxed);
        for (;;) { /* room: the parent takes entries at every pass */
            uint32_t word = atomic_load_explicit(&ra->log_word, memory_order_acquire);
            if (head + size - atomic_load_explicit(&ra->log_tail, memory_order_acquire) <= REMOTE_LOG_BYTES)
                break;
            atomic_fetch_add_explicit(&ra->kick, 1, memory_order_seq_cst);
            sync_wake_all(&ra->kick);
            if (sync_wait_change(&ra->log_word, word, &wr->w->hdr->abort_word) != DDP_OK)
                return; /* stopped: nobody reads it now */
        }
        log_put(ra, head, hdr, sizeof hdr);
        log_put(ra, head + sizeof hdr, (const unsigned char *)p + done, piece);
        atomic_store_explicit(&ra->log_head, head + size, memory_order_release);
        done += piece;
    }
    atomic_fetch_add_explicit(&ra->kick, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&ra->parent_asleep, memory_order_seq_cst))
        sync_wake_all(&ra->kick);
}

void world_record_arrivals(world_rank *wr, int on)
{
    wr->recording = on;
    wr->nrec = 0;
}

size_t world_take_arrivals(world_rank *wr, const uint32_t **pos, int *lost)
{
    size_t n = wr->nrec;
    *pos = wr->rec;
    *lost = wr->rec_lost;
    wr->nrec = 0;
    return n;
}

void world_force_arrivals(world_rank *wr, const uint32_t *pos, size_t n)
{
    wr->forced = pos;
    wr->nforced = n;
    wr->next_forced = 0;
}

/* ---- the supervisor ---- */

static void reset_segment(world *w)
{
    atomic_store(&w->hdr->abort_word, 0);
    sync_barrier_init(&w->hdr->barrier, (uint32_t)w->cfg.nranks);
    memset(w->ranks, 0, (size_t)w->cfg.nranks * sizeof *w->ranks);
    memset(w->outcomes, 0, (size_t)w->cfg.nranks * sizeof *w->outcomes);
    for (int r = 0; r < w->cfg.nranks; r++)
        atomic_store(&w->ranks[r].op_index, -1);
    w->failed_rank = -1;
    w->interrupt_signal = 0;
    w->stuck_for_s = 0;
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    for (int r = 0; r < w->cfg.nranks; r++)
        memcpy(w->outcomes[r].host, host, sizeof host);
    if (w->remote) {
        remote_area *ra = w->remote;
        atomic_store(&ra->req, 0);
        atomic_store(&ra->done, 0);
        atomic_store(&ra->kick, 0);
        atomic_store(&ra->parent_asleep, 0);
        atomic_store(&ra->log_head, 0);
        atomic_store(&ra->log_tail, 0);
        atomic_store(&ra->log_word, 0);
    }
}

/* Record how a reaped rank ended. `stopping`: the supervisor sent it SIGKILL. */
void world_decode_exit(world_rank_outcome *o, int wstatus, int stopping)
{
    if (WIFEXITED(wstatus)) {
        o->exit_code = WEXITSTATUS(wstatus);
        o->fate = o->exit_code == 0 ? WORLD_FATE_OK : WORLD_FATE_FAILED;
        if (stopping && o->exit_code == RANK_EXIT_ABORTED)
            o->fate = WORLD_FATE_STOPPED; /* it saw the abort word before the SIGKILL landed */
    } else if (WIFSIGNALED(wstatus)) {
        o->signal = WTERMSIG(wstatus);
        o->fate = (stopping && o->signal == SIGKILL) ? WORLD_FATE_STOPPED : WORLD_FATE_SIGNALED;
    } else {
        o->fate = WORLD_FATE_FAILED;
    }
}

/* SIGKILL every rank still running and reap it; returns once none is left. */
static void stop_all(world *w, int *live)
{
    for (int r = 0; r < w->cfg.nranks; r++)
        if (w->outcomes[r].pid > 0 && w->outcomes[r].fate == WORLD_FATE_NOT_STARTED)
            kill(w->outcomes[r].pid, SIGKILL);
    /* Then tell waiters to give up, for a world whose ranks a signal cannot reach. */
    atomic_store(&w->hdr->abort_word, 1);
    for (int r = 0; r < w->cfg.nranks; r++) {
        world_rank_outcome *o = &w->outcomes[r];
        if (o->pid <= 0 || o->fate != WORLD_FATE_NOT_STARTED)
            continue;
        int ws;
        struct rusage ru;
        memset(&ru, 0, sizeof ru);
        while (wait4(o->pid, &ws, 0, &ru) < 0 && errno == EINTR) {
        }
        o->maxrss_kib = ru.ru_maxrss;
        world_decode_exit(o, ws, 1);
        (*live)--;
    }
}

static void collect_states(world *w)
{
    for (int r = 0; r < w->cfg.nranks; r++) {
        world_rank_outcome *o = &w->outcomes[r];
        rank_state *st = &w->ranks[r];
        o->op_index = atomic_load(&st->op_index);
        memcpy(o->op_label, st->op_label, WORLD_LABEL_LEN);
        o->op_label[WORLD_LABEL_LEN - 1] = '\0';
        o->coll_seq = atomic_load(&st->coll_seq);
        o->coll_ns = atomic_load(&st->coll_ns);
        o->coll_cpu_ns = atomic_load(&st->coll_cpu_ns);
        if (atomic_load(&st->in_coll)) {
            memcpy(o->coll, st->coll, WORLD_LABEL_LEN);
            o->coll[WORLD_LABEL_LEN - 1] = '\0';
        }
        memcpy(o->error, st->error, WORLD_ERROR_LEN);
        o->error[WORLD_ERROR_LEN - 1] = '\0';
    }
}

/* Rank r waits for something that has not happened: a barrier not yet released, a flag not yet reached. */
static int still_waiting(const world *w, int r)
{
    const rank_state *st = &w->ranks[r];
    switch (atomic_load_explicit(&st->wait_kind, memory_order_acquire)) {
    case WAIT_BARRIER:
        return atomic_load(&w->hdr->barrier.generation) == atomic_load(&st->wait_gen);
    case WAIT_FLAG: {
        int32_t owner = atomic_load(&st->wait_rank);
        uint32_t v = atomic_load(&w->ranks[owner].flag), want = atomic_load(&st->wait_value);
        return (int32_t)(v - want) < 0;
    }
    default: return 0; /* running, or a wait this rule cannot judge */
    }
}

/*
 * A deadlock the supervisor can prove: some rank has finished (it will
 * never arrive at a barrier again, and every collective starts with one),
 * and every rank still running waits in the world for a barrier that has
 * not been released or a flag not yet set, with no progress anywhere for
 * 200 ms. None of them can ever be released, so there is no point
 * in waiting for the watchdog, which stays for hangs inside an
 * implementation's own code. (A rank that was released but has not run
 * yet, on a loaded machine, is not waiting by this rule; nor is one whose
 * main has returned and which is on its way out, perhaps with an error
 * more telling than the deadlock its other threads leave: it is reaped
 * first.)
 */
#define DEADLOCK_QUIET_S 0.2
static int deadlocked(const world *w, double quiet_s)
{
    int finished = 0, blocked = 1;
    for (int r = 0; r < w->cfg.nranks; r++) {
        const world_rank_outcome *o = &w->outcomes[r];
        if (o->fate == WORLD_FATE_OK)
            finished++;
        else if (o->fate == WORLD_FATE_NOT_STARTED)
            blocked &= !atomic_load(&w->ranks[r].exiting) && still_waiting(w, r);
    }
    return finished > 0 && blocked && quiet_s >= DEADLOCK_QUIET_S;
}

void world_deadlock_text(const int *finished, int n, char *buf, size_t len)
{
    char who[256] = "";
    size_t used = 0;
    int k = 0, total = 0;
    for (int r = 0; r < n; r++)
        total += finished[r] != 0;
    for (int r = 0; r < n && used + 16 < sizeof who; r++) {
        if (!finished[r])
            continue;
        k++;
        int c = snprintf(who + used, sizeof who - used, "%s%d", k == 1 ? "" : k == total ? " and " : ", ", r);
        if (c < 0)
            break;
        used += (size_t)c;
    }
    snprintf(buf, len, "deadlock: rank%s %s %s finished, and every other rank waits in a collective that needs %s",
             total == 1 ? "" : "s", who, total == 1 ? "has" : "have", total == 1 ? "it" : "them");
}

/*
 * The supervisor's loop: a tick every 50 ms, or every millisecond while the
 * caller's poll has work (the ranks stream records that a full ring would
 * make them wait for) and for 64 ticks after; the children are reaped when
 * SIGCHLD says one ended, and looked at every 50 ms in any case.
 */
enum { TICK_SLOW_MS = 50, TICK_FAST_MS = 1, FAST_TICKS_AFTER_WORK = 64 };

static ddp_status supervise(world *w, const sigset_t *watched, int live)
{
    uint64_t last_sum = UINT64_MAX;
    double last_change = clock_now_s(), last_scan = 0;
    int hot = 0;
    for (;;) {
        if (live == 0)
            break;
        long ms = hot ? TICK_FAST_MS : TICK_SLOW_MS;
        struct timespec tick = {.tv_sec = 0, .tv_nsec = ms * 1000 * 1000};
        int sig = sigtimedwait(watched, NULL, &tick);
        if (sig == SIGINT || sig == SIGTERM) {
            w->interrupt_signal = sig;
            stop_all(w, &live);
            return ddp_error(DDP_ERR_INTERRUPTED, "interrupted by %s", strsignal(sig));
        }
        double t = clock_now_s();
        if (sig == SIGCHLD || t - last_scan >= TICK_SLOW_MS * 1e-3) {
            last_scan = t;
            for (int r = 0; r < w->cfg.nranks; r++) {
                world_rank_outcome *o = &w->outcomes[r];
                int ws;
                struct rusage ru;
                if (o->fate != WORLD_FATE_NOT_STARTED || wait4(o->pid, &ws, WNOHANG, &ru) != o->pid)
                    continue;
                o->maxrss_kib = ru.ru_maxrss; /* this rank's own peak, whatever else the caller waited for */
                world_decode_exit(o, ws, 0);
                live--;
                if (o->fate != WORLD_FATE_OK && w->failed_rank < 0)
                    w->failed_rank = r;
            }
        }
        if (w->failed_rank >= 0) {
            stop_all(w, &live);
            const world_rank_outcome *o = &w->outcomes[w->failed_rank];
            if (o->fate == WORLD_FATE_SIGNALED)
                return ddp_error(DDP_ERR_RANK_FAILED, "rank %d was killed by signal %d (%s)",
                                 w->failed_rank, o->signal, strsignal(o->signal));
            return ddp_error(DDP_ERR_RANK_FAILED, "rank %d failed (exit code %d)", w->failed_rank,
                             o->exit_code);
        }
        if (w->cfg.poll && w->cfg.poll(w->cfg.poll_arg))
            hot = FAST_TICKS_AFTER_WORK;
        else if (hot)
            hot--;
        uint64_t sum = 0;
        for (int r = 0; r < w->cfg.nranks; r++)
            sum += atomic_load_explicit(&w->ranks[r].progress, memory_order_relaxed);
        if (sum != last_sum) {
            last_sum = sum;
            last_change = t;
        }
        if (live > 0 && deadlocked(w, t - last_change)) {
            int finished[WORLD_MAX_RANKS];
            for (int r = 0; r < w->cfg.nranks; r++)
                finished[r] = w->outcomes[r].fate == WORLD_FATE_OK;
            char text[WORLD_ERROR_LEN];
            world_deadlock_text(finished, w->cfg.nranks, text, sizeof text);
            stop_all(w, &live);
            return ddp_error(DDP_ERR_DEADLOCK, "%s", text);
        }
        if (w->cfg.timeout_s > 0 && t - last_change > w->cfg.timeout_s) {
            w->stuck_for_s = t - last_change;
            stop_all(w, &live);
            return ddp_error(DDP_ERR_TIMEOUT, "no rank made progress for %.1f s (--timeout %g)",
                             w->stuck_for_s, w->cfg.timeout_s);
        }
    }
    return DDP_OK;
}

ddp_status world_run(world *w, world_rank_main rank_main, void *arg)
{
    reset_segment(w);
    sigset_t watched, saved;
    sigemptyset(&watched);
    sigaddset(&watched, SIGCHLD);
    sigaddset(&watched, SIGINT);
    sigaddset(&watched, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &watched, &saved);
    /* Buffered output would be duplicated into every child. */
    fflush(NULL);

    pid_t parent = getpid();
    int live = 0;
    ddp_status s = DDP_OK;
    if (w->remote) { /* an MPI world: this process forks its one rank and supervises it with its peers */
        pid_t pid = fork();
        if (pid == 0)
            rank_process(w, w->local_rank, rank_main, arg, parent);
        if (pid < 0)
            s = ddp_error(DDP_ERR_SYSTEM, "fork of rank %d: %s", w->local_rank, strerror(errno));
        else
            s = world_mpi_supervise(w, &watched, pid);
        collect_states(w);
        pthread_sigmask(SIG_SETMASK, &saved, NULL);
        w->last_status = s;
        return s;
    }
    for (int r = 0; r < w->cfg.nranks; r++) {
        pid_t pid = fork();
        if (pid == 0)
            rank_process(w, r, rank_main, arg, parent);
        if (pid < 0) {
            s = ddp_error(DDP_ERR_SYSTEM, "fork of rank %d: %s", r, strerror(errno));
            stop_all(w, &live);
            break;
        }
        w->outcomes[r].pid = pid;
        live++;
    }
    if (s == DDP_OK)
        s = supervise(w, &watched, live);
    collect_states(w);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    w->last_status = s;
    return s;
}

static const char *fate_text(const world_rank_outcome *o, char *buf, size_t len)
{
    switch (o->fate) {
    case WORLD_FATE_NOT_STARTED: return "never started";
    case WORLD_FATE_OK: return "finished";
    case WORLD_FATE_FAILED:
        if (o->error[0])
            snprintf(buf, len, "failed: %s", o->error);
        else
            snprintf(buf, len, "exited with code %d", o->exit_code);
        return buf;
    case WORLD_FATE_SIGNALED:
        snprintf(buf, len, "killed by signal %d (%s)", o->signal, strsignal(o->signal));
        return buf;
    case WORLD_FATE_STOPPED: return "stopped by the supervisor";
    }
    return "?";
}

void world_describe(const world *w, char *buf, size_t len)
{
    size_t used = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    for (int r = 0; r < w->cfg.nranks && used + 1 < len; r++) {
        const world_rank_outcome *o = &w->outcomes[r];
        char fate[WORLD_ERROR_LEN + 32], where[128];
        if (o->op_index < 0)
            snprintf(where, sizeof where, "before its first op");
        else
            snprintf(where, sizeof where, "in op %d (%s)", o->op_index, o->op_label);
        char coll[96] = "";
        if (o->coll[0])
            snprintf(coll, sizeof coll, ", inside %s #%llu", o->coll, (unsigned long long)o->coll_seq);
        else if (o->fate != WORLD_FATE_OK)
            snprintf(coll, sizeof coll, ", not in a collective");
        char host[80] = "";
        if (w->mpi)
            snprintf(host, sizeof host, " on %s", o->host);
        int n = snprintf(buf + used, len - used, "rank %d (pid %ld%s): %s, %s%s%s\n", r, (long)o->pid, host,
                         fate_text(o, fate, sizeof fate), where, coll,
                         (w->last_status == DDP_ERR_TIMEOUT && o->fate == WORLD_FATE_STOPPED) ? " [stuck]"
                                                                                             : "");
        if (n < 0)
            break;
        used += (size_t)n;
    }
    if (used >= len)
        buf[len - 1] = '\0';
}
