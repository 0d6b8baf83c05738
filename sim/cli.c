/*
 * cli.c - shared command-line helpers (cli.h).
 */
#include "cli.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "file.h"
#include "gpu_probe.h"

int cli_usage_error(const char *sub, const char *opt, const char *msg)
{
    fprintf(stderr, "ddpsim%s%s: %s%s%s\n", sub ? " " : "", sub ? sub : "", opt ? opt : "", opt ? ": " : "", msg);
    fprintf(stderr, "Try 'ddpsim%s%s --help' for the options and their defaults.\n", sub ? " " : "", sub ? sub : "");
    return DDPSIM_EXIT_USAGE;
}

char *cli_join_command(int argc, char **argv, cli_keep_fn keep)
{
    char *line = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&line, &len);
    if (!f)
        return NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = i == 0 ? "ddpsim" : argv[i];
        int skip_next = 0;
        if (i > 0 && keep && !keep(a, &skip_next)) {
            i += skip_next;
            continue;
        }
        int plain = *a != '\0';
        for (const char *p = a; *p; p++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=:./,@+", *p))
                plain = 0;
        if (i > 0)
            fputc(' ', f);
        if (plain) {
            fputs(a, f);
            continue;
        }
        fputc('\'', f);
        for (const char *p = a; *p; p++) {
            if (*p == '\'')
                fputs("'\\''", f); /* close the quote, an escaped quote, open again */
            else
                fputc(*p, f);
        }
        fputc('\'', f);
    }
    if (fclose(f) != 0) {
        free(line);
        return NULL;
    }
    return line;
}

int cli_fault_exit(const world *w, ddp_status s)
{
    fprintf(stderr, "ddpsim: %s\n", ddp_error_last());
    if (w) {
        size_t len = (size_t)world_nranks(w) * 400 + 1;
        char *detail = malloc(len);
        if (detail) {
            world_describe(w, detail, len);
            fputs(detail, stderr);
            free(detail);
        }
    }
    if (s == DDP_ERR_INTERRUPTED && w)
        return 128 + world_interrupt_signal(w);
    return DDPSIM_EXIT_FAULT;
}

/* Where temporary files and directories go. */
static const char *temp_root(void)
{
    const char *dir = getenv("TMPDIR");
    return dir && *dir ? dir : "/tmp";
}

int cli_temp_dir(const char *what, char *dir, size_t len)
{
    if ((size_t)snprintf(dir, len, "%s/ddpsim-%s-XXXXXX", temp_root(), what) >= len) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return mkdtemp(dir) ? 0 : -1;
}

FILE *cli_temp_file(char *msg, size_t len)
{
    const char *dir = temp_root();
    char path[4096];
    snprintf(path, sizeof path, "%s/ddpsim-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) {
        snprintf(msg, len, "cannot create a temporary file in %s: %s", dir, strerror(errno));
        return NULL;
    }
    unlink(path);
    FILE *f = fdopen(fd, "w+");
    if (!f) {
        snprintf(msg, len, "cannot open a temporary file in %s: %s", dir, strerror(errno));
        close(fd);
    }
    return f;
}

int cli_copy_temp(FILE *tmp, FILE *out)
{
    if (!tmp)
        return 0;
    char buf[1 << 16];
    size_t n;
    if (fflush(tmp) != 0 || fseek(tmp, 0, SEEK_SET) != 0)
        return -1;
    while ((n = fread(buf, 1, sizeof buf, tmp)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            return -1;
    return ferror(tmp) ? -1 : 0;
}

FILE *cli_open_output(const char *path, char *msg, size_t len)
{
    if (strcmp(path, "-") == 0)
        return stdout;
    if (world_mpi_rank() > 0) /* --world mpi: rank 0's process writes the file; the others have the same to say */
        path = "/dev/null";
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(msg, len, "%s is a directory", path);
        return NULL;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(msg, len, "cannot create %s: %s", path, strerror(errno));
        return NULL;
    }
    /* JSON allows leading white space, so the probe byte may stay where it cannot be taken back (a pipe). */
    if (fputc('\n', f) == EOF || fflush(f) != 0) {
        snprintf(msg, len, "cannot write %s: %s", path, strerror(errno));
        fclose(f);
        return NULL;
    }
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) {
        if (ftruncate(fileno(f), 0) != 0 || fseek(f, 0, SEEK_SET) != 0) {
            snprintf(msg, len, "cannot rewrite %s: %s", path, strerror(errno));
            fclose(f);
            return NULL;
        }
    }
    return f;
}

