/* SPDX-License-Identifier: MIT */
/* What the step graph knows of its sequences beyond the token ids: the RoPE parameters of the
 * model's rope scaling, and document masking of packed rows.  With masking every micro-batch
 * carries, like its token ids, a small int tensor (B*T) of each token's document start in its row,
 * filled per step and read by the attention tasks, so that a token attends within its document
 * only (and, with doc_positions, by the RoPE tasks, whose positions restart per document). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "graph/graph_internal.h"
#include "base/sdp_log.h"

/* The RoPE kernels' parameters from the model's rope scaling (models/sdp_models.h). */
void sdp_graph_rope_params(struct sdp_rope_params *r, const struct sdp_model_cfg *m)
{
    static const int kinds[SDP_ROPE_NTYPES] = { [SDP_ROPE_LLAMA3] = SDP_ROPE_KIND_LLAMA3,
                                                [SDP_ROPE_YARN] = SDP_ROPE_KIND_YARN,
                                                [SDP_ROPE_LINEAR] = SDP_ROPE_KIND_LINEAR,
                                                [SDP_ROPE_DYNAMIC] = SDP_ROPE_KIND_DYNAMIC };
    *r = (struct sdp_rope_params){ .kind = SDP_ROPE_KIND_DEFAULT, .theta = m->rope_theta };
    if (m->rope_scaling_factor == 0.0)
        return;
    r->kind = kinds[m->rope_type]; /* in range: sdp_model_validate */
    r->factor = m->rope_scaling_factor;
    r->low_freq_factor = m->rope_low_freq_factor;
    r->high_freq_factor = m->rope_high_freq_factor;
    r->original_max_pos = m->rope_original_max_pos;
    r->max_pos = m->max_position_embeddings;
    r->beta_fast = m->rope_beta_fast;
    r->beta_slow = m->rope_beta_slow;
    r->attention_factor = m->rope_attention_factor;
    r->mscale = m->rope_mscale;
    r->mscale_all_dim = m->rope_mscale_all_dim;
    r->no_truncate = m->rope_no_truncate;
}

/* The segment tensors, in two alternating sets as the ids. */
int sdp_graph_docs_create(sdp_graph_t *g)
{
    const struct sdp_graph_conf *c = &g->c;
    char name[32];
    int rc = 0;
    if (!c->doc_mask)
        return 0;
    g->segs = calloc(2 * (size_t)c->n_micro, sizeof(*g->segs));
    if (!g->segs)
        return sdp_err(-ENOMEM, "document starts");
    for (int i = 0; i < 2 * c->n_micro && !rc; i++) {
        snprintf(name, sizeof(name), "segs.%d", i);
        rc = sdp_rt_tensor_create(&g->segs[i], SDP_I32, (size_t)c->micro_batch * c->seq_len, name);
    }
    return rc;
}

void sdp_graph_docs_destroy(sdp_graph_t *g)
{
    for (int i = 0; g->segs && i < 2 * g->c.n_micro; i++)
        sdp_rt_tensor_release(g->segs[i]);
    free(g->segs);
    g->segs = NULL;
}

/* Every row's starts well formed: 0 at its first token, then each either the previous one (the
 * same document) or the token itself (a new one). */
int sdp_graph_docs_check(const sdp_graph_t *g, int step, const int32_t *segs)
{
    const int T = g->c.seq_len;
    const size_t rows = (size_t)g->c.n_micro * g->c.micro_batch;
    if (!segs)
        return sdp_err(-EINVAL,
                       "step %d: document masking is on, and the step has no document "
                       "starts",
                       step + 1);
    for (size_t r = 0; r < rows; r++) {
        const int32_t *s = segs + r * T;
        for (int t = 0; t < T; t++)
            if (t == 0 ? s[0] != 0 : s[t] != s[t - 1] && s[t] != t)
                return sdp_err(-EINVAL,
                               "step %d: row %zu: token %d's document start %d is neither the "
                               "previous token's (%d) nor the token",
                               step + 1, r, t, s[t], t ? s[t - 1] : 0);
    }
    return 0;
}
