/* SPDX-License-Identifier: MIT */
/* Hugging Face safetensors: read one file or a sharded set, write one file or a sharded set.
 * Every header is validated as strictly as the reference reader (offsets in range, sizes matching
 * dtype x shape, tensors tiling the data block) before any data is trusted; errors name the file
 * and the tensor, never assert.  Writes are atomic (tmp file, fsync, rename, fsync of the
 * directory) and leave an existing file untouched on failure.  Tests:
 * tests/formats/test_safetensors.c. */
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

#include "formats/safetensors.h"
#include "base/sdp_log.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host (the format is little-endian)"
#endif

/* Dtypes that are listed but cannot be converted: one value past the header's enum. */
#define ST_DTYPE_OTHER SDP_ST_OTHER

#define MAX_HEADER_BYTES (100u * 1024 * 1024) /* the reference reader's limit */
#define INDEX_NAME       "model.safetensors.index.json"
#define SINGLE_NAME      "model.safetensors"
#define CHUNK_ELEMS      ((size_t)1 << 20) /* conversion buffer: 1 Mi elements */

struct dtype_info {
    const char *name;
    size_t size;
    enum sdp_st_dtype code;
};

static const struct dtype_info dtypes[] = {
    { "F32", 4, SDP_ST_F32 },         { "BF16", 2, SDP_ST_BF16 },
    { "F16", 2, SDP_ST_F16 },         { "I32", 4, SDP_ST_I32 },
    { "I64", 8, SDP_ST_I64 },         { "F64", 8, ST_DTYPE_OTHER },
    { "I16", 2, ST_DTYPE_OTHER },     { "U16", 2, ST_DTYPE_OTHER },
    { "I8", 1, ST_DTYPE_OTHER },      { "U8", 1, ST_DTYPE_OTHER },
    { "BOOL", 1, ST_DTYPE_OTHER },    { "F8_E4M3", 1, ST_DTYPE_OTHER },
    { "F8_E5M2", 1, ST_DTYPE_OTHER }, { "F8_E8M0", 1, ST_DTYPE_OTHER },
    { "U32", 4, ST_DTYPE_OTHER },     { "U64", 8, ST_DTYPE_OTHER },
    { "C64", 8, ST_DTYPE_OTHER },
};

struct st_file {
    char *path;
    int fd;
    uint64_t size;
};

struct name_ix;

struct sdp_st {
    int nfiles;
    struct st_file *files;
    int ntensors, cap;
    struct sdp_st_tensor *tensors;
    const char **dtype_names; /* on-disk dtype name of each tensor (static strings) */
    struct name_ix *by_name;  /* tensor names sorted, with their indices */
    json_t *metadata;         /* "__metadata__" of the first file that has one */
};

const char *sdp_st_dtype_name(enum sdp_st_dtype d)
{
    for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++) {
        if (dtypes[i].code == d && d != ST_DTYPE_OTHER)
            return dtypes[i].name;
    }
    return "unsupported";
}

size_t sdp_st_dtype_size(enum sdp_st_dtype d)
{
    for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++) {
        if (dtypes[i].code == d && d != ST_DTYPE_OTHER)
            return dtypes[i].size;
    }
    return 0;
}

/* ---- conversions to fp32 (exact) ---- */
static float bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    float f;
    if (e == 0) {
        f = (float)m * 0x1p-24f; /* exact: m < 2^10 */
        memcpy(&x, &f, 4);
        x |= sign;
    } else if (e == 31) {
        x = sign | 0x7f800000u | (m << 13);
    } else {
        x = sign | ((e + 112u) << 23) | (m << 13);
    }
    memcpy(&f, &x, 4);
    return f;
}

