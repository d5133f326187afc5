/* SPDX-License-Identifier: MIT */
/* Fuzz target for formats/safetensors.c: the input is opened as a .safetensors file, then as a
 * model.safetensors.index.json next to two small valid shards; whatever opens is listed and every
 * readable tensor read.  Must only return 0 or a negative errno and free everything.
 * Built by tools/fuzz.sh (libFuzzer) and by tests/fuzz/local.mk (regression replay). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

#define READ_MAX_ELEMS (1u << 16)

/* Write the shards an index may point to (once per process). */
static void write_shards(void)
{
    static int done;
    static const float a[6] = { 1, 2, 3, 4, 5, 6 };
    static const int32_t c[3] = { 7, -8, 9 };
    char path[600];
    if (done)
        return;
    const struct sdp_st_wtensor s1[] = {
        { .name = "a", .dtype = SDP_ST_F32, .ndim = 2, .shape = { 2, 3 }, .data_f32 = a },
        { .name = "b", .dtype = SDP_ST_BF16, .ndim = 1, .shape = { 6 }, .data_f32 = a },
    };
    const struct sdp_st_wtensor s2[] = {
        { .name = "c", .dtype = SDP_ST_I32, .ndim = 1, .shape = { 3 }, .data_i32 = c },
        { .name = "d", .dtype = SDP_ST_F16, .ndim = 3, .shape = { 1, 2, 3 }, .data_f32 = a },
    };
    fuzz_path(path, sizeof(path), "model-00001-of-00002.safetensors");
    if (sdp_st_write(path, s1, 2, NULL, NULL, 0))
        abort();
    fuzz_path(path, sizeof(path), "model-00002-of-00002.safetensors");
    if (sdp_st_write(path, s2, 2, NULL, NULL, 0))
        abort();
    done = 1;
}

static void exercise(const char *path)
{
    sdp_st_t *st = NULL;
    int rc = sdp_st_open(path, &st);
    fuzz_check_rc("sdp_st_open", rc);
    if (rc) {
        if (st)
            abort();
        return;
    }
    (void)sdp_st_metadata(st, "format");
    for (int i = 0; i < sdp_st_num_tensors(st); i++) {
        const struct sdp_st_tensor *t = sdp_st_tensor_at(st, i);
        if (!t || sdp_st_find(st, t->name) == NULL)
            abort();
        (void)sdp_st_file_path(st, t->file);
        if (t->nelems == 0 || t->nelems > READ_MAX_ELEMS)
            continue;
        if (t->dtype == SDP_ST_I32 || t->dtype == SDP_ST_I64) {
            int32_t *dst = malloc(t->nelems * sizeof(*dst));
            if (!dst)
                abort();
            fuzz_check_rc("sdp_st_read_i32", sdp_st_read_i32(st, t, dst, t->nelems));
            free(dst);
        } else {
            float *dst = malloc(t->nelems * sizeof(*dst));
            if (!dst)
                abort();
            fuzz_check_rc("sdp_st_read_f32", sdp_st_read_f32(st, t, dst, t->nelems));
            free(dst);
        }
    }
    sdp_st_close(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[600];
    write_shards();
    fuzz_path(path, sizeof(path), "input.safetensors");
    fuzz_write(path, data, size);
    exercise(path);
    fuzz_path(path, sizeof(path), "model.safetensors.index.json");
    fuzz_write(path, data, size);
    exercise(path);
    return 0;
}
