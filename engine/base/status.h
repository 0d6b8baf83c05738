/*
 * status.h - the status codes every engine and models call returns, and the
 * per-thread "last error" message that carries the detail (file:line and why).
 *
 * Library code never prints and never exits: it returns a ddp_status and, on
 * failure, leaves a one-line explanation retrievable with ddp_error_last().
 * Only sim/ turns that into a message on stderr and an exit code.
 * This is not a logging facility.
 */
#ifndef DDPSIM_STATUS_H
#define DDPSIM_STATUS_H

#include <stddef.h>

typedef enum ddp_status {
    DDP_OK = 0,
    DDP_ERR_INVALID,     /* a bad argument: out of range, mismatched sizes, unknown name */
    DDP_ERR_NOMEM,       /* an allocation failed */
    DDP_ERR_SYSTEM,      /* a system call failed (errno text in the message) */
    DDP_ERR_ABORTED,     /* the world was aborted while this rank waited (a peer died) */
    DDP_ERR_TIMEOUT,     /* a wait or the watchdog ran out of time */
    DDP_ERR_RANK_FAILED, /* a rank process exited non-zero or was killed */
    DDP_ERR_INTERRUPTED, /* SIGINT or SIGTERM reached the supervisor */
    DDP_ERR_MISMATCH,    /* a self-check found a wrong value */
    DDP_ERR_BACKEND,     /* CUDA/NCCL or another backend call failed */
    DDP_ERR_DEADLOCK,    /* every rank still running waits on one that has finished */
} ddp_status;

/* A short fixed name for a status ("invalid argument", ...); never NULL. */
const char *ddp_status_str(ddp_status s);

/*
 * Record why the current call fails, prefixed with "file:line: ", and return
 * `s` so a failure path reads `return ddp_error(DDP_ERR_INVALID, ...)`.
 */
ddp_status ddp_error_at(ddp_status s, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define ddp_error(s, ...) ddp_error_at((s), __FILE__, __LINE__, __VA_ARGS__)

/*
 * Put "prefix: " in front of the current message's text (keeping the
 * file:line of where it is called) and return s: a caller adds context
 * ("--inputs DIR") to an error from below.
 */
ddp_status ddp_error_prefix_at(ddp_status s, const char *file, int line, const char *prefix);
#define ddp_error_prefix(s, prefix) ddp_error_prefix_at((s), __FILE__, __LINE__, (prefix))

/* The text of the current message without its "file:line: " ("" if none). */
const char *ddp_error_text(void);

/* msg past a leading "name.c:123: " (where a ddp_error was raised), or msg itself when it has none. */
const char *ddp_error_without_location(const char *msg);

/* The message of the most recent ddp_error() in this thread ("" if none). */
const char *ddp_error_last(void);

/* Where `at` lies in text, from 1: for parsers' messages ("line L, column C: ..."). */
void ddp_text_position(const char *text, const char *at, int *line, int *col);

/* Forget the last error (tests use it to check that a call set one). */
void ddp_error_clear(void);

/*
 * Propagate a failure: evaluate `expr` once and return its status from the
 * enclosing function when it is not DDP_OK. The first failure keeps its
 * message, so the report names the place where things went wrong.
 */
#define DDP_CHECK(expr)                                                     \
    do {                                                                    \
        ddp_status ddp_check_s_ = (expr);                                   \
        if (ddp_check_s_ != DDP_OK)                                         \
            return ddp_check_s_;                                            \
    } while (0)

#endif
