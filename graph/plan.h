/* SPDX-License-Identifier: MIT */
/* The per-layer plan of a run: every choice the step graph makes about a parameter group
 * (embedding, decoder layers, LM head), computed once from the graph's configuration and the
 * training state, and the run-wide choices beside them.  The graph builds its tasks from the plan
 * and decides nothing else; the recipe's knobs (keep_last, keep_mlp, activations, offload,
 * grad_route_groups, gpu_update, mlp_early, embed_early, embed_lookup, work_home ...) are ways to
 * fill it.
 *
 * Use from the CLI:
 *     struct sdp_plan p;
 *     sdp_plan_init(&p, &st, &gc);                      // today's behaviour from the knobs
 *     sdp_plan_set(&p, 1, 8, "activations", "keep");    // per layer range (recipe's plan:)
 *     sdp_plan_print(&p, stdout);                       // --print-plan
 *     sdp_graph_create_plan(&g, &st, &gc, &p);          // validates, then copies the plan
 *     sdp_plan_free(&p);
 * sdp_plan_init reads where the tasks run (sdp_tasks_place_compute, sdp_tasks_place_norms), so
 * call it after those, as sdp_graph_create does.  Groups are numbered as in the state: 0 the
 * embedding, 1..L the decoder layers, L + 1 the final norm and LM head (SDP_PLAN_HEAD).
 * Test: tests/graph/test_graph_tasks.c. */
#ifndef SDP_PLAN_H
#define SDP_PLAN_H

#include <stdio.h>

#include "graph/step.h"

/* What a decoder layer's backward has of its forward's activations. */
enum sdp_act_place {
    SDP_ACT_KEEP,      /* every intermediate kept on the GPU from the forward */
    SDP_ACT_RECOMPUTE, /* only the input kept; the backward recomputes the layer's forward */
    SDP_ACT_SELECTIVE, /* the input and the mid residual kept: the recomputation skips the
                          attention's output projection */
    SDP_ACT_KEEP_MLP,  /* the input, the mid residual and the gate/up projection kept: the
                          recomputation skips the output and gate/up projections */
    SDP_ACT_KEEP_ATTN  /* the input and the attention's output and LSE kept: the recomputation
                          skips the attention core (long sequences) */
};

/* What a placement saves from the forward, as the model's enum sdp_recompute counts it (keep-mlp:
 * its input; its mid residual and gate/up projection are counted beside). */
static inline int sdp_act_saved(enum sdp_act_place a)
{
    return a == SDP_ACT_KEEP        ? SDP_RECOMPUTE_NONE
           : a == SDP_ACT_SELECTIVE ? SDP_RECOMPUTE_SELECTIVE
           : a == SDP_ACT_KEEP_ATTN ? SDP_RECOMPUTE_ATTN
                                    : SDP_RECOMPUTE_FULL;
}

