/*
 * options.h - the command line of a verification run (`ddpsim [OPTIONS]`):
 * its option table (options.c), parsed into one run description. Whether
 * the description makes sense as a run is verify_check_config's to say
 * (engine/verify); this layer reads files the options name, opens the
 * implementation, parses the schedule and checks what only the command line
 * knows (repeat and chaos, --list). Nothing here runs anything.
 */
#ifndef DDPSIM_OPTIONS_H
#define DDPSIM_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#include "gpu_probe.h"
#include "battery.h"
#include "impl.h"
#include "optable.h"
#include "schedule.h"
#include "trace.h"
#include "verify.h"

typedef struct ddpsim_options {
    verify_config run;       /* what the engine gets */
    sched schedule;          /* owned */
    const char *schedule_arg; /* --schedule as given (text or @FILE) */
    char *schedule_text;     /* owned: the text parsed (from --schedule or its @FILE) */
    int clip_inserted;       /* --clip put clip ops into it (a scenario that clips keeps its own) */
    const char *json_path;   /* --json FILE */
    const char *prepare_dir; /* --prepare DIR: write the run's inputs there and run nothing */
    FILE *json_file;         /* opened by main before the run: the file, or stdout for "-" (not by parsing) */
    const char *junit_path;  /* --junit FILE */
    FILE *junit_file;        /* opened by main before the run, as json_file */
    int annotations;         /* --annotations: annotate_mode */
    const char *html_path;   /* --html FILE */
    FILE *html_file;         /* opened by main before the run, as json_file */
    FILE *out;               /* the human report: stdout, or stderr when the JSON goes to stdout */
    int quiet;
    int portable_math;       /* --portable-math: the models' products in ddpsim's fixed-order kernels */
    int list;                /* --list */
    int mutants;             /* --mutants */
    int list_scenarios;      /* --scenarios */
    const char *scenario_name; /* --scenario NAME */
    int battery;             /* no --schedule, --model or --scenario: the scenario battery (battery.h) */
    battery_given given;     /* the DDP options given explicitly: they win over every scenario's */
    impl_handle impl;        /* the opened --impl */
    /* chaos, repeat, replay */
    int chaos_given, repeat, repeat_mode, fail_fast;
    int race;                /* --race: the plugin under ThreadSanitizer (race.h) */
    uint64_t chaos_first, chaos_last; /* --chaos C (first = last) or A..B, or --repeat K from --chaos or 1 */
    const char *replay_path;
    verify_replay replay;    /* loaded from --replay */
    char *run_key;           /* owned: what a trace belongs to */
    char *replay_base;       /* owned: the command line without --chaos/--repeat/--fail-fast */
    double lr;               /* --lr as typed (the engine gets it as float) */
    int tol_given;
    int world;               /* --world: CLI_WORLD_FORK or CLI_WORLD_MPI */
    int nccl_op;             /* --nccl-op: 0 sum, 1 avg, -1 not given */
    gpu_info gpu;            /* --backend nccl: what the probe found (main.c) */
    char *command;           /* owned: the command line, quoted, to print and to replay */
    opt_given seen;          /* which options were on the command line */
    const model *layout;     /* the parameters' names for the report, when the run has no model spec (ddpsim check) */
    int sharded;             /* ddpsim check of a recording with grad_shards: each rank's held slices are checked */
    const char *mesh_text;   /* --mesh RxS, or hsdp:RxS (parsed once the ranks are known) */
} ddpsim_options;

extern const opt_command options_command;

/*
 * Parse argv (argv[0] is the program). Returns OPT_RUN to go on, or an exit
 * code: 0 after --help/--version (printed on stdout), 2 after a one-line
 * error and a hint on stderr. options_free is safe after any return.
 */
int options_parse(int argc, char **argv, ddpsim_options *opt);
void options_free(ddpsim_options *opt);

#endif