/* ---- low-level I/O ---- */
static int pread_full(const struct st_file *f, void *buf, size_t n, uint64_t off, const char *what)
{
    char *p = buf;
    while (n > 0) {
        size_t want = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t r = pread(f->fd, p, want, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return sdp_err(-EIO, "file %s: reading %s (%zu bytes at offset %llu) failed: %s",
                           f->path, what, n, (unsigned long long)off, strerror(errno));
        if (r == 0)
            return sdp_err(-EIO, "file %s: end of file reading %s at offset %llu (truncated?)",
                           f->path, what, (unsigned long long)off);
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static uint64_t le64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
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

/* Directory part of path ("." when there is none); caller frees. */
static char *dir_of(const char *path)
{
    const char *s = strrchr(path, '/');
    if (!s)
        return strdup(".");
    if (s == path)
        return strdup("/");
    return strndup(path, (size_t)(s - path));
}

/* ---- parsing ---- */
static int add_file(sdp_st_t *st, const char *path)
{
    struct st_file *nf = realloc(st->files, (size_t)(st->nfiles + 1) * sizeof(*nf));
    if (!nf)
        return sdp_err(-ENOMEM, "file %s: out of memory", path);
    st->files = nf;
    nf[st->nfiles].path = strdup(path);
    nf[st->nfiles].fd = -1;
    nf[st->nfiles].size = 0;
    if (!nf[st->nfiles].path)
        return sdp_err(-ENOMEM, "file %s: out of memory", path);
    return st->nfiles++;
}

static int add_tensor(sdp_st_t *st, const char *name, const struct sdp_st_tensor *t,
                      const char *dtype_name)
{
    if (st->ntensors == st->cap) {
        int cap = st->cap ? 2 * st->cap : 64;
        struct sdp_st_tensor *nt = realloc(st->tensors, (size_t)cap * sizeof(*nt));
        if (!nt)
            return sdp_err(-ENOMEM, "tensor %s: out of memory", name);
        st->tensors = nt;
        const char **nd = realloc(st->dtype_names, (size_t)cap * sizeof(*nd));
        if (!nd)
            return sdp_err(-ENOMEM, "tensor %s: out of memory", name);
        st->dtype_names = nd;
        st->cap = cap;
    }
    st->tensors[st->ntensors] = *t;
    st->tensors[st->ntensors].name = strdup(name);
    if (!st->tensors[st->ntensors].name)
        return sdp_err(-ENOMEM, "tensor %s: out of memory", name);
    st->dtype_names[st->ntensors] = dtype_name;
    st->ntensors++;
    return 0;
}

/* Integer JSON value in [0, 2^63). */
static int json_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int parse_tensor(sdp_st_t *st, int fi, const char *name, json_t *v, uint64_t data_bytes,
                        uint64_t data_start)
{
    const char *path = st->files[fi].path;
    struct sdp_st_tensor t = { 0 };
    const struct dtype_info *di = NULL;
    json_t *dt, *shape, *offs;
    uint64_t begin, end, nelems = 1, nbytes;

    if (!json_is_object(v))
        return sdp_err(-EINVAL, "file %s: tensor %s: header entry is not an object", path, name);
    dt = json_object_get(v, "dtype");
    shape = json_object_get(v, "shape");
    offs = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs))
        return sdp_err(-EINVAL,
                       "file %s: tensor %s: needs string dtype, array shape and array "
                       "data_offsets",
                       path, name);
    for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++) {
        if (!strcmp(json_string_value(dt), dtypes[i].name))
            di = &dtypes[i];
    }
    if (!di)
        return sdp_err(-EINVAL, "file %s: tensor %s: unknown dtype \"%s\"", path, name,
                       json_string_value(dt));
    if (json_array_size(shape) > SDP_ST_MAX_DIMS)
        return sdp_err(-EINVAL, "file %s: tensor %s: %zu dimensions, at most %d supported", path,
                       name, json_array_size(shape), SDP_ST_MAX_DIMS);
    t.ndim = (int)json_array_size(shape);
    for (int d = 0; d < t.ndim; d++) {
        uint64_t s;
        if (json_u64(json_array_get(shape, (size_t)d), &s) != 0)
            return sdp_err(-EINVAL, "file %s: tensor %s: shape[%d] is not a non-negative integer",
                           path, name, d);
        if (__builtin_mul_overflow(nelems, s, &nelems))
            return sdp_err(-EINVAL, "file %s: tensor %s: element count overflows", path, name);
        t.shape[d] = (int64_t)s;
    }
    if (json_array_size(offs) != 2 || json_u64(json_array_get(offs, 0), &begin) != 0 ||
        json_u64(json_array_get(offs, 1), &end) != 0)
        return sdp_err(-EINVAL,
                       "file %s: tensor %s: data_offsets must be two non-negative integers", path,
                       name);
    if (end < begin || end > data_bytes)
        return sdp_err(-EINVAL,
                       "file %s: tensor %s: data_offsets [%llu, %llu] outside the data "
                       "block of %llu bytes",
                       path, name, (unsigned long long)begin, (unsigned long long)end,
                       (unsigned long long)data_bytes);
    if (__builtin_mul_overflow(nelems, (uint64_t)di->size, &nbytes) || nbytes != end - begin)
        return sdp_err(-EINVAL,
                       "file %s: tensor %s: %llu elements of %s need %llu bytes, "
                       "data_offsets [%llu, %llu] hold %llu",
                       path, name, (unsigned long long)nelems, di->name,
                       (unsigned long long)nelems * di->size, (unsigned long long)begin,
                       (unsigned long long)end, (unsigned long long)(end - begin));
    if (nelems > SIZE_MAX)
        return sdp_err(-EINVAL, "file %s: tensor %s: too large", path, name);
    t.dtype = di->code;
    t.nelems = (size_t)nelems;
    t.offset = data_start + begin;
    t.nbytes = nbytes;
    t.file = fi;
    return add_tensor(st, name, &t, di->name);
}

