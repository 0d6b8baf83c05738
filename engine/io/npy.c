/*
 * npy.c - the .npy reader and writer (npy.h).
 *
 * Header: magic "\x93NUMPY", major, minor, header length (2 bytes in 1.0,
 * 4 in 2.0/3.0, little-endian), then a Python dict literal such as
 * {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with
 * spaces and a newline so the data starts on a 64-byte boundary.
 */
#include "npy.h"

#include "file.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NPY_MAX_HEADER 65536
#define NPY_MAX_BYTES ((size_t)1 << 36)

static const char *const descr_of[] = {"<f4", "<f8", "<i4"};

size_t npy_dtype_size(npy_dtype t)
{
    return t == NPY_F8 ? 8 : 4;
}

ddp_status npy_write(const char *path, npy_dtype dtype, const size_t *shape, int ndim, const void *data)
{
    if (ndim < 0 || ndim > NPY_MAX_DIMS || (unsigned)dtype > NPY_I4)
        return ddp_error(DDP_ERR_INVALID, "npy_write(%s): %d dimensions, dtype %d", path, ndim, (int)dtype);
    char dict[512];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr_of[dtype]);
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%zu,%s", shape[i], (i + 1 < ndim) ? " " : "");
        count *= shape[i];
    }
    /* A 1-d tuple needs its trailing comma, "(8,)"; longer ones read "(2, 3)". */
    if (ndim > 1)
        n--;
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    size_t total = 10 + (size_t)n + 1; /* preamble, dict, newline */
    size_t pad = (64 - total % 64) % 64;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    size_t hlen = (size_t)n + pad + 1;
    pre[8] = (unsigned char)(hlen & 0xff);
    pre[9] = (unsigned char)(hlen >> 8);

    FILE *f = fopen(path, "wb");
    if (!f)
        return ddp_error(DDP_ERR_SYSTEM, "cannot create %s: %s", path, strerror(errno));
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)n, f) == (size_t)n;
    for (size_t i = 0; ok && i < pad; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    size_t bytes = count * npy_dtype_size(dtype);
    ok = ok && (bytes == 0 || fwrite(data, 1, bytes, f) == bytes);
    int e = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (!ok)
        return ddp_error(DDP_ERR_SYSTEM, "cannot write %s: %s", path, strerror(e));
    return DDP_OK;
}

/* The value text after 'key': in the dict, or NULL. */
static const char *dict_value(const char *dict, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(dict, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    while (*p == ' ')
        p++;
    if (*p != ':')
        return NULL;
    p++;
    while (*p == ' ')
        p++;
    return p;
}

static ddp_status parse_shape(const char *p, npy_array *out)
{
    if (*p++ != '(')
        return ddp_error(DDP_ERR_INVALID, "npy: shape is not a tuple");
    out->ndim = 0;
    out->count = 1;
    for (;;) {
        while (*p == ' ')
            p++;
        if (*p == ')')
            return DDP_OK;
        if (!isdigit((unsigned char)*p))
            return ddp_error(DDP_ERR_INVALID, "npy: bad shape entry near '%.10s'", p);
        if (out->ndim == NPY_MAX_DIMS)
            return ddp_error(DDP_ERR_INVALID, "npy: more than %d dimensions", NPY_MAX_DIMS);
        errno = 0;
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (errno || v > NPY_MAX_BYTES)
            return ddp_error(DDP_ERR_INVALID, "npy: dimension too large");
        out->shape[out->ndim++] = (size_t)v;
        if (v && out->count > NPY_MAX_BYTES / v)
            return ddp_error(DDP_ERR_INVALID, "npy: array too large");
        out->count *= (size_t)v;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == ',')
            p++;
        else if (*p != ')')
            return ddp_error(DDP_ERR_INVALID, "npy: expected ',' or ')' in shape");
    }
}

/*
 * The header of a .npy image whose first `got` bytes are buf and whose whole
 * length is total: dtype, shape and count into out (no data), the data's
 * offset into *data_off. The data must fill the rest of the image exactly.
 */
