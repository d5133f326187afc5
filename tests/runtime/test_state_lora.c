/* SPDX-License-Identifier: MIT */
/* LoRA's training state (runtime/state_lora.c, sdp_state_create_lora) through StarPU with one CPU
 * worker, on a tiny untied Llama with adapters of rank 4 on q_proj, v_proj and down_proj of layers
 * 2-3 (of 3).  Checks: the frozen base has its working copy alone (no master, moments, gradient);
 * adapters exist on layers 2-3 only, with PEFT's names and shapes (A: r x in, B: out x r, from
 * the base weight's shape) back to back; the random base of a LoRA state equals the full state's
 * masters, bit for bit in fp32 and rounded to nearest even in bf16 (rounding oracle written here,
 * from the two bf16 neighbours in fp64); the same for a base loaded from a safetensors file;
 * PEFT's initialisation: B and the moments zero, A inside +-1/sqrt(in) with the mean and variance
 * of that uniform law (bounds of 6 standard deviations of the estimates), reproducible from the
 * seed; the host bytes; and the refusals (a rank too large, working copies off the host, saving
 * a frozen base). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/init.h"
#include "runtime/state.h"
#include "tests/lib/sdp_test.h"

static struct sdp_model_cfg tiny_cfg(void)
{
    struct sdp_model_cfg c;
    memset(&c, 0, sizeof(c));
    sdp_model_defaults(&c, SDP_ARCH_LLAMA);
    c.vocab_size = 256, c.hidden_size = 64, c.intermediate_size = 176, c.num_layers = 3;
    c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = 16, c.max_position_embeddings = 512;
    c.rope_theta = 10000, c.rms_norm_eps = 1e-5, c.initializer_range = 0.02;
    c.bos_token_id = 1, c.eos_token_id = 2;
    return c;
}

/* x rounded to the nearer of its two bf16 neighbours (fp64 distances), ties to the even one */
static uint16_t bf16_oracle(float x)
{
    uint32_t u, lo, hi;
    float flo, fhi;
    memcpy(&u, &x, sizeof(u));
    lo = u & 0xffff0000u, hi = lo + 0x10000u;
    memcpy(&flo, &lo, 4), memcpy(&fhi, &hi, 4);
    double dlo = fabs((double)x - flo), dhi = fabs((double)fhi - x);
    if (dlo < dhi || (dlo == dhi && !((lo >> 16) & 1)))
        return (uint16_t)(lo >> 16);
    return (uint16_t)(hi >> 16);
}

/* the base of lo (frozen, work_dtype) against the masters of full: identical or rounded */
static void check_base(const char *what, struct sdp_state *lo, struct sdp_state *full)
{
    size_t bad = 0, n = 0;
    for (int g = 0; g < lo->ngroups; g++) {
        const float *m = sdp_rt_tensor_data(full->groups[g].master);
        const void *w = sdp_rt_tensor_data(lo->groups[g].work);
        for (size_t i = 0; i < lo->groups[g].nelems; i++, n++)
            bad += lo->work_dtype == SDP_F32 ? memcmp(&((const float *)w)[i], &m[i], 4) != 0
                                             : ((const uint16_t *)w)[i] != bf16_oracle(m[i]);
    }
    printf("%s: %zu of %zu base elements differ\n", what, bad, n);
    CHECK(bad == 0, "%s: %zu elements differ", what, bad);
}

static void check_layout(struct sdp_state *st, const struct sdp_lora_cfg *lc)
{
    for (int g = 0; g < st->ngroups; g++) {
        const struct sdp_group_state *gs = &st->groups[g];
        const struct sdp_lora_state *ls = gs->lora;
        CHECK(gs->frozen && gs->work && !gs->master && !gs->m && !gs->v && !gs->grad &&
                  !gs->grad_ret,
              "group %d is not a frozen base", g);
        CHECK((ls != NULL) == (g == 2 || g == 3), "group %d: adapters %p", g, (const void *)ls);
        if (!ls)
            continue;
        size_t off = 0;
        CHECK(ls->ntensors == 6, "group %d: %d adapter tensors", g, ls->ntensors);
        for (int i = 0; i < ls->ntensors; i++) {
            const struct sdp_lora_tensor *t = &ls->tensors[i];
            const struct sdp_param_desc *d = NULL;
            char want[160];
            for (int j = 0; j < gs->ntensors; j++)
                d = gs->tensors[j].kind == t->kind ? &gs->tensors[j] : d;
            CHECK(d && t->offset == off && t->is_b == (i & 1), "group %d tensor %d placement", g,
                  i);
            CHECK(t->rows == (t->is_b ? d->rows : lc->rank) &&
                      t->cols == (t->is_b ? lc->rank : d->cols),
                  "%s: %d x %d", t->peft_name, t->rows, t->cols);
            snprintf(want, sizeof(want), "base_model.model.model.layers.%d.%s.%s.lora_%c.weight",
                     g - 1, t->kind == SDP_PT_DOWN ? "mlp" : "self_attn",
                     sdp_lora_target_name(t->kind), t->is_b ? 'B' : 'A');
            CHECK(!strcmp(t->peft_name, want), "name %s, PEFT's %s", t->peft_name, want);
            off += (size_t)t->rows * t->cols;
        }
        CHECK(off == ls->nelems && ls->nelems == sdp_lora_layer_elems(lc, &st->cfg, g),
              "group %d: %zu adapter elements", g, ls->nelems);
    }
}

