/*
 * machine.c - memory and disk of this machine (machine.h).
 */
#include "machine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* The figure of the line "KEY <n> kB" (key "MemAvailable:") in a /proc file, in KiB; 0 when none. */
static unsigned long long proc_kib(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    char line[256];
    unsigned long long kib = 0;
    size_t k = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, k) == 0) {
            kib = strtoull(line + k, NULL, 10);
            break;
        }
    if (f)
        fclose(f);
    return kib;
}

size_t machine_memory_available(void)
{
    unsigned long long kib = proc_kib("/proc/meminfo", "MemAvailable:");
    if (kib)
        return (size_t)kib * 1024;
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

int machine_memory_self(machine_memory *out)
{
    *out = (machine_memory){-1, -1, -1};
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return -1;
    char line[256];
    long pss = -1, pc = 0, pd = 0, sc = 0, sd = 0, v;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "Pss: %ld kB", &v) == 1)
            pss = v;
        else if (sscanf(line, "Private_Clean: %ld kB", &v) == 1)
            pc = v;
        else if (sscanf(line, "Private_Dirty: %ld kB", &v) == 1)
            pd = v;
        else if (sscanf(line, "Shared_Clean: %ld kB", &v) == 1)
            sc = v;
        else if (sscanf(line, "Shared_Dirty: %ld kB", &v) == 1)
            sd = v;
    }
    fclose(f);
    if (pss < 0)
        return -1;
    *out = (machine_memory){pss, pc + pd, sc + sd};
    return 0;
}

size_t machine_disk_free(const char *path)
{
    struct statvfs st;
    if (statvfs(path, &st) != 0)
        return 0;
    return (size_t)st.f_bavail * (size_t)st.f_frsize;
}

int machine_address_space_fits(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return 0;
    munmap(p, bytes);
    return 1;
}

/* A resource's soft limit in its units; 0: none (or unknown). */
static size_t soft_limit(int resource)
{
    struct rlimit rl;
    if (getrlimit(resource, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    return (size_t)rl.rlim_cur;
}

size_t machine_address_space_limit(void)
{
    return soft_limit(RLIMIT_AS);
}

size_t machine_file_size_limit(void)
{
    return soft_limit(RLIMIT_FSIZE);
}

size_t machine_address_space_used(void)
{
    return (size_t)proc_kib("/proc/self/status", "VmSize:") * 1024;
}

const char *machine_format_bytes(double bytes, char *buf, size_t len)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (bytes >= 1024 && u < 5) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}
