/*
 * machine.h - what the machine offers, read before a run so that a run too
 * large for it is refused up front instead of failing in every rank.
 */
#ifndef DDPSIM_MACHINE_H
#define DDPSIM_MACHINE_H

#include <stddef.h>

/* Bytes of memory available to new processes (Linux MemAvailable; 0 when unknown). */
size_t machine_memory_available(void);

/* Bytes free in the file system that holds path (0 when unknown). */
size_t machine_disk_free(const char *path);

/* "1.5 GiB": a size for a message. */
const char *machine_format_bytes(double bytes, char *buf, size_t len);

#endif