static ddp_status parse_header(const unsigned char *buf, size_t got, size_t total, npy_array *out, size_t *data_off)
{
    memset(out, 0, sizeof *out);
    if (got < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return ddp_error(DDP_ERR_INVALID, "npy: not a .npy file (bad magic)");
    int major = buf[6];
    size_t hlen, start;
    if (major == 1) {
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
        start = 10;
    } else if (major == 2 || major == 3) {
        if (got < 12)
            return ddp_error(DDP_ERR_INVALID, "npy: truncated header");
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        start = 12;
    } else {
        return ddp_error(DDP_ERR_INVALID, "npy: unsupported format version %d.%d", major, buf[7]);
    }
    if (hlen > NPY_MAX_HEADER || start + hlen > got)
        return ddp_error(DDP_ERR_INVALID, "npy: header of %zu bytes does not fit the file", hlen);
    char dict[NPY_MAX_HEADER + 1];
    memcpy(dict, buf + start, hlen);
    dict[hlen] = '\0';
    if (strlen(dict) != hlen)
        return ddp_error(DDP_ERR_INVALID, "npy: NUL byte in the header");

    const char *d = dict_value(dict, "descr");
    int found = -1;
    for (int t = 0; d && t < 3; t++) {
        size_t l = strlen(descr_of[t]);
        if (d[0] == '\'' && strncmp(d + 1, descr_of[t], l) == 0 && d[1 + l] == '\'')
            found = t;
    }
    if (found < 0)
        return ddp_error(DDP_ERR_INVALID, "npy: unsupported or missing descr (need '<f4', '<f8' or '<i4')");
    out->dtype = (npy_dtype)found;
    const char *fo = dict_value(dict, "fortran_order");
    if (!fo || strncmp(fo, "False", 5) != 0)
        return ddp_error(DDP_ERR_INVALID, "npy: only C order (fortran_order False) is supported");
    const char *sh = dict_value(dict, "shape");
    if (!sh)
        return ddp_error(DDP_ERR_INVALID, "npy: no shape in the header");
    DDP_CHECK(parse_shape(sh, out));

    size_t bytes = out->count * npy_dtype_size(out->dtype);
    if (total - start - hlen != bytes)
        return ddp_error(DDP_ERR_INVALID, "npy: %zu data bytes for a shape that needs %zu", total - start - hlen,
                         bytes);
    *data_off = start + hlen;
    return DDP_OK;
}

ddp_status npy_parse(const unsigned char *buf, size_t len, npy_array *out)
{
    size_t off;
    DDP_CHECK(parse_header(buf, len, len, out, &off));
    size_t bytes = out->count * npy_dtype_size(out->dtype);
    out->data = malloc(bytes ? bytes : 1);
    if (!out->data)
        return ddp_error(DDP_ERR_NOMEM, "npy: %zu bytes", bytes);
    memcpy(out->data, buf + off, bytes);
    return DDP_OK;
}

/* Open path and parse its header (no data read): the open file, the layout, the data's offset. */
static ddp_status open_header(const char *path, FILE **f, npy_array *hdr, size_t *data_off)
{
    ddp_status opened;
    *f = file_open_regular(path, &opened);
    if (!*f)
        return opened;
    unsigned char head[NPY_MAX_HEADER + 16];
    size_t got = fread(head, 1, sizeof head, *f);
    struct stat st;
    ddp_status s;
    if (fstat(fileno(*f), &st) != 0)
        s = ddp_error(DDP_ERR_INVALID, "%s: cannot stat", path);
    else if ((size_t)st.st_size > NPY_MAX_BYTES)
        s = ddp_error(DDP_ERR_INVALID, "%s: larger than %zu bytes", path, NPY_MAX_BYTES);
    else if ((s = parse_header(head, got, (size_t)st.st_size, hdr, data_off)) != DDP_OK)
        s = ddp_error_prefix(s, path);
    if (s != DDP_OK) {
        fclose(*f);
        *f = NULL;
    }
    return s;
}

ddp_status npy_read(const char *path, npy_array *out)
{
    memset(out, 0, sizeof *out);
    char *buf;
    size_t len;
    DDP_CHECK(file_read_regular(path, NPY_MAX_BYTES, &buf, &len));
    ddp_status s = npy_parse((const unsigned char *)buf, len, out);
    free(buf);
    if (s != DDP_OK)
        return ddp_error_prefix(s, path);
    return DDP_OK;
}

void npy_free(npy_array *a)
{
    free(a->data);
    a->data = NULL;
}

const char *npy_dtype_name(npy_dtype t)
{
    return t == NPY_I4 ? "int32" : t == NPY_F4 ? "float32" : "float64";
}

void npy_format_shape(const size_t *shape, int ndim, char *buf, size_t len)
{
    int n = snprintf(buf, len, "[");
    for (int i = 0; i < ndim && n > 0 && (size_t)n < len; i++)
        n += snprintf(buf + n, len - (size_t)n, "%s%zu", i ? ", " : "", shape[i]);
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, "]");
}

/* arr against (dtype, shape): DDP_ERR_INVALID naming path and both when they differ. */
static ddp_status same_layout(const char *path, const npy_array *arr, npy_dtype dtype, const size_t *shape, int ndim)
{
    int same = arr->dtype == dtype && arr->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = arr->shape[i] == shape[i];
    if (same)
        return DDP_OK;
    char want[64], got[64];
    npy_format_shape(shape, ndim, want, sizeof want);
    npy_format_shape(arr->shape, arr->ndim, got, sizeof got);
    return ddp_error(DDP_ERR_INVALID, "%s: expected %s of shape %s, found %s of shape %s", path, npy_dtype_name(dtype),
                     want, npy_dtype_name(arr->dtype), got);
}

ddp_status npy_read_exact(const char *path, npy_dtype dtype, const size_t *shape, int ndim, void *dst,
                          int finite_only)
{
    FILE *f;
    npy_array hdr;
    size_t off;
    DDP_CHECK(open_header(path, &f, &hdr, &off));
    ddp_status s = same_layout(path, &hdr, dtype, shape, ndim);
    size_t bytes = hdr.count * npy_dtype_size(dtype);
    /* The data straight into dst: a recorded run's files are the size of the model. */
    if (s == DDP_OK && (fseek(f, (long)off, SEEK_SET) != 0 || fread(dst, 1, bytes, f) != bytes))
        s = ddp_error(DDP_ERR_INVALID, "%s: cannot read its %zu data bytes", path, bytes);
    fclose(f);
    if (s == DDP_OK && dtype == NPY_F4 && finite_only) {
        const float *x = dst;
        for (size_t i = 0; i < hdr.count && s == DDP_OK; i++)
            if (!isfinite(x[i]))
                s = ddp_error(DDP_ERR_INVALID, "%s: element %zu is %g; a run on it could verify nothing", path, i,
                              (double)x[i]);
    }
    return s;
}

ddp_status npy_check_header(const char *path, npy_dtype dtype, const size_t *shape, int ndim)
{
    FILE *f;
    npy_array hdr;
    size_t off;
    DDP_CHECK(open_header(path, &f, &hdr, &off));
    fclose(f);
    return same_layout(path, &hdr, dtype, shape, ndim);
}
