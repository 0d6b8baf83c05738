/*
 * optable.h - ddpsim's command lines as tables. Each command (the
 * verification run, selfcheck, each benchmark) is one opt_command: its
 * options with their name, argument, help text, parser and range, and one
 * validator for combinations. The parsing loop, the --help text (with every
 * default read from the command's own initial values) and the subcommand
 * dispatch are written once, here; tests/manpage.sh checks the man page
 * against the --help every table generates.
 */
#ifndef DDPSIM_OPTABLE_H
#define DDPSIM_OPTABLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum opt_kind {
    OPT_FLAG,    /* int field set to 1 */
    OPT_INT,     /* int field, a decimal integer in [min, max] */
    OPT_U64,     /* uint64_t field, a decimal integer (seeds) */
    OPT_SIZE,    /* uint64_t field, bytes with K/M/G/T suffixes, in [min, max] */
    OPT_SECONDS, /* double field, seconds, in [min, max] */
    OPT_STRING,  /* const char * field (points into argv) */
    OPT_LIST,    /* opt_list field: a repeatable string option, up to max times */
    OPT_CHOICE,  /* int (or enum) field: the index of the argument among arg's "a|b|c" */
    OPT_CUSTOM,  /* parse() decides */
    OPT_HELP,    /* print --help and exit 0 */
    OPT_VERSION, /* print the version and exit 0 */
} opt_kind;

#define OPT_LIST_MAX 16
typedef struct opt_list {
    const char *items[OPT_LIST_MAX];
    int n;
} opt_list;

/*
 * A custom parser: store what arg means into the command's options struct
 * and return 0, or fill msg with why not and return -1.
 */
typedef int (*opt_parse_fn)(void *opts, const char *arg, char *msg, size_t len);

typedef struct opt_spec {
    const char *name;   /* long name, without "--" (NULL ends a table) */
    char short_name;    /* 0: none */
    const char *arg;    /* the argument's name in the help ("N", "SPEC"); NULL: a flag */
    const char *help;   /* one or more lines, '\n' between them */
    opt_kind kind;
    size_t offset;      /* of the field in the options struct (not for HELP/VERSION) */
    double min, max;    /* OPT_INT, OPT_SIZE, OPT_SECONDS: the accepted range; OPT_LIST: max items */
    opt_parse_fn parse; /* OPT_CUSTOM */
    const char *def;    /* the default as shown; NULL: read it from the field, "" : none shown */
} opt_spec;

/* Which options of a table appeared on the command line, by their position in the table. */
#define OPT_MAX 80
typedef struct opt_given {
    unsigned char seen[OPT_MAX];
} opt_given;

typedef struct opt_command {
    const char *name;     /* "" for ddpsim itself, else "selfcheck", "bench allreduce", ... */
    const char *usage;    /* what follows the name in the usage line */
    const char *about;    /* a paragraph */
    const opt_spec *opts; /* ends with {NULL} */
    size_t opts_size;     /* sizeof the options struct */
    void (*init)(void *opts); /* the defaults */
    /* Combinations, after every option was parsed: 0, or -1 with *which set to the option to blame and msg. */
    int (*validate)(void *opts, const char **which, char *msg, size_t len);
    const char *epilog;   /* after the options: exit status and the like */
    int tracks_given;     /* the options struct has an opt_given at given_offset, filled while parsing */
    size_t given_offset;
    const char *positional; /* one required argument that is not an option ("DIR"), or NULL for none */
    size_t positional_offset; /* ... stored as a const char * there */
} opt_command;

/* 1 when option `name` of cmd was on the command line (cmd must track it). */
int opt_was_given(const opt_command *cmd, const void *opts, const char *name);

enum { OPT_RUN = -1 };

/*
 * Initialise opts with cmd's defaults and parse argv (argv[0] is the
 * command's name) into it. Returns OPT_RUN to go on; 0 after --help or
 * --version (printed on stdout); 2 after a one-line error naming the option
 * and a hint, on stderr.
 */
int opt_parse(const opt_command *cmd, int argc, char **argv, void *opts);

/* The --help text: usage, about, every option with its default, epilog. */
void opt_help(const opt_command *cmd, FILE *out);

/* A subcommand: its name, what it does, and the function that runs it (argv[0] is the name). */
typedef struct opt_subcommand {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} opt_subcommand;

/*
 * Run the subcommand named by argv[1] from table (ends with {NULL}), or
 * return OPT_RUN when argv[1] names none and no_match_ok is set. Otherwise
 * --help lists the table on stdout (exit 0); an unknown name, or none, is a
 * usage error that lists it on stderr (exit 2). `parent` names the command
 * the table belongs to ("bench").
 */
int opt_dispatch(const char *parent, const opt_subcommand *table, int argc, char **argv, int no_match_ok);

#endif
