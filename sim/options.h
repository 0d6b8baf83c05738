/*
 * options.h - the command line of a verification run (`ddpsim [OPTIONS]`),
 * parsed and validated into one run description. Nothing here runs anything.
 */
#ifndef DDPSIM_OPTIONS_H
#define DDPSIM_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#include "gpu_probe.h"
#include "impl.h"
#include "schedule.h"
#include "trace.h"
#include "verify.h"

typedef struct ddpsim_options {
    verify_config run;       /* what the engine gets */
    sched schedule;          /* owned */
    char *schedule_text;     /* owned: the text parsed (from --schedule or its @FILE) */
    const char *json_path;   /* --json FILE */
    int quiet;
    int list;                /* --list */
    int mutants;             /* --mutants */
    impl_handle impl;        /* the opened --impl */
    /* chaos, repeat, replay */
    int chaos_given, repeat_mode, fail_fast;
    uint64_t chaos_first, chaos_last; /* --chaos C (first = last) or A..B, or --repeat K from --chaos or 1 */
    const char *replay_path;
    verify_replay replay;    /* loaded from --replay */
    char run_key[512];       /* what a trace belongs to */
    char replay_base[1024];  /* the command line without --chaos/--repeat/--fail-fast */
    double lr;               /* --lr as typed (the engine gets it as float) */
    int tol_given, nccl_op_given;
    gpu_info gpu;            /* --backend nccl: what the probe found (main.c) */
    char command[1024];      /* the command line, quoted, to print and to replay */
} ddpsim_options;

enum { OPTIONS_RUN = -1 };

/* The NCCL backend's default tolerance: ulp-of-max:N (see tolerance.h and README). */
#define NCCL_DEFAULT_ULPS 64

/*
 * Parse argv. Returns OPTIONS_RUN to go on, or an exit code: 0 after
 * --help/--version (printed on stdout), 2 after a one-line error and a hint
 * on stderr.
 */
int options_parse(int argc, char **argv, ddpsim_options *opt);
void options_free(ddpsim_options *opt);

#endif
