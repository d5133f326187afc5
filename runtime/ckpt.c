/* SPDX-License-Identifier: MIT */
/* Checkpoints of the training state (format in ckpt.h): CRC32C, the JSON header, the atomic write
 * with pruning of old files, validation and loading.  A load validates everything before it writes
 * into the state; a save never deletes an older checkpoint before the new one is durable.
 * Tests: tests/runtime/test_ckpt.c. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
#define HAVE_CRC32C_HW 1
#endif

#include "runtime/ckpt.h"
#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "runtime/state.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ckpt.c writes host fp32 bytes as the little-endian file format"
#endif

#define FIXED_NBYTES 64
#define ALIGN        64
#define IO_BLOCK     ((size_t)64 << 20)   /* bytes per read/write call */
#define JSON_MAX     ((uint64_t)64 << 20) /* sanity bound on the JSON header */
#define NKINDS       3

static const char *const kind_names[NKINDS] = { "master", "m", "v" };

/* ---- CRC32C (Castagnoli, reflected polynomial 0x82f63b78) ---- */

static uint32_t crc_table[8][256];
static int crc_hw;
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    /* slicing-by-8: table[k][i] is the crc of byte i followed by k zero bytes */
    for (int k = 1; k < 8; k++)
        for (int i = 0; i < 256; i++)
            crc_table[k][i] = (crc_table[k - 1][i] >> 8) ^ crc_table[0][crc_table[k - 1][i] & 0xff];
#ifdef HAVE_CRC32C_HW
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

uint32_t sdp_crc32c_sw(uint32_t crc, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    uint32_t c = ~crc;
    pthread_once(&crc_once, crc_init);
    for (; n && ((uintptr_t)p & 7); n--)
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= c;
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
            crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^
            crc_table[2][(hi >> 8) & 0xff] ^ crc_table[1][(hi >> 16) & 0xff] ^
            crc_table[0][hi >> 24];
    }
    for (; n; n--)
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    return ~c;
}

