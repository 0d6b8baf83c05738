/*
 * fuzz_npy.c - libFuzzer harness: the .npy reader on arbitrary bytes. It
 * must accept only well-formed arrays whose data fits exactly, and never
 * read past the input.
 */
#include <stdint.h>
#include <stdlib.h>

#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    npy_array a;
    if (npy_parse(data, size, &a) == DDP_OK) {
        size_t count = 1;
        for (int d = 0; d < a.ndim; d++)
            count *= a.shape[d];
        if (count != a.count || a.ndim > NPY_MAX_DIMS || count * npy_dtype_size(a.dtype) > size)
            abort();
        volatile unsigned char sink = 0;
        for (size_t i = 0; i < count * npy_dtype_size(a.dtype); i++)
            sink ^= ((unsigned char *)a.data)[i]; /* every byte of the copy is readable */
        (void)sink;
        npy_free(&a);
    }
    return 0;
}
