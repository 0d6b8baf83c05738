/*
 * jsonw.h - the few JSON writing helpers ddpsim's reports and manifests
 * need: escaped strings and numbers that stay valid JSON when they are not
 * finite (written as the strings "nan", "inf", "-inf").
 */
#ifndef DDPSIM_JSONW_H
#define DDPSIM_JSONW_H

#include <stddef.h>
#include <stdio.h>

void jsonw_string(FILE *f, const char *s);
void jsonw_number(FILE *f, double x);
/* A float as the shortest decimal that reads back as the same float (0.1f as 0.1). */
void jsonw_float(FILE *f, float x);
/* ... the same into buf. */
void jsonw_float_text(float x, char *buf, size_t len);
/* A double as the shortest decimal that reads back as the same double, into buf. */
void jsonw_number_text(double x, char *buf, size_t len);

#endif
