/* SPDX-License-Identifier: MIT */
/* Fuzz target for formats/hfconfig.c: the input is read as a config.json (MoE configs included),
 * then loaded as the step graph loads it.  Must only return 0 or a negative errno and free
 * everything.
 * Built by tools/fuzz.sh (libFuzzer) and by tests/fuzz/local.mk (regression replay). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "models/sdp_models.h"
#include "formats/hfconfig.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sdp_model_cfg cfg;
    char path[600];
    fuzz_path(path, sizeof(path), "config.json");
    fuzz_write(path, data, size);
    fuzz_check_rc("sdp_hfconfig_read", sdp_hfconfig_read(path, &cfg));
    fuzz_check_rc("sdp_hfconfig_load", sdp_hfconfig_load(path, &cfg));
    return 0;
}
