/*
 * input_text.h - the harnesses' input as a C string: a malloc'd copy of the
 * fuzzer's bytes with a NUL after them (the caller frees it), or NULL when
 * it is longer than max (0: no limit) or memory ran out.
 */
#ifndef DDPSIM_FUZZ_INPUT_TEXT_H
#define DDPSIM_FUZZ_INPUT_TEXT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline char *fuzz_text(const uint8_t *data, size_t size, size_t max)
{
    if (max && size > max)
        return NULL;
    char *text = malloc(size + 1);
    if (!text)
        return NULL;
    memcpy(text, data, size);
    text[size] = '\0';
    return text;
}

#endif
