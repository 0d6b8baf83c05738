/*
 * optable.c - table-driven command lines (optable.h).
 */
#include "optable.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "units.h"

#define HELP_COLUMN 27

static int nopts(const opt_command *cmd)
{
    int n = 0;
    while (cmd->opts[n].name)
        n++;
    return n;
}

static void *field(void *opts, const opt_spec *s)
{
    return (char *)opts + s->offset;
}

/* "25M", "4K", "1G", "100": a size as people type it. */
static void format_size(uint64_t v, char *buf, size_t len)
{
    static const char suffix[] = "TGMK";
    for (int i = 0; i < 4; i++) {
        unsigned shift = (unsigned)(40 - 10 * i);
        if (v && (v & ((UINT64_C(1) << shift) - 1)) == 0) {
            snprintf(buf, len, "%llu%c", (unsigned long long)(v >> shift), suffix[i]);
            return;
        }
    }
    snprintf(buf, len, "%llu", (unsigned long long)v);
}

/* The accepted range, as the help shows it ("" when the kind has none). */
static void format_range(const opt_spec *s, char *buf, size_t len)
{
    char lo[24], hi[24];
    buf[0] = '\0';
    switch (s->kind) {
    case OPT_INT: snprintf(buf, len, "%.0f..%.0f", s->min, s->max); break;
    case OPT_SIZE:
        format_size((uint64_t)s->min, lo, sizeof lo);
        format_size((uint64_t)s->max, hi, sizeof hi);
        snprintf(buf, len, "%s..%s", lo, hi);
        break;
    default: break;
    }
}

/* The default as shown in brackets ("" for none). */
static void format_default(const opt_spec *s, const void *defaults, char *buf, size_t len)
{
    buf[0] = '\0';
    if (s->def) {
        snprintf(buf, len, "%s", s->def);
        return;
    }
    const void *f = (const char *)defaults + s->offset;
    switch (s->kind) {
    case OPT_INT: snprintf(buf, len, "%d", *(const int *)f); break;
    case OPT_U64: snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)f); break;
    case OPT_SIZE: format_size(*(const uint64_t *)f, buf, len); break;
    case OPT_SECONDS: snprintf(buf, len, "%g", *(const double *)f); break;
    case OPT_STRING:
        if (*(const char *const *)f)
            snprintf(buf, len, "%s", *(const char *const *)f);
        break;
    case OPT_CHOICE: {
        /* the k-th of "a|b|c" */
        const char *c = s->arg;
        for (int k = *(const int *)f; c && k > 0; k--) {
            c = strchr(c, '|');
            c = c ? c + 1 : NULL;
        }
        if (c)
            snprintf(buf, len, "%.*s", (int)strcspn(c, "|"), c);
        break;
    }
    default: break;
    }
}

void opt_help(const opt_command *cmd, FILE *out)
{
    void *defaults = calloc(1, cmd->opts_size ? cmd->opts_size : 1);
    if (defaults && cmd->init)
        cmd->init(defaults);
    fprintf(out, "Usage: ddpsim%s%s %s\n", cmd->name[0] ? " " : "", cmd->name, cmd->usage);
    if (cmd->about && cmd->about[0])
        fprintf(out, "%s\n", cmd->about);
    fprintf(out, "\nOptions (default in brackets):\n");
    for (const opt_spec *s = cmd->opts; s->name; s++) {
        char left[96], def[160], range[64];
        int n = s->short_name ? snprintf(left, sizeof left, "  -%c, --%s", s->short_name, s->name)
                              : snprintf(left, sizeof left, "      --%s", s->name);
        if (s->arg && n > 0 && (size_t)n < sizeof left)
            snprintf(left + n, sizeof left - (size_t)n, " %s", s->arg);
        def[0] = '\0';
        if (defaults)
            format_default(s, defaults, def, sizeof def);
        format_range(s, range, sizeof range);
        /* The help text, line by line; the range and default go after its last line. */
        const char *h = s->help;
        int first = 1;
        for (;;) {
            const char *nl = strchr(h, '\n');
            int len = nl ? (int)(nl - h) : (int)strlen(h);
            if (first && strlen(left) + 1 < HELP_COLUMN)
                fprintf(out, "%-*s%.*s", HELP_COLUMN, left, len, h);
            else if (first)
                fprintf(out, "%s\n%-*s%.*s", left, HELP_COLUMN, "", len, h);
            else
                fprintf(out, "%-*s%.*s", HELP_COLUMN, "", len, h);
            first = 0;
            if (!nl)
                break;
            fputc('\n', out);
            h = nl + 1;
        }
        if (range[0])
            fprintf(out, ", %s", range);
        if (def[0])
            fprintf(out, " [%s]", def);
        fputc('\n', out);
    }
    if (cmd->epilog && cmd->epilog[0])
        fprintf(out, "\n%s", cmd->epilog);
    free(defaults);
}

