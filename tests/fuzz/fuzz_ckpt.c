/* SPDX-License-Identifier: MIT */
/* Fuzz target for the header reader of runtime/ckpt.c (sdp_ckpt_read_info; loading the tensors
 * needs StarPU).  The input is a checkpoint's header: to get past the checks no fuzzer can solve,
 * the file is zero-extended to the size the fixed header states (when that is at most 1 MiB more)
 * and the header crc32c is recomputed before the file is read.  Must only return 0 or a negative
 * errno and free everything.
 * Built by tools/fuzz.sh (libFuzzer) and by tests/fuzz/local.mk (regression replay). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/sdp_models.h"
#include "runtime/ckpt.h"
#include "tests/fuzz/fuzz_common.h"

#define FIXED  64
#define EXTEND ((uint64_t)1 << 20)

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sdp_model_cfg cfg;
    struct sdp_ckpt_info info;
    uint8_t *buf;
    size_t len = size;
    char path[600];
    if (size >= FIXED) {
        uint64_t json_nbytes = get_u64(data + 16), file_nbytes = get_u64(data + 32);
        if (file_nbytes > size && file_nbytes - size <= EXTEND)
            len = (size_t)file_nbytes;
        buf = calloc(1, len);
        if (!buf)
            abort();
        memcpy(buf, data, size);
        if (json_nbytes <= len - FIXED) {
            uint32_t crc = sdp_crc32c(sdp_crc32c(0, buf, 60), buf + FIXED, (size_t)json_nbytes);
            for (int i = 0; i < 4; i++)
                buf[60 + i] = (uint8_t)(crc >> (8 * i));
        }
    } else {
        buf = malloc(size ? size : 1);
        if (!buf)
            abort();
        memcpy(buf, data, size);
    }
    fuzz_path(path, sizeof(path), "step-00000001.sdpckpt");
    fuzz_write(path, buf, len);
    free(buf);
    fuzz_check_rc("sdp_ckpt_read_info", sdp_ckpt_read_info(path, &cfg, &info));
    return 0;
}
