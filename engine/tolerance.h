/*
 * tolerance.h - how two gradients are compared: bitwise (the default),
 * within N units in the last place, or within rtol/atol as numpy.allclose
 * (|actual - expected| <= atol + rtol * |expected|). In every mode a NaN or
 * an infinity on either side is a mismatch: non-finite values never pass.
 */
#ifndef DDPSIM_TOLERANCE_H
#define DDPSIM_TOLERANCE_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef enum tol_kind { TOL_BITWISE, TOL_ULP, TOL_CLOSE } tol_kind;

typedef struct tolerance {
    tol_kind kind;
    uint32_t ulps;      /* TOL_ULP */
    double rtol, atol;  /* TOL_CLOSE */
} tolerance;

/* "bitwise" | "ulp:N" | "rtol=X,atol=Y" (either part may be left out: 0). */
ddp_status tol_parse(const char *text, tolerance *out);
/* The canonical text of t ("bitwise", "ulp:4", "rtol=1e-05,atol=1e-08"). */
const char *tol_format(const tolerance *t, char *buf, size_t len);

/* Distance in units in the last place between two floats (0 for +0 and -0; UINT32_MAX if either is NaN). */
uint32_t tol_ulp_distance(float a, float b);

/* 1 when actual passes against expected. */
int tol_match(const tolerance *t, float expected, float actual);

#endif
