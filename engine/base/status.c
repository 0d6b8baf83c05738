/*
 * status.c - status names and the per-thread last-error buffer.
 */
#include "status.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[512];

const char *ddp_status_str(ddp_status s)
{
    switch (s) {
    case DDP_OK: return "ok";
    case DDP_ERR_INVALID: return "invalid argument";
    case DDP_ERR_NOMEM: return "out of memory";
    case DDP_ERR_SYSTEM: return "system error";
    case DDP_ERR_ABORTED: return "aborted";
    case DDP_ERR_TIMEOUT: return "timeout";
    case DDP_ERR_RANK_FAILED: return "rank failed";
    case DDP_ERR_INTERRUPTED: return "interrupted";
    case DDP_ERR_MISMATCH: return "mismatch";
    case DDP_ERR_BACKEND: return "backend error";
    case DDP_ERR_DEADLOCK: return "deadlock";
    }
    return "unknown status";
}

ddp_status ddp_error_at(ddp_status s, const char *file, int line, const char *fmt, ...)
{
    /* Keep only the base name: the full build path is noise in a report. */
    const char *slash = strrchr(file, '/');
    int n = snprintf(last_error, sizeof last_error, "%s:%d: ", slash ? slash + 1 : file, line);
    if (n < 0 || (size_t)n >= sizeof last_error)
        return s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
    va_end(ap);
    /* A failed allocation says so, whatever its message names ("model 'mlp:...': 6296064 parameters"). */
    static const char oom[] = "out of memory: ";
    const size_t o = sizeof oom - 1, room = sizeof last_error - (size_t)n - 1;
    if (s == DDP_ERR_NOMEM && !strstr(last_error + n, "out of memory") && room > o) {
        size_t keep = strlen(last_error + n);
        if (keep > room - o)
            keep = room - o;
        memmove(last_error + n + o, last_error + n, keep);
        memcpy(last_error + n, oom, o);
        last_error[(size_t)n + o + keep] = '\0';
    }
    return s;
}

const char *ddp_error_last(void)
{
    return last_error;
}

void ddp_error_clear(void)
{
    last_error[0] = '\0';
}

const char *ddp_error_without_location(const char *msg)
{
    /* "file.c:123: text": a base name of letters, digits, '_', '-' and '.', a colon, a line number, ": " */
    const char *p = msg;
    while (isalnum((unsigned char)*p) || *p == '_' || *p == '-' || *p == '.')
        p++;
    if (p == msg || *p != ':' || !isdigit((unsigned char)p[1]))
        return msg;
    p++;
    while (isdigit((unsigned char)*p))
        p++;
    return p[0] == ':' && p[1] == ' ' ? p + 2 : msg;
}

const char *ddp_error_text(void)
{
    return ddp_error_without_location(last_error);
}

ddp_status ddp_error_prefix_at(ddp_status s, const char *file, int line, const char *prefix)
{
    char text[sizeof last_error];
    snprintf(text, sizeof text, "%s", ddp_error_text());
    return ddp_error_at(s, file, line, "%s: %s", prefix, text);
}

void ddp_text_position(const char *text, const char *at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (const char *c = text; c < at; c++) {
        if (*c == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}
