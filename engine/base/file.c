/*
 * file.c - reading a whole file (file.h).
 */
#include "file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
