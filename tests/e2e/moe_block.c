/* SPDX-License-Identifier: MIT */
/* Test helper (not a test): one Qwen3-MoE sparse block through the CPU kernels of
 * codelets/cpu/moe.h, forward and backward, for tests/e2e/moe_hf.py to compare with transformers.
 *   moe_block IN_FILE OUT_FILE
 *   moe_block --config IN_DIR OUT_DIR
 *   moe_block --aux IN_FILE OUT_FILE
 * IN_FILE (native order): int32 N C E K IM norm_topk_prob, float32 aux_coef, then float32 x (N, C),
 * router weight (E, C), gate_up_proj (E, 2IM, C), down_proj (E, C, IM), dout (N, C).
 * OUT_FILE: float64 aux loss, then float32 router logits (N, E), expert ids (N, K), routing
 * weights (N, K), slots per expert (E), output (N, C), and the gradients of the objective
 * sum(dout * output) + aux_coef * aux: dx (N, C), router weight (E, C), gate_up_proj, down_proj.
 * With --config: IN_DIR's config.json read (formats/hfconfig.c, MoE included) and written to
 * OUT_DIR/config.json; stdout lists the sparse layers (0-based), e.g. "sparse: 0 2".  * Exit 0
 * done, 1 failure, 2 usage. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/moe.h"
#include "formats/hfconfig.h"
#include "models/sdp_models.h"

struct dims {
    int32_t N, C, E, K, IM, norm;
    float coef;
};

static float *get(FILE *f, size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    if (p && fread(p, sizeof(float), n, f) != n) {
        free(p);
        return NULL;
    }
    return p;
}

static float *zeros(size_t n)
{
    return calloc(n ? n : 1, sizeof(float));
}

/* Forward, aux loss and backward of the block; outputs written to o. */
static int run(FILE *o, const struct dims *d, const float *x, const float *wr, const float *wgu,
               const float *wdn, const float *dout)
{
    const size_t N = d->N, C = d->C, E = d->E, S = N * d->K, IM = d->IM;
    struct sdp_moe_routing r = { .N = d->N, .E = d->E, .K = d->K };
    float *lg = zeros(N * E), *pr = zeros(N * E), *xp = zeros(S * C), *gu = zeros(S * 2 * IM);
    float *h = zeros(S * IM), *y = zeros(S * C), *out = zeros(N * C), *dy = zeros(S * C);
    float *dwt = zeros(S), *dxp = zeros(S * C), *dgu = zeros(S * 2 * IM), *dh = zeros(S * IM);
    float *dp = zeros(N * E), *dz = zeros(N * E), *dx = zeros(N * C), *dwr = zeros(E * C);
    float *dwgu = zeros(E * 2 * IM * C), *dwdn = zeros(E * C * IM), *ids = zeros(S);
    float *cnt = zeros(E);
    double *count = calloc(E, sizeof(double)), *psum = calloc(E, sizeof(double)), aux;
    int32_t *buf = calloc(2 * S + 2 * E + 1, sizeof(int32_t));
    int rc = 1;
    if (!lg || !pr || !xp || !gu || !h || !y || !out || !dy || !dwt || !dxp || !dgu || !dh || !dp ||
        !dz || !dx || !dwr || !dwgu || !dwdn || !ids || !cnt || !count || !psum || !buf)
        goto done;
    r.ids = buf, r.counts = buf + S, r.offsets = buf + S + E, r.rows = buf + S + 2 * E + 1;
    r.where = calloc(S, sizeof(int32_t)), r.wts = zeros(S);
    if (!r.where || !r.wts)
        goto done;
    sdp_cpu_moe_router_fwd(lg, pr, &r, x, wr, d->C, d->norm);
    sdp_cpu_moe_permute(&r);
    sdp_cpu_moe_gather(xp, x, &r, d->C);
    sdp_cpu_moe_experts_fwd(y, gu, h, xp, wgu, wdn, &r, d->C, d->IM);
    sdp_cpu_moe_combine(out, y, &r, d->C);
    sdp_cpu_moe_aux_stats(count, psum, pr, &r);
    aux = sdp_cpu_moe_aux_loss(count, psum, d->N, d->E);
    sdp_cpu_moe_combine_bwd(dy, dwt, dout, y, &r, d->C);
    sdp_cpu_moe_experts_bwd(dxp, dwgu, dwdn, dgu, dh, dy, xp, gu, h, wgu, wdn, &r, d->C, d->IM);
    sdp_cpu_moe_scatter_bwd(dx, dxp, &r, d->C);
    sdp_cpu_moe_topk_bwd(dp, dwt, pr, &r, d->norm);
    sdp_cpu_moe_aux_bwd(dp, count, d->N, d->N, d->E, d->coef);
    sdp_cpu_moe_softmax_bwd(dz, dp, pr, d->N, d->E);
    sdp_cpu_moe_router_bwd(dx, dwr, dz, x, wr, d->N, d->C, d->E);
    for (size_t s = 0; s < S; s++)
        ids[s] = (float)r.ids[s];
    for (size_t e = 0; e < E; e++)
        cnt[e] = (float)r.counts[e];
    rc = fwrite(&aux, sizeof(aux), 1, o) != 1 || fwrite(lg, 4, N * E, o) != N * E ||
         fwrite(ids, 4, S, o) != S || fwrite(r.wts, 4, S, o) != S || fwrite(cnt, 4, E, o) != E ||
         fwrite(out, 4, N * C, o) != N * C || fwrite(dx, 4, N * C, o) != N * C ||
         fwrite(dwr, 4, E * C, o) != E * C ||
         fwrite(dwgu, 4, E * 2 * IM * C, o) != E * 2 * IM * C ||
         fwrite(dwdn, 4, E * C * IM, o) != E * C * IM;
done:
    free(r.where), free(r.wts);
    free(lg), free(pr), free(xp), free(gu), free(h), free(y), free(out), free(dy), free(dwt);
    free(dxp), free(dgu), free(dh), free(dp), free(dz), free(dx), free(dwr), free(dwgu);
    free(dwdn), free(ids), free(cnt), free(count), free(psum), free(buf);
    return rc;
}

