/*
 * json.c - a strict JSON reader (json.h).
 */
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const char *text, *p;
    int depth;
} parser;

static ddp_status fail(const parser *ps, const char *what)
{
    int line, col;
    ddp_text_position(ps->text, ps->p, &line, &col);
    if (*ps->p == '\0')
        return ddp_error(DDP_ERR_INVALID, "line %d, column %d: %s, found the end of the text", line, col, what);
    return ddp_error(DDP_ERR_INVALID, "line %d, column %d: %s, found '%c'", line, col, what, *ps->p);
}

static void skip_space(parser *ps)
{
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
        ps->p++;
}

static ddp_status parse_value(parser *ps, json_value *v);

/* Append one UTF-8 encoded code point. */
static size_t put_utf8(char *out, uint32_t c)
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xc0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xe0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        out[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3f));
    out[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

static int hex4(const char *p, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* A string at ps->p (the opening quote) into a fresh NUL-terminated buffer. */
static ddp_status parse_string(parser *ps, char **out)
{
    ps->p++; /* the quote */
    size_t cap = 16, n = 0;
    char *s = malloc(cap);
    if (!s)
        return ddp_error(DDP_ERR_NOMEM, "JSON string");
    for (;;) {
        if (n + 5 > cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) {
                free(s);
                return ddp_error(DDP_ERR_NOMEM, "JSON string");
            }
            s = t;
        }
        unsigned char c = (unsigned char)*ps->p;
        if (c == '"') {
            ps->p++;
            s[n] = '\0';
            *out = s;
            return DDP_OK;
        }
        if (c < 0x20) {
            free(s);
            return fail(ps, c == 0 ? "expected a closing '\"'" : "a control character must be escaped in a string");
        }
        if (c != '\\') {
            s[n++] = (char)c;
            ps->p++;
            continue;
        }
        ps->p++;
        char e = *ps->p;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *k = e ? strchr(from, e) : NULL;
        if (k) {
            s[n++] = to[k - from];
            ps->p++;
            continue;
        }
        uint32_t cp;
        if (e != 'u' || hex4(ps->p + 1, &cp)) {
            free(s);
            return fail(ps, "expected an escape: \\\" \\\\ \\/ \\b \\f \\n \\r \\t or \\uXXXX");
        }
        ps->p += 5;
        if (cp >= 0xd800 && cp < 0xdc00) { /* a surrogate pair */
            uint32_t lo;
            if (ps->p[0] != '\\' || ps->p[1] != 'u' || hex4(ps->p + 2, &lo) || lo < 0xdc00 || lo > 0xdfff) {
                free(s);
                return fail(ps, "expected the low half of a surrogate pair");
            }
            ps->p += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else if (cp >= 0xdc00 && cp < 0xe000) {
            free(s);
            return fail(ps, "a lone low surrogate");
        }
        if (cp == 0) {
            free(s);
            return fail(ps, "\\u0000 is not allowed in ddpsim's JSON");
        }
        n += put_utf8(s + n, cp);
    }
}

/* The JSON number grammar, strictly; the value by strtod. */
static ddp_status parse_number(parser *ps, json_value *v)
{
    const char *q = ps->p;
    if (*q == '-')
        q++;
    if (*q == '0') {
        q++;
    } else if (*q >= '1' && *q <= '9') {
        while (*q >= '0' && *q <= '9')
            q++;
    } else {
        return fail(ps, "expected a value");
    }
    if (*q == '.') {
        q++;
        if (!(*q >= '0' && *q <= '9')) {
            ps->p = q;
            return fail(ps, "expected a digit after '.'");
        }
        while (*q >= '0' && *q <= '9')
            q++;
    }
    if (*q == 'e' || *q == 'E') {
        q++;
        if (*q == '+' || *q == '-')
            q++;
        if (!(*q >= '0' && *q <= '9')) {
            ps->p = q;
            return fail(ps, "expected a digit in the exponent");
        }
        while (*q >= '0' && *q <= '9')
            q++;
    }
    errno = 0;
    v->type = JSON_NUMBER;
    v->number = strtod(ps->p, NULL);
    if (!isfinite(v->number))
        return fail(ps, "a number too large for a double");
    ps->p = q;
    return DDP_OK;
}

/* Grow a value's items by one zeroed slot; returns it or NULL. */
static json_value *push_item(json_value *v, size_t *cap)
{
    if (v->n == *cap) {
        size_t c = *cap ? *cap * 2 : 4;
        json_value *t = realloc(v->items, c * sizeof *t);
        if (!t)
            return NULL;
        v->items = t;
        *cap = c;
    }
    json_value *it = &v->items[v->n++];
    memset(it, 0, sizeof *it);
    return it;
}

static ddp_status parse_container(parser *ps, json_value *v, int object)
{
    if (++ps->depth > JSON_MAX_DEPTH)
        return fail(ps, "nesting deeper than 64");
    v->type = object ? JSON_OBJECT : JSON_ARRAY;
    char close = object ? '}' : ']';
    size_t cap = 0;
    ps->p++;
    skip_space(ps);
    if (*ps->p == close) {
        ps->p++;
        ps->depth--;
        return DDP_OK;
    }
    for (;;) {
        json_value *it = push_item(v, &cap);
        if (!it)
            return ddp_error(DDP_ERR_NOMEM, "JSON %s", object ? "object" : "array");
        if (object) {
            skip_space(ps);
            if (*ps->p != '"')
                return fail(ps, "expected a member name in quotes");
            DDP_CHECK(parse_string(ps, &it->key));
            skip_space(ps);
            if (*ps->p != ':')
                return fail(ps, "expected ':' after a member name");
            ps->p++;
        }
        DDP_CHECK(parse_value(ps, it));
        skip_space(ps);
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p == close) {
            ps->p++;
            ps->depth--;
            return DDP_OK;
        }
        return fail(ps, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static ddp_status parse_value(parser *ps, json_value *v)
{
    skip_space(ps);
    switch (*ps->p) {
    case '{': return parse_container(ps, v, 1);
    case '[': return parse_container(ps, v, 0);
    case '"':
        v->type = JSON_STRING;
        return parse_string(ps, &v->string);
    case 't':
    case 'f':
    case 'n': {
        static const char *const words[] = {"true", "false", "null"};
        for (int i = 0; i < 3; i++)
            if (strncmp(ps->p, words[i], strlen(words[i])) == 0) {
                ps->p += strlen(words[i]);
                v->type = i == 2 ? JSON_NULL : JSON_BOOL;
                v->boolean = i == 0;
                return DDP_OK;
            }
        return fail(ps, "expected a value");
    }
    default: return parse_number(ps, v);
    }
}

static void free_tree(json_value *v)
{
    for (size_t i = 0; i < v->n; i++)
        free_tree(&v->items[i]);
    free(v->items);
    free(v->string);
    free(v->key);
}

void json_free(json_value *v)
{
    if (!v)
        return;
    free_tree(v);
    free(v);
}

ddp_status json_parse(const char *text, json_value **out)
{
    *out = NULL;
    parser ps = {text, text, 0};
    json_value *v = calloc(1, sizeof *v);
    if (!v)
        return ddp_error(DDP_ERR_NOMEM, "JSON value");
    ddp_status s = parse_value(&ps, v);
    if (s == DDP_OK) {
        skip_space(&ps);
        if (*ps.p != '\0')
            s = fail(&ps, "expected the end of the text after the value");
    }
    if (s != DDP_OK) {
        json_free(v);
        return s;
    }
    *out = v;
    return DDP_OK;
}

const json_value *json_get(const json_value *v, const char *key)
{
    if (!v || v->type != JSON_OBJECT)
        return NULL;
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->items[i].key, key) == 0)
            return &v->items[i];
    return NULL;
}

const char *json_type_name(json_type t)
{
    switch (t) {
    case JSON_NULL: return "null";
    case JSON_BOOL: return "a boolean";
    case JSON_NUMBER: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "an array";
    case JSON_OBJECT: return "an object";
    }
    return "?";
}

ddp_status json_need(const char *path, const json_value *v, const char *key, json_type type, const json_value **out)
{
    *out = json_get(v, key);
    if (!*out)
        return ddp_error(DDP_ERR_INVALID, "%s: no \"%s\"", path, key);
    if ((*out)->type != type)
        return ddp_error(DDP_ERR_INVALID, "%s: \"%s\" is %s, expected %s", path, key, json_type_name((*out)->type),
                         json_type_name(type));
    return DDP_OK;
}