/* One parameter group's row of the plan. */
struct sdp_plan_group {
    enum sdp_act_place act; /* decoder layers; SDP_ACT_KEEP for the embedding and the head */
    int offload;            /* the saved input (and a selective mid residual, keep-attn's output
                               and LSE) leaves the GPU after the forward and comes back for the
                               recomputation */
    int work_gpu;           /* the working copy's home is the GPU (staged: train.work_home or
                               embed_home gpu); 0: the host */
    int work_chunks;        /* one rank, the working copy on the host and chunked: each chunk
                               goes to the compute copy once written (graph/routes.c); 0: the
                               compute reads the working copy whole (train.chunk_mib 0) */
    int moe_routed;         /* a sparse layer with work_chunks: its chunks holding only experts
                               are not fetched; its MoE tasks copy the routed experts
                               (docs/moe.md, routed streaming) */
    int grad_gpu;           /* with ranks: the ranks' gradients meet on rank 0's GPU; 0: host */
    int grad_bf16;          /* the gradient returns to the host in bf16 (packed); 0: fp32 */
    int grad_chunks;        /* the fp32 return chunk by chunk: each chunk copied out of the
                               gradient where it was made (grad_chunk), the accumulator dropped */
    int grad_routed;        /* a sparse layer's trained experts, one rank: each chunk of the
                               return (fp32 grad_chunks, or the bf16 packs) comes down less the
                               experts without token in the step (docs/moe.md) */
    int norms_gpu;          /* the squared norms read the gradient on the GPU, whole */
    int nchunks;            /* chunks of the group (the update's unit) */
    size_t chunk_elems;     /* elements of a chunk (the last may be shorter) */
    int update_gpu;         /* AdamW on the GPU (train.gpu_update) when the step updates */
    int mlp_early;          /* > 0: the first chunk holding only MLP weights, packed and updated
                               after the MLP's backward of the last micro-batch (train.mlp_early);
                               -1: not early */
    int embed_early;        /* embedding: the rows the step's tokens do not select are updated
                               during the backward (train.embed_early) */
    unsigned lora_targets;  /* decoder layers: the linears carrying a LoRA adapter (bits
                               SDP_LORA_BIT of their kinds); 0: none */
    int lora_rank;          /* their adapters' rank r (0 without) */
};

struct sdp_plan;
/* One rank of one node: no reduction after the backward (each group's norms, packs and returns
 * follow its backward), and the one-rank-only mechanisms may apply. */
static inline int sdp_plan_one_rank(const struct sdp_plan *p);

struct sdp_plan {
    int nlayers;                  /* L */
    int ngroups;                  /* L + 2 */
    struct sdp_plan_group *group; /* [ngroups] */
    /* run-wide */
    int nranks;                       /* data-parallel ranks of this node (1: one) */
    int nodes;                        /* nodes of the run, one process each (1: one) */
    enum sdp_param_route param_route; /* with ranks: replicated or sharded dispatch */
    int window;                       /* bounded GPU window (sdp_graph_conf.window) */
    int bwd_lookahead;                /* backward preparations ahead (sdp_graph_conf) */
    int param_delay;                  /* 0 synchronous; 1 RoundPipe's delayed weights */
    int lookup_host;                  /* the embedding lookup on the CPU workers */
    int rows_pack;     /* the embedding's late rows packed alone (SDP_ROWS_PACK not off) */
    int defer_rows;    /* the next step's lookups between the late rows' updates, when told the
                          next ids (sdp_graph_set_next; SDP_EMBED_DEFER not off) */
    int gpu_writeback; /* SDP_GPU_UPDATE_WRITEBACK: GPU updates write the state back when idle */
    int clip;          /* the updates wait for the global norm (clipping or skip_nonfinite) */
    long long attn_row_tokens; /* sdp_graph_conf.attn_row_tokens: the masked attention's tokens
                                  a row (0: seq_len), for its workspace */
    int residual_f32; /* the residual stream and its gradient in fp32 (sdp_graph_conf.residual_f32):
                         each saved input and mid residual takes 4 bytes an element */
    struct sdp_lora_cfg lora; /* LoRA (rank 0: none): every base weight is frozen, only the
                                 adapters of the groups with lora_targets train, their output
                                 scaled by alpha / rank (sdp_lora_scale) */
};

static inline int sdp_plan_one_rank(const struct sdp_plan *p)
{
    return p->nranks == 1 && p->nodes <= 1;
}

/* The group index of the final norm and LM head in a plan. */
#define SDP_PLAN_HEAD(p) ((p)->nlayers + 1)

/** The chunk pipeline that SDP_CHUNK_PIPELINE asks for (work_chunks, grad_chunks): 0 off (the
 * default), 1 where the compute runs on a GPU (auto), 2 everywhere (on).  on_gpu: whether the
 * compute runs on a GPU. */
int sdp_plan_chunk_pipeline(int on_gpu);