#ifdef HAVE_CRC32C_HW
/* The SSE4.2 crc32 instruction computes the same polynomial, 8 bytes per instruction. */
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    uint64_t c = ~crc;
    for (; n && ((uintptr_t)p & 7); n--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
    }
    for (; n; n--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

uint32_t sdp_crc32c(uint32_t crc, const void *buf, size_t n)
{
    pthread_once(&crc_once, crc_init);
#ifdef HAVE_CRC32C_HW
    if (crc_hw)
        return crc32c_hw(crc, buf, n);
#endif
    return sdp_crc32c_sw(crc, buf, n);
}

/* ---- little-endian fields, layout helpers ---- */

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t align_up(uint64_t x)
{
    return (x + ALIGN - 1) / ALIGN * ALIGN;
}

static sdp_rt_tensor_t *state_tensor(struct sdp_state *st, int g, int kind)
{
    struct sdp_group_state *gs = &st->groups[g];
    return kind == 0 ? gs->master : kind == 1 ? gs->m : gs->v;
}

/* ---- model configuration <-> JSON ---- */

struct cfg_field {
    const char *name;
    int is_double;
    size_t off;
};

/* clang-format off */
#define CFG_INT(f) { #f, 0, offsetof(struct sdp_model_cfg, f) }
#define CFG_DBL(f) { #f, 1, offsetof(struct sdp_model_cfg, f) }
static const struct cfg_field cfg_fields[] = {
    CFG_INT(vocab_size), CFG_INT(hidden_size), CFG_INT(intermediate_size), CFG_INT(num_layers),
    CFG_INT(num_heads), CFG_INT(num_kv_heads), CFG_INT(head_dim),
    CFG_INT(max_position_embeddings), CFG_DBL(rope_theta), CFG_DBL(rms_norm_eps),
    CFG_INT(tie_word_embeddings), CFG_INT(qk_norm), CFG_DBL(rope_scaling_factor),
    CFG_DBL(rope_low_freq_factor), CFG_DBL(rope_high_freq_factor), CFG_INT(rope_original_max_pos),
    CFG_INT(bos_token_id), CFG_INT(eos_token_id),
    CFG_DBL(initializer_range),
};
/* clang-format on */
#define NCFG_FIELDS (sizeof(cfg_fields) / sizeof(cfg_fields[0]))

static int *cfg_int(const struct sdp_model_cfg *cfg, const struct cfg_field *f)
{
    return (int *)((char *)cfg + f->off);
}

static double *cfg_dbl(const struct sdp_model_cfg *cfg, const struct cfg_field *f)
{
    return (double *)((char *)cfg + f->off);
}

static json_t *cfg_to_json(const struct sdp_model_cfg *cfg)
{
    json_t *o = json_object();
    json_object_set_new(o, "arch", json_string(sdp_model_arch_name(cfg->arch)));
    for (size_t i = 0; i < NCFG_FIELDS; i++) {
        const struct cfg_field *f = &cfg_fields[i];
        json_object_set_new(o, f->name,
                            f->is_double ? json_real(*cfg_dbl(cfg, f))
                                         : json_integer(*cfg_int(cfg, f)));
    }
    return o;
}

/* Name the first field where a (the checkpoint's) and b (the state's) differ. */
static int cfg_compare(const char *path, const struct sdp_model_cfg *a,
                       const struct sdp_model_cfg *b)
{
    if (a->arch != b->arch)
        return sdp_err(-EINVAL, "checkpoint %s was written for arch %s, the recipe has %s", path,
                       sdp_model_arch_name(a->arch), sdp_model_arch_name(b->arch));
    for (size_t i = 0; i < NCFG_FIELDS; i++) {
        const struct cfg_field *f = &cfg_fields[i];
        if (f->is_double && *cfg_dbl(a, f) != *cfg_dbl(b, f))
            return sdp_err(-EINVAL, "checkpoint %s was written for %s %.17g, the recipe has %.17g",
                           path, f->name, *cfg_dbl(a, f), *cfg_dbl(b, f));
        if (!f->is_double && *cfg_int(a, f) != *cfg_int(b, f))
            return sdp_err(-EINVAL, "checkpoint %s was written for %s %d, the recipe has %d", path,
                           f->name, *cfg_int(a, f), *cfg_int(b, f));
    }
    return 0;
}

/* ---- JSON header, writing ---- */

/* The JSON text for the given absolute tensor offsets and crcs (crcs NULL: placeholders of the
 * same length, since a crc is always 8 hex digits).  Caller frees. */
static char *header_json(const struct sdp_state *st, const struct sdp_ckpt_info *info,
                         const uint64_t *offsets, const uint32_t *crcs)
{
    json_t *root = json_object(), *data = json_object(), *rng = json_array(),
           *tensors = json_array();
    char num[32], *text;
    json_object_set_new(root, "format", json_string("slidedp-checkpoint"));
    json_object_set_new(root, "version", json_integer(SDP_CKPT_VERSION));
    json_object_set_new(root, "model", cfg_to_json(&st->cfg));
    json_object_set_new(root, "step", json_integer(info->step));
    json_object_set_new(data, "epoch", json_integer((json_int_t)info->data_epoch));
    json_object_set_new(data, "index", json_integer((json_int_t)info->data_index));
    json_object_set_new(root, "data", data);
    snprintf(num, sizeof(num), "%" PRIu64, info->seed);
    json_object_set_new(root, "seed", json_string(num));
    for (int i = 0; i < info->rng_nwords; i++) {
        snprintf(num, sizeof(num), "%" PRIu64, info->rng[i]);
        json_array_append_new(rng, json_string(num));
    }
    json_object_set_new(root, "rng", rng);
    json_object_set_new(root, "fingerprint", json_string(info->fingerprint));
    json_object_set_new(root, "last_loss",
                        isfinite(info->last_loss) ? json_real(info->last_loss) : json_null());
    json_object_set_new(root, "work_dtype", json_string(sdp_dtype_name(st->work_dtype)));
    json_object_set_new(root, "chunk_elems", json_integer((json_int_t)st->chunk_elems));
    json_object_set_new(root, "num_groups", json_integer(st->ngroups));
    for (int i = 0; i < NKINDS * st->ngroups; i++) {
        json_t *t = json_object();
        snprintf(num, sizeof(num), "%08" PRIx32, crcs ? crcs[i] : 0u);
        json_object_set_new(t, "group", json_integer(i / NKINDS));
        json_object_set_new(t, "kind", json_string(kind_names[i % NKINDS]));
        json_object_set_new(t, "nelems", json_integer((json_int_t)st->groups[i / NKINDS].nelems));
        json_object_set_new(t, "offset", json_integer((json_int_t)offsets[i]));
        json_object_set_new(t, "crc32c", json_string(num));
        json_array_append_new(tensors, t);
    }
    json_object_set_new(root, "tensors", tensors);
    text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return text;
}

/* Absolute offsets of the tensors for data starting at data_off; returns the file size. */
static uint64_t layout(const struct sdp_state *st, uint64_t data_off, uint64_t *offsets)
{
    uint64_t off = data_off;
    for (int i = 0; i < NKINDS * st->ngroups; i++) {
        offsets[i] = off;
        off += align_up(st->groups[i / NKINDS].nelems * sizeof(float));
    }
    return off;
}

static int io_error(const char *path, int err, const char *what)
{
    if (err == ENOSPC || err == EDQUOT) {
        int rc = sdp_err(-ENOSPC, "checkpoint %s: %s: no space left on the device", path, what);
        sdp_hint("free disk space, lower keep_last or write checkpoints to another directory");
        return rc;
    }
    if (err == EFBIG) {
        int rc = sdp_err(-EFBIG, "checkpoint %s: %s: file size limit reached", path, what);
        sdp_hint("raise the file size limit (ulimit -f) or use a file system without one");
        return rc;
    }
    return sdp_err(err ? -err : -EIO, "checkpoint %s: %s", path, what);
}

static int write_all(FILE *fp, const char *tmp, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        size_t k = n < IO_BLOCK ? n : IO_BLOCK;
        errno = 0;
        if (fwrite(p, 1, k, fp) != k)
            return io_error(tmp, errno, "write failed");
        p += k;
        n -= k;
    }
    return 0;
}

