/* SPDX-License-Identifier: MIT */
/* LM head fused with softmax cross-entropy, in blocks of rows and, inside them, of the vocabulary,
 * so that neither the (N, V) logits nor a (rows, V) slice of them exists: a block of logits
 * (rows x vcols) stays in the core's cache between the sgemm that makes it and the ones that use
 * it, and the embedding-sized dw (V, C) is read and written once per row block.  Two passes over
 * the vocabulary per row block: the first makes each row's max and sum of exponentials (online,
 * as the blocks come), the second makes the logits again, turns them into dlogits and gives dh and
 * dw by two more sgemms (8 N C V FLOPs in all, where a row-blocked version does 6 but streams the
 * whole of w and dw through memory at every block).  The vocabulary is cut into a fixed number of
 * shards that threads of a pool take in turn; dh sums the shards' partial products in shard order,
 * so the result does not depend on the thread count.  The element-wise work (max, exp, sums):
 * codelets/cpu/lmhead_rows.c, AVX-512 or not, the same bits.  Also the fp64 triple-loop version
 * (test oracle).  Ignored targets (< 0) contribute nothing.
 * Test: tests/kernels/test_kernels_lmhead_ce.c (fp64 oracle, finite differences). */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#undef I /* <complex.h>, pulled in by OpenBLAS's cblas.h, defines I: a dimension name here */

#include "codelets/cpu/sdp_cpu_kernels.h"

/* One call's shared state.  Per row block: pass 1 (shards in turn), combine (thread 0), pass 2
 * (shards in turn), dh as the shards' sum (rows split over the threads); a barrier between. */
struct head_ctx {
    double *loss_sum;
    int *nvalid;
    float *dh, *dw;
    const float *h, *w;
    const int32_t *tgt;
    int N, C, V;
    float scale;
    struct sdp_lmhead_blocks b;
    int nvb;                                 /* vocabulary blocks */
    float *logits;                           /* per thread: rows x vcols */
    float *dhp;                              /* per shard: rows x C partial dh */
    float *smax;                             /* per shard: rows maxima */
    double *ssum;                            /* per shard: rows sums of exp(z - smax) */
    double *zt;                              /* rows: the target's logit */
    float *rmax;                             /* rows: the row's max */
    float *rk;                               /* rows: scale / sum, 0 for ignored rows */
    float (*row_max)(const float *z, int n); /* the element-wise work, AVX-512 or not */
    double (*exp_sum)(const float *z, int n, float m);
    void (*exp_scale)(float *z, int n, float m, float k);
    atomic_int next1, next2;
    pthread_mutex_t bl;
    pthread_cond_t bc;
    int bcount;
    unsigned bgen;
};

static void barrier(struct head_ctx *x, int nth)
{
    if (nth <= 1)
        return;
    pthread_mutex_lock(&x->bl);
    const unsigned gen = x->bgen;
    if (++x->bcount == nth) {
        x->bcount = 0;
        x->bgen++;
        pthread_cond_broadcast(&x->bc);
    } else {
        while (gen == x->bgen)
            pthread_cond_wait(&x->bc, &x->bl);
    }
    pthread_mutex_unlock(&x->bl);
}

/* the vocabulary blocks [*vb0, *vb1) of shard s */
static void shard_blocks(const struct head_ctx *x, int s, int *vb0, int *vb1)
{
    *vb0 = (int)((long)s * x->nvb / x->b.shards);
    *vb1 = (int)((long)(s + 1) * x->nvb / x->b.shards);
}

/* logits of rows [n0, n0 + bs) and vocabulary block vb into z; returns the block's first entry */
static int block_logits(const struct head_ctx *x, float *z, int n0, int bs, int vb, int *nv)
{
    const int v0 = vb * x->b.vcols, C = x->C;
    *nv = x->V - v0 < x->b.vcols ? x->V - v0 : x->b.vcols;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bs, *nv, C, 1.0f, x->h + (size_t)n0 * C, C,
                x->w + (size_t)v0 * C, C, 0.0f, z, *nv);
    return v0;
}

