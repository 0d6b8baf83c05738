/*
 * race.c - --race (race.h).
 */
#include "config.h" /* first: _GNU_SOURCE for memmem */
#include "race.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* A ddpsim built with a sanitizer of its own cannot take ThreadSanitizer's runtime beside it. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RACE_OWN_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RACE_OWN_SANITIZER 1
#endif
#endif

#define RACE_DIR_ENV "DDPSIM_RACE_DIR" /* set when ddpsim runs again under the runtime: where the reports go */

/* Whether the file at path holds the bytes of needle (a plugin's symbol names). -1: unreadable. */
static int file_holds(const char *path, const char *needle)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    static char buf[1 << 16];
    size_t keep = strlen(needle) - 1, have = 0, n;
    int found = 0;
    while (!found && (n = fread(buf + have, 1, sizeof buf - have, f)) > 0) {
        have += n;
        found = memmem(buf, have, needle, strlen(needle)) != NULL;
        if (have > keep) { /* keep the tail: a name cut by the buffer's end */
            memmove(buf, buf + have - keep, keep);
            have = keep;
        }
    }
    fclose(f);
    return found;
}

/* The ThreadSanitizer runtime to preload: DDPSIM_TSAN_RUNTIME, or configure's; NULL when there is none. */
static const char *runtime(void)
{
    const char *env = getenv("DDPSIM_TSAN_RUNTIME");
    if (env && *env)
        return env;
#ifdef DDPSIM_TSAN_RUNTIME
    return DDPSIM_TSAN_RUNTIME;
#else
    return NULL;
#endif
}

/* Whether argv asks for --race (before a "--" that ends the options). */
static int asks_for_race(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--race") == 0)
            return 1;
    return 0;
}

int race_restart(int argc, char **argv)
{
    if (getenv(RACE_DIR_ENV) || !asks_for_race(argc, argv))
        return OPT_RUN;
#ifdef RACE_OWN_SANITIZER
    return cli_usage_error(NULL, "--race", "this ddpsim is built with a sanitizer of its own (--enable-sanitizers, "
                                           "or -fsanitize=thread), which cannot run beside ThreadSanitizer's runtime");
#endif
    char msg[PATH_MAX + 200];
    const char *rt = runtime();
    struct stat st;
    if (!rt || stat(rt, &st) != 0) {
        snprintf(msg, sizeof msg, "no ThreadSanitizer runtime%s%s (Debian: apt-get install libtsan2; or set "
                                  "DDPSIM_TSAN_RUNTIME to gcc's libtsan.so)",
                 rt ? " at " : "", rt ? rt : "");
        return cli_usage_error(NULL, "--race", msg);
    }
    char dir[PATH_MAX];
    if (cli_temp_dir("race", dir, sizeof dir) != 0) {
        fprintf(stderr, "ddpsim: --race: cannot create a directory for the reports: %s\n", strerror(errno));
        return DDPSIM_EXIT_FAULT;
    }
    /* Each process logs to DIR/tsan.PID; exit codes stay the run's own (the verdict is race_finish's). */
    char tsan[PATH_MAX + 200], preload[2 * PATH_MAX];
    const char *theirs = getenv("TSAN_OPTIONS"), *before = getenv("LD_PRELOAD");
    snprintf(tsan, sizeof tsan, "%s%slog_path=%s/tsan exitcode=0 halt_on_error=0 report_signal_unsafe=0",
             theirs ? theirs : "", theirs ? " " : "", dir);
    snprintf(preload, sizeof preload, "%s%s%s", rt, before && *before ? ":" : "", before ? before : "");
    if (setenv("TSAN_OPTIONS", tsan, 1) || setenv("LD_PRELOAD", preload, 1) || setenv(RACE_DIR_ENV, dir, 1)) {
        rmdir(dir);
        fprintf(stderr, "ddpsim: --race: cannot set the environment: %s\n", strerror(errno));
        return DDPSIM_EXIT_FAULT;
    }
    execv("/proc/self/exe", argv);
    fprintf(stderr, "ddpsim: --race: cannot start again under ThreadSanitizer: %s\n", strerror(errno));
    rmdir(dir);
    return DDPSIM_EXIT_FAULT;
}

