/*
 * jsonw.c - JSON string escaping and number formatting (jsonw.h).
 */
#include "jsonw.h"

#include <math.h>
#include <stdlib.h>

void jsonw_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

void jsonw_number(FILE *f, double x)
{
    if (isnan(x))
        fputs("\"nan\"", f);
    else if (isinf(x))
        fputs(x > 0 ? "\"inf\"" : "\"-inf\"", f);
    else {
        /* The shortest text that reads back as the same double (0.1, not 0.10000000000000001). */
        char buf[32];
        for (int digits = 1; digits <= 17; digits++) {
            snprintf(buf, sizeof buf, "%.*g", digits, x);
            if (strtod(buf, NULL) == x)
                break;
        }
        fputs(buf, f);
    }
}