void cli_close_output(FILE *f)
{
    if (f && f != stdout)
        fclose(f);
}

static int verdict_said;

/* A held SIGINT or SIGTERM, consumed (0: none). */
static int take_signal(void)
{
    sigset_t held;
    sigemptyset(&held);
    sigaddset(&held, SIGINT);
    sigaddset(&held, SIGTERM);
    struct timespec now = {0, 0};
    int sig = sigtimedwait(&held, NULL, &now);
    return sig > 0 ? sig : 0;
}

int cli_signal_before_verdict(FILE *out)
{
    int sig = take_signal();
    if (!sig)
        return 0;
    if (out && out != stderr)
        fprintf(out, "# interrupted by signal %d (%s) before the verdict: no verdict\n", sig, strsignal(sig));
    fprintf(stderr, "ddpsim: interrupted by signal %d (%s) before the verdict: no verdict\n", sig, strsignal(sig));
    verdict_said = 1; /* what was said instead */
    return 128 + sig;
}

void cli_verdict_printed(void)
{
    verdict_said = 1;
}

int cli_finish(int code)
{
    int sig = verdict_said ? 0 : take_signal();
    if (sig) {
        fprintf(stderr, "ddpsim: interrupted by signal %d (%s)\n", sig, strsignal(sig));
        code = 128 + sig;
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "ddpsim: cannot write to standard output: %s\n", strerror(errno ? errno : EIO));
        if (code == DDPSIM_EXIT_PASS)
            return DDPSIM_EXIT_FAULT;
    }
    return code;
}

char *cli_read_file(const char *path, size_t max, char *msg, size_t msglen)
{
    char *buf;
    size_t n;
    if (file_read_all(path, max, &buf, &n) != DDP_OK) {
        snprintf(msg, msglen, "%s", ddp_error_text());
        return NULL;
    }
    if (strlen(buf) != n) {
        snprintf(msg, msglen, "%s contains a NUL byte", path);
        free(buf);
        return NULL;
    }
    return buf;
}

void cli_print_version(void)
{
    char gpu[256];
    gpu_probe_describe(gpu, sizeof gpu);
    printf("ddpsim %s\n", PACKAGE_VERSION);
    printf("NCCL backend: %s\n", gpu);
    char mpi[256];
    world_mpi_describe(mpi, sizeof mpi);
    printf("MPI world: %s\n", mpi);
}

void cli_hold_signals(sigset_t *saved)
{
    sigset_t held;
    sigemptyset(&held);
    sigaddset(&held, SIGINT);
    sigaddset(&held, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &held, saved);
}

int cli_release_signals(const sigset_t *saved)
{
    int sig = take_signal();
    pthread_sigmask(SIG_SETMASK, saved, NULL);
    return sig;
}

int cli_world_start(int argc, char **argv)
{
    const char *want = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        if (strcmp(argv[i], "--world") == 0 && i + 1 < argc)
            want = argv[i + 1];
        else if (strncmp(argv[i], "--world=", 8) == 0)
            want = argv[i] + 8;
    }
    if (!want || strcmp(want, "mpi") != 0)
        return 0; /* fork, or a bad value the option table names */
    if (world_mpi_start(&argc, &argv) != DDP_OK) {
        fprintf(stderr, "ddpsim: --world mpi: %s\n", ddp_error_text());
        return DDPSIM_EXIT_USAGE;
    }
    return 0;
}

int cli_world_ranks(int world_kind, int given, int *nranks, char *msg, size_t len)
{
    if (world_kind != CLI_WORLD_MPI)
        return 0;
    if (!world_mpi_active()) { /* --world mpi after "--", or a table that parsed it without cli_world_start */
        snprintf(msg, len, "MPI was not started: give --world mpi before any \"--\"");
        return -1;
    }
    if (!given) {
        *nranks = world_mpi_size();
        return 0;
    }
    if (*nranks != world_mpi_size()) {
        snprintf(msg, len, "%d ranks, but the MPI job has %d processes: each process is one rank (mpirun -np %d)",
                 *nranks, world_mpi_size(), *nranks);
        return -1;
    }
    return 0;
}