/* The reports' directory, removed with what it holds. */
static void remove_reports(const char *dir)
{
    DIR *d = opendir(dir);
    char path[PATH_MAX + 300];
    for (struct dirent *e; d && (e = readdir(d));)
        if (strncmp(e->d_name, "tsan.", 5) == 0) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            remove(path);
        }
    if (d)
        closedir(d);
    rmdir(dir);
}

int race_check(const ddpsim_options *opt)
{
    const char *dir = getenv(RACE_DIR_ENV);
    if (!opt->race || !dir)
        return OPT_RUN;
    const char *impl = opt->run.impl, *why = NULL;
    char msg[PATH_MAX + 200];
    int held = strchr(impl, '/') ? file_holds(impl, "__tsan_func_entry") : 0;
    if (opt->mutants)
        why = "checks a plugin, and --mutants runs the built-ins";
    else if (opt->world == CLI_WORLD_MPI)
        why = "not under --world mpi: mpirun starts the processes; give the MPI job LD_PRELOAD of the "
              "ThreadSanitizer runtime yourself";
    else if (opt->json_path || opt->junit_path || opt->html_path)
        why = "its finding is the report's last line and the exit code, while --json, --junit and --html hold the "
              "gradients' verdict alone: run them without --race";
    else if (!strchr(impl, '/'))
        why = "checks a plugin built with -fsanitize=thread (--impl ./libmine.so); the built-in implementations are "
              "not instrumented";
    else if (held < 0)
        snprintf(msg, sizeof msg, "cannot read %s: %s", impl, strerror(errno)), why = msg;
    else if (!held)
        snprintf(msg, sizeof msg, "%s is not built with -fsanitize=thread (it calls no __tsan_ function), so "
                                  "ThreadSanitizer would watch none of it: rebuild it with cc -fsanitize=thread -g",
                 impl),
            why = msg;
    if (!why)
        return OPT_RUN;
    remove_reports(dir);
    return cli_usage_error(NULL, "--race", why);
}

/* Print one report file on stderr; the number of reports it holds, the first one's summary into first. */
static int read_reports(const char *path, char *first, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        fputs(line, stderr);
        n += strncmp(line, "WARNING: ThreadSanitizer:", 25) == 0;
        if (!first[0] && strncmp(line, "SUMMARY: ThreadSanitizer: ", 26) == 0) {
            snprintf(first, len, "%.500s", line + 26);
            first[strcspn(first, "\n")] = '\0';
        }
    }
    fclose(f);
    return n;
}

int race_finish(const ddpsim_options *opt, int code)
{
    const char *dir = getenv(RACE_DIR_ENV);
    if (!opt->race || !dir)
        return code;
    DIR *d = opendir(dir);
    int reports = 0, files = 0;
    char first[512] = "", path[PATH_MAX + 300];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, "tsan.", 5) != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int n = read_reports(path, first, sizeof first);
        reports += n;
        files += n > 0;
    }
    if (d)
        closedir(d);
    remove_reports(dir);
    if (reports) {
        fprintf(opt->out, "# race: ThreadSanitizer reported %d data race%s in %d process%s (the reports are on "
                          "stderr), so the run fails (exit 1); first: %s\n",
                reports, reports == 1 ? "" : "s", files, files == 1 ? "" : "es", first);
        return code == DDPSIM_EXIT_PASS ? DDPSIM_EXIT_MISMATCH : code;
    }
    fprintf(opt->out, "# race: ThreadSanitizer watched the plugin's threads in every rank and reported no data "
                      "race\n");
    return code;
}
