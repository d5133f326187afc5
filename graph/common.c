/* SPDX-License-Identifier: MIT */
/* Helpers of the step graph shared by its files: ordering tags, activations, token ids. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

/* A tag for an ordering edge of this step; forgotten by sdp_graph_forget_tags() once the step has
 * ended. 0 when the list cannot grow (the edge is then left out: only memory use depends on it). */
unsigned long long sdp_graph_new_tag(sdp_graph_t *g)
{
    if (g->ntags == g->cap_tags) {
        int cap = g->cap_tags ? 2 * g->cap_tags : 256;
        unsigned long long *t = realloc(g->tags, (size_t)cap * sizeof(*t));
        if (!t)
            return 0;
        g->tags = t;
        g->cap_tags = cap;
    }
    return g->tags[g->ntags++] = sdp_task_tag_new();
}

void sdp_graph_forget_tags(sdp_graph_t *g)
{
    for (int i = 0; i < g->ntags; i++)
        sdp_task_tag_forget(g->tags[i]);
    g->ntags = 0;
}

void sdp_graph_release_acts(struct layer_acts *a)
{
    sdp_rt_tensor_t **all[] = { &a->h1,  &a->rstd1, &a->qkv, &a->qkv2,  &a->rstdqk, &a->att,
                                &a->lse, &a->xmid,  &a->h2,  &a->rstd2, &a->gu,     &a->act };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        sdp_rt_tensor_release(*all[i]);
        *all[i] = NULL;
    }
}

int sdp_graph_fill_i32(sdp_rt_tensor_t *t, const int32_t *src, size_t n)
{
    int rc = sdp_rt_tensor_acquire(t, 1);
    if (rc)
        return rc;
    memcpy(sdp_rt_tensor_data(t), src, n * sizeof(int32_t));
    sdp_rt_tensor_release_acquire(t);
    return 0;
}
