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

/*
 * This process's memory as the kernel accounts it (/proc/self/smaps_rollup), in KiB: pss (its share of every
 * page: a page shared by k processes counts 1/k here, so the PSS of several processes adds up to what they
 * really hold together), private (pages no other process maps) and shared (pages another process maps too,
 * counted whole). -1 when the kernel does not say (no smaps_rollup: before Linux 4.14, or no /proc).
 */
typedef struct machine_memory {
    long pss_kib, private_kib, shared_kib;
} machine_memory;
int machine_memory_self(machine_memory *out);

/*
 * Whether this process can take bytes more of address space now, under its RLIMIT_AS (`ulimit -v`): 1 yes,
 * 0 no. Tried, not computed: a PROT_NONE reservation of that size, unmapped at once, costs no memory and
 * counts against the limit as the real allocations will. machine_address_space_limit gives the limit in
 * bytes (0: none), machine_address_space_used this process's size now (VmSize; 0 when unknown).
 */
int machine_address_space_fits(size_t bytes);
size_t machine_address_space_limit(void);
size_t machine_address_space_used(void);

/* The largest file this process may write (RLIMIT_FSIZE, `ulimit -f`; a /dev/shm segment is such a file), in
 * bytes; 0: no limit. */
size_t machine_file_size_limit(void);

/* "1.5 GiB": a size for a message. */
const char *machine_format_bytes(double bytes, char *buf, size_t len);

#endif