/* PEFT's initialisation: B, m, v zero; A uniform in +-1/sqrt(in) */
static void check_init(struct sdp_state *st)
{
    for (int g = 2; g <= 3; g++) {
        const struct sdp_lora_state *ls = st->groups[g].lora;
        const float *p = sdp_rt_tensor_data(ls->master), *m = sdp_rt_tensor_data(ls->m);
        const float *v = sdp_rt_tensor_data(ls->v);
        for (size_t i = 0; i < ls->nelems; i++)
            CHECK(m[i] == 0 && v[i] == 0, "group %d: moment %zu not zero", g, i);
        for (int i = 0; i < ls->ntensors; i++) {
            const struct sdp_lora_tensor *t = &ls->tensors[i];
            size_t n = (size_t)t->rows * t->cols, out = 0, zeros = 0;
            double b = 1.0 / sqrt(t->cols), s1 = 0, s2 = 0;
            for (size_t k = 0; k < n; k++) {
                double x = p[t->offset + k];
                out += fabs(x) > b, zeros += x == 0, s1 += x, s2 += x * x;
            }
            if (t->is_b) {
                CHECK(zeros == n, "%s: %zu of %zu non-zero", t->peft_name, n - zeros, n);
                continue;
            }
            /* the mean of n uniforms has sd b / sqrt(3n); the mean of their squares b^2 / 3 with
             * sd b^2 sqrt(4 / (45 n)) (E x^4 = b^4 / 5) */
            double mean = s1 / n, msq = s2 / n;
            printf("%s: %zu values in +-%.4f, mean %.2e (6 sd %.2e), mean square %.4e (%.4e)\n",
                   t->peft_name, n, b, mean, 6 * b / sqrt(3.0 * n), msq, b * b / 3);
            CHECK(out == 0 && zeros < 2, "%s: %zu outside the bound", t->peft_name, out);
            CHECK(fabs(mean) < 6 * b / sqrt(3.0 * n), "%s: mean %g", t->peft_name, mean);
            CHECK(fabs(msq - b * b / 3) < 6 * b * b * sqrt(4.0 / (45.0 * n)), "%s: mean square %g",
                  t->peft_name, msq);
        }
    }
}

int main(void)
{
    struct sdp_rt_conf rconf = { .ncpus = 1, .ncuda = 0 };
    struct sdp_model_cfg cfg = tiny_cfg();
    struct sdp_lora_cfg lc = { .rank = 4, .alpha = 8, .first = 2, .last = 3 };
    struct sdp_state full, l32, l16, again;
    char dir[] = "/tmp/sdp-state-lora-XXXXXX";
    lc.targets = SDP_LORA_BIT(SDP_PT_Q) | SDP_LORA_BIT(SDP_PT_V) | SDP_LORA_BIT(SDP_PT_DOWN);
    if (sdp_rt_init(&rconf) != 0) {
        printf("StarPU did not start\nSKIP\n");
        return 77;
    }
    if (sdp_state_create(&full, &cfg, SDP_F32, 4096) ||
        sdp_state_create_lora(&l32, &cfg, &lc, SDP_F32, 4096, 0) ||
        sdp_state_create_lora(&l16, &cfg, &lc, SDP_BF16, 4096, 0) ||
        sdp_state_create_lora(&again, &cfg, &lc, SDP_BF16, 4096, 0)) {
        printf("state creation failed\nFAIL\n");
        return 1;
    }
    check_layout(&l16, &lc);
    sdp_state_init_random(&full, 5);
    sdp_state_init_random(&l32, 5);
    sdp_state_init_random(&l16, 5);
    check_base("random base, fp32", &l32, &full);
    check_base("random base, bf16", &l16, &full);

    /* a base loaded from a file: the full state's masters saved in fp32 */
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    CHECK(sdp_state_save_hf(&full, dir, "float32") == 0, "save the full state");
    CHECK(sdp_state_load_hf(&again, dir) == 0, "load into a LoRA state");
    check_base("loaded base, bf16", &again, &full);
    CHECK(sdp_state_save_hf(&l16, dir, "float32") == -EINVAL, "a frozen base saved");

    sdp_state_lora_init(&l16, 9);
    sdp_state_lora_init(&again, 9);
    check_init(&l16);
    for (int g = 2; g <= 3; g++)
        CHECK(!memcmp(sdp_rt_tensor_data(l16.groups[g].lora->master),
                      sdp_rt_tensor_data(again.groups[g].lora->master),
                      l16.groups[g].lora->nelems * 4),
              "group %d: the same seed drew other adapters", g);
    sdp_state_lora_init(&again, 10);
    CHECK(memcmp(sdp_rt_tensor_data(l16.groups[2].lora->master),
                 sdp_rt_tensor_data(again.groups[2].lora->master), 64),
          "another seed drew the same adapters");
    CHECK(sdp_state_lora_host_bytes(&cfg, &lc, SDP_BF16) ==
              sdp_model_num_params(&cfg) * 2 + 2 * sdp_lora_layer_elems(&lc, &cfg, 2) * 18,
          "host bytes");

    struct sdp_state bad;
    struct sdp_lora_cfg big = lc;
    big.rank = 33; /* k is not adapted; v_proj is 32 x 64 */
    CHECK(sdp_state_create_lora(&bad, &cfg, &big, SDP_BF16, 4096, 0) == -EINVAL, "rank 33");
    CHECK(sdp_state_create_lora(&bad, &cfg, &lc, SDP_BF16, 4096, SDP_STATE_WORK_STAGED) == -EINVAL,
          "working copies off the host");

    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "rm");
    sdp_state_destroy(&full);
    sdp_state_destroy(&l32);
    sdp_state_destroy(&l16);
    sdp_state_destroy(&again);
    sdp_rt_shutdown();
    return sdp_test_finish(sdp_test_nfail);
}
