/* SPDX-License-Identifier: MIT */
/* main() for the non-libFuzzer builds of the fuzz targets (`make check`): runs the target's
 * LLVMFuzzerTestOneInput on every file named on the command line, as libFuzzer would replay a
 * crash input.  It must not judge the result itself: the target aborts on a bad return value and
 * the sanitizers (in a sanitizer build) on memory errors.
 * Used by tests/fuzz/test_fuzz_regressions.sh. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/fuzz/fuzz_common.h"

static int replay(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    if (!f) {
        perror(path);
        return 1;
    }
    for (;;) {
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap ? 2 * cap : 4096);
            if (!nb) {
                fclose(f);
                free(buf);
                return 1;
            }
            buf = nb;
            cap = cap ? 2 * cap : 4096;
        }
        size_t k = fread(buf + len, 1, cap - len, f);
        if (k == 0)
            break;
        len += k;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        printf("replay %s\n", argv[i]);
        fflush(stdout);
        bad |= replay(argv[i]);
    }
    return bad;
}
