/* SPDX-License-Identifier: MIT */
/* Fuzz target for the checkpoint header reader of formats/ckpt_read.c (sdp_ckpt_read_header,
 * which sdp_ckpt_read_info wraps; plain C, no StarPU).  The input is a checkpoint's header: to get
 * past the checks no fuzzer can solve, the file is zero-extended to the size the fixed header
 * states (when that is at most 1 MiB more) and the header crc32c is recomputed before the file is
 * read.  Must only return 0 or a negative errno and free everything.  Built by tools/fuzz.sh
 * (libFuzzer) and by tests/fuzz/local.mk (regression replay). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"
#include "formats/ckpt_format.h"
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
    struct sdp_ckpt_header h;
    int rc;
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
    rc = sdp_ckpt_read_header(path, &h);
    fuzz_check_rc("sdp_ckpt_read_header", rc);
    if (rc == 0)
        sdp_ckpt_header_free(&h);
    return 0;
}