static int cmp_offset(const void *a, const void *b)
{
    const struct sdp_st_tensor *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* The tensors of one file must tile its data block exactly, as the reference reader requires. */
static int check_tiling(sdp_st_t *st, int fi, int first, uint64_t data_start, uint64_t data_bytes)
{
    int n = st->ntensors - first;
    struct sdp_st_tensor *tmp = malloc((size_t)(n > 0 ? n : 1) * sizeof(*tmp));
    uint64_t pos = data_start;
    int rc = 0;
    if (!tmp)
        return sdp_err(-ENOMEM, "file %s: out of memory", st->files[fi].path);
    if (n > 0) { /* a file of no tensors: st->tensors may be NULL, and NULL + 0 is undefined */
        memcpy(tmp, st->tensors + first, (size_t)n * sizeof(*tmp));
        qsort(tmp, (size_t)n, sizeof(*tmp), cmp_offset);
    }
    for (int i = 0; i < n && rc == 0; i++) {
        if (tmp[i].offset != pos)
            rc = sdp_err(-EINVAL,
                         "file %s: tensor %s: data starts at byte %llu of the data block, "
                         "expected %llu (tensors overlap or leave a gap)",
                         st->files[fi].path, tmp[i].name,
                         (unsigned long long)(tmp[i].offset - data_start),
                         (unsigned long long)(pos - data_start));
        pos = tmp[i].offset + tmp[i].nbytes;
    }
    if (rc == 0 && pos != data_start + data_bytes)
        rc = sdp_err(-EINVAL, "file %s: tensors cover %llu bytes of a %llu-byte data block",
                     st->files[fi].path, (unsigned long long)(pos - data_start),
                     (unsigned long long)data_bytes);
    free(tmp);
    return rc;
}

/* Open file fi and parse its header. */
static int parse_file(sdp_st_t *st, int fi)
{
    struct st_file *f = &st->files[fi];
    unsigned char lenb[8];
    struct stat sb;
    char *hdr = NULL;
    json_t *root = NULL, *v;
    json_error_t jerr;
    const char *key;
    uint64_t n, data_bytes;
    int rc, first = st->ntensors;

    f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        if (errno == ENOENT)
            return sdp_err(-ENOENT, "file %s: cannot open", f->path);
        return sdp_err(-EIO, "file %s: cannot open: %s", f->path, strerror(errno));
    }
    if (fstat(f->fd, &sb) != 0)
        return sdp_err(-EIO, "file %s: fstat failed: %s", f->path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return sdp_err(-EINVAL, "file %s: not a regular file", f->path);
    f->size = (uint64_t)sb.st_size;
    if (f->size < 8)
        return sdp_err(-EINVAL, "file %s: %llu bytes, too short for a safetensors header", f->path,
                       (unsigned long long)f->size);
    rc = pread_full(f, lenb, 8, 0, "the header length");
    if (rc)
        return rc;
    n = le64(lenb);
    if (n < 2 || n > f->size - 8 || n > MAX_HEADER_BYTES) {
        rc = sdp_err(-EINVAL, "file %s: header length %llu invalid (file has %llu bytes, limit %u)",
                     f->path, (unsigned long long)n, (unsigned long long)f->size, MAX_HEADER_BYTES);
        sdp_hint("the file is truncated or not a safetensors file");
        return rc;
    }
    data_bytes = f->size - 8 - n;
    hdr = malloc((size_t)n);
    if (!hdr)
        return sdp_err(-ENOMEM, "file %s: header of %llu bytes", f->path, (unsigned long long)n);
    rc = pread_full(f, hdr, (size_t)n, 8, "the header");
    if (rc)
        goto out;
    root = json_loadb(hdr, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        rc = sdp_err(-EINVAL, "file %s: header is not valid JSON (line %d column %d: %s)", f->path,
                     jerr.line, jerr.column, jerr.text);
        goto out;
    }
    if (!json_is_object(root)) {
        rc = sdp_err(-EINVAL, "file %s: header is not a JSON object", f->path);
        goto out;
    }
    json_object_foreach (root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(v)) {
                rc = sdp_err(-EINVAL, "file %s: __metadata__ is not an object", f->path);
                goto out;
            }
            json_object_foreach (v, mk, mv) {
                if (!json_is_string(mv)) {
                    rc = sdp_err(-EINVAL, "file %s: __metadata__ value of \"%s\" is not a string",
                                 f->path, mk);
                    goto out;
                }
            }
            if (!st->metadata)
                st->metadata = json_incref(v);
            continue;
        }
        rc = parse_tensor(st, fi, key, v, data_bytes, 8 + n);
        if (rc)
            goto out;
    }
    rc = check_tiling(st, fi, first, 8 + n, data_bytes);
