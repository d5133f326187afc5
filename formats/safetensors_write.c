/* SPDX-License-Identifier: MIT */
/* Hugging Face safetensors, writing: one file, or a sharded set with its index.  Header JSON with
 * "__metadata__" first and the tensors in the given order, contiguous offsets, padded with spaces
 * to 8 bytes.  Every file is written atomically (path.tmp, fflush, fsync, rename, fsync of the
 * directory): on failure the old file is untouched and the temporary removed.  bf16/f16 round to
 * nearest even.  Tests: tests/formats/test_safetensors.c. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fsutil.h"
#include "formats/safetensors.h"
#include "base/sdp_log.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors_write.c assumes a little-endian host (the format is little-endian)"
#endif

#define INDEX_NAME  "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define CHUNK_ELEMS ((size_t)1 << 20) /* conversion buffer: 1 Mi elements */

/* ---- conversions from fp32 (round to nearest, ties to even; NaN stays NaN) ---- */
static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x0040u); /* quiet NaN, sign and payload top kept */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static uint16_t f32_to_f16(float f)
{
    uint32_t x, ax, sign;
    memcpy(&x, &f, 4);
    sign = (x >> 16) & 0x8000u;
    ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet, keep the top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520 (halfway past 65504, the largest half) rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: half subnormal (units of 2^-24) or zero */
        int e = (int)(ax >> 23);
        int shift = 126 - e; /* value / 2^-24 = mant >> shift, mant with its hidden bit */
        if (shift > 24)
            return (uint16_t)sign; /* below 2^-25: rounds to zero */
        uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
        uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u)))
            q++; /* may carry into the smallest normal, which is the right encoding */
        return (uint16_t)(sign | q);
    }
    uint32_t h = (ax - 0x38000000u) >> 13; /* rebias the exponent from 127 to 15 */
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

static char *path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

/* ---- atomic files ---- */
struct atomic_file {
    char *path, *tmp;
    FILE *fp;
};

static int write_error(const struct atomic_file *a, int err, const char *what)
{
    if (err == ENOSPC || err == EDQUOT) {
        int rc = sdp_err(-ENOSPC, "file %s: %s: no space left on the device", a->tmp, what);
        sdp_hint("free disk space or write to another directory; %s is untouched", a->path);
        return rc;
    }
    return sdp_err(-EIO, "file %s: %s: %s", a->tmp, what, strerror(err));
}

static int atomic_begin(struct atomic_file *a, const char *path)
{
    int fd;
    a->path = strdup(path);
    a->tmp = malloc(strlen(path) + 5);
    a->fp = NULL;
    if (!a->path || !a->tmp) {
        free(a->path);
        free(a->tmp);
        return sdp_err(-ENOMEM, "file %s: out of memory", path);
    }
    sprintf(a->tmp, "%s.tmp", path);
    fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || !(a->fp = fdopen(fd, "wb"))) {
        int err = errno, rc;
        if (fd >= 0)
            close(fd);
        rc = write_error(a, err, "cannot create");
        free(a->path);
        free(a->tmp);
        return rc;
    }
    return 0;
}

static void atomic_abort(struct atomic_file *a)
{
    if (a->fp)
        fclose(a->fp);
    unlink(a->tmp);
    free(a->path);
    free(a->tmp);
}

static int atomic_write(struct atomic_file *a, const void *buf, size_t n)
{
    if (n && fwrite(buf, 1, n, a->fp) != n)
        return write_error(a, errno, "write failed");
    return 0;
}