/* pass 1, shard s: each row's max over the shard and sum of exp(z - max), the target's logit */
static void pass1(struct head_ctx *x, int s, float *z, int n0, int bs)
{
    float *m = x->smax + (size_t)s * x->b.rows;
    double *sum = x->ssum + (size_t)s * x->b.rows;
    int vb0, vb1, nv;
    shard_blocks(x, s, &vb0, &vb1);
    for (int r = 0; r < bs; r++) {
        m[r] = -INFINITY;
        sum[r] = 0.0;
    }
    for (int vb = vb0; vb < vb1; vb++) {
        const int v0 = block_logits(x, z, n0, bs, vb, &nv);
        for (int r = 0; r < bs; r++) {
            float *zr = z + (size_t)r * nv;
            const int32_t t = x->tgt[n0 + r];
            if (t < 0)
                continue;
            if (t >= v0 && t < v0 + nv)
                x->zt[r] = zr[t - v0];
            const float bm = x->row_max(zr, nv);
            if (isnan(bm) || isnan(m[r])) { /* the loss and gradients become NaN */
                m[r] = NAN;
                sum[r] = NAN;
                continue;
            }
            if (bm > m[r]) { /* rescale the sum so far to the new max */
                sum[r] = sum[r] > 0.0 ? sum[r] * exp((double)m[r] - bm) : 0.0;
                m[r] = bm;
            }
            sum[r] += x->exp_sum(zr, nv, m[r]);
        }
    }
}

/* thread 0 between the passes: each row's max, scale / sum and loss, over the shards in order */
static void combine(struct head_ctx *x, int n0, int bs, double *loss, int *count)
{
    const int R = x->b.rows;
    for (int r = 0; r < bs; r++) {
        x->rk[r] = 0.0f;
        if (x->tgt[n0 + r] < 0)
            continue;
        float mx = x->smax[r];
        for (int s = 1; s < x->b.shards; s++)
            mx = x->smax[(size_t)s * R + r] > mx ? x->smax[(size_t)s * R + r] : mx;
        double sum = 0.0;
        for (int s = 0; s < x->b.shards; s++)
            sum += x->ssum[(size_t)s * R + r] * exp((double)x->smax[(size_t)s * R + r] - mx);
        x->rmax[r] = mx;
        x->rk[r] = (float)((double)x->scale / sum);
        *loss += (double)mx + log(sum) - x->zt[r];
        (*count)++;
    }
}

/* pass 2, shard s: dlogits = scale (softmax - onehot) block by block; the shard's dh partial and
 * its rows of dw */
static void pass2(struct head_ctx *x, int s, float *z, int n0, int bs)
{
    const int C = x->C;
    float *dhp = x->dhp + (size_t)s * x->b.rows * C;
    int vb0, vb1, nv;
    shard_blocks(x, s, &vb0, &vb1);
    for (int vb = vb0; vb < vb1; vb++) {
        const int v0 = block_logits(x, z, n0, bs, vb, &nv);
        for (int r = 0; r < bs; r++) {
            float *zr = z + (size_t)r * nv;
            const int32_t t = x->tgt[n0 + r];
            if (t < 0) {
                memset(zr, 0, (size_t)nv * sizeof(*zr));
                continue;
            }
            x->exp_scale(zr, nv, x->rmax[r], x->rk[r]);
            if (t >= v0 && t < v0 + nv)
                zr[t - v0] -= x->scale;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bs, C, nv, 1.0f, z, nv,
                    x->w + (size_t)v0 * C, C, vb == vb0 ? 0.0f : 1.0f, dhp, C);
        if (x->dw) /* NULL: a frozen head (LoRA) */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nv, C, bs, 1.0f, z, nv,
                        x->h + (size_t)n0 * C, C, 1.0f, x->dw + (size_t)v0 * C, C);
    }
}

/* dh rows [r0, r1) of the block at n0: the shards' partials summed in shard order */
static void sum_dh(struct head_ctx *x, int n0, int r0, int r1)
{
    const int C = x->C;
    const size_t stride = (size_t)x->b.rows * C;
    for (int r = r0; r < r1; r++) {
        float *out = x->dh + (size_t)(n0 + r) * C;
        const float *p = x->dhp + (size_t)r * C;
        for (int c = 0; c < C; c++)
            out[c] = p[c];
        for (int s = 1; s < x->b.shards; s++)
            for (int c = 0; c < C; c++)
                out[c] += p[s * stride + c];
    }
}

