/*
 * race.h - --race: a plugin's data races, found by ThreadSanitizer in one
 * run even when they do not fire.
 *
 * The plugin is built with -fsanitize=thread (its memory accesses call
 * __tsan_*); ddpsim itself is not. ddpsim starts again with the
 * ThreadSanitizer runtime preloaded (LD_PRELOAD: gcc's libtsan.so, found
 * at configure time or given by DDPSIM_TSAN_RUNTIME) and TSAN_OPTIONS that
 * log each process's reports to a private directory and leave exit codes
 * alone. The runtime intercepts every thread and lock of every rank; only
 * the plugin's own accesses are watched, so ddpsim's code raises no report.
 * After the verdict the reports are printed on stderr and counted: any
 * report turns a passing run into exit 1, "data race".
 *
 * Refused before any rank starts (exit 2): a built-in implementation (not
 * instrumented), a plugin without __tsan_ calls, no runtime, --world mpi
 * (mpirun starts the processes), --mutants.
 */
#ifndef DDPSIM_RACE_H
#define DDPSIM_RACE_H

#include "options.h"

/*
 * First thing, before the options are parsed (parsing loads the plugin,
 * which needs the runtime already there): when argv asks for --race, start
 * ddpsim again under the runtime (no return on success). OPT_RUN to go on
 * (no --race, or started again already), else an exit code (said).
 */
int race_restart(int argc, char **argv);

/* Once parsed, under the runtime: OPT_RUN, or exit 2 (said) when --race cannot check this run. */
int race_check(const ddpsim_options *opt);

/* After the run's report: the reports on stderr, one line on out, and code (1 when a passing run raced). */
int race_finish(const ddpsim_options *opt, int code);

#endif
