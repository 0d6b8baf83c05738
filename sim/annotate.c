/*
 * annotate.c - CI annotations (annotate.h).
 */
#include "annotate.h"

#include <stdlib.h>
#include <string.h>

int annotate_on(annotate_mode mode)
{
    if (mode != ANNOTATE_AUTO)
        return mode == ANNOTATE_GITHUB;
    const char *gha = getenv("GITHUB_ACTIONS");
    return gha && strcmp(gha, "true") == 0;
}

/* A workflow command's text escaped: %, CR and LF always, and : and , in a property's value. */
static void escaped(FILE *out, const char *s, int property)
{
    for (; *s; s++) {
        if (*s == '%')
            fputs("%25", out);
        else if (*s == '\r')
            fputs("%0D", out);
        else if (*s == '\n')
            fputs("%0A", out);
        else if (property && *s == ':')
            fputs("%3A", out);
        else if (property && *s == ',')
            fputs("%2C", out);
        else
            fputc(*s, out);
    }
}

void annotate(FILE *out, const char *kind, const char *title, const char *text)
{
    fprintf(out, "::%s title=", kind);
    escaped(out, title, 1);
    fputs("::", out);
    escaped(out, text, 0);
    fputc('\n', out);
}
