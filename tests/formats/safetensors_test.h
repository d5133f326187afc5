/* SPDX-License-Identifier: MIT */
/* A safetensors file made by hand, as another writer would make it, for the tests of
 * formats/safetensors.c (test_safetensors.c, test_safetensors_bad.c): the reader is checked
 * against bytes that its own writer did not produce. */
#ifndef SDP_SAFETENSORS_TEST_H
#define SDP_SAFETENSORS_TEST_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/sdp_test_files.h"

/* A safetensors file made by hand: 8-byte length, header text as given, then data bytes. */
static inline void st_make_file(const char *path, const char *header, uint64_t hlen_field,
                                const void *data, size_t ndata)
{
    size_t h = strlen(header);
    unsigned char *b = malloc(8 + h + ndata);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(hlen_field >> (8 * i));
    memcpy(b + 8, header, h);
    if (ndata)
        memcpy(b + 8 + h, data, ndata);
    sdp_test_write_file(path, b, 8 + h + ndata);
    free(b);
}

#endif