static void head_thread(void *arg, int tid, int nth)
{
    struct head_ctx *x = arg;
    float *z = x->logits + (size_t)tid * x->b.rows * x->b.vcols;
    double loss = 0.0;
    int count = 0;

    for (int n0 = 0; n0 < x->N; n0 += x->b.rows) {
        const int bs = x->N - n0 < x->b.rows ? x->N - n0 : x->b.rows;
        int bvalid = 0, s;
        for (int r = 0; r < bs; r++)
            bvalid += x->tgt[n0 + r] >= 0;
        if (bvalid == 0) { /* nothing to learn from this block */
            if (tid == 0)
                memset(x->dh + (size_t)n0 * x->C, 0, (size_t)bs * x->C * sizeof(*x->dh));
            continue;
        }
        while ((s = atomic_fetch_add(&x->next1, 1)) < x->b.shards)
            pass1(x, s, z, n0, bs);
        barrier(x, nth);
        if (tid == 0) {
            combine(x, n0, bs, &loss, &count);
            atomic_store(&x->next1, 0);
        }
        barrier(x, nth);
        while ((s = atomic_fetch_add(&x->next2, 1)) < x->b.shards)
            pass2(x, s, z, n0, bs);
        barrier(x, nth);
        sum_dh(x, n0, (int)((long)tid * bs / nth), (int)((long)(tid + 1) * bs / nth));
        if (tid == 0)
            atomic_store(&x->next2, 0);
        barrier(x, nth);
    }
    if (tid == 0) {
        *x->loss_sum = loss;
        *x->nvalid = count;
    }
}

/* Blocks of logits of about 1 MiB (the core's L2 holds one beside its slice of w and dw), at least
 * 16 columns; row blocks so that the partial dh of 8 shards stay within 16 MiB. */
#define LOGITS_BLOCK_FLOATS (1 << 18)
#define DHP_FLOATS          (1 << 22)
#define HEAD_SHARDS         8

struct sdp_lmhead_blocks sdp_cpu_lmhead_blocks(int N, int C, int V, int threads)
{
    struct sdp_lmhead_blocks b = { .shards = HEAD_SHARDS, .threads = threads < 1 ? 1 : threads };
    long rows = DHP_FLOATS / HEAD_SHARDS / (C > 0 ? C : 1), vcols;
    rows = rows < 16 ? 16 : rows;
    b.rows = (int)(rows < N ? rows : N > 0 ? N : 1);
    vcols = LOGITS_BLOCK_FLOATS / b.rows;
    vcols = vcols < 16 ? 16 : vcols;
    b.vcols = (int)(vcols < V ? vcols : V > 0 ? V : 1);
    return b;
}

#define ALIGN_UP(n) (((n) + 63) & ~(size_t)63)

size_t sdp_cpu_lmhead_ce_scratch(int C, const struct sdp_lmhead_blocks *b)
{
    const size_t R = (size_t)b->rows, S = (size_t)b->shards;
    return ALIGN_UP((size_t)b->threads * R * b->vcols * sizeof(float)) +
           ALIGN_UP(S * R * (size_t)C * sizeof(float)) + ALIGN_UP(S * R * sizeof(float)) +
           ALIGN_UP(S * R * sizeof(double)) + ALIGN_UP(R * sizeof(double)) +
           2 * ALIGN_UP(R * sizeof(float));
}