/* Write one tensor of the state (under a read acquire) and its padding; *crc gets its crc32c. */
static int write_tensor(FILE *fp, const char *tmp, sdp_rt_tensor_t *t, uint32_t *crc)
{
    static const unsigned char zeros[ALIGN];
    size_t nbytes = sdp_rt_tensor_nelems(t) * sizeof(float);
    const char *p;
    int rc = sdp_rt_tensor_acquire(t, 0);
    if (rc)
        return rc;
    p = sdp_rt_tensor_data(t);
    *crc = 0;
    for (size_t done = 0; done < nbytes && !rc;) {
        size_t k = nbytes - done < IO_BLOCK ? nbytes - done : IO_BLOCK;
        *crc = sdp_crc32c(*crc, p + done, k);
        rc = write_all(fp, tmp, p + done, k);
        done += k;
    }
    sdp_rt_tensor_release_acquire(t);
    if (!rc && align_up(nbytes) > nbytes)
        rc = write_all(fp, tmp, zeros, (size_t)(align_up(nbytes) - nbytes));
    return rc;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;
    if (fd < 0 || fsync(fd) != 0)
        rc = sdp_err(-errno, "checkpoint directory %s: fsync failed", dir);
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Step of a file name "step-<digits>.sdpckpt", or -1. */
static long name_step(const char *name)
{
    const char *p = name + 5, *end;
    long step = 0;
    if (strncmp(name, "step-", 5) != 0)
        return -1;
    for (end = p; *end >= '0' && *end <= '9'; end++) {
        if (step > 100000000000L)
            return -1;
        step = step * 10 + (*end - '0');
    }
    if (end == p || strcmp(end, ".sdpckpt") != 0)
        return -1;
    return step;
}

static int cmp_desc(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Steps of the checkpoint files in dir, newest first.  -ENOENT when dir cannot be opened. */
static int list_steps(const char *dir, long **steps_out, int *n_out)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    long *steps = NULL;
    int n = 0, cap = 0;
    if (!d)
        return -ENOENT;
    while ((e = readdir(d))) {
        long s = name_step(e->d_name);
        if (s < 0)
            continue;
        if (n == cap) {
            long *p = realloc(steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof(*steps));
            if (!p) {
                free(steps);
                closedir(d);
                return sdp_err(-ENOMEM, "listing %s", dir);
            }
            steps = p;
        }
        steps[n++] = s;
    }
    closedir(d);
    if (n)
        qsort(steps, (size_t)n, sizeof(*steps), cmp_desc);
    *steps_out = steps;
    *n_out = n;
    return 0;
}

/* Delete all but the newest keep_last checkpoints (the one of step keep_step always stays). */
static void prune(const char *dir, int keep_last, long keep_step)
{
    long *steps = NULL;
    int n = 0, kept = 1;
    char path[4200];
    if (keep_last <= 0 || list_steps(dir, &steps, &n) != 0)
        return;
    for (int i = 0; i < n; i++) {
        if (steps[i] == keep_step)
            continue;
        if (kept < keep_last) {
            kept++;
            continue;
        }
        snprintf(path, sizeof(path), "%s/step-%08ld.sdpckpt", dir, steps[i]);
        if (unlink(path) != 0)
            SDP_WARN("cannot delete old checkpoint %s: %s", path, strerror(errno));
        else
            SDP_DEBUG("deleted old checkpoint %s", path);
    }
    free(steps);
}

int sdp_ckpt_save(const char *dir, struct sdp_state *st, const struct sdp_ckpt_info *info,
                  int keep_last)
{
    int nt = NKINDS * st->ngroups, rc, created = 0;
    uint64_t *offsets = calloc((size_t)nt, sizeof(*offsets)), data_off = 0, file_nbytes;
    uint32_t *crcs = calloc((size_t)nt, sizeof(*crcs));
    char path[4200], tmp[4210], *json = NULL;
    unsigned char *head = NULL;
    size_t json_nbytes;
    FILE *fp = NULL;
    int fd;

    if (!offsets || !crcs) {
        rc = sdp_err(-ENOMEM, "checkpoint of %d tensors", nt);
        goto fail;
    }
    if (info->step < 0 || info->rng_nwords < 0 || info->rng_nwords > SDP_CKPT_RNG_WORDS ||
        !memchr(info->fingerprint, '\0', sizeof(info->fingerprint))) {
        rc = sdp_err(-EINVAL, "checkpoint info: step %d, %d rng words (0..%d), fingerprint %s",
                     info->step, info->rng_nwords, SDP_CKPT_RNG_WORDS,
                     memchr(info->fingerprint, '\0', sizeof(info->fingerprint)) ? "ok"
                                                                                : "unterminated");
        goto fail;
    }
    if (strlen(dir) > 4000) {
        rc = sdp_err(-ENAMETOOLONG, "checkpoint directory name of %zu bytes", strlen(dir));
        goto fail;
    }
    rc = sdp_mkdir_p(dir);
    if (rc)
        goto fail;
    snprintf(path, sizeof(path), "%s/step-%08d.sdpckpt", dir, info->step);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);

    /* The JSON holds absolute offsets, which depend on its own length: iterate until the data
     * start covers it (the length only grows with the offsets, so this ends in a few rounds). */
    do {
        data_off = align_up(FIXED_NBYTES + (json ? strlen(json) : 0));
        file_nbytes = layout(st, data_off, offsets);
        free(json);
        json = header_json(st, info, offsets, NULL);
        if (!json) {
            rc = sdp_err(-ENOMEM, "checkpoint %s: JSON header", path);
            goto fail;
        }
    } while (FIXED_NBYTES + strlen(json) > data_off);
    json_nbytes = strlen(json);

    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = io_error(tmp, errno, "cannot create");
        goto fail;
    }
    created = 1;
    if (!(fp = fdopen(fd, "wb"))) {
        rc = io_error(tmp, errno, "fdopen failed");
        close(fd);
        goto fail;
    }
    /* placeholder header (rewritten once the crcs are known), then the tensors */
    head = calloc(1, (size_t)data_off);
    if (!head) {
        rc = sdp_err(-ENOMEM, "checkpoint %s: header of %" PRIu64 " bytes", path, data_off);
        goto fail;
    }
    rc = write_all(fp, tmp, head, (size_t)data_off);
    for (int i = 0; i < nt && !rc; i++)
        rc = write_tensor(fp, tmp, state_tensor(st, i / NKINDS, i % NKINDS), &crcs[i]);
    if (rc)
        goto fail;

    free(json);
    json = header_json(st, info, offsets, crcs);
    if (!json) {
        rc = sdp_err(-ENOMEM, "checkpoint %s: JSON header", path);
        goto fail;
    }
    SDP_ASSERT(strlen(json) == json_nbytes, "JSON header changed length (%zu, then %zu bytes)",
               json_nbytes, strlen(json));
    memcpy(head, SDP_CKPT_MAGIC, 8);
    put_u32(head + 8, SDP_CKPT_VERSION);
    put_u32(head + 12, 0);
    put_u64(head + 16, json_nbytes);
    put_u64(head + 24, data_off);
    put_u64(head + 32, file_nbytes);
    memcpy(head + FIXED_NBYTES, json, json_nbytes);
    put_u32(head + 60, sdp_crc32c(sdp_crc32c(0, head, 60), json, json_nbytes));
    if (fflush(fp) != 0) {
        rc = io_error(tmp, errno, "flush failed");
        goto fail;
    }
    if (fseeko(fp, 0, SEEK_SET) != 0) {
        rc = io_error(tmp, errno, "seek failed");
        goto fail;
    }
    rc = write_all(fp, tmp, head, (size_t)data_off);
    if (rc)
        goto fail;
    if (fflush(fp) != 0) {
        rc = io_error(tmp, errno, "flush failed");
        goto fail;
    }
    if (fsync(fileno(fp)) != 0) {
        rc = io_error(tmp, errno, "fsync failed");
        goto fail;
    }
    rc = fclose(fp);
    fp = NULL;
    if (rc != 0) {
        rc = io_error(tmp, errno, "close failed");
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        rc = io_error(tmp, errno, "rename failed");
        goto fail;
    }
    created = 0;
    rc = fsync_dir(dir);
    if (rc)
        goto fail; /* the rename may not be durable yet: keep the older checkpoints */
    SDP_INFO("checkpoint %s: step %d, %.1f MiB", path, info->step, file_nbytes / 1048576.0);
    prune(dir, keep_last, info->step);