static int config_round_trip(const char *in, const char *out)
{
    struct sdp_model_cfg c;
    if (sdp_hfconfig_read(in, &c) || sdp_hfconfig_write(out, &c, "float32"))
        return 1;
    printf("sparse:");
    for (int l = 0; l < c.num_layers; l++)
        if (sdp_model_layer_sparse(&c, l))
            printf(" %d", l);
    printf("\n");
    return 0;
}

/* The load-balancing loss of L layers' logits (passed as x with an identity router, C = E) and
 * its gradient: statistics summed over the layers, then each layer's backward. */
static int aux_layers(const char *in, const char *out)
{
    int32_t d[4];
    FILE *f = fopen(in, "rb"), *o;
    float *lg = NULL, *eye = NULL, *pr = NULL, *dp = NULL, *dz = NULL, *l2 = NULL;
    double *count = NULL, *psum = NULL, aux;
    struct sdp_moe_routing r = { 0 };
    int rc = 1;
    if (!f || fread(d, 4, 4, f) != 4 || d[0] < 1 || d[1] < 1 || d[2] < 1 || d[3] < 1 ||
        d[3] > d[2] || d[0] > 64 || d[1] > 1 << 16 || d[2] > 1024)
        goto done;
    const int L = d[0], N = d[1], E = d[2], K = d[3];
    const size_t NE = (size_t)N * E;
    lg = get(f, L * NE), eye = zeros((size_t)E * E), pr = zeros(L * NE), dp = zeros(NE);
    dz = zeros(L * NE), l2 = zeros(NE), count = calloc(E, sizeof(double));
    psum = calloc(E, sizeof(double)), r.ids = calloc((size_t)N * K, 4), r.wts = zeros(N * K);
    if (!lg || !eye || !pr || !dp || !dz || !l2 || !count || !psum || !r.ids || !r.wts)
        goto done;
    r.N = N, r.E = E, r.K = K;
    for (int e = 0; e < E; e++)
        eye[(size_t)e * E + e] = 1.0f;
    for (int l = 0; l < L; l++) {
        sdp_cpu_moe_router_fwd(l2, pr + l * NE, &r, lg + l * NE, eye, E, 0);
        sdp_cpu_moe_aux_stats(count, psum, pr + l * NE, &r);
    }
    aux = sdp_cpu_moe_aux_loss(count, psum, (double)L * N, E);
    for (int l = 0; l < L; l++) {
        memset(dp, 0, NE * sizeof(float));
        sdp_cpu_moe_aux_bwd(dp, count, (double)L * N, N, E, 1.0f);
        sdp_cpu_moe_softmax_bwd(dz + l * NE, dp, pr + l * NE, N, E);
    }
    if ((o = fopen(out, "wb"))) {
        rc = fwrite(&aux, 8, 1, o) != 1 || fwrite(dz, 4, L * NE, o) != L * NE;
        rc = fclose(o) != 0 || rc;
    }
done:
    if (rc)
        fprintf(stderr, "moe_block --aux: %s: bad input, or cannot write %s\n", in, out);
    if (f)
        fclose(f);
    free(lg), free(eye), free(pr), free(dp), free(dz), free(l2), free(count), free(psum);
    free(r.ids), free(r.wts);
    return rc;
}

int main(int argc, char **argv)
{
    struct dims d;
    float *x = NULL, *wr = NULL, *wgu = NULL, *wdn = NULL, *dout = NULL;
    FILE *f, *o;
    int rc = 1;
    if (argc == 4 && !strcmp(argv[1], "--config"))
        return config_round_trip(argv[2], argv[3]);
    if (argc == 4 && !strcmp(argv[1], "--aux"))
        return aux_layers(argv[2], argv[3]);
    if (argc != 3) {
        fprintf(stderr,
                "usage: moe_block IN_FILE OUT_FILE | --config IN_DIR OUT_DIR | --aux IN OUT\n");
        return 2;
    }
    f = fopen(argv[1], "rb");
    if (!f || fread(&d, 4, 7, f) != 7 || d.N < 1 || d.C < 1 || d.E < 1 || d.K < 1 || d.K > d.E ||
        d.IM < 1 || d.N > 1 << 20 || d.C > 1 << 16 || d.E > 1 << 16 || d.IM > 1 << 16) {
        fprintf(stderr, "moe_block: %s: cannot read the dimensions, or they are out of range\n",
                argv[1]);
        if (f)
            fclose(f);
        return 1;
    }
    x = get(f, (size_t)d.N * d.C), wr = get(f, (size_t)d.E * d.C);
    wgu = get(f, (size_t)d.E * 2 * d.IM * d.C), wdn = get(f, (size_t)d.E * d.C * d.IM);
    dout = get(f, (size_t)d.N * d.C);
    fclose(f);
    if (!x || !wr || !wgu || !wdn || !dout)
        fprintf(stderr, "moe_block: %s is shorter than its dimensions say\n", argv[1]);
    else if (!(o = fopen(argv[2], "wb")))
        fprintf(stderr, "moe_block: cannot create %s\n", argv[2]);
    else {
        rc = run(o, &d, x, wr, wgu, wdn, dout);
        rc = fclose(o) != 0 || rc;
        if (rc)
            fprintf(stderr, "moe_block: out of memory or cannot write %s\n", argv[2]);
    }
    free(x), free(wr), free(wgu), free(wdn), free(dout);
    return rc;
}