out:
    json_decref(root);
    free(hdr);
    return rc;
}

struct name_ix {
    const char *name;
    int ix;
};

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const struct name_ix *)a)->name, ((const struct name_ix *)b)->name);
}

static int build_name_index(sdp_st_t *st)
{
    st->by_name = malloc((size_t)(st->ntensors > 0 ? st->ntensors : 1) * sizeof(*st->by_name));
    if (!st->by_name)
        return sdp_err(-ENOMEM, "tensor index: out of memory");
    for (int i = 0; i < st->ntensors; i++) {
        st->by_name[i].name = st->tensors[i].name;
        st->by_name[i].ix = i;
    }
    qsort(st->by_name, (size_t)st->ntensors, sizeof(*st->by_name), cmp_name);
    for (int i = 1; i < st->ntensors; i++) {
        const struct sdp_st_tensor *a = &st->tensors[st->by_name[i - 1].ix];
        const struct sdp_st_tensor *b = &st->tensors[st->by_name[i].ix];
        if (!strcmp(a->name, b->name))
            return sdp_err(-EINVAL, "tensor %s is in both %s and %s", a->name,
                           st->files[a->file].path, st->files[b->file].path);
    }
    return 0;
}

/* A shard name from an index must stay inside the index's directory. */
static int shard_name_ok(const char *s)
{
    if (!s[0] || s[0] == '/')
        return 0;
    for (const char *p = s; *p;) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return 0;
        p += len + (e ? 1 : 0);
    }
    return 1;
}

