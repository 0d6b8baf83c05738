/*
 * file.h - reading a whole file into memory (the schedule files, .npy
 * arrays and manifests ddpsim reads are small and read once), and finishing
 * a written one with the reason its writes failed.
 */
#ifndef DDPSIM_FILE_H
#define DDPSIM_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "status.h"

/*
 * All of path, at most max bytes, into a malloc'd buffer with a NUL after
 * the last byte (so text can be used as a string; binary data has its length
 * in *len). DDP_ERR_SYSTEM when it cannot be opened or read (with errno's
 * text), DDP_ERR_INVALID when it is a directory or larger than max,
 * DDP_ERR_NOMEM. The caller frees *out.
 */
ddp_status file_read_all(const char *path, size_t max, char **out, size_t *len);

/*
 * The same for a file that must be a regular file (a recording's or a dump's .npy files and manifests): a FIFO,
 * a device or a socket there is refused with DDP_ERR_INVALID naming what it is, without blocking on it (a FIFO
 * nobody writes would hang the read). A schedule file goes through file_read_all: a pipe is a fair schedule.
 * Every failure is DDP_ERR_INVALID here: a file its reader cannot use is bad input.
 */
ddp_status file_read_regular(const char *path, size_t max, char **out, size_t *len);

/* path opened for reading as a regular file (the same refusals), as a stdio stream: NULL and the error set. */
FILE *file_open_regular(const char *path, ddp_status *status);

/*
 * Closes f, written to path: DDP_OK when every byte reached the file; otherwise DDP_ERR_SYSTEM, "cannot write
 * PATH: REASON", the reason being the failed write's (ENOSPC on a full file system, EFBIG over `ulimit -f`).
 * f is closed either way.
 */
ddp_status file_close_written(FILE *f, const char *path);

#endif
