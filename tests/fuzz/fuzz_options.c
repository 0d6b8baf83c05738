/*
 * fuzz_options.c - libFuzzer harness: ddpsim's command line. The input is
 * split at NUL bytes and newlines into at most 32 arguments; '/' is replaced
 * so that no input names a path (no plugin is dlopen'ed, no file outside the
 * working directory is read). Parsing must end in an exit code or a run
 * description, never crash, and free everything it took.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "input_text.h"
#include "options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = fuzz_text(data, size, 4096);
    if (!buf)
        return 0;
    char *argv[34] = {"ddpsim"};
    int argc = 1;
    char *p = buf;
    for (size_t i = 0; i <= size && argc < 33; i++) {
        if (i == size || buf[i] == '\0' || buf[i] == '\n') {
            buf[i] = '\0';
            argv[argc++] = p;
            p = buf + i + 1;
        } else if (buf[i] == '/') {
            buf[i] = '_';
        }
    }
    argv[argc] = NULL;
    ddpsim_options opt;
    FILE *saved_out = stdout, *saved_err = stderr;
    stdout = stderr = fopen("/dev/null", "w");
    int r = options_parse(argc, argv, &opt);
    fclose(stdout);
    stdout = saved_out;
    stderr = saved_err;
    if (r != OPT_RUN && r != 0 && r != 2)
        abort();
    /* A run needs its description; the listings (--list, --scenarios) describe no run. */
    if (r == OPT_RUN && !opt.list && !opt.list_scenarios &&
        (opt.run.nranks < 1 || !opt.run.schedule || !opt.run.impl_ops))
        abort();
    options_free(&opt);
    free(buf);
    return 0;
}
