/*
 * options.h - the command line of ddpsim, parsed and validated into one
 * run description. Nothing here runs anything.
 */
#ifndef DDPSIM_OPTIONS_H
#define DDPSIM_OPTIONS_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "coll.h"

/* Exit codes: the verdict travels in the exit status. */
enum {
    DDPSIM_EXIT_PASS = 0,     /* every check matched */
    DDPSIM_EXIT_MISMATCH = 1, /* a check found a difference */
    DDPSIM_EXIT_USAGE = 2,    /* bad options or input */
    DDPSIM_EXIT_FAULT = 3,    /* a rank died, the watchdog fired, a backend failed */
    /* interrupted by signal S: 128 + S (130 for SIGINT, 143 for SIGTERM) */
};

typedef struct ddpsim_options {
    int ranks;              /* --ranks N */
    double timeout_s;       /* --timeout SEC */
    int algo;               /* --algo NAME, or -1 for every algorithm */
    uint64_t count;         /* --count N: elements per self-check allreduce */
    int iters;              /* --iters K */
    uint64_t slot_bytes;    /* --slot-bytes SIZE */
    uint64_t jitter_seed;   /* --jitter-seed S */
    unsigned jitter_us;     /* --jitter US */
    int quiet;              /* --quiet */
} ddpsim_options;

enum { OPTIONS_RUN = 0, OPTIONS_EXIT_OK = 1, OPTIONS_ERROR = 2 };

/*
 * Parse argv into opt. Returns OPTIONS_RUN to go on, OPTIONS_EXIT_OK after
 * --help/--version (already printed on stdout), OPTIONS_ERROR after a
 * one-line error and a hint on stderr.
 */
int options_parse(int argc, char **argv, ddpsim_options *opt);

void options_usage(FILE *out);

/*
 * The user's message after getopt_long returned c: ':' (a value is missing),
 * anything else unknown; c = 0 for a stray argument at argv[optind].
 */
const char *options_getopt_message(int c, char **argv, char *msg, size_t len);

#endif
