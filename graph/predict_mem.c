/* SPDX-License-Identifier: MIT */
/* The step-time model's memory side (graph/predict.h): one GPU's peak and the host's, from the
 * plan, the machine and, for one rank on a GPU, the timeline's gradient backlog. */
#include "config.h"

#include "graph/predict.h"
#include "graph/predict_internal.h"
#include "models/sdp_lora.h"
#include "models/sdp_models.h"

double sdp_predict_trained_elems(const struct sdp_plan *p, const struct sdp_model_cfg *m, int gi)
{
    if (p->lora.rank <= 0)
        return (double)sdp_model_group_nelems(m, gi);
    return p->group[gi].lora_targets ? (double)sdp_lora_layer_elems(&p->lora, m, gi) : 0.0;
}

/* What stays on one GPU beyond the plan's own account (sdp_plan_gpu_bytes_min): the working
 * copies without a window, the staged ones, the GPU updates' masters and moments, and the fp32
 * gradients and intermediates of the layers a lookahead beyond one prepares. */
static unsigned long long gpu_extra(const struct sdp_plan *p, const struct sdp_model_cfg *m,
                                    enum sdp_dtype dt, int B, int T)
{
    int L = p->nlayers, es = dt == SDP_F32 ? 4 : 2, rec = 0;
    unsigned long long extra = 0, all = 0, gmax = 0, lmax = 0;
    for (int gi = 0; gi < p->ngroups; gi++) {
        const struct sdp_plan_group *pg = &p->group[gi];
        unsigned long long n = sdp_model_group_nelems(m, gi);
        all += n, gmax = n > gmax ? n : gmax;
        if (gi >= 1 && gi <= L) {
            lmax = n > lmax ? n : lmax;
            rec += pg->act != SDP_ACT_KEEP;
        }
        if (pg->update_gpu) /* the master and moments of what trains (LoRA: the adapters) */
            extra += (unsigned long long)sdp_predict_trained_elems(p, m, gi) * 12ull;
        if (pg->work_gpu && p->window > 0)
            extra += n * (unsigned long long)es;
    }
    if (p->window <= 0)
        extra += (all - 2 * gmax) * (unsigned long long)es;
    int ahead = p->bwd_lookahead < 0 ? L : p->bwd_lookahead;
    if (ahead > 1 && rec)
        extra += (unsigned long long)(ahead - 1) *
                 (lmax * 4ull + sdp_model_layer_act_bytes_res(m, B, T, es, p->residual_f32 ? 4 : es,
                                                              SDP_RECOMPUTE_NONE));
    return extra;
}

/* The plan's account within what the extra leaves of the limit (0: none), and its budget */
static unsigned long long plan_min(const struct sdp_plan *p, const struct sdp_model_cfg *m,
                                   enum sdp_dtype dt, int B, int T, unsigned long long limit,
                                   unsigned long long extra, unsigned long long *budget)
{
    if (limit > 0) /* 1: a limit the extra fills leaves the attention nothing */
        limit = limit > extra ? limit - extra : 1;
    return sdp_plan_gpu_bytes_min(p, m, dt, B, T, limit, budget);
}

unsigned long long sdp_predict_ws_budget(const struct sdp_plan *p, const struct sdp_model_cfg *m,
                                         enum sdp_dtype dt, int B, int T,
                                         unsigned long long gpu_limit)
{
    unsigned long long budget;
    plan_min(p, m, dt, B, T, gpu_limit, gpu_extra(p, m, dt, B, T), &budget);
    return budget;
}

/* One GPU's peak: the plan's own account, its workspaces within what the limit leaves (above),
 * plus the extra.  Without a window nothing evicts what waits on the GPU: the gradients waiting
 * for the host's updates are the timeline's backlog (grad_peak, bytes; < 0: no timeline), which
 * stands for the plan's two largest groups' gradients. */
unsigned long long sdp_predict_gpu_peak(const struct sdp_predict_run *run, double grad_peak)
{
    const struct sdp_plan *p = run->plan;
    unsigned long long gmax = 0;
    for (int gi = 0; gi < p->ngroups; gi++) {
        unsigned long long n = sdp_model_group_nelems(run->m, gi);
        gmax = n > gmax ? n : gmax;
    }
    const unsigned long long extra =
        gpu_extra(p, run->m, run->work_dtype, run->micro_batch, run->seq_len);
    unsigned long long min = plan_min(p, run->m, run->work_dtype, run->micro_batch, run->seq_len,
                                      (unsigned long long)run->gpu_limit_bytes, extra, NULL);
    if (p->window <= 0 && grad_peak >= 0 && min > 2 * gmax * 4ull)
        min = min - 2 * gmax * 4ull + (unsigned long long)grad_peak;
    return min + extra;
}

/* The host: fp32 masters and moments (12 bytes a parameter), the working copy unless staged (a
 * second one with delayed weights), fp32 gradients where the return is fp32 (one per rank when
 * the host sums them), the stages, one micro-batch's offloaded activations.  The moments of a
 * group updated on the GPU (update_gpu) get address space but no pages: they are zero until the
 * GPU's AdamW writes them there, and come to the host only for a checkpoint or an eviction. */
void sdp_predict_host_peak(const struct sdp_predict_run *run, const struct sdp_predict_machine *mc,
                           struct sdp_predict *o)
{
    const struct sdp_plan *p = run->plan;
    unsigned long long P = sdp_model_num_params(run->m), es = run->work_dtype == SDP_F32 ? 4 : 2;
    unsigned long long b =
        P * 12ull + (run->work_staged ? 0 : P * es) + (p->param_delay ? P * es : 0);
    if (p->lora.rank > 0) { /* the base's working copy; the adapters' master, moments, gradient
                               (one per rank when the host sums them) */
        b = P * es;
        for (int gi = 1; gi <= p->nlayers; gi++) {
            int more = p->nranks > 1 && !p->group[gi].grad_gpu ? p->nranks - 1 : 0;
            b += (unsigned long long)sdp_predict_trained_elems(p, run->m, gi) *
                 (16ull + es + 4ull * (unsigned)more);
        }
    }
    for (int gi = 0; gi < p->ngroups; gi++) {
        const struct sdp_plan_group *pg = &p->group[gi];
        unsigned long long n = sdp_model_group_nelems(run->m, gi);
        if (!pg->grad_bf16 && p->lora.rank <= 0)
            b += n * 4ull * (p->nranks > 1 && !pg->grad_gpu ? (unsigned)p->nranks : 1u);
        if (pg->update_gpu)
            b -= (unsigned long long)sdp_predict_trained_elems(p, run->m, gi) * 8ull;
        if (gi >= 1 && gi <= p->nlayers && pg->offload && pg->act != SDP_ACT_KEEP)
            b += sdp_model_layer_act_bytes_res(run->m, run->micro_batch, run->seq_len, (int)es,
                                               p->residual_f32 ? 4 : (int)es,
                                               sdp_act_saved(pg->act));
    }
    if (run->work_staged)
        b += (unsigned long long)(run->stage_buffers > 0 ? run->stage_buffers : p->ngroups) *
             p->group[1].chunk_elems * es;
    o->pinned_bytes = b;
    o->host_bytes = b + mc->host_base_bytes;
}
