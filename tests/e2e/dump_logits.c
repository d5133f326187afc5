/* SPDX-License-Identifier: MIT */
/* Test helper (not a test): the fp32 logits of our forward pass for a batch of token ids, loaded
 * from a Hugging Face directory (config.json + safetensors) and run through StarPU on CPU workers.
 *   dump_logits MODEL_DIR IDS_FILE NSEQ T OUT_FILE [ADAPTER_DIR]
 * IDS_FILE: NSEQ * T int32 (native order); OUT_FILE: NSEQ * T * V float32 (native order).  Used by
 * tests/e2e/export_hf.py to compare with transformers.  With ADAPTER_DIR (a PEFT LoRA adapter of
 * the model), the forward runs the adapters' own tasks (lora_fwd) beside the frozen base
 * (tests/e2e/lora_peft.py compares with PEFT).  Exit 0 done, 1 failure, 2 usage. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/sdp_tasks.h"
#include "graph/step.h"
#include "formats/hfconfig.h"
#include "runtime/init.h"
#include "runtime/peft.h"
#include "runtime/state.h"

#define CHUNK_BYTES ((size_t)1 << 20) /* any size: chunking does not change the forward */

static int parse_pos(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 1 || v > 1 << 20)
        return -1;
    *out = (int)v;
    return 0;
}

static int32_t *read_ids(const char *path, size_t n)
{
    FILE *f = fopen(path, "rb");
    int32_t *ids = malloc(n * sizeof(*ids));
    int extra;
    if (!f || !ids) {
        fprintf(stderr, "dump_logits: cannot read %s: %s\n", path, strerror(errno));
        goto fail;
    }
    if (fread(ids, sizeof(*ids), n, f) != n || (extra = fgetc(f)) != EOF) {
        fprintf(stderr, "dump_logits: %s does not hold exactly %zu int32 ids\n", path, n);
        goto fail;
    }
    fclose(f);
    return ids;
fail:
    if (f)
        fclose(f);
    free(ids);
    return NULL;
}

static int run(const char *dir, const int32_t *ids, int nseq, int T, const char *out,
               const char *adapter)
{
    struct sdp_model_cfg cfg;
    struct sdp_state st;
    struct sdp_graph_conf gc = { 0 };
    sdp_graph_t *g = NULL;
    float *logits = NULL;
    size_t n;
    FILE *f;
    int rc = 1, have_state = 0;
    if (sdp_hfconfig_load(dir, &cfg))
        return 1;
    for (size_t i = 0; i < (size_t)nseq * T; i++)
        if (ids[i] < 0 || ids[i] >= cfg.vocab_size) {
            fprintf(stderr, "dump_logits: id %d at %zu outside the vocabulary [0, %d)\n", ids[i], i,
                    cfg.vocab_size);
            return 1;
        }
    gc.micro_batch = nseq;
    gc.n_micro = 1;
    gc.seq_len = T;
    gc.recompute = 1;
    gc.beta1 = 0.9;
    gc.beta2 = 0.95;
    gc.eps = 1e-8;
    if (adapter && sdp_peft_read_config(adapter, &cfg, &gc.lora))
        return 1;
    if (adapter ? sdp_state_create_lora(&st, &cfg, &gc.lora, SDP_F32, CHUNK_BYTES, 0)
                : sdp_state_create(&st, &cfg, SDP_F32, CHUNK_BYTES))
        return 1;
    have_state = 1;
    if (sdp_state_load_hf(&st, dir) || (adapter && sdp_state_load_peft(&st, adapter)) ||
        sdp_graph_create(&g, &st, &gc))
        goto out;
    n = (size_t)nseq * T * cfg.vocab_size;
    logits = malloc(n * sizeof(float));
    if (!logits) {
        fprintf(stderr, "dump_logits: cannot allocate %zu logits\n", n);
        goto out;
    }
    if (sdp_graph_logits(g, ids, nseq, logits))
        goto out;
    f = fopen(out, "wb");
    if (!f || fwrite(logits, sizeof(float), n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "dump_logits: cannot write %s: %s\n", out, strerror(errno));
        goto out;
    }
    printf("dump_logits: %d x %d ids -> %zu logits (V = %d) in %s\n", nseq, T, n, cfg.vocab_size,
           out);
    rc = 0;
out:
    free(logits);
    sdp_rt_wait_all();
    if (g)
        sdp_graph_destroy(g);
    if (have_state)
        sdp_state_destroy(&st);
    return rc;
}

int main(int argc, char **argv)
{
    struct sdp_rt_conf rc = { 0 };
    int nseq, T, status;
    int32_t *ids;
    if (argc < 6 || argc > 7 || parse_pos(argv[3], &nseq) || parse_pos(argv[4], &T)) {
        fprintf(stderr, "usage: dump_logits MODEL_DIR IDS_FILE NSEQ T OUT_FILE [ADAPTER_DIR]\n");
        return 2;
    }
    ids = read_ids(argv[2], (size_t)nseq * T);
    if (!ids)
        return 1;
    rc.ncpus = 2;
    if (sdp_rt_init(&rc) || sdp_tasks_init()) {
        fprintf(stderr, "dump_logits: cannot start StarPU\n");
        free(ids);
        return 1;
    }
    status = run(argv[1], ids, nseq, T, argv[5], argc == 7 ? argv[6] : NULL);
    sdp_tasks_shutdown();
    sdp_rt_shutdown();
    free(ids);
    return status;
}
