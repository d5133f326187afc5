/* SPDX-License-Identifier: MIT */
/* Checkpoints (runtime/ckpt*.c over formats/ckpt_*.c) through StarPU with one CPU worker, on a
 * tiny untied Llama with random bit patterns (NaNs included) in every master, m and v.  Checks:
 * CRC32C against the RFC 3720 vectors and a bit-at-a-time oracle; the file against the format of
 * formats/ckpt_format.h, parsed here independently; save -> load bit-identical; keep_last pruning;
 * that truncation, flipped data or JSON bytes, a wrong magic or version and a different model are
 * all rejected without touching the state; that latest skips a corrupt newest file; that failed
 * saves (tmp path taken, file size limit) leave no temporary and the older checkpoints loadable. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "runtime/ckpt.h"
#include "runtime/init.h"
#include "runtime/state.h"
#include "tests/lib/sdp_test.h"

#define NKINDS 3

static int failures;
static char workdir[4096];

static void check(int ok, const char *what)
{
    printf("  %-66s %s\n", what, ok ? "ok" : "FAIL");
    if (!ok)
        failures++;
}

/* ---- CRC32C oracle: one bit at a time, reflected polynomial 0x82f63b78 (RFC 3720 B.4) ---- */

static uint32_t crc_bitwise(uint32_t crc, const unsigned char *p, size_t n)
{
    uint32_t c = ~crc;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
}

static void test_crc(void)
{
    unsigned char buf[300 + 8], v[32];
    struct sdp_rng r = { 11 };
    int ok = 1;
    printf("crc32c:\n");
    check(sdp_crc32c(0, "123456789", 9) == 0xe3069283u &&
              sdp_crc32c_sw(0, "123456789", 9) == 0xe3069283u,
          "check value of \"123456789\" is e3069283");
    memset(v, 0, 32);
    ok = sdp_crc32c(0, v, 32) == 0x8a9136aau && sdp_crc32c_sw(0, v, 32) == 0x8a9136aau;
    memset(v, 0xff, 32);
    ok = ok && sdp_crc32c(0, v, 32) == 0x62a8ab43u && sdp_crc32c_sw(0, v, 32) == 0x62a8ab43u;
    for (int i = 0; i < 32; i++)
        v[i] = (unsigned char)i;
    ok = ok && sdp_crc32c(0, v, 32) == 0x46dd794eu && sdp_crc32c_sw(0, v, 32) == 0x46dd794eu;
    check(ok, "RFC 3720 B.4 vectors (32 zeros, 32 x ff, 0..31)");
    ok = 1;
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)sdp_rng_next(&r);
    for (size_t n = 0; n <= 300; n++)
        for (size_t a = 0; a < 8; a++) {
            uint32_t ref = crc_bitwise(0, buf + a, n);
            size_t cut = n / 3;
            ok = ok && sdp_crc32c(0, buf + a, n) == ref && sdp_crc32c_sw(0, buf + a, n) == ref;
            ok = ok && sdp_crc32c(sdp_crc32c(0, buf + a, cut), buf + a + cut, n - cut) == ref;
            ok = ok && sdp_crc32c_sw(sdp_crc32c_sw(0, buf + a, cut), buf + a + cut, n - cut) == ref;
        }
    check(ok, "hw and sw vs bitwise oracle, 0..300 bytes x 8 alignments, chained");
}

/* ---- a tiny model and its state ---- */

static struct sdp_model_cfg tiny_cfg(int hidden)
{
    struct sdp_model_cfg c;
    memset(&c, 0, sizeof(c));
    c.vocab_size = 256;
    c.hidden_size = hidden;
    c.intermediate_size = 176;
    c.num_layers = 3;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 16;
    sdp_model_defaults(&c, SDP_ARCH_LLAMA);
    c.rope_theta = 500000.5;
    c.rms_norm_eps = 1e-5; /* not a binary fraction: the JSON must keep all 17 digits */
    c.rope_scaling_factor = 8.0;
    c.rope_low_freq_factor = 1.0;
    c.rope_high_freq_factor = 4.0;
    c.rope_original_max_pos = 64;
    c.max_position_embeddings = 512;
    c.bos_token_id = 1;
    c.eos_token_id = 2;
    c.initializer_range = 0.0123;
    return c;
}