/** Whether the residual stream is fp32 (train.residual_dtype, sdp_graph_conf.residual_f32: 0
 * bf16, 1 fp32): never with fp32 working copies (nothing to widen). */
int sdp_plan_residual_f32(const struct sdp_graph_conf *c, enum sdp_dtype work_dtype);

/** Fill p with today's behaviour for st and c (the knobs of sdp_graph_conf).
 * @return 0, -ENOMEM, -EINVAL (a knob outside its range, logged) */
int sdp_plan_init(struct sdp_plan *p, const struct sdp_state *st, const struct sdp_graph_conf *c);

/** Set field `key` of groups first..last (inclusive; 0: embedding, L + 1: head) to `value`:
 *   activations  keep | recompute | selective | keep-mlp | keep-attn   (decoder layers)
 *   offload      on | off                                   (recomputed decoder layers)
 *   grad_route   cpu | gpu                                  (with ranks)
 *   update       host | gpu                                 (decoder layers, see sdp_plan_check)
 *   mlp_early    on | off                                   (decoder layers)
 * Derived fields follow (a layer set to keep stops offloading; mlp_early on finds the chunk).
 * st may be NULL for a plan priced before any state exists (graph/predict.h): mlp_early on is
 * then taken as asked, unchecked.
 * @return 0 or -EINVAL (unknown key or value, range outside 0..L + 1: logged with the allowed
 * values) */
int sdp_plan_set(struct sdp_plan *p, const struct sdp_state *st, int first, int last,
                 const char *key, const char *value);

/** Whether the graph can build p for st and c: the same rules as the configuration's checks,
 * per group.  @return 0 or -EINVAL (logged, naming the group and the field) */
int sdp_plan_check(const struct sdp_plan *p, const struct sdp_state *st,
                   const struct sdp_graph_conf *c);

/** p as a table: the run-wide choices, then one row per run of identical groups. */
void sdp_plan_print(const struct sdp_plan *p, FILE *f);

/** Copy src into dst (dst's previous content is not freed).  @return 0 or -ENOMEM */
int sdp_plan_copy(struct sdp_plan *dst, const struct sdp_plan *src);
void sdp_plan_free(struct sdp_plan *p);

/** sdp_graph_gpu_bytes_min for plan p, layer by layer: two groups in flight, a micro-batch's
 * residual stream, per decoder layer what its placement keeps (keep: every intermediate;
 * recompute, selective, keep-mlp: the saved input, the mid residual, the gate/up projection; an
 * offloaded one only while it is near the layer at work), the layers at work, the LM head's block
 * and workspaces within gpu_limit (sdp_graph_ws_bytes; *budget, may be NULL: the attention's).
 * For a plan of the knobs it equals sdp_graph_gpu_bytes_min, less the inputs that function also
 * counts for the kept layers (keep_last of them).  Test: test_gpu_bytes.c. */
unsigned long long sdp_plan_gpu_bytes_min(const struct sdp_plan *p, const struct sdp_model_cfg *m,
                                          enum sdp_dtype work_dtype, int micro_batch, int seq_len,
                                          unsigned long long gpu_limit, unsigned long long *budget);
/** What decoder layer placement act (offloaded or not) keeps on one GPU for one micro-batch: its
 * term in sdp_plan_gpu_bytes_min; residual_f32: the saved input and mid residual in fp32. */
unsigned long long sdp_plan_layer_bytes(const struct sdp_model_cfg *m, enum sdp_dtype work_dtype,
                                        int micro_batch, int seq_len, enum sdp_act_place act,
                                        int offload, int residual_f32);

/** sdp_graph_create with a plan (checked, then copied): the graph builds p's tasks.
 * @return 0, -ENOMEM, -EINVAL */
int sdp_graph_create_plan(sdp_graph_t **out, struct sdp_state *st, const struct sdp_graph_conf *c,
                          const struct sdp_plan *p);

#endif
