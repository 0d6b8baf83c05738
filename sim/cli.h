/*
 * cli.h - what every ddpsim subcommand shares on the command line: exit
 * codes, the one-line error with a hint, getopt's messages, turning a
 * runtime fault into its report and exit code, and --version.
 */
#ifndef DDPSIM_CLI_H
#define DDPSIM_CLI_H

#include <stddef.h>
#include <signal.h>
#include <stdio.h>

#include "status.h"
#include "world.h"

/* Exit codes: the verdict travels in the exit status. */
enum {
    DDPSIM_EXIT_PASS = 0,     /* every check matched */
    DDPSIM_EXIT_MISMATCH = 1, /* a check found a difference */
    DDPSIM_EXIT_USAGE = 2,    /* bad options or input */
    DDPSIM_EXIT_FAULT = 3,    /* a rank died, the watchdog fired, a backend failed, output could not be written */
    DDPSIM_EXIT_NOTHING = 4,  /* the run verified nothing: no grab, or every grab compared only zeros */
    /* interrupted by signal S: 128 + S (130 for SIGINT, 143 for SIGTERM) */
};

/*
 * --world fork|mpi, for every command that runs ranks. cli_world_start runs
 * before any parsing: a command line with --world mpi starts MPI
 * (world_mpi_start) so that only rank 0's process prints from then on;
 * returns 0, or DDPSIM_EXIT_USAGE after saying why it cannot. The exit code
 * then goes through world_mpi_finish (main.c).
 */
enum { CLI_WORLD_FORK = 0, CLI_WORLD_MPI = 1 };
#define CLI_WORLD_CHOICES "fork|mpi"
int cli_world_start(int argc, char **argv);
/*
 * After parsing, for a command of nranks ranks (given: on its command line):
 * --world mpi takes the job's size when --ranks was not given, and refuses a
 * different one. 0, or -1 with msg.
 */
int cli_world_ranks(int world_kind, int given, int *nranks, char *msg, size_t len);

/* "ddpsim[ sub]: OPT: MSG" and "Try 'ddpsim[ sub] --help' ..." on stderr; returns DDPSIM_EXIT_USAGE. */
int cli_usage_error(const char *sub, const char *opt, const char *msg);

/*
 * argv as one line a shell runs again ("ddpsim" for argv[0]; arguments with
 * anything but plain characters in single quotes), keeping only the
 * arguments keep() accepts (NULL: all; it may ask to drop the next one
 * too). Returns a malloc'd string, or NULL when memory ran out.
 */
typedef int (*cli_keep_fn)(const char *arg, int *skip_next);
char *cli_join_command(int argc, char **argv, cli_keep_fn keep);

/*
 * Report a failed world run on stderr (the error, then one line per rank)
 * and return its exit code: 128 + signal when interrupted, else
 * DDPSIM_EXIT_FAULT. w may be NULL.
 */
int cli_fault_exit(const world *w, ddp_status s);

/*
 * An output file named on the command line, opened before anything runs so
 * that a missing directory, a directory, or a device that takes no bytes
 * (/dev/full) is refused up front: "-" is stdout; anything else is created
 * (or truncated) and one byte is written and flushed to see it can be
 * written, then taken back where the file allows. NULL with msg on error.
 */
FILE *cli_open_output(const char *path, char *msg, size_t len);
/* Close what cli_open_output returned (stdout is left open). */
void cli_close_output(FILE *f);

/*
 * A temporary file for reading back later, in $TMPDIR (or /tmp), already
 * unlinked so nothing is left behind whatever happens. NULL with msg on
 * error.
 */
FILE *cli_temp_file(char *msg, size_t len);
/*
 * A private directory in $TMPDIR (or /tmp), DIR/ddpsim-WHAT-XXXXXX, into dir (len bytes); its owner removes it.
 * -1 with errno when it cannot be made.
 */
int cli_temp_dir(const char *what, char *dir, size_t len);
/* What a temporary file holds, from its start, onto out (tmp NULL: nothing); -1 on an error (errno). */
int cli_copy_temp(FILE *tmp, FILE *out);

/*
 * The end of every command: flush stdout, and when that or an earlier write
 * to it failed, say so on stderr. Returns code, or DDPSIM_EXIT_FAULT when
 * code was a pass that did not reach the reader.
 */
int cli_finish(int code);

/*
 * Hold SIGINT and SIGTERM across a loop of many runs (the battery, --mutants): a signal between two runs
 * stays pending and the next run's supervisor takes it (the run ends as interrupted, every rank stopped)
 * instead of killing ddpsim between runs without a word. cli_release_signals restores the mask and
 * returns a signal that came after the last run (0: none), consumed.
 */
void cli_hold_signals(sigset_t *saved);
int cli_release_signals(const sigset_t *saved);

/*
 * The rule for SIGINT and SIGTERM in a forked world: a signal that arrives before the verdict is printed
 * wins (exit 128 + the signal), one that arrives after it does not (the verdict stands). main holds both
 * signals from its start (cli_hold_signals), so none kills ddpsim between two checks of it: a run's
 * supervisor takes one at once (every rank stopped), cli_signal_before_verdict takes one that came after the
 * ranks ended, just before the verdict line (it says so on stderr and on out, and returns 128 + the signal;
 * 0 when none came), cli_verdict_printed marks the verdict said, and cli_finish takes one that came before
 * the verdict of a command that printed none.
 */
int cli_signal_before_verdict(FILE *out);
void cli_verdict_printed(void);

/* Read a whole text file (at most max bytes) into a NUL-terminated buffer; NULL with msg filled on error. */
char *cli_read_file(const char *path, size_t max, char *msg, size_t msglen);

void cli_print_version(void);

#endif
