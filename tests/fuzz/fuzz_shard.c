/* SPDX-License-Identifier: MIT */
/* Fuzz target for formats/shard.c: the input is opened as a token shard; an open shard has every
 * token and mask byte read (so a count that overruns the mapping is caught).  Must only return 0
 * or a negative errno and free (unmap) everything.
 * Built by tools/fuzz.sh (libFuzzer) and by tests/fuzz/local.mk (regression replay). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "formats/shard.h"
#include "tests/fuzz/fuzz_common.h"

volatile uint32_t sdp_fuzz_sink; /* keeps the reads of every token */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct sdp_shard s;
    char path[600];
    int rc;
    fuzz_path(path, sizeof(path), "input.tok");
    fuzz_write(path, data, size);
    rc = sdp_shard_open(path, &s);
    fuzz_check_rc("sdp_shard_open", rc);
    if (rc == 0) {
        uint32_t sum = 0;
        for (uint64_t i = 0; i < s.count; i++)
            sum += s.tokens[i];
        sdp_fuzz_sink = sum;
        for (uint64_t i = 0; s.mask && i < s.count; i++)
            if (s.mask[i] > 1)
                abort(); /* open promises mask bytes of 0 or 1 */
        sdp_shard_close(&s);
    }
    return 0;
}