static int parse_index(sdp_st_t *st, const char *index_path)
{
    json_error_t jerr;
    json_t *root, *wm, *v;
    const char *key, **shards = NULL;
    char *dir = NULL;
    int rc = 0, nshards = 0;
    struct stat sb;

    if (stat(index_path, &sb) != 0) { /* ENOENT: errno's text follows the message */
        if (errno == ENOENT)
            return sdp_err(-ENOENT, "index %s: cannot stat", index_path);
        return sdp_err(-EIO, "index %s: cannot stat: %s", index_path, strerror(errno));
    }
    if ((uint64_t)sb.st_size > MAX_HEADER_BYTES)
        return sdp_err(-EINVAL, "index %s: %lld bytes, larger than the %u-byte limit", index_path,
                       (long long)sb.st_size, MAX_HEADER_BYTES);
    root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return sdp_err(-EINVAL, "index %s: not valid JSON (line %d column %d: %s)", index_path,
                       jerr.line, jerr.column, jerr.text);
    wm = json_object_get(root, "weight_map");
    if (!json_is_object(root) || !json_is_object(wm)) {
        rc = sdp_err(-EINVAL, "index %s: no \"weight_map\" object", index_path);
        goto out;
    }
    shards = calloc(json_object_size(wm) + 1, sizeof(*shards));
    dir = dir_of(index_path);
    if (!shards || !dir) {
        rc = sdp_err(-ENOMEM, "index %s: out of memory", index_path);
        goto out;
    }
    /* distinct shard files in order of first appearance */
    json_object_foreach (wm, key, v) {
        const char *s = json_string_value(v);
        int k;
        if (!s || !shard_name_ok(s)) {
            rc = sdp_err(-EINVAL,
                         "index %s: tensor %s: shard must be a relative file name inside "
                         "the index's directory",
                         index_path, key);
            goto out;
        }
        for (k = 0; k < nshards && strcmp(shards[k], s) != 0; k++)
            ;
        if (k == nshards)
            shards[nshards++] = s;
    }
    for (int k = 0; k < nshards; k++) {
        char *p = path_join(dir, shards[k]);
        if (!p) {
            rc = sdp_err(-ENOMEM, "index %s: out of memory", index_path);
            goto out;
        }
        if (access(p, F_OK) != 0) {
            rc = sdp_err(-EINVAL, "index %s: shard %s does not exist", index_path, p);
            sdp_hint("the download is incomplete or the index belongs to another set of shards");
            free(p);
            goto out;
        }
        int fi = add_file(st, p);
        free(p);
        if (fi < 0) {
            rc = fi;
            goto out;
        }
        rc = parse_file(st, fi);
        if (rc)
            goto out;
    }
    rc = build_name_index(st);
    if (rc)
        goto out;
    json_object_foreach (wm, key, v) {
        const struct sdp_st_tensor *t = sdp_st_find(st, key);
        const char *want = json_string_value(v);
        int k;
        for (k = 0; k < nshards && strcmp(shards[k], want) != 0; k++)
            ;
        if (!t || t->file != k) {
            rc = sdp_err(-EINVAL, "index %s: tensor %s is not in its shard %s%s%s", index_path, key,
                         want, t ? ", it is in " : "", t ? st->files[t->file].path : "");
            goto out;
        }
    }
    if ((size_t)st->ntensors != json_object_size(wm))
        SDP_WARN("index %s: shards hold %d tensors, weight_map lists %zu", index_path, st->ntensors,
                 json_object_size(wm));
out:
    free(dir);
    free(shards);
    json_decref(root);
    return rc;
}

void sdp_st_close(sdp_st_t *st)
{
    if (!st)
        return;
    for (int i = 0; i < st->nfiles; i++) {
        if (st->files[i].fd >= 0)
            close(st->files[i].fd);
        free(st->files[i].path);
    }
    for (int i = 0; i < st->ntensors; i++)
        free(st->tensors[i].name);
    free(st->files);
    free(st->tensors);
    free(st->dtype_names);
    free(st->by_name);
    json_decref(st->metadata);
    free(st);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

int sdp_st_open(const char *path, sdp_st_t **out)
{
    struct stat sb;
    sdp_st_t *st;
    char *index = NULL, *single = NULL;
    int rc;

    *out = NULL;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT)
            return sdp_err(-ENOENT, "safetensors %s: cannot open", path); /* + errno's text */
        return sdp_err(-EIO, "safetensors %s: cannot stat: %s", path, strerror(errno));
    }
    st = calloc(1, sizeof(*st));
    if (!st)
        return sdp_err(-ENOMEM, "safetensors %s: out of memory", path);
    if (S_ISDIR(sb.st_mode)) {
        index = path_join(path, INDEX_NAME);
        single = path_join(path, SINGLE_NAME);
        if (!index || !single) {
            rc = sdp_err(-ENOMEM, "safetensors %s: out of memory", path);
        } else if (access(single, F_OK) == 0) { /* transformers' order: the single file first */
            rc = add_file(st, single);
            if (rc >= 0)
                rc = parse_file(st, rc);
            if (rc == 0)
                rc = build_name_index(st);
        } else if (access(index, F_OK) == 0) {
            rc = parse_index(st, index);
        } else {
            rc = sdp_err(-ENOENT, "directory %s: no %s nor %s", path, SINGLE_NAME, INDEX_NAME);
            sdp_hint("point to a Hugging Face model directory or to a .safetensors file");
        }
    } else if (ends_with(path, ".json")) {
        rc = parse_index(st, path);
    } else {
        rc = add_file(st, path);
        if (rc >= 0)
            rc = parse_file(st, rc);
        if (rc == 0)
            rc = build_name_index(st);
    }
    free(index);
    free(single);
    if (rc < 0) {
        sdp_st_close(st);
        return rc;
    }
    *out = st;
    return 0;
}

int sdp_st_num_tensors(const sdp_st_t *st)
{
    return st->ntensors;
}

const struct sdp_st_tensor *sdp_st_tensor_at(const sdp_st_t *st, int i)
{
    if (i < 0 || i >= st->ntensors)
        return NULL;
    return &st->tensors[i];
}

