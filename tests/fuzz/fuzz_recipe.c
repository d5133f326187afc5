/* SPDX-License-Identifier: MIT */
/* Fuzz target for cli/recipe.c: the input is loaded as a YAML recipe; a recipe that loads is
 * validated again and its learning-rate schedule evaluated.  Must only return 0 or a negative
 * errno and free everything.
 * Built by tools/fuzz.sh (libFuzzer) and by tests/fuzz/local.mk (regression replay). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "cli/recipe.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct sdp_recipe r; /* 20 KB of paths: keep it off the stack */
    char path[600];
    int rc;
    fuzz_path(path, sizeof(path), "recipe.yaml");
    fuzz_write(path, data, size);
    rc = sdp_recipe_load(path, &r);
    fuzz_check_rc("sdp_recipe_load", rc);
    if (rc == 0) {
        fuzz_check_rc("sdp_recipe_validate", sdp_recipe_validate(&r));
        for (int s = 0; s < r.steps && s < 4; s++)
            (void)sdp_recipe_lr_at(&r, s);
        if (r.steps > 0)
            (void)sdp_recipe_lr_at(&r, r.steps - 1);
    }
    return 0;
}