void sdp_cpu_lmhead_ce(double *loss_sum, int *nvalid, float *dh, float *dw, const float *h,
                       const float *w, const int32_t *targets, int N, int C, int V, float scale,
                       const struct sdp_lmhead_blocks *b, void *scratch)
{
    struct head_ctx x = { .loss_sum = loss_sum,
                          .nvalid = nvalid,
                          .dh = dh,
                          .dw = dw,
                          .h = h,
                          .w = w,
                          .tgt = targets,
                          .N = N,
                          .C = C,
                          .V = V,
                          .scale = scale,
                          .b = *b };
    char *p = scratch;

    if (N <= 0 || C <= 0 || V <= 0) {
        if (N > 0 && C > 0)
            memset(dh, 0, (size_t)N * C * sizeof(*dh));
        *loss_sum = 0.0;
        *nvalid = 0;
        return;
    }
    x.nvb = (V + b->vcols - 1) / b->vcols;
    x.b.shards = b->shards < x.nvb ? b->shards : x.nvb;
    x.logits = (float *)p;
    p += ALIGN_UP((size_t)b->threads * b->rows * b->vcols * sizeof(float));
    x.dhp = (float *)p;
    p += ALIGN_UP((size_t)b->shards * b->rows * C * sizeof(float));
    x.smax = (float *)p;
    p += ALIGN_UP((size_t)b->shards * b->rows * sizeof(float));
    x.ssum = (double *)p;
    p += ALIGN_UP((size_t)b->shards * b->rows * sizeof(double));
    x.zt = (double *)p;
    p += ALIGN_UP((size_t)b->rows * sizeof(double));
    x.rmax = (float *)p;
    p += ALIGN_UP((size_t)b->rows * sizeof(float));
    x.rk = (float *)p;
    const int avx512 = sdp_cpu_isa() == SDP_CPU_ISA_AVX512;
    x.row_max = avx512 ? sdp_cpu_lmhead_row_max_avx512 : sdp_cpu_lmhead_row_max_ref;
    x.exp_sum = avx512 ? sdp_cpu_lmhead_exp_sum_avx512 : sdp_cpu_lmhead_exp_sum_ref;
    x.exp_scale = avx512 ? sdp_cpu_lmhead_exp_scale_avx512 : sdp_cpu_lmhead_exp_scale_ref;
    atomic_init(&x.next1, 0);
    atomic_init(&x.next2, 0);
    pthread_mutex_init(&x.bl, NULL);
    pthread_cond_init(&x.bc, NULL);
    sdp_cpu_pool_run(b->threads < x.b.shards ? b->threads : x.b.shards, head_thread, &x);
    pthread_mutex_destroy(&x.bl);
    pthread_cond_destroy(&x.bc);
}

/* Test oracle: every dot product and sum in double, one rounding per output.  It needs N*V doubles
 * of temporary storage (small shapes only); if that allocation fails, *loss_sum is NaN and *nvalid
 * -1. */
void sdp_cpu_lmhead_ce_ref(double *loss_sum, int *nvalid, float *dh, float *dw, const float *h,
                           const float *w, const int32_t *targets, int N, int C, int V, float scale)
{
    double *g = malloc((size_t)(N > 0 ? N : 1) * (size_t)(V > 0 ? V : 1) * sizeof(*g));
    double loss = 0.0;
    int count = 0;

    if (!g) {
        *loss_sum = NAN;
        *nvalid = -1;
        return;
    }
    /* g (N, V) = scale * (softmax(logits) - onehot), 0 for ignored rows */
    for (int n = 0; n < N; n++) {
        double *gn = g + (size_t)n * V;
        const float *hn = h + (size_t)n * C;
        double zmax = -INFINITY, sum = 0.0;
        if (targets[n] < 0) {
            for (int v = 0; v < V; v++)
                gn[v] = 0.0;
            continue;
        }
        for (int v = 0; v < V; v++) {
            double z = 0.0;
            for (int c = 0; c < C; c++)
                z += (double)hn[c] * w[(size_t)v * C + c];
            gn[v] = z;
            zmax = z > zmax ? z : zmax;
        }
        for (int v = 0; v < V; v++)
            sum += exp(gn[v] - zmax);
        const double lse = zmax + log(sum);
        loss += lse - gn[targets[n]];
        count++;
        for (int v = 0; v < V; v++)
            gn[v] = scale * exp(gn[v] - lse);
        gn[targets[n]] -= scale;
    }
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double acc = 0.0;
            for (int v = 0; v < V; v++)
                acc += g[(size_t)n * V + v] * w[(size_t)v * C + c];
            dh[(size_t)n * C + c] = (float)acc;
        }
    for (int v = 0; dw && v < V; v++)
        for (int c = 0; c < C; c++) {
            double acc = dw[(size_t)v * C + c];
            for (int n = 0; n < N; n++)
                acc += g[(size_t)n * V + v] * h[(size_t)n * C + c];
            dw[(size_t)v * C + c] = (float)acc;
        }
    free(g);
    *loss_sum = loss;
    *nvalid = count;
}