const struct sdp_st_tensor *sdp_st_find(const sdp_st_t *st, const char *name)
{
    int lo = 0, hi = st->ntensors - 1;
    if (!st->by_name)
        return NULL;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const struct sdp_st_tensor *t = &st->tensors[st->by_name[mid].ix];
        int c = strcmp(name, t->name);
        if (c == 0)
            return t;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *sdp_st_metadata(const sdp_st_t *st, const char *key)
{
    return st->metadata ? json_string_value(json_object_get(st->metadata, key)) : NULL;
}

const char *sdp_st_file_path(const sdp_st_t *st, int i)
{
    if (i < 0 || i >= st->nfiles)
        return NULL;
    return st->files[i].path;
}

/* Check that t belongs to st and dst holds exactly its elements. */
static int check_read(const sdp_st_t *st, const struct sdp_st_tensor *t, size_t nelems)
{
    if (!t || t < st->tensors || t >= st->tensors + st->ntensors)
        return sdp_err(-EINVAL, "tensor does not belong to this safetensors set");
    if (nelems != t->nelems)
        return sdp_err(-EINVAL, "file %s: tensor %s has %zu elements, destination %zu",
                       st->files[t->file].path, t->name, t->nelems, nelems);
    return 0;
}

int sdp_st_read_f32(sdp_st_t *st, const struct sdp_st_tensor *t, float *dst, size_t nelems)
{
    int rc = check_read(st, t, nelems);
    const struct st_file *f;
    uint16_t *buf;
    if (rc)
        return rc;
    f = &st->files[t->file];
    if (t->dtype == SDP_ST_F32)
        return pread_full(f, dst, nelems * 4, t->offset, t->name);
    if (t->dtype != SDP_ST_BF16 && t->dtype != SDP_ST_F16)
        return sdp_err(-EINVAL, "file %s: tensor %s has dtype %s; fp32 reads take F32, BF16, F16",
                       f->path, t->name, st->dtype_names[t - st->tensors]);
    buf = malloc((nelems < CHUNK_ELEMS ? nelems : CHUNK_ELEMS) * 2 + 2);
    if (!buf)
        return sdp_err(-ENOMEM, "tensor %s: conversion buffer", t->name);
    for (size_t done = 0; done < nelems && rc == 0;) {
        size_t k = nelems - done < CHUNK_ELEMS ? nelems - done : CHUNK_ELEMS;
        rc = pread_full(f, buf, k * 2, t->offset + done * 2, t->name);
        for (size_t i = 0; i < k && rc == 0; i++)
            dst[done + i] = t->dtype == SDP_ST_BF16 ? bf16_to_f32(buf[i]) : f16_to_f32(buf[i]);
        done += k;
    }
    free(buf);
    return rc;
}

int sdp_st_read_i32(sdp_st_t *st, const struct sdp_st_tensor *t, int32_t *dst, size_t nelems)
{
    int rc = check_read(st, t, nelems);
    const struct st_file *f;
    int64_t *buf;
    if (rc)
        return rc;
    f = &st->files[t->file];
    if (t->dtype == SDP_ST_I32)
        return pread_full(f, dst, nelems * 4, t->offset, t->name);
    if (t->dtype != SDP_ST_I64)
        return sdp_err(-EINVAL, "file %s: tensor %s has dtype %s; int32 reads take I32, I64",
                       f->path, t->name, st->dtype_names[t - st->tensors]);
    buf = malloc((nelems < CHUNK_ELEMS ? nelems : CHUNK_ELEMS) * 8 + 8);
    if (!buf)
        return sdp_err(-ENOMEM, "tensor %s: conversion buffer", t->name);
    for (size_t done = 0; done < nelems && rc == 0;) {
        size_t k = nelems - done < CHUNK_ELEMS ? nelems - done : CHUNK_ELEMS;
        rc = pread_full(f, buf, k * 8, t->offset + done * 8, t->name);
        for (size_t i = 0; i < k && rc == 0; i++) {
            if (buf[i] < INT32_MIN || buf[i] > INT32_MAX)
                rc = sdp_err(-EINVAL, "file %s: tensor %s: element %zu = %lld does not fit int32",
                             f->path, t->name, done + i, (long long)buf[i]);
            else
                dst[done + i] = (int32_t)buf[i];
        }
        done += k;
    }
    free(buf);
    return rc;
}