/* Every field of struct sdp_model_cfg, listed here independently of ckpt_header.c. */
static int cfg_equal(const struct sdp_model_cfg *a, const struct sdp_model_cfg *b)
{
    return a->arch == b->arch && a->vocab_size == b->vocab_size &&
           a->hidden_size == b->hidden_size && a->intermediate_size == b->intermediate_size &&
           a->num_layers == b->num_layers && a->num_heads == b->num_heads &&
           a->num_kv_heads == b->num_kv_heads && a->head_dim == b->head_dim &&
           a->max_position_embeddings == b->max_position_embeddings &&
           a->rope_theta == b->rope_theta && a->rms_norm_eps == b->rms_norm_eps &&
           a->tie_word_embeddings == b->tie_word_embeddings && a->qk_norm == b->qk_norm &&
           a->rope_scaling_factor == b->rope_scaling_factor &&
           a->rope_low_freq_factor == b->rope_low_freq_factor &&
           a->rope_high_freq_factor == b->rope_high_freq_factor &&
           a->rope_original_max_pos == b->rope_original_max_pos && a->rope_type == b->rope_type &&
           a->rope_beta_fast == b->rope_beta_fast && a->rope_beta_slow == b->rope_beta_slow &&
           a->rope_attention_factor == b->rope_attention_factor &&
           a->rope_mscale == b->rope_mscale && a->rope_mscale_all_dim == b->rope_mscale_all_dim &&
           a->rope_no_truncate == b->rope_no_truncate && a->bos_token_id == b->bos_token_id &&
           a->eos_token_id == b->eos_token_id && a->initializer_range == b->initializer_range;
}

static sdp_rt_tensor_t *tensor_of(struct sdp_state *st, int i)
{
    struct sdp_group_state *gs = &st->groups[i / NKINDS];
    return i % NKINDS == 0 ? gs->master : i % NKINDS == 1 ? gs->m : gs->v;
}

/* Random 32-bit patterns: every float class, NaN payloads included, must survive bit for bit. */
static void fill_state(struct sdp_state *st, uint64_t seed)
{
    struct sdp_rng r = { seed };
    for (int i = 0; i < NKINDS * st->ngroups; i++) {
        sdp_rt_tensor_t *t = tensor_of(st, i);
        uint32_t *p = sdp_rt_tensor_data(t);
        sdp_rt_tensor_acquire(t, 1);
        for (size_t j = 0; j < sdp_rt_tensor_nelems(t); j++)
            p[j] = (uint32_t)sdp_rng_next(&r);
        sdp_rt_tensor_release_acquire(t);
    }
}

/* Copy of master, m, v of every group, back to back. */
static unsigned char *snapshot(struct sdp_state *st, size_t *nbytes)
{
    size_t n = 0, off = 0;
    unsigned char *s;
    for (int i = 0; i < NKINDS * st->ngroups; i++)
        n += sdp_rt_tensor_nelems(tensor_of(st, i)) * 4;
    s = sdp_test_alloc(n);
    for (int i = 0; i < NKINDS * st->ngroups; i++) {
        sdp_rt_tensor_t *t = tensor_of(st, i);
        sdp_rt_tensor_acquire(t, 0);
        memcpy(s + off, sdp_rt_tensor_data(t), sdp_rt_tensor_nelems(t) * 4);
        sdp_rt_tensor_release_acquire(t);
        off += sdp_rt_tensor_nelems(t) * 4;
    }
    *nbytes = n;
    return s;
}

