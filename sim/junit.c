/*
 * junit.c - JUnit XML (junit.h).
 */
#include "junit.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* The length of a well-formed UTF-8 sequence at s that XML 1.0 allows, or 0. */
static size_t utf8_char(const unsigned char *s)
{
    if (s[0] < 0x80)
        return s[0] >= 0x20 || s[0] == '\t' || s[0] == '\n' || s[0] == '\r' ? 1 : 0;
    size_t n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 0;
    if (s[0] >= 0xf5)
        n = 0;
    uint32_t c = n == 2 ? s[0] & 0x1f : n == 3 ? s[0] & 0x0f : s[0] & 0x07;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (s[i] & 0x3f);
    }
    int overlong = (n == 3 && c < 0x800) || (n == 4 && c < 0x10000);
    int bad = (c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff || c == 0xfffe || c == 0xffff;
    return n && !overlong && !bad ? n : 0;
}

/*
 * Text (attr 0) or an attribute's value (1), escaped; what XML cannot hold (control bytes, malformed UTF-8)
 * becomes '?'. An attribute keeps its line breaks as references, where a raw one would read as a space.
 */
static void xml_escaped(FILE *f, const char *text, int attr)
{
    const unsigned char *s = (const unsigned char *)(text ? text : "");
    while (*s) {
        size_t n = utf8_char(s);
        if (n == 0) {
            fputc('?', f);
            s++;
            continue;
        }
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\n':
        case '\r':
        case '\t':
            if (attr)
                fprintf(f, "&#%d;", *s);
            else
                fputc(*s, f);
            break;
        default: fwrite(s, 1, n, f);
        }
        s += n;
    }
}

static void xml_text(FILE *f, const char *text)
{
    xml_escaped(f, text, 0);
}

static void xml_attr(FILE *f, const char *text)
{
    xml_escaped(f, text, 1);
}

static void property(FILE *f, const char *name, const char *value)
{
    fputs("      <property name=\"", f);
    xml_attr(f, name);
    fputs("\" value=\"", f);
    xml_attr(f, value);
    fputs("\"/>\n", f);
}

int junit_begin(junit_suite *s, char *msg, size_t len)
{
    memset(s, 0, sizeof *s);
    s->cases = cli_temp_file(msg, len);
    return s->cases ? 0 : -1;
}

void junit_end(junit_suite *s)
{
    if (s->cases)
        fclose(s->cases);
    s->cases = NULL;
}

/* A failure's facts as "key: value" lines (the testcase cannot hold properties in this layout). */
static void facts_text(FILE *f, const judge_facts *k)
{
    fprintf(f, "check: %s (%s)\nrank: %d\n", k->check, k->label, k->rank);
    if (k->has_element)
        fprintf(f, "parameter: %s\nelement: %llu\nexpected: %.9g\nactual: %.9g\nulps: %u\n", k->tensor,
                (unsigned long long)k->element, (double)k->expected, (double)k->actual, k->ulps);
    if (k->pattern[0])
        fprintf(f, "pattern: %s\n", k->pattern);
}

void junit_add(junit_suite *s, const junit_case *c)
{
    FILE *f = s->cases;
    s->tests++;
    fputs("    <testcase classname=\"ddpsim\" name=\"", f);
    xml_attr(f, c->name);
    fputc('"', f);
    if (c->time_s >= 0)
        fprintf(f, " time=\"%.3f\"", c->time_s);
    if (c->outcome == JUNIT_PASS && !c->replay) {
        fputs("/>\n", f);
        return;
    }
    fputs(">\n", f);
    if (c->outcome == JUNIT_SKIP) {
        s->skipped++;
        fputs("      <skipped message=\"", f);
        xml_attr(f, c->message);
        fputs("\"/>\n", f);
    } else if (c->outcome != JUNIT_PASS) {
        s->failures++;
        fputs("      <failure type=\"", f);
        xml_attr(f, c->outcome == JUNIT_FAULT ? "fault" : c->type ? c->type : "divergence");
        fputs("\" message=\"", f);
        xml_attr(f, c->message);
        fputs("\">", f);
        char *body = NULL;
        size_t blen = 0;
        FILE *b = open_memstream(&body, &blen);
        if (b) {
            fprintf(b, "%s\n", c->message ? c->message : "");
            if (c->facts && c->facts->known)
                facts_text(b, c->facts);
            if (c->replay)
                fprintf(b, "replay: %s\n", c->replay);
            fclose(b);
            xml_text(f, body);
        }
        free(body);
        fputs("</failure>\n", f);
        if (!s->has_first) {
            s->has_first = 1;
            snprintf(s->first_name, sizeof s->first_name, "%s", c->name);
            if (c->facts)
                s->first = *c->facts;
        }
    }
    if (c->replay) {
        fputs("      <system-out>replay: ", f);
        xml_text(f, c->replay);
        fputs("</system-out>\n", f);
    }
    fputs("    </testcase>\n", f);
}

int junit_write(junit_suite *s, FILE *out, const char *name, double wall_s, const char *const *props)
{
    char host[256] = "localhost", stamp[32] = "";
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm))
        strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    /* The declaration must be the document's first bytes: not after cli_open_output's probe byte, which stays in
     * a pipe (without it the document is UTF-8 all the same). */
    if (ftell(out) == 0)
        fputs("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n", out);
    fputs("<testsuites>\n  <testsuite name=\"", out);
    xml_attr(out, name);
    fprintf(out, "\" errors=\"0\" failures=\"%d\" skipped=\"%d\" tests=\"%d\" time=\"%.3f\" timestamp=\"%s\" "
                 "hostname=\"",
            s->failures, s->skipped, s->tests, wall_s > 0 ? wall_s : 0.0, stamp);
    xml_attr(out, host);
    fputs("\">\n    <properties>\n", out);
    for (int i = 0; props && props[i] && props[i + 1]; i += 2)
        property(out, props[i], props[i + 1]);
    if (s->has_first) {
        char v[64];
        const judge_facts *k = &s->first;
        property(out, "first_failure", s->first_name);
        if (k->known) {
            property(out, "check", k->check);
            snprintf(v, sizeof v, "%d", k->rank);
            property(out, "rank", v);
        }
        if (k->known && k->has_element) {
            property(out, "parameter", k->tensor);
            snprintf(v, sizeof v, "%llu", (unsigned long long)k->element);
            property(out, "element", v);
            snprintf(v, sizeof v, "%.9g", (double)k->expected);
            property(out, "expected", v);
            snprintf(v, sizeof v, "%.9g", (double)k->actual);
            property(out, "actual", v);
            snprintf(v, sizeof v, "%u", k->ulps);
            property(out, "ulps", v);
        }
        if (k->known && k->pattern[0])
            property(out, "pattern", k->pattern);
    }
    fputs("    </properties>\n", out);
    if (cli_copy_temp(s->cases, out) != 0)
        return -1;
    fputs("  </testsuite>\n</testsuites>\n", out);
    return fflush(out) != 0 || ferror(out) ? -1 : 0;
}
