/*
 * file.c - reading a whole file (file.h).
 */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *file_kind(mode_t m)
{
    return S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
           : S_ISSOCK(m) ? "a socket" : S_ISDIR(m) ? "a directory" : "not a regular file";
}

FILE *file_open_regular(const char *path, ddp_status *status)
{
    /* O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *status = ddp_error(DDP_ERR_INVALID, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        *status = ddp_error(DDP_ERR_INVALID, "cannot stat %s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        *status = ddp_error(DDP_ERR_INVALID, "%s is %s, not a regular file", path, file_kind(st.st_mode));
        close(fd);
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    FILE *f = fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        *status = ddp_error(DDP_ERR_INVALID, "cannot open %s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    *status = DDP_OK;
    return f;
}

static ddp_status read_stream(FILE *f, const char *path, size_t max, char **out, size_t *len);

ddp_status file_read_all(const char *path, size_t max, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return ddp_error(DDP_ERR_INVALID, "%s is a directory", path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return ddp_error(DDP_ERR_SYSTEM, "cannot open %s: %s", path, strerror(errno));
    return read_stream(f, path, max, out, len);
}

ddp_status file_read_regular(const char *path, size_t max, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    ddp_status s;
    FILE *f = file_open_regular(path, &s);
    return f ? read_stream(f, path, max, out, len) : s;
}

/* All of f (closed here) into *out, as file_read_all says. */
static ddp_status read_stream(FILE *f, const char *path, size_t max, char **out, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    ddp_status s = buf ? DDP_OK : ddp_error(DDP_ERR_NOMEM, "reading %s", path);
    while (s == DDP_OK) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        if (n > max) {
            s = ddp_error(DDP_ERR_INVALID, "%s is larger than %zu bytes", path, max);
            break;
        }
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) {
            s = ddp_error(DDP_ERR_NOMEM, "reading %s", path);
            break;
        }
        buf = nb;
        cap *= 2;
    }
    if (s == DDP_OK && ferror(f))
        s = ddp_error(DDP_ERR_SYSTEM, "cannot read %s", path);
    if (s == DDP_OK && n > max)
        s = ddp_error(DDP_ERR_INVALID, "%s is larger than %zu bytes", path, max);
    fclose(f);
    if (s != DDP_OK) {
        free(buf);
        return s;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return DDP_OK;
}

ddp_status file_close_written(FILE *f, const char *path)
{
    /* A write that failed earlier is tried again by the flush (stdio keeps what it could not write), which then
     * fails for the same reason; errno is read before anything else can change it. */
    errno = 0;
    int e = fflush(f) != 0 ? errno : 0;
    if (!e && ferror(f))
        e = errno ? errno : EIO;
    errno = 0;
    if (fclose(f) != 0 && !e)
        e = errno ? errno : EIO;
    if (e)
        return ddp_error(DDP_ERR_SYSTEM, "cannot write %s: %s", path, strerror(e));
    return DDP_OK;
}
