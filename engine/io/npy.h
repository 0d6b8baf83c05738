/*
 * npy.h - reading and writing NumPy .npy files (format version 1.0 written;
 * 1.0, 2.0 and 3.0 read), the array format of ddpsim's dumps and of the
 * golden PyTorch data. Little-endian float32, float64 and int32, C order.
 *
 * The reader is strict and bounded: any malformed header, unsupported dtype,
 * Fortran order, absurd shape or short file is DDP_ERR_INVALID with a
 * message; it never reads past the buffer. Not a general NumPy reader.
 */
#ifndef DDPSIM_NPY_H
#define DDPSIM_NPY_H

#include <stddef.h>

#include "status.h"

#define NPY_MAX_DIMS 8

typedef enum npy_dtype { NPY_F4, NPY_F8, NPY_I4 } npy_dtype;

typedef struct npy_array {
    npy_dtype dtype;
    int ndim;
    size_t shape[NPY_MAX_DIMS];
    size_t count; /* product of shape (1 for a 0-d array) */
    void *data;   /* count elements, owned by the array */
} npy_array;

size_t npy_dtype_size(npy_dtype t);

/* Write an array. DDP_ERR_SYSTEM (with the path and errno text) when the file cannot be written. */
ddp_status npy_write(const char *path, npy_dtype dtype, const size_t *shape, int ndim, const void *data);

/* Parse a whole .npy image in memory into out (data is copied). */
ddp_status npy_parse(const unsigned char *buf, size_t len, npy_array *out);

/* Read a file: DDP_ERR_SYSTEM when it cannot be opened or read, else as npy_parse. */
ddp_status npy_read(const char *path, npy_array *out);

void npy_free(npy_array *a);

/* "float32", "float64", "int32". */
const char *npy_dtype_name(npy_dtype t);
/* "[8, 4]" into buf. */
void npy_format_shape(const size_t *shape, int ndim, char *buf, size_t len);

/*
 * Read path into dst, checking dtype and shape exactly (a [32, 64] where
 * [64, 32] belongs is refused, not reinterpreted) and, with finite_only,
 * that every float is finite. Errors name the file and what was found.
 */
ddp_status npy_read_exact(const char *path, npy_dtype dtype, const size_t *shape, int ndim, void *dst,
                          int finite_only);

/* The same checks of dtype, shape and the file's length on the header alone (the data is not read). */
ddp_status npy_check_header(const char *path, npy_dtype dtype, const size_t *shape, int ndim);

#endif
