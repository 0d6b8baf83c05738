/*
 * units.h - parsing of the numbers users type: sizes with K/M/G suffixes,
 * bounded integers, seconds. Every parser rejects trailing junk, signs where
 * they make no sense and overflow, and fills a message for the user.
 */
#ifndef DDPSIM_UNITS_H
#define DDPSIM_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* "4096", "64K", "16M", "1G" (powers of 1024; an optional trailing B/iB). 0 on success, -1 on error. */
int units_parse_size(const char *s, uint64_t *out, char *msg, size_t msglen);

/* A decimal unsigned 64-bit integer (a seed). */
int units_parse_u64(const char *s, uint64_t *out, char *msg, size_t msglen);

/* A decimal integer in [min, max]. */
int units_parse_long(const char *s, long min, long max, long *out, char *msg, size_t msglen);

/* A non-negative finite number of seconds ("0.5", "60"). */
int units_parse_seconds(const char *s, double *out, char *msg, size_t msglen);

/* "1.0 MiB", "64 KiB", "12 B": a size for people. */
const char *units_format_size(uint64_t bytes, char *buf, size_t len);

#endif
