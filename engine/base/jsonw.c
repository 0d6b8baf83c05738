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

/* The shortest text that reads back as x, as a double or (as_float) as a float: 0.1, not 0.10000000000000001. */
static void shortest_text(double x, int as_float, char *buf, size_t len)
{
    if (isnan(x) || isinf(x)) {
        snprintf(buf, len, "%s", isnan(x) ? "\"nan\"" : x > 0 ? "\"inf\"" : "\"-inf\"");
        return;
    }
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, len, "%.*g", digits, x);
        double back = strtod(buf, NULL);
        if (as_float ? (float)back == (float)x : back == x)
            break;
    }
}

static void shortest(FILE *f, double x, int as_float)
{
    char buf[32];
    shortest_text(x, as_float, buf, sizeof buf);
    fputs(buf, f);
}

void jsonw_float_text(float x, char *buf, size_t len)
{
    shortest_text(x, 1, buf, len);
}

void jsonw_number_text(double x, char *buf, size_t len)
{
    shortest_text(x, 0, buf, len);
}

void jsonw_number(FILE *f, double x)
{
    shortest(f, x, 0);
}

void jsonw_float(FILE *f, float x)
{
    shortest(f, x, 1);
}