static int state_equals(struct sdp_state *st, const unsigned char *snap, size_t nbytes)
{
    size_t n;
    unsigned char *s = snapshot(st, &n);
    int eq = n == nbytes && memcmp(s, snap, n) == 0;
    free(s);
    return eq;
}

/* ---- files ---- */

static unsigned char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    unsigned char *p;
    long len;
    *n = 0;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    p = sdp_test_alloc((size_t)len + 1);
    if (fread(p, 1, (size_t)len, f) != (size_t)len) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return p;
}

static int write_file(const char *path, const unsigned char *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(p, 1, n, f) == n;
    if (f)
        fclose(f);
    return ok ? 0 : -1;
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d)
        return -1;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* rm -r of the work directory (two levels: workdir/case/file). */
static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[4400];
    struct stat sb;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
            rm_tree(p);
        else
            unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

static void subdir(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", workdir, name);
}

static uint32_t le32(const unsigned char *p)
{
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const unsigned char *p)
{
    return le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* Parse a checkpoint file following the format of ckpt_format.h (not its code) and compare its
 * tensors to the state snapshot; returns the tensor table (offsets, sizes) for the corruption
 * tests. */
static int check_format(const unsigned char *f, size_t n, const unsigned char *snap, uint64_t *offs,
                        uint64_t *nbytes, int ntensors)
{
    uint64_t jlen = le64(f + 16), data_off = le64(f + 24), fsize = le64(f + 32), soff = 0;
    json_t *root, *tab;
    int ok;
    ok = n >= 64 && !memcmp(f, "SDPCKPT1", 8) && le32(f + 8) == 1 && le32(f + 12) == 0;
    ok = ok && fsize == n && data_off % 64 == 0 && data_off >= 64 + jlen;
    ok = ok && le32(f + 60) == crc_bitwise(crc_bitwise(0, f, 60), f + 64, jlen);
    if (!ok)
        return 0;
    root = json_loadb((const char *)f + 64, jlen, 0, NULL);
    tab = json_object_get(root, "tensors");
    ok = root && json_array_size(tab) == (size_t)ntensors &&
         json_integer_value(json_object_get(root, "step")) == 7;
    for (int i = 0; ok && i < ntensors; i++) {
        json_t *e = json_array_get(tab, (size_t)i);
        uint64_t off = (uint64_t)json_integer_value(json_object_get(e, "offset"));
        uint64_t nb = 4 * (uint64_t)json_integer_value(json_object_get(e, "nelems"));
        char crc[16];
        snprintf(crc, sizeof(crc), "%08x", crc_bitwise(0, f + off, nb));
        ok = off % 64 == 0 && off + nb <= n && !memcmp(f + off, snap + soff, nb) &&
             !strcmp(crc, json_string_value(json_object_get(e, "crc32c")));
        ok = ok && json_integer_value(json_object_get(e, "group")) == i / NKINDS;
        offs[i] = off;
        nbytes[i] = nb;
        soff += nb;
    }
    ok = ok && offs[0] == data_off &&
         (offs[ntensors - 1] + nbytes[ntensors - 1] + 63) / 64 * 64 == n;
    json_decref(root);
    return ok;
}

/* Run load with stderr captured into msg. */
static int load_capture(const char *path, struct sdp_state *st, char *msg, size_t len)
{
    FILE *cap = tmpfile();
    int saved = dup(2), rc;
    size_t k;
    fflush(stderr);
    dup2(fileno(cap), 2);
    rc = sdp_ckpt_load(path, st, NULL);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(cap);
    k = fread(msg, 1, len - 1, cap);
    msg[k] = '\0';
    fclose(cap);
    fputs(msg, stderr);
    return rc;
}

/* ---- the tests ---- */

int main(void)
{
    struct sdp_rt_conf rconf = { .ncpus = 1, .ncuda = 0 };
    struct sdp_model_cfg cfg = tiny_cfg(64), cfg2 = tiny_cfg(128), rcfg;
    struct sdp_state a, b, c;
    struct sdp_ckpt_info info = { 0 }, got;
    char d1[4200], d2[4200], d3[4200], d4[4200], d5[4200], path[4400], path2[4400], msg[8192];
    unsigned char *snap_a, *snap_b, *file, *work;
    uint64_t offs[64], nbs[64];
    size_t snap_n, snap_bn, fn;
    struct sdp_rng rng = { 2024 };
    int nt, rc, ok;

    test_crc();

    snprintf(workdir, sizeof(workdir), "%s/sdp-ckpt-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(workdir)) {
        printf("cannot create a temporary directory\nFAIL\n");
        return 1;
    }
    subdir(d1, sizeof(d1), "rt");
    subdir(d2, sizeof(d2), "keep");
    subdir(d3, sizeof(d3), "corrupt");
    subdir(d4, sizeof(d4), "latest");
    subdir(d5, sizeof(d5), "failsave");
    if (sdp_rt_init(&rconf) != 0) {
        printf("StarPU did not start\nSKIP\n");
        return 77;
    }
    /* chunks of 4 KiB: a decoder layer (~45k elements) spans a dozen chunks */
    if (sdp_state_create(&a, &cfg, SDP_F32, 4096) || sdp_state_create(&b, &cfg, SDP_BF16, 8192) ||
        sdp_state_create(&c, &cfg2, SDP_F32, 4096)) {
        printf("state creation failed\nFAIL\n");
        return 1;
    }
    nt = NKINDS * a.ngroups;
    printf("model: %zu parameters, %d groups, %d chunks; 3 x %d tensors saved\n",
           sdp_model_num_params(&cfg), a.ngroups, a.nchunks_total, a.ngroups);
    fill_state(&a, 1);
    fill_state(&b, 2);
    snap_a = snapshot(&a, &snap_n);

    /* round trip */
    printf("round trip:\n");
    info.step = 7;
    info.data_epoch = 3;
    info.data_index = 12345678901ull;
    info.seed = 0xfedcba9876543210ull;
    info.rng_nwords = 4;
    for (int i = 0; i < 4; i++)
        info.rng[i] = sdp_rng_next(&rng);
    snprintf(info.fingerprint, sizeof(info.fingerprint), "%s",
             "sha256:0123456789abcdef \"quoted\" \xc3\xa9");
    rc = sdp_ckpt_save(d1, &a, &info, 3);
    snprintf(path, sizeof(path), "%s/step-00000007.sdpckpt", d1);
    check(rc == 0 && exists(path) && count_entries(d1) == 1, "save: one file, no temporary");
    check(state_equals(&a, snap_a, snap_n), "save leaves the state unchanged");
    file = read_file(path, &fn);
    check(file && check_format(file, fn, snap_a, offs, nbs, nt),
          "file parsed per ckpt_format.h: magic, header crc, offsets, data, tensor crcs");
    if (!file || fn < 4096) {
        printf("no checkpoint file to corrupt\nFAIL\n");
        return 1;
    }
    memset(&got, 0, sizeof(got));
    rc = sdp_ckpt_read_info(path, &rcfg, &got);
    check(rc == 0 && cfg_equal(&rcfg, &cfg), "read_info: every model config field");
    ok = got.step == 7 && got.data_epoch == 3 && got.data_index == info.data_index &&
         got.seed == info.seed && got.rng_nwords == 4 && !memcmp(got.rng, info.rng, 32) &&
         !strcmp(got.fingerprint, info.fingerprint) && got.work_dtype == SDP_F32 &&
         got.chunk_elems == 1024;
    check(ok, "read_info: step, data position, seed, rng, fingerprint, dtype, chunk");
    memset(&got, 0, sizeof(got));
    rc = sdp_ckpt_load(path, &b, &got);
    check(rc == 0 && state_equals(&b, snap_a, snap_n),
          "load into a state with other chunks and dtype: bit-identical master, m, v");
    check(got.step == 7 && got.seed == info.seed && !b.work_valid, "load: info, work marked stale");

    /* corruption: each case on a fresh copy; st must stay as it was */
    printf("corruption (each must fail and leave the state untouched):\n");
    mkdir(d3, 0777);
    snprintf(path2, sizeof(path2), "%s/step-00000007.sdpckpt", d3);
    fill_state(&b, 3);
    snap_b = snapshot(&b, &snap_bn);
    work = sdp_test_alloc(fn);
    ok = 1;
    for (int k = 0; k < 10; k++) {
        size_t cut = (size_t)(sdp_rng_unit(&rng) * (double)fn);
        if (k == 0)
            cut = fn - 1; /* one byte short: only the padding of the last tensor is lost */
        write_file(path2, file, cut);
        ok =
            ok && sdp_ckpt_read_info(path2, NULL, NULL) != 0 && sdp_ckpt_load(path2, &b, NULL) != 0;
    }
    check(ok && state_equals(&b, snap_b, snap_bn), "truncated at 10 random points");
    memcpy(work, file, fn);
    work[offs[nt - 1] + nbs[nt - 1] - 1] ^= 0x01; /* last byte of the last tensor */
    write_file(path2, work, fn);
    check(sdp_ckpt_read_info(path2, NULL, NULL) == 0,
          "flipped data byte: read_info passes (header only)");
    check(sdp_ckpt_load(path2, &b, NULL) == -EINVAL && state_equals(&b, snap_b, snap_bn),
          "flipped last data byte: load fails (crc) before touching the state");
    memcpy(work, file, fn);
    {
        int t = (int)(sdp_rng_unit(&rng) * nt);
        work[offs[t] + (uint64_t)(sdp_rng_unit(&rng) * (double)nbs[t])] ^= 0x40;
    }
    write_file(path2, work, fn);
    check(sdp_ckpt_load(path2, &b, NULL) == -EINVAL && state_equals(&b, snap_b, snap_bn),
          "flipped random data byte: load fails");
    memcpy(work, file, fn);
    {
        char *s = strstr((char *)work + 64, "\"step\": 7");
        if (s)
            s[8] = '8'; /* still valid JSON: only the crc can tell */
        write_file(path2, work, fn);
        check(s && sdp_ckpt_read_info(path2, NULL, NULL) == -EINVAL &&
                  sdp_ckpt_load(path2, &b, NULL) == -EINVAL && state_equals(&b, snap_b, snap_bn),
              "JSON byte changed (step 7 -> 8): header crc");
    }
    memcpy(work, file, fn);
    work[3] = 'X';
    write_file(path2, work, fn);
    check(sdp_ckpt_load(path2, &b, NULL) == -EINVAL && state_equals(&b, snap_b, snap_bn),
          "wrong magic");
    memcpy(work, file, fn);
    work[8] = 2; /* version 2 with a valid header crc */
    {
        uint32_t h = crc_bitwise(crc_bitwise(0, work, 60), work + 64, le64(work + 16));
        for (int i = 0; i < 4; i++)
            work[60 + i] = (unsigned char)(h >> (8 * i));
    }
    write_file(path2, work, fn);
    check(sdp_ckpt_load(path2, &b, NULL) == -EINVAL && state_equals(&b, snap_b, snap_bn),
          "version 2 (header crc valid)");
    fill_state(&c, 4);
    rc = load_capture(path, &c, msg, sizeof(msg));
    check(rc == -EINVAL && strstr(msg, "hidden_size 64, the recipe has 128"),
          "other model: error names hidden_size 64 vs 128");

    /* keep_last */
    printf("keep_last:\n");
    for (int s = 10; s <= 40; s += 10) {
        info.step = s;
        rc = sdp_ckpt_save(d2, &a, &info, 2);
        if (rc)
            break;
    }
    snprintf(path, sizeof(path), "%s/step-00000030.sdpckpt", d2);
    snprintf(path2, sizeof(path2), "%s/step-00000040.sdpckpt", d2);
    check(rc == 0 && count_entries(d2) == 2 && exists(path) && exists(path2),
          "steps 10..40 with keep_last 2: 30 and 40 remain");
    rc = sdp_ckpt_latest(d2, msg, sizeof(msg));
    check(rc == 0 && !strcmp(msg, path2), "latest: step 40");

    /* latest skips a corrupt newest file */
    printf("latest:\n");
    info.step = 30;
    sdp_ckpt_save(d4, &a, &info, 0);
    info.step = 40;
    sdp_ckpt_save(d4, &a, &info, 0);
    snprintf(path, sizeof(path), "%s/step-00000030.sdpckpt", d4);
    snprintf(path2, sizeof(path2), "%s/step-00000040.sdpckpt", d4);
    memcpy(work, file, fn);
    work[offs[nt / 2] + 5] ^= 0x80; /* step-7's bytes under step 40's name: still a crc failure */
    write_file(path2, work, fn);
    rc = sdp_ckpt_latest(d4, msg, sizeof(msg));
    check(rc == 0 && !strcmp(msg, path), "corrupt step 40 skipped, step 30 returned");
    write_file(path, work, fn);
    check(sdp_ckpt_latest(d4, msg, sizeof(msg)) == -ENOENT, "all corrupt: -ENOENT");
    check(sdp_ckpt_latest(d5, msg, sizeof(msg)) == -ENOENT, "missing directory: -ENOENT");

    /* failed saves */
    printf("failed saves:\n");
    info.step = 30;
    sdp_ckpt_save(d5, &a, &info, 2);
    info.step = 40;
    sdp_ckpt_save(d5, &a, &info, 2);
    snprintf(path, sizeof(path), "%s/step-00000050.sdpckpt.tmp", d5);
    mkdir(path, 0777);
    info.step = 50;
    rc = sdp_ckpt_save(d5, &a, &info, 1);
    snprintf(path2, sizeof(path2), "%s/step-00000050.sdpckpt", d5);
    check(rc != 0 && !exists(path2) && count_entries(d5) == 3, "tmp path is a directory: error");
    rmdir(path);
    {
        struct rlimit old, lim;
        getrlimit(RLIMIT_FSIZE, &old);
        lim = old;
        lim.rlim_cur = fn / 2;
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &lim);
        info.step = 60;
        rc = sdp_ckpt_save(d5, &a, &info, 1);
        setrlimit(RLIMIT_FSIZE, &old);
        signal(SIGXFSZ, SIG_DFL);
    }
    snprintf(path, sizeof(path), "%s/step-00000060.sdpckpt.tmp", d5);
    snprintf(path2, sizeof(path2), "%s/step-00000060.sdpckpt", d5);
    check(rc == -EFBIG && !exists(path) && !exists(path2) && count_entries(d5) == 2,
          "file size limit: -EFBIG, no temporary, nothing pruned");
    ok = 1;
    for (int s = 30; s <= 40; s += 10) {
        snprintf(path, sizeof(path), "%s/step-%08d.sdpckpt", d5, s);
        fill_state(&b, 5);
        ok = ok && sdp_ckpt_load(path, &b, NULL) == 0 && state_equals(&b, snap_a, snap_n);
    }
    check(ok, "steps 30 and 40 still load bit-identical");

    free(work);
    free(file);
    free(snap_a);
    free(snap_b);
    sdp_state_destroy(&a);
    sdp_state_destroy(&b);
    sdp_state_destroy(&c);
    sdp_rt_shutdown();
    if (!failures)
        rm_tree(workdir);
    else
        printf("files kept in %s\n", workdir);
    printf("%s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
