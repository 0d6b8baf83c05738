/*
 * json.h - reading JSON: the manifests of dump directories (manifest.json),
 * written by ddpsim, by PyTorch scripts or by anyone else. A strict RFC 8259
 * parser into a small tree; every error says the line and column and what
 * was expected. Bounded: nesting deeper than JSON_MAX_DEPTH is refused.
 * Writing JSON is engine/base/jsonw.h.
 */
#ifndef DDPSIM_JSON_H
#define DDPSIM_JSON_H

#include <stddef.h>

#include "status.h"

#define JSON_MAX_DEPTH 64

typedef enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json_value json_value;
struct json_value {
    json_type type;
    int boolean;       /* JSON_BOOL */
    double number;     /* JSON_NUMBER */
    char *string;      /* JSON_STRING (UTF-8, NUL-terminated; an embedded NUL is refused) */
    char *key;         /* the member's name, when this value is a member of an object */
    json_value *items; /* JSON_ARRAY: elements; JSON_OBJECT: members, in document order */
    size_t n;
};

/* Parse text (NUL-terminated) into *out. DDP_ERR_INVALID "line L, column C: ..." on any error. */
ddp_status json_parse(const char *text, json_value **out);
void json_free(json_value *v);

/* The member named key of an object (the first if repeated), or NULL (also when v is not an object). */
const json_value *json_get(const json_value *v, const char *key);

/* A JSON type's name, for messages: "a string", "an object", ... */
const char *json_type_name(json_type t);

/* Member key of v, of the given type: DDP_ERR_INVALID "PATH: no "key"" or "PATH: "key" is ..., expected ...". */
ddp_status json_need(const char *path, const json_value *v, const char *key, json_type type, const json_value **out);

#endif