fail:
    if (fp)
        fclose(fp);
    if (created && unlink(tmp) != 0)
        SDP_WARN("cannot remove %s: %s", tmp, strerror(errno));
    free(head);
    free(json);
    free(crcs);
    free(offsets);
    return rc;
}

/* ---- reading ---- */

struct tentry {
    int group, kind;
    uint64_t nelems, offset;
    uint32_t crc;
};

struct hdr {
    struct sdp_model_cfg cfg;
    struct sdp_ckpt_info info;
    int ngroups, ntensors;
    struct tentry *t;
    uint64_t data_off, file_nbytes;
};

/* Read n bytes at off: 0, 1 at end of file, or a negative errno. */
static int read_at(int fd, void *buf, size_t n, uint64_t off)
{
    char *p = buf;
    while (n) {
        ssize_t k = pread(fd, p, n < IO_BLOCK ? n : IO_BLOCK, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        if (k == 0)
            return 1;
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

static int bad(const char *path, const char *key, const char *why)
{
    return sdp_err(-EINVAL, "checkpoint %s: header key \"%s\" %s", path, key, why);
}

static int get_int(const char *path, json_t *o, const char *key, json_int_t lo, json_int_t hi,
                   json_int_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        return bad(path, key, "is missing or not an integer");
    *out = json_integer_value(v);
    if (*out < lo || *out > hi)
        return bad(path, key, "is out of range");
    return 0;
}

static int get_u64s(const char *path, json_t *v, const char *key, uint64_t *out)
{
    const char *s = json_string_value(v);
    char *end;
    if (!s || !*s || *s < '0' || *s > '9')
        return bad(path, key, "is missing or not a decimal string");
    errno = 0;
    *out = strtoull(s, &end, 10);
    if (*end || errno)
        return bad(path, key, "is not a 64-bit unsigned decimal");
    return 0;
}

static int parse_cfg(const char *path, json_t *o, struct sdp_model_cfg *cfg)
{
    const char *arch = json_string_value(json_object_get(o, "arch"));
    char why[256];
    memset(cfg, 0, sizeof(*cfg));
    if (!json_is_object(o))
        return bad(path, "model", "is missing or not an object");
    if (arch && !strcmp(arch, sdp_model_arch_name(SDP_ARCH_QWEN3)))
        cfg->arch = SDP_ARCH_QWEN3;
    else if (arch && !strcmp(arch, sdp_model_arch_name(SDP_ARCH_LLAMA)))
        cfg->arch = SDP_ARCH_LLAMA;
    else
        return bad(path, "model.arch", "is not a known architecture");
    for (size_t i = 0; i < NCFG_FIELDS; i++) {
        const struct cfg_field *f = &cfg_fields[i];
        json_t *v = json_object_get(o, f->name);
        if (f->is_double) {
            if (!json_is_number(v))
                return bad(path, f->name, "is missing or not a number");
            *cfg_dbl(cfg, f) = json_number_value(v);
        } else {
            json_int_t x;
            int rc = get_int(path, o, f->name, INT32_MIN, INT32_MAX, &x);
            if (rc)
                return rc;
            *cfg_int(cfg, f) = (int)x;
        }
    }
    if (sdp_model_validate(cfg, why, sizeof(why)) != 0)
        return sdp_err(-EINVAL, "checkpoint %s: invalid model: %s", path, why);
    return 0;
}

/* Parse and check the JSON against the fixed header; fills h. */
static int parse_json(const char *path, const char *text, size_t len, struct hdr *h)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr), *v, *arr;
    json_int_t x, y;
    uint64_t expect;
    const char *s;
    int rc;
    if (!root)
        return sdp_err(-EINVAL, "checkpoint %s: JSON header: %s (line %d)", path, jerr.text,
                       jerr.line);
    if (!json_is_object(root)) {
        rc = bad(path, "(root)", "is not an object");
        goto out;
    }
    if ((rc = get_int(path, root, "version", 0, INT32_MAX, &x)))
        goto out;
    if (x != SDP_CKPT_VERSION) {
        rc = bad(path, "version", "differs from the fixed header");
        goto out;
    }
    if ((rc = parse_cfg(path, json_object_get(root, "model"), &h->cfg)))
        goto out;
    if ((rc = get_int(path, root, "step", 0, INT32_MAX, &x)))
        goto out;
    h->info.step = (int)x;
    v = json_object_get(root, "data");
    if ((rc = get_int(path, v, "epoch", 0, INT64_MAX, &x)) ||
        (rc = get_int(path, v, "index", 0, INT64_MAX, &y)))
        goto out;
    h->info.data_epoch = (uint64_t)x;
    h->info.data_index = (uint64_t)y;
    if ((rc = get_u64s(path, json_object_get(root, "seed"), "seed", &h->info.seed)))
        goto out;
    arr = json_object_get(root, "rng");
    if (!json_is_array(arr) || json_array_size(arr) > SDP_CKPT_RNG_WORDS) {
        rc = bad(path, "rng", "is not an array of at most 4 strings");
        goto out;
    }
    h->info.rng_nwords = (int)json_array_size(arr);
    for (int i = 0; i < h->info.rng_nwords; i++)
        if ((rc = get_u64s(path, json_array_get(arr, (size_t)i), "rng", &h->info.rng[i])))
            goto out;
    s = json_string_value(json_object_get(root, "fingerprint"));
    if (!s || strlen(s) >= sizeof(h->info.fingerprint)) {
        rc = bad(path, "fingerprint", "is missing or longer than 127 bytes");
        goto out;
    }
    strcpy(h->info.fingerprint, s);
    /* optional: the loss of the last step done (null or absent when unknown) */
    h->info.last_loss = json_is_number(json_object_get(root, "last_loss"))
                            ? json_number_value(json_object_get(root, "last_loss"))
                            : NAN;
    s = json_string_value(json_object_get(root, "work_dtype"));
    if (s && !strcmp(s, sdp_dtype_name(SDP_F32)))
        h->info.work_dtype = SDP_F32;
    else if (s && !strcmp(s, sdp_dtype_name(SDP_BF16)))
        h->info.work_dtype = SDP_BF16;
    else {
        rc = bad(path, "work_dtype", "is not f32 or bf16");
        goto out;
    }
    if ((rc = get_int(path, root, "chunk_elems", 1, INT64_MAX, &x)))
        goto out;
    h->info.chunk_elems = (size_t)x;
    if ((rc = get_int(path, root, "num_groups", 1, 1 << 20, &x)))
        goto out;
    h->ngroups = (int)x;
    if (h->ngroups != sdp_model_num_groups(&h->cfg)) {
        rc = bad(path, "num_groups", "does not match the model");
        goto out;
    }
    arr = json_object_get(root, "tensors");
    h->ntensors = NKINDS * h->ngroups;
    if (!json_is_array(arr) || json_array_size(arr) != (size_t)h->ntensors) {
        rc = bad(path, "tensors", "is not an array of 3 entries per group");
        goto out;
    }
    h->t = calloc((size_t)h->ntensors, sizeof(*h->t));
    if (!h->t) {
        rc = sdp_err(-ENOMEM, "checkpoint %s: %d tensors", path, h->ntensors);
        goto out;
    }
    /* The layout is fully determined by the model: tensors in table order, back to back. */
    expect = h->data_off;
    for (int i = 0; i < h->ntensors; i++) {
        struct tentry *t = &h->t[i];
        json_t *e = json_array_get(arr, (size_t)i);
        char *end;
        if ((rc = get_int(path, e, "group", 0, h->ngroups - 1, &x)))
            goto out;
        t->group = (int)x;
        s = json_string_value(json_object_get(e, "kind"));
        t->kind = i % NKINDS;
        if (t->group != i / NKINDS || !s || strcmp(s, kind_names[t->kind])) {
            rc = sdp_err(-EINVAL, "checkpoint %s: tensor table entry %d is not group %d, %s", path,
                         i, i / NKINDS, kind_names[i % NKINDS]);
            goto out;
        }
        if ((rc = get_int(path, e, "nelems", 1, INT64_MAX, &x)) ||
            (rc = get_int(path, e, "offset", 0, INT64_MAX, &y)))
            goto out;
        t->nelems = (uint64_t)x;
        t->offset = (uint64_t)y;
        if (t->nelems != sdp_model_group_nelems(&h->cfg, t->group) || t->offset != expect) {
            rc = sdp_err(-EINVAL,
                         "checkpoint %s: tensor %d (group %d, %s): %" PRIu64
                         " elements at offset %" PRIu64 ", the model implies %zu at %" PRIu64,
                         path, i, t->group, s, t->nelems, t->offset,
                         sdp_model_group_nelems(&h->cfg, t->group), expect);
            goto out;
        }
        expect += align_up(t->nelems * sizeof(float));
        s = json_string_value(json_object_get(e, "crc32c"));
        if (!s || strlen(s) != 8 || (t->crc = (uint32_t)strtoul(s, &end, 16), *end)) {
            rc = bad(path, "crc32c", "is not 8 hex digits");
            goto out;
        }
    }
    if (expect != h->file_nbytes)
        rc = sdp_err(-EINVAL,
                     "checkpoint %s: the tensors end at byte %" PRIu64 ", the header says the "
                     "file has %" PRIu64,
                     path, expect, h->file_nbytes);
out:
    json_decref(root);
    return rc;
}

static int not_ckpt(const char *path, const char *why)
{
    return sdp_err(-EINVAL, "checkpoint %s: %s", path, why);
}

/* Open path and validate its whole header; on success *fd_out is open and h filled. */
static int open_ckpt(const char *path, int *fd_out, struct hdr *h)
{
    unsigned char fixed[FIXED_NBYTES];
    char *json = NULL;
    uint64_t json_nbytes;
    uint32_t version, flags;
    struct stat sb;
    int fd, rc;
    memset(h, 0, sizeof(*h));
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sdp_err(-errno, "checkpoint %s: cannot open", path);
    if (fstat(fd, &sb) != 0) {
        rc = sdp_err(-errno, "checkpoint %s: fstat failed", path);
        goto fail;
    }
    rc = read_at(fd, fixed, sizeof(fixed), 0);
    if (rc < 0) {
        rc = sdp_err(-EIO, "checkpoint %s: read failed: %s", path, strerror(-rc));
        goto fail;
    }
    if (rc > 0 || memcmp(fixed, SDP_CKPT_MAGIC, 8) != 0) {
        rc = not_ckpt(path, rc > 0 ? "truncated inside the fixed header"
                                   : "not a slidedp checkpoint (wrong magic)");
        goto fail;
    }
    version = get_u32(fixed + 8);
    flags = get_u32(fixed + 12);
    json_nbytes = get_u64(fixed + 16);
    h->data_off = get_u64(fixed + 24);
    h->file_nbytes = get_u64(fixed + 32);
    if (json_nbytes == 0 || json_nbytes > JSON_MAX || json_nbytes > (uint64_t)sb.st_size) {
        rc = not_ckpt(path, "corrupt fixed header (JSON length) or truncated file");
        goto fail;
    }
    json = malloc((size_t)json_nbytes);
    if (!json) {
        rc = sdp_err(-ENOMEM, "checkpoint %s: JSON header of %" PRIu64 " bytes", path, json_nbytes);
        goto fail;
    }
    rc = read_at(fd, json, (size_t)json_nbytes, FIXED_NBYTES);
    if (rc != 0) {
        rc = rc > 0 ? not_ckpt(path, "truncated inside the JSON header")
                    : sdp_err(-EIO, "checkpoint %s: read failed: %s", path, strerror(-rc));
        goto fail;
    }
    if (sdp_crc32c(sdp_crc32c(0, fixed, 60), json, (size_t)json_nbytes) != get_u32(fixed + 60)) {
        rc = not_ckpt(path, "header crc32c mismatch: the header is corrupt");
        goto fail;
    }
    if (version != SDP_CKPT_VERSION || flags != 0) {
        rc = sdp_err(-EINVAL,
                     "checkpoint %s: format version %" PRIu32 " flags %#" PRIx32
                     ", this build reads version %d flags 0",
                     path, version, flags, SDP_CKPT_VERSION);
        sdp_hint("export it with the slidedp that wrote it");
        goto fail;
    }
    if (h->file_nbytes != (uint64_t)sb.st_size) {
        rc = sdp_err(-EINVAL, "checkpoint %s: %lld bytes, the header says %" PRIu64 "%s", path,
                     (long long)sb.st_size, h->file_nbytes,
                     (uint64_t)sb.st_size < h->file_nbytes ? " (truncated)" : "");
        goto fail;
    }
    if (h->data_off % ALIGN || h->data_off < FIXED_NBYTES + json_nbytes) {
        rc = not_ckpt(path, "corrupt fixed header (data offset)");
        goto fail;
    }
    rc = parse_json(path, json, (size_t)json_nbytes, h);
    if (rc)
        goto fail;
    free(json);
    *fd_out = fd;
    return 0;
fail:
    free(json);
    free(h->t);
    h->t = NULL;
    close(fd);
    return rc;
}

/* Check the crc of tensor t, reading it in blocks into buf (bufsize bytes) or, with dst, straight
 * into dst. */
static int check_tensor(const char *path, int fd, const struct tentry *t, char *buf, size_t bufsize,
                        char *dst)
{
    size_t nbytes = (size_t)t->nelems * sizeof(float);
    uint32_t crc = 0;
    for (size_t done = 0; done < nbytes;) {
        size_t k = nbytes - done < bufsize ? nbytes - done : bufsize;
        char *p = dst ? dst + done : buf;
        int rc = read_at(fd, p, k, t->offset + done);
        if (rc)
            return rc > 0 ? not_ckpt(path, "truncated in the tensor data")
                          : sdp_err(-EIO, "checkpoint %s: read failed: %s", path, strerror(-rc));
        crc = sdp_crc32c(crc, p, k);
        done += k;
    }
    if (crc != t->crc)
        return sdp_err(-EINVAL,
                       "checkpoint %s: group %d %s: crc32c %08" PRIx32
                       ", the header says %08" PRIx32 ": the data is corrupt",
                       path, t->group, kind_names[t->kind], crc, t->crc);
    return 0;
}

static int verify_all(const char *path, int fd, const struct hdr *h)
{
    size_t bufsize = 0;
    char *buf;
    int rc = 0;
    for (int i = 0; i < h->ntensors; i++)
        if (h->t[i].nelems * sizeof(float) > bufsize)
            bufsize = (size_t)h->t[i].nelems * sizeof(float);
    if (bufsize > IO_BLOCK)
        bufsize = IO_BLOCK;
    buf = malloc(bufsize);
    if (!buf)
        return sdp_err(-ENOMEM, "checkpoint %s: read buffer of %zu bytes", path, bufsize);
#ifdef POSIX_FADV_SEQUENTIAL
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
    for (int i = 0; i < h->ntensors && !rc; i++)
        rc = check_tensor(path, fd, &h->t[i], buf, bufsize, NULL);
    free(buf);
    return rc;
}

int sdp_ckpt_read_info(const char *path, struct sdp_model_cfg *cfg_out,
                       struct sdp_ckpt_info *info_out)
{
    struct hdr h;
    int fd, rc = open_ckpt(path, &fd, &h);
    if (rc)
        return rc;
    close(fd);
    free(h.t);
    if (cfg_out)
        *cfg_out = h.cfg;
    if (info_out)
        *info_out = h.info;
    return 0;
}

int sdp_ckpt_latest(const char *dir, char *path_out, size_t len)
{
    long *steps = NULL;
    int n = 0, rc = list_steps(dir, &steps, &n);
    char path[4200];
    if (rc)
        return rc;
    rc = -ENOENT;
    for (int i = 0; i < n && rc == -ENOENT; i++) {
        struct hdr h;
        int fd;
        snprintf(path, sizeof(path), "%s/step-%08ld.sdpckpt", dir, steps[i]);
        if (open_ckpt(path, &fd, &h) == 0) {
            int bad_data = verify_all(path, fd, &h);
            close(fd);
            free(h.t);
            if (!bad_data) {
                if (strlen(path) >= len) {
                    rc = sdp_err(-ENAMETOOLONG, "checkpoint path %s", path);
                } else {
                    strcpy(path_out, path);
                    rc = 0;
                }
                break;
            }
        }
        SDP_WARN("skipping checkpoint %s: it failed validation (above); trying an older one", path);
    }
    free(steps);
    return rc;
}

int sdp_ckpt_load(const char *path, struct sdp_state *st, struct sdp_ckpt_info *info_out)
{
    struct hdr h;
    int fd, rc = open_ckpt(path, &fd, &h);
    if (rc)
        return rc;
    rc = cfg_compare(path, &h.cfg, &st->cfg);
    if (!rc && h.ngroups != st->ngroups)
        rc = sdp_err(-EINVAL, "checkpoint %s: %d groups, the state has %d", path, h.ngroups,
                     st->ngroups);
    for (int i = 0; i < h.ntensors && !rc; i++)
        if (h.t[i].nelems != sdp_rt_tensor_nelems(state_tensor(st, h.t[i].group, h.t[i].kind)))
            rc = sdp_err(-EINVAL, "checkpoint %s: group %d has %" PRIu64 " elements, the state %zu",
                         path, h.t[i].group, h.t[i].nelems, st->groups[h.t[i].group].nelems);
    /* pass 1: every crc, before st is touched */
    if (!rc)
        rc = verify_all(path, fd, &h);
    /* pass 2: the same bytes of the same open file, straight into the host copies */
    for (int i = 0; i < h.ntensors && !rc; i++) {
        sdp_rt_tensor_t *t = state_tensor(st, h.t[i].group, h.t[i].kind);
        rc = sdp_rt_tensor_acquire(t, 1);
        if (rc)
            break;
        rc = check_tensor(path, fd, &h.t[i], NULL, IO_BLOCK, sdp_rt_tensor_data(t));
        sdp_rt_tensor_release_acquire(t);
        if (rc) {
            rc = sdp_err(-EIO,
                         "checkpoint %s changed or failed while loading: the state is "
                         "partly loaded",
                         path);
            sdp_hint("restart from another checkpoint; do not modify checkpoints in place");
        }
    }
    close(fd);
    free(h.t);
    if (rc)
        return rc;
    st->work_valid = 0;
    if (info_out)
        *info_out = h.info;
    SDP_INFO("loaded checkpoint %s (step %d)", path, h.info.step);
    return 0;
}