static const char *sub_name(const opt_command *cmd)
{
    return cmd->name[0] ? cmd->name : NULL;
}

static int usage_error(const opt_command *cmd, const opt_spec *s, const char *msg)
{
    char name[80];
    if (s)
        snprintf(name, sizeof name, "--%s", s->name);
    return cli_usage_error(sub_name(cmd), s ? name : NULL, msg);
}

/* Store arg into the field of s. 0, or -1 with msg. */
static int apply(const opt_spec *s, void *opts, const char *arg, char *msg, size_t len)
{
    void *f = field(opts, s);
    long v;
    uint64_t u;
    double d;
    switch (s->kind) {
    case OPT_FLAG: *(int *)f = 1; return 0;
    case OPT_INT:
        if (units_parse_long(arg, (long)s->min, (long)s->max, &v, msg, len))
            return -1;
        *(int *)f = (int)v;
        return 0;
    case OPT_U64:
        if (units_parse_u64(arg, &u, msg, len))
            return -1;
        *(uint64_t *)f = u;
        return 0;
    case OPT_SIZE: {
        if (units_parse_size(arg, &u, msg, len))
            return -1;
        if ((double)u < s->min || (double)u > s->max) {
            char range[64];
            format_range(s, range, sizeof range);
            snprintf(msg, len, "%s is out of range %s", arg, range);
            return -1;
        }
        *(uint64_t *)f = u;
        return 0;
    }
    case OPT_SECONDS:
        if (units_parse_seconds(arg, &d, msg, len))
            return -1;
        if (d < s->min || d > s->max) {
            snprintf(msg, len, "%s seconds is out of range %g..%g", arg, s->min, s->max);
            return -1;
        }
        *(double *)f = d;
        return 0;
    case OPT_STRING: *(const char **)f = arg; return 0;
    case OPT_LIST: {
        opt_list *l = f;
        if (l->n >= (int)s->max || l->n >= OPT_LIST_MAX) {
            snprintf(msg, len, "at most %.0f of them", s->max < OPT_LIST_MAX ? s->max : OPT_LIST_MAX);
            return -1;
        }
        l->items[l->n++] = arg;
        return 0;
    }
    case OPT_CHOICE: {
        int k = 0;
        for (const char *c = s->arg; c; k++) {
            const char *bar = strchr(c, '|');
            size_t n = bar ? (size_t)(bar - c) : strlen(c);
            if (strlen(arg) == n && strncmp(arg, c, n) == 0) {
                *(int *)f = k;
                return 0;
            }
            c = bar ? bar + 1 : NULL;
        }
        snprintf(msg, len, "'%s': expected one of %s", arg, s->arg);
        return -1;
    }
    case OPT_CUSTOM: return s->parse(opts, arg, msg, len);
    case OPT_HELP:
    case OPT_VERSION: return 0;
    }
    snprintf(msg, len, "internal error: option kind %d", (int)s->kind);
    return -1;
}

