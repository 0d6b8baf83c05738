/*
 * units.c - number parsing for the command line (units.h).
 */
#include "units.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int units_parse_size(const char *s, uint64_t *out, char *msg, size_t msglen)
{
    if (!s || !isdigit((unsigned char)s[0])) {
        snprintf(msg, msglen, "'%s' is not a size (examples: 4096, 64K, 16M, 1G)", s ? s : "");
        return -1;
    }
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE) {
        snprintf(msg, msglen, "size '%s' is too large", s);
        return -1;
    }
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && (*end == 'i' || *end == 'I'))
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0') {
        snprintf(msg, msglen, "'%s' is not a size (examples: 4096, 64K, 16M, 1G)", s);
        return -1;
    }
    if (shift && v > (UINT64_MAX >> shift)) {
        snprintf(msg, msglen, "size '%s' is too large", s);
        return -1;
    }
    *out = (uint64_t)v << shift;
    return 0;
}

int units_parse_u64(const char *s, uint64_t *out, char *msg, size_t msglen)
{
    if (!s || !isdigit((unsigned char)s[0])) {
        snprintf(msg, msglen, "'%s' is not a non-negative integer", s ? s : "");
        return -1;
    }
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0') {
        snprintf(msg, msglen, "'%s' is not a non-negative integer", s);
        return -1;
    }
    if (errno == ERANGE) {
        snprintf(msg, msglen, "'%s' does not fit in 64 bits", s);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

int units_parse_long(const char *s, long min, long max, long *out, char *msg, size_t msglen)
{
    errno = 0;
    char *end;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || end == s || *end != '\0' || isspace((unsigned char)s[0])) {
        snprintf(msg, msglen, "'%s' is not an integer", s ? s : "");
        return -1;
    }
    if (errno == ERANGE || v < min || v > max) {
        snprintf(msg, msglen, "%s is out of range %ld..%ld", s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

int units_parse_seconds(const char *s, double *out, char *msg, size_t msglen)
{
    errno = 0;
    char *end;
    double v = s ? strtod(s, &end) : 0;
    if (!s || end == s || *end != '\0' || isspace((unsigned char)s[0])) {
        snprintf(msg, msglen, "'%s' is not a number of seconds", s ? s : "");
        return -1;
    }
    if (errno == ERANGE || !isfinite(v) || v < 0 || v > 1e7) {
        snprintf(msg, msglen, "%s seconds is out of range 0..10000000", s);
        return -1;
    }
    *out = v;
    return 0;
}

const char *units_format_size(uint64_t bytes, char *buf, size_t len)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double v = (double)bytes;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, len, "%.*f %s", v == floor(v) ? 0 : 1, v, unit[u]);
    return buf;
}
