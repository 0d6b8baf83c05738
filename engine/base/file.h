/*
 * file.h - reading a whole file into memory: the schedule files, .npy
 * arrays and manifests ddpsim reads are small and read once.
 */
#ifndef DDPSIM_FILE_H
#define DDPSIM_FILE_H

#include <stddef.h>

#include "status.h"

/*
 * All of path, at most max bytes, into a malloc'd buffer with a NUL after
 * the last byte (so text can be used as a string; binary data has its length
 * in *len). DDP_ERR_SYSTEM when it cannot be opened or read (with errno's
 * text), DDP_ERR_INVALID when it is a directory or larger than max,
 * DDP_ERR_NOMEM. The caller frees *out.
 */
ddp_status file_read_all(const char *path, size_t max, char **out, size_t *len);

#endif