/* Flush, fsync, close, rename over the target, fsync the directory; on failure remove tmp. */
static int atomic_commit(struct atomic_file *a)
{
    const char *what = NULL;
    int rc = sdp_file_commit(a->fp, a->tmp, a->path, &what);
    a->fp = NULL;
    if (rc)
        rc = write_error(a, -rc, what);
    else if ((rc = sdp_fsync_parent(a->path)) != 0)
        rc = sdp_err(-EIO, "file %s: fsync of its directory after the rename failed: %s", a->path,
                     strerror(-rc));
    free(a->path);
    free(a->tmp);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Validate the tensors to write and compute their on-disk sizes. */
static int check_wtensors(const char *path, const struct sdp_st_wtensor *t, int n, uint64_t *nbytes)
{
    const char **names;
    int rc = 0;
    if (n < 0 || (n > 0 && !t))
        return sdp_err(-EINVAL, "file %s: %d tensors", path, n);
    for (int i = 0; i < n; i++) {
        uint64_t ne = 1;
        size_t esz = sdp_st_dtype_size(t[i].dtype);
        if (!t[i].name || !t[i].name[0] || !strcmp(t[i].name, "__metadata__"))
            return sdp_err(-EINVAL, "file %s: tensor %d has an empty or reserved name", path, i);
        if (t[i].ndim < 0 || t[i].ndim > SDP_ST_MAX_DIMS)
            return sdp_err(-EINVAL, "file %s: tensor %s: ndim %d", path, t[i].name, t[i].ndim);
        for (int d = 0; d < t[i].ndim; d++) {
            if (t[i].shape[d] < 0 || __builtin_mul_overflow(ne, (uint64_t)t[i].shape[d], &ne))
                return sdp_err(-EINVAL, "file %s: tensor %s: bad shape[%d] = %lld", path, t[i].name,
                               d, (long long)t[i].shape[d]);
        }
        if (esz == 0)
            return sdp_err(-EINVAL, "file %s: tensor %s: cannot write dtype %d", path, t[i].name,
                           (int)t[i].dtype);
        int is_int = t[i].dtype == SDP_ST_I32 || t[i].dtype == SDP_ST_I64;
        if (ne > 0 && (is_int ? !t[i].data_i32 : !t[i].data_f32))
            return sdp_err(-EINVAL, "file %s: tensor %s: no %s source data for dtype %s", path,
                           t[i].name, is_int ? "int32" : "fp32", sdp_st_dtype_name(t[i].dtype));
        if (__builtin_mul_overflow(ne, (uint64_t)esz, &nbytes[i]))
            return sdp_err(-EINVAL, "file %s: tensor %s: too large", path, t[i].name);
    }
    names = malloc((size_t)(n > 0 ? n : 1) * sizeof(*names));
    if (!names)
        return sdp_err(-ENOMEM, "file %s: out of memory", path);
    for (int i = 0; i < n; i++)
        names[i] = t[i].name;
    qsort(names, (size_t)n, sizeof(*names), cmp_str);
    for (int i = 1; i < n && rc == 0; i++) {
        if (!strcmp(names[i - 1], names[i]))
            rc = sdp_err(-EINVAL, "file %s: tensor name %s appears twice", path, names[i]);
    }
    free(names);
    return rc;
}

static json_t *shape_json(const struct sdp_st_wtensor *t)
{
    json_t *a = json_array();
    for (int d = 0; a && d < t->ndim; d++) {
        if (json_array_append_new(a, json_integer(t->shape[d])) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* Header JSON: "__metadata__" first, then the tensors in the given order, offsets contiguous. */
static char *build_header(const struct sdp_st_wtensor *t, int n, const uint64_t *nbytes,
                          const char *const *keys, const char *const *values, int nmeta,
                          size_t *len)
{
    json_t *root = json_object(), *meta = json_object();
    char *s = NULL, *padded = NULL;
    uint64_t off = 0;
    int bad = !root || !meta;

    bad = bad || json_object_set_new(meta, "format", json_string("pt")) != 0;
    for (int i = 0; i < nmeta && !bad; i++)
        bad = !keys[i] || !values[i] || json_object_set_new(meta, keys[i], json_string(values[i]));
    bad = bad || json_object_set(root, "__metadata__", meta) != 0;
    for (int i = 0; i < n && !bad; i++) {
        json_t *e = json_pack("{s:s, s:o, s:[I,I]}", "dtype", sdp_st_dtype_name(t[i].dtype),
                              "shape", shape_json(&t[i]), "data_offsets", (json_int_t)off,
                              (json_int_t)(off + nbytes[i]));
        bad = !e || json_object_set_new(root, t[i].name, e) != 0;
        off += nbytes[i];
    }
    if (!bad)
        s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(meta);
    json_decref(root);
    if (!s)
        return NULL;
    /* pad with spaces so that the data block starts on an 8-byte boundary */
    size_t l = strlen(s), lp = (l + 7) / 8 * 8;
    padded = malloc(lp + 1);
    if (padded) {
        memcpy(padded, s, l);
        memset(padded + l, ' ', lp - l);
        padded[lp] = '\0';
        *len = lp;
    }
    free(s);
    return padded;
}

static int write_data(struct atomic_file *a, const struct sdp_st_wtensor *t, size_t nelems,
                      void *buf)
{
    int rc = 0;
    if (t->dtype == SDP_ST_F32)
        return atomic_write(a, t->data_f32, nelems * 4);
    if (t->dtype == SDP_ST_I32)
        return atomic_write(a, t->data_i32, nelems * 4);
    for (size_t done = 0; done < nelems && rc == 0;) {
        size_t k = nelems - done < CHUNK_ELEMS ? nelems - done : CHUNK_ELEMS;
        uint16_t *h = buf;
        int64_t *q = buf;
        for (size_t i = 0; i < k; i++) {
            if (t->dtype == SDP_ST_BF16)
                h[i] = f32_to_bf16(t->data_f32[done + i]);
            else if (t->dtype == SDP_ST_F16)
                h[i] = f32_to_f16(t->data_f32[done + i]);
            else
                q[i] = t->data_i32[done + i];
        }
        rc = atomic_write(a, buf, k * sdp_st_dtype_size(t->dtype));
        done += k;
    }
    return rc;
}

int sdp_st_write(const char *path, const struct sdp_st_wtensor *t, int n,
                 const char *const *meta_keys, const char *const *meta_values, int nmeta)
{
    uint64_t *nbytes = calloc((size_t)(n > 0 ? n : 1), sizeof(*nbytes));
    struct atomic_file a;
    char *hdr = NULL;
    void *buf = NULL;
    size_t hlen = 0;
    unsigned char lenb[8];
    int rc;

    if (!nbytes)
        return sdp_err(-ENOMEM, "file %s: out of memory", path);
    rc = check_wtensors(path, t, n, nbytes);
    if (rc == 0 && nmeta > 0 && (!meta_keys || !meta_values))
        rc = sdp_err(-EINVAL, "file %s: %d metadata pairs without keys or values", path, nmeta);
    if (rc) {
        free(nbytes);
        return rc;
    }
    hdr = build_header(t, n, nbytes, meta_keys, meta_values, nmeta, &hlen);
    buf = malloc(CHUNK_ELEMS * 8);
    if (!hdr || !buf) {
        rc = sdp_err(-ENOMEM, "file %s: building the header", path);
        goto out;
    }
    rc = atomic_begin(&a, path);
    if (rc)
        goto out;
    for (int i = 0; i < 8; i++)
        lenb[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    rc = atomic_write(&a, lenb, 8);
    if (rc == 0)
        rc = atomic_write(&a, hdr, hlen);
    for (int i = 0; i < n && rc == 0; i++)
        rc = write_data(&a, &t[i], (size_t)(nbytes[i] / sdp_st_dtype_size(t[i].dtype)), buf);
    if (rc)
        atomic_abort(&a);
    else
        rc = atomic_commit(&a);
out:
    free(buf);
    free(hdr);
    free(nbytes);
    return rc;
}

static int write_text_atomic(const char *path, const char *text)
{
    struct atomic_file a;
    int rc = atomic_begin(&a, path);
    if (rc)
        return rc;
    rc = atomic_write(&a, text, strlen(text));
    if (rc) {
        atomic_abort(&a);
        return rc;
    }
    return atomic_commit(&a);
}

static void remove_stale(const char *dir, const char *name)
{
    char *p = path_join(dir, name);
    if (p && unlink(p) == 0)
        SDP_INFO("removed stale %s", p);
    free(p);
}

int sdp_st_write_sharded(const char *dir, const struct sdp_st_wtensor *t, int n,
                         size_t max_shard_bytes)
{
    uint64_t *nbytes = calloc((size_t)(n > 0 ? n : 1), sizeof(*nbytes)), cur = 0, total = 0;
    int *first = calloc((size_t)(n > 0 ? n : 1) + 1, sizeof(int)), nshards = 0, rc;
    json_t *index = NULL, *wm = NULL;
    char *text = NULL, *p = NULL;

    if (!nbytes || !first) {
        rc = sdp_err(-ENOMEM, "directory %s: out of memory", dir);
        goto out;
    }
    rc = check_wtensors(dir, t, n, nbytes);
    if (rc)
        goto out;
    rc = sdp_mkdir_p(dir);
    if (rc)
        goto out;
    /* greedy in the given order: a new shard when the next tensor would pass the limit */
    for (int i = 0; i < n; i++) {
        if (nshards == 0 || (max_shard_bytes > 0 && cur > 0 && cur + nbytes[i] > max_shard_bytes)) {
            first[nshards++] = i;
            cur = 0;
        }
        cur += nbytes[i];
        total += nbytes[i];
    }
    first[nshards] = n;
    if (nshards <= 1) {
        p = path_join(dir, SINGLE_NAME);
        rc = p ? sdp_st_write(p, t, n, NULL, NULL, 0) : sdp_err(-ENOMEM, "out of memory");
        if (rc == 0)
            remove_stale(dir, INDEX_NAME);
        goto out;
    }
    if (nshards > 99999) {
        rc = sdp_err(-EINVAL, "directory %s: %d shards, at most 99999", dir, nshards);
        goto out;
    }
    index = json_pack("{s:{s:I}, s:{}}", "metadata", "total_size", (json_int_t)total, "weight_map");
    wm = json_object_get(index, "weight_map");
    for (int k = 0; k < nshards && rc == 0; k++) {
        char name[64];
        snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", k + 1, nshards);
        free(p);
        p = path_join(dir, name);
        if (!p || !wm) {
            rc = sdp_err(-ENOMEM, "directory %s: out of memory", dir);
            break;
        }
        rc = sdp_st_write(p, t + first[k], first[k + 1] - first[k], NULL, NULL, 0);
        for (int i = first[k]; i < first[k + 1] && rc == 0; i++) {
            if (json_object_set_new(wm, t[i].name, json_string(name)) != 0)
                rc = sdp_err(-ENOMEM, "directory %s: out of memory", dir);
        }
    }
    if (rc)
        goto out;
    text = json_dumps(index, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    free(p);
    p = path_join(dir, INDEX_NAME);
    if (!text || !p) {
        rc = sdp_err(-ENOMEM, "directory %s: out of memory", dir);
        goto out;
    }
    rc = write_text_atomic(p, text);
    if (rc == 0)
        remove_stale(dir, SINGLE_NAME); /* transformers prefers model.safetensors to the index */
out:
    free(text);
    free(p);
    json_decref(index);
    free(first);
    free(nbytes);
    return rc;
}
