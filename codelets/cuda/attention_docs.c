/* SPDX-License-Identifier: MIT */
/* The documents of packed rows as the sequences of a variable-length attention call (cuDNN's
 * ragged layout, attention_cudnn.cu), on the host: every row gets D slots, its documents in order
 * and then empty slots (length 0), so that a call's number of sequences is a fixed multiple of its
 * rows and one graph serves every micro-batch whose rows hold at most D documents.
 * Test: tests/kernels/test_cuda_attention_long.c (runs without a GPU too). */
#include "config.h"

#include "codelets/cuda/sdp_cuda_kernels.h"

int sdp_cuda_attention_docs_max(const int32_t *seg, int B, int T, int *longest)
{
    int most = 0, lmax = 0;
    for (int b = 0; b < B; b++) {
        const int32_t *s = seg + (size_t)b * T;
        int n = 0;
        for (int t = 0; t < T; t++) {
            if (t == 0 ? s[0] != 0 : s[t] != s[t - 1] && s[t] != t)
                return -1; /* neither the previous token's start nor the token itself */
            n += s[t] == t;
            lmax = t - s[t] + 1 > lmax ? t - s[t] + 1 : lmax;
        }
        most = n > most ? n : most;
    }
    *longest = lmax;
    return most;
}

int sdp_cuda_attention_docs(int32_t *len, int32_t *tok, const int32_t *seg, int b0, int bs, int T,
                            int D)
{
    for (int r = 0; r < bs; r++) {
        const int32_t *s = seg + (size_t)(b0 + r) * T;
        const int row0 = r * T;
        int j = 0;
        for (int t = 0; t < T; t++) {
            if (s[t] != t)
                continue;
            if (j == D || (t == 0) != (j == 0))
                return -1; /* more than D documents, or a row not starting one at token 0 */
            if (j > 0)
                len[r * D + j - 1] = row0 + t - tok[r * D + j - 1];
            tok[r * D + j++] = row0 + t;
        }
        if (j == 0)
            return -1; /* no document: T == 0 */
        len[r * D + j - 1] = row0 + T - tok[r * D + j - 1];
        for (; j < D; j++) { /* empty slots: length 0, at the next row's first token */
            len[r * D + j] = 0;
            tok[r * D + j] = row0 + T;
        }
    }
    tok[bs * D] = bs * T;
    return 0;
}