int opt_parse(const opt_command *cmd, int argc, char **argv, void *opts)
{
    memset(opts, 0, cmd->opts_size);
    if (cmd->init)
        cmd->init(opts);
    int n = nopts(cmd);
    if (n > OPT_MAX)
        return cli_usage_error(sub_name(cmd), NULL, "internal error: too many options in the table");
    struct option longopts[OPT_MAX + 1];
    char shorts[3 * OPT_MAX + 2] = ":";
    size_t ns = 1;
    for (int i = 0; i < n; i++) {
        const opt_spec *s = &cmd->opts[i];
        longopts[i] = (struct option){s->name, s->arg ? required_argument : no_argument, NULL, 256 + i};
        if (s->short_name) {
            shorts[ns++] = s->short_name;
            if (s->arg)
                shorts[ns++] = ':';
        }
    }
    shorts[ns] = '\0';
    longopts[n] = (struct option){NULL, 0, NULL, 0};

    char msg[512];
    opterr = 0;
    optind = 0; /* 0, not 1: glibc then also forgets a half-parsed option cluster from an earlier call */
    int c;
    while ((c = getopt_long(argc, argv, shorts, longopts, NULL)) != -1) {
        const opt_spec *s = NULL;
        if (c >= 256 && c < 256 + n)
            s = &cmd->opts[c - 256];
        for (int i = 0; !s && c != ':' && c != '?' && i < n; i++)
            if (cmd->opts[i].short_name == c)
                s = &cmd->opts[i];
        if (!s) {
            if (c == ':')
                snprintf(msg, sizeof msg, "option '%s' needs a value", argv[optind - 1]);
            else
                snprintf(msg, sizeof msg, "unknown option '%s'", argv[optind - 1]);
            return usage_error(cmd, NULL, msg);
        }
        if (s->kind == OPT_HELP) {
            opt_help(cmd, stdout);
            return DDPSIM_EXIT_PASS;
        }
        if (s->kind == OPT_VERSION) {
            cli_print_version();
            return DDPSIM_EXIT_PASS;
        }
        if (apply(s, opts, optarg, msg, sizeof msg))
            return usage_error(cmd, s, msg);
        if (cmd->tracks_given)
            ((opt_given *)((char *)opts + cmd->given_offset))->seen[s - cmd->opts] = 1;
    }
    if (cmd->positional && optind < argc)
        *(const char **)((char *)opts + cmd->positional_offset) = argv[optind++];
    if (optind < argc) {
        snprintf(msg, sizeof msg, "unexpected argument '%s'", argv[optind]);
        return usage_error(cmd, NULL, msg);
    }
    if (cmd->positional && !*(const char **)((char *)opts + cmd->positional_offset)) {
        snprintf(msg, sizeof msg, "needs %s", cmd->positional);
        return usage_error(cmd, NULL, msg);
    }
    if (cmd->validate) {
        const char *which = NULL;
        msg[0] = '\0';
        if (cmd->validate(opts, &which, msg, sizeof msg)) {
            char name[80];
            if (which)
                snprintf(name, sizeof name, "--%s", which);
            return cli_usage_error(sub_name(cmd), which ? name : NULL, msg);
        }
    }
    return OPT_RUN;
}

int opt_dispatch(const char *parent, const opt_subcommand *table, int argc, char **argv, int no_match_ok)
{
    if (argc >= 2)
        for (const opt_subcommand *t = table; t->name; t++)
            if (strcmp(argv[1], t->name) == 0)
                return t->run(argc - 1, argv + 1);
    if (no_match_ok)
        return OPT_RUN;
    int asked_help = argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0);
    FILE *out = asked_help ? stdout : stderr;
    if (argc >= 2 && !asked_help)
        fprintf(stderr, "ddpsim %s: unknown subcommand '%s'\n", parent, argv[1]);
    fprintf(out, "Usage: ddpsim %s SUBCOMMAND [OPTIONS]   (ddpsim %s SUBCOMMAND --help for its options)\n", parent,
            parent);
    for (const opt_subcommand *t = table; t->name; t++)
        fprintf(out, "  %-12s %s\n", t->name, t->summary);
    return asked_help ? DDPSIM_EXIT_PASS : DDPSIM_EXIT_USAGE;
}

int opt_was_given(const opt_command *cmd, const void *opts, const char *name)
{
    const opt_given *g = (const opt_given *)((const char *)opts + cmd->given_offset);
    for (int i = 0; cmd->tracks_given && cmd->opts[i].name; i++)
        if (strcmp(cmd->opts[i].name, name) == 0)
            return g->seen[i];
    return 0;
}
