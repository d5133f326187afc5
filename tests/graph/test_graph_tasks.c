/* SPDX-License-Identifier: MIT */
/* The task graph of one training step for given plans (graph/plan.h), on a 4-layer version of
 * tests/ref/data/qwen3-tiny with random weights, on two CPU workers: each step's task event log
 * (runtime/trace.h) is read back and checked for the count of tasks per codelet, phase and layer
 * that the plan implies, and for dependency facts that show in the events' times (a layer's
 * recomputation ends before its backward's last task starts; the update of a chunk starts after
 * the last backward task of its group has ended).  Plans: the default (full recomputation, the
 * last layer kept), every activation kept, one layer of each placement set per layer with
 * sdp_plan_set, and the bf16 return with the embedding's early update and one layer's early MLP
 * update.  Each plan runs twice: dry (sdp_cl_dry_run: the real graph through StarPU, no kernel),
 * then with the CPU kernels, where keeping or recomputing activations must not change the loss's
 * bits.  Also the plan's
 * API: unknown keys and values and impossible combinations are refused, and the table has one row
 * per run of identical layers. */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codelets/sdp_tasks.h"
#include "formats/hfconfig.h"
#include "graph/plan.h"
#include "graph/step.h"
#include "runtime/init.h"
#include "runtime/state.h"
#include "runtime/trace.h"
#include "tests/lib/sdp_test.h"

#define NLAYERS 4
#define B       2
#define T       16
#define NMICRO  2

struct ev {
    char name[40], phase[16];
    int group, chunk, mb;
    double s, e;
};

struct evs {
    struct ev *v;
    int n;
};

/* The task events of the log at path (waits left out). */
static int load_events(const char *path, struct evs *out)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    int cap = 0;
    out->v = NULL;
    out->n = 0;
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        json_t *o = json_loads(line, 0, NULL);
        const char *kind;
        if (!o)
            continue;
        kind = json_string_value(json_object_get(o, "kind"));
        if (kind && strcmp(kind, "wait") != 0) {
            struct ev *e;
            if (out->n == cap) {
                cap = cap ? 2 * cap : 1024;
                out->v = realloc(out->v, (size_t)cap * sizeof(*out->v));
                if (!out->v)
                    abort();
            }
            e = &out->v[out->n++];
            snprintf(e->name, sizeof(e->name), "%s", json_string_value(json_object_get(o, "name")));
            snprintf(e->phase, sizeof(e->phase), "%s",
                     json_string_value(json_object_get(o, "phase")));
            e->group = (int)json_integer_value(json_object_get(o, "group"));
            e->chunk = (int)json_integer_value(json_object_get(o, "chunk"));
            e->mb = (int)json_integer_value(json_object_get(o, "mb"));
            e->s = json_real_value(json_object_get(o, "start_us"));
            e->e = json_real_value(json_object_get(o, "end_us"));
        }
        json_decref(o);
    }
    fclose(f);
    return 0;
}

/* Events matching name (NULL: any), phase (NULL: any), group and mb (-2: any). */
static int match(const struct ev *e, const char *name, const char *phase, int group, int mb)
{
    return (!name || strcmp(e->name, name) == 0) && (!phase || strcmp(e->phase, phase) == 0) &&
           (group == -2 || e->group == group) && (mb == -2 || e->mb == mb);
}

static int count(const struct evs *x, const char *name, const char *phase, int group, int mb)
{
    int n = 0;
    for (int i = 0; i < x->n; i++)
        n += match(&x->v[i], name, phase, group, mb);
    return n;
}

/* What a plan case sets beyond the configuration. */
struct plan_case {
    const char *what;
    int recompute, keep_last, bf16_grad;
    void (*adjust)(struct sdp_plan *p, const struct sdp_state *st);
    int recompute_mm[NLAYERS + 1]; /* matmul_fwd of a recomputation, per layer and mb */
    int mlp_packs[NLAYERS + 1];    /* grad_pack_mlp per layer */
};

static void mixed(struct sdp_plan *p, const struct sdp_state *st)
{
    CHECK(sdp_plan_set(p, st, 1, 1, "activations", "keep") == 0, "set layer 1 keep");
    CHECK(sdp_plan_set(p, st, 2, 2, "activations", "selective") == 0, "set layer 2 selective");
    CHECK(sdp_plan_set(p, st, 3, 3, "activations", "keep-mlp") == 0, "set layer 3 keep-mlp");
    CHECK(sdp_plan_set(p, st, 4, 4, "activations", "recompute") == 0, "set layer 4 recompute");
}

static void attn_kept(struct sdp_plan *p, const struct sdp_state *st)
{
    CHECK(sdp_plan_set(p, st, 2, 3, "activations", "keep-attn") == 0, "set layers 2-3 keep-attn");
}

static void mlp_early2(struct sdp_plan *p, const struct sdp_state *st)
{
    CHECK(sdp_plan_set(p, st, 2, 2, "mlp_early", "on") == 0, "set layer 2 mlp_early");
}

/* The ordering facts every plan keeps. */
static void check_order(const struct evs *x, const struct sdp_plan *p)
{
    for (int l = 1; l <= NLAYERS; l++)
        for (int mb = 0; mb < NMICRO; mb++) {
            double rec_end = -1, bwd_last = -1;
            for (int i = 0; i < x->n; i++) {
                const struct ev *e = &x->v[i];
                if (match(e, NULL, "recompute", l, mb) && e->e > rec_end)
                    rec_end = e->e;
                if (match(e, "rmsnorm_bwd", "bwd", l, mb) && e->s > bwd_last)
                    bwd_last = e->s;
            }
            CHECK(bwd_last >= 0, "layer %d mb %d: no backward", l, mb);
            CHECK(rec_end <= bwd_last,
                  "layer %d mb %d: recomputation ends at %.1f after the "
                  "backward's last task starts at %.1f",
                  l, mb, rec_end, bwd_last);
        }
    for (int gi = 0; gi < p->ngroups; gi++) {
        double bwd_end = -1;
        for (int i = 0; i < x->n; i++)
            if (match(&x->v[i], NULL, "bwd", gi, -2) && x->v[i].mb >= 0 && x->v[i].e > bwd_end)
                bwd_end = x->v[i].e;
        for (int i = 0; i < x->n; i++) {
            const struct ev *e = &x->v[i];
            if (match(e, NULL, "update", gi, -2) && strncmp(e->name, "adamw", 5) == 0 &&
                strcmp(e->name, "adamw_early") != 0 &&
                !(p->group[gi].mlp_early > 0 && e->chunk >= p->group[gi].mlp_early))
                CHECK(e->s >= bwd_end,
                      "group %d chunk %d: %s starts at %.1f before its last "
                      "backward task ends at %.1f",
                      gi, e->chunk, e->name, e->s, bwd_end);
        }
    }
}

/* Counts that follow from the plan: every layer's forward, its recomputation, the zeroing and the
 * updates of every chunk. */
static void check_counts(const struct evs *x, const struct sdp_plan *p, const struct plan_case *pc)
{
    for (int l = 1; l <= NLAYERS; l++) {
        int want_rec = pc->recompute_mm[l], rec_any = count(x, NULL, "recompute", l, -2);
        for (int mb = 0; mb < NMICRO; mb++) {
            int fwd = count(x, "matmul_fwd", "fwd", l, mb);
            int rec = count(x, "matmul_fwd", "recompute", l, mb);
            CHECK(fwd == 4, "layer %d mb %d: %d forward matmuls, want 4", l, mb, fwd);
            CHECK(rec == want_rec, "layer %d mb %d: %d recomputed matmuls, want %d (%s)", l, mb,
                  rec, want_rec, pc->what);
            CHECK(count(x, "attention_bwd", "bwd", l, mb) == 1, "layer %d mb %d: attention_bwd", l,
                  mb);
            /* keep-attn recomputes all but the attention core */
            int want_att = p->group[l].act != SDP_ACT_KEEP && p->group[l].act != SDP_ACT_KEEP_ATTN;
            CHECK(count(x, "attention_fwd", "recompute", l, mb) == want_att,
                  "layer %d mb %d: %d recomputed attention_fwd, want %d", l, mb,
                  count(x, "attention_fwd", "recompute", l, mb), want_att);
        }
        CHECK((rec_any > 0) == (p->group[l].act != SDP_ACT_KEEP),
              "layer %d: %d recompute tasks for activation %d", l, rec_any, (int)p->group[l].act);
        CHECK(count(x, "grad_pack_mlp", NULL, l, -2) == pc->mlp_packs[l],
              "layer %d: %d grad_pack_mlp, want %d", l, count(x, "grad_pack_mlp", NULL, l, -2),
              pc->mlp_packs[l]);
    }
    for (int gi = 0; gi < p->ngroups; gi++) {
        int upd = 0;
        for (int i = 0; i < x->n; i++)
            upd += match(&x->v[i], NULL, "update", gi, -2) &&
                   strncmp(x->v[i].name, "adamw", 5) == 0 &&
                   strcmp(x->v[i].name, "adamw_early") != 0;
        CHECK(count(x, "zero", "bwd", gi, -2) == 1, "group %d: %d zero, want 1", gi,
              count(x, "zero", "bwd", gi, -2));
        /* one AdamW per chunk; with the embedding's early update, one per chunk that holds rows
         * the step's tokens do not select and one per chunk that holds rows they do */
        if (!p->group[gi].embed_early) {
            CHECK(upd == p->group[gi].nchunks, "group %d: %d updates for %d chunks", gi, upd,
                  p->group[gi].nchunks);
        } else {
            int early = count(x, "adamw_early", "update", 0, -2);
            CHECK(upd >= 1 && upd <= p->group[0].nchunks && early >= 1 &&
                      early <= p->group[0].nchunks && upd + early >= p->group[0].nchunks,
                  "embedding: %d updates and %d early ones for %d chunks", upd, early,
                  p->group[0].nchunks);
        }
        if (gi == 0 && !p->group[0].embed_early)
            CHECK(count(x, "adamw_early", NULL, 0, -2) == 0, "embedding: early updates");
    }
}

/* One step of a plan case; its loss and gradient norm (the backward's bits) into out.  @return 0
 * or 1 (setup failed) */
static int run_case(const struct sdp_model_cfg *cfg, const struct plan_case *pc, const char *tmp,
                    double out[2])
{
    struct sdp_state st;
    struct sdp_graph_conf gc = { .micro_batch = B,
                                 .n_micro = NMICRO,
                                 .seq_len = T,
                                 .beta1 = 0.9,
                                 .beta2 = 0.95,
                                 .eps = 1e-8,
                                 .weight_decay = 0.1,
                                 .bwd_lookahead = -1 };
    struct sdp_plan p;
    sdp_graph_t *g = NULL;
    struct sdp_step_result res;
    struct evs x;
    int32_t ids[NMICRO * B * T], tgt[NMICRO * B * T];
    struct sdp_rng rng = { 42 };
    char path[4200];
    gc.recompute = pc->recompute;
    gc.keep_last = pc->keep_last;
    for (int i = 0; i < NMICRO * B * T; i++) {
        ids[i] = (int32_t)(sdp_rng_next(&rng) % (uint64_t)cfg->vocab_size);
        tgt[i] = (int32_t)(sdp_rng_next(&rng) % (uint64_t)cfg->vocab_size);
    }
    printf("%s\n", pc->what);
    if (sdp_state_create_ex(&st, cfg, SDP_BF16, 16384, pc->bf16_grad ? SDP_BF16 : SDP_F32, 0))
        return 1;
    sdp_state_init_random(&st, 7);
    if (sdp_plan_init(&p, &st, &gc)) {
        sdp_state_destroy(&st);
        return 1;
    }
    if (pc->adjust)
        pc->adjust(&p, &st);
    sdp_plan_print(&p, stdout);
    snprintf(path, sizeof(path), "%s/events.jsonl", tmp);
    if (sdp_graph_create_plan(&g, &st, &gc, &p) || sdp_trace_start() ||
        sdp_graph_step(g, 0, ids, tgt, 1e-3, 1, &res) || sdp_rt_wait_all() ||
        sdp_trace_write(path, NULL) || load_events(path, &x)) {
        printf("  step failed\n");
        sdp_graph_destroy(g);
        sdp_plan_free(&p);
        sdp_state_destroy(&st);
        return 1;
    }
    sdp_trace_stop();
    printf("  %d task events, loss %.9g, gradient norm %.9g\n", x.n, res.loss, res.grad_norm);
    out[0] = res.loss;
    out[1] = res.grad_norm;
    check_counts(&x, &p, pc);
    check_order(&x, &p);
    free(x.v);
    unlink(path);
    sdp_graph_destroy(g);
    sdp_plan_free(&p);
    sdp_state_destroy(&st);
    return 0;
}

/* The plan's API on the default plan: refusals and the table. */
static void check_api(const struct sdp_model_cfg *cfg)
{
    struct sdp_state st;
    struct sdp_graph_conf gc = {
        .micro_batch = B, .n_micro = NMICRO, .seq_len = T, .recompute = 1, .keep_last = 1
    };
    struct sdp_plan p;
    char *buf = NULL;
    size_t len = 0;
    FILE *f;
    int rows = 0;
    printf("plan API\n");
    if (sdp_state_create(&st, cfg, SDP_BF16, 16384) || sdp_plan_init(&p, &st, &gc)) {
        CHECK(0, "setup");
        return;
    }
    CHECK(sdp_plan_set(&p, &st, 1, 2, "activation", "keep") == -EINVAL, "unknown key taken");
    CHECK(sdp_plan_set(&p, &st, 1, 2, "activations", "all") == -EINVAL, "unknown value taken");
    CHECK(sdp_plan_set(&p, &st, 0, 2, "activations", "keep") == -EINVAL, "embedding recomputed");
    CHECK(sdp_plan_set(&p, &st, 3, NLAYERS + 2, "grad_route", "gpu") == -EINVAL,
          "groups past the head taken");
    CHECK(sdp_plan_check(&p, &st, &gc) == 0, "the default plan refused");
    CHECK(sdp_plan_set(&p, &st, 2, 3, "offload", "on") == 0, "offload of recomputed layers");
    CHECK(sdp_plan_check(&p, &st, &gc) == 0, "offload of recomputed layers refused");
    p.group[NLAYERS].offload = 1; /* the last layer keeps its activations */
    CHECK(sdp_plan_check(&p, &st, &gc) == -EINVAL, "offload of a kept layer taken");
    p.group[NLAYERS].offload = 0;
    CHECK(sdp_plan_set(&p, &st, 2, 2, "activations", "keep-attn") == 0, "keep-attn set");
    CHECK(sdp_plan_check(&p, &st, &gc) == -EINVAL, "keep-attn offloaded taken");
    CHECK(sdp_plan_set(&p, &st, 2, 3, "offload", "off") == 0 && sdp_plan_check(&p, &st, &gc) == 0,
          "keep-attn on the GPU refused");
    CHECK(sdp_plan_set(&p, &st, 2, 2, "activations", "recompute") == 0 &&
              sdp_plan_set(&p, &st, 2, 3, "offload", "on") == 0,
          "layers 2-3 back to recompute offloaded");
    CHECK(sdp_plan_set(&p, &st, 1, 1, "update", "gpu") == 0, "update gpu set");
    CHECK(sdp_plan_check(&p, &st, &gc) == -EINVAL, "GPU update without a GPU taken");
    CHECK(sdp_plan_set(&p, &st, 1, 1, "update", "host") == 0, "update host set");
    f = open_memstream(&buf, &len);
    sdp_plan_print(&p, f);
    fclose(f);
    for (size_t i = 0; i < len; i++)
        rows += buf[i] == '\n';
    /* 2 header lines; embedding, 1, 2-3 (offloaded), 4 (kept), head */
    CHECK(rows == 7, "the table has %d lines, want 7:\n%s", rows, buf);
    free(buf);
    sdp_plan_free(&p);
    sdp_state_destroy(&st);
}

int main(void)
{
    static const struct plan_case cases[] = {
        { "default: full recomputation, the last layer kept",
          SDP_RECOMPUTE_FULL,
          1,
          0,
          NULL,
          { 0, 3, 3, 3, 0 },
          { 0 } },
        { "every activation kept", SDP_RECOMPUTE_NONE, 0, 0, NULL, { 0 }, { 0 } },
        { "per layer: keep, selective, keep-mlp, recompute",
          SDP_RECOMPUTE_FULL,
          1,
          0,
          mixed,
          { 0, 0, 2, 1, 3 },
          { 0 } },
        { "per layer: keep-attn, keep-attn offloaded, recompute",
          SDP_RECOMPUTE_FULL,
          1,
          0,
          attn_kept,
          { 0, 3, 3, 3, 0 },
          { 0 } },
        { "bf16 return, early embedding rows, layer 2's MLP early",
          SDP_RECOMPUTE_FULL,
          1,
          1,
          mlp_early2,
          { 0, 3, 3, 3, 0 },
          { 0, 0, 1, 0, 0 } },
    };
    const char *top = getenv("top_srcdir");
    struct sdp_rt_conf rc = { 0 };
    struct sdp_model_cfg cfg;
    double loss[5][2];
    char dir[4096], tmp[] = "/tmp/sdp_graph_tasks.XXXXXX";
    snprintf(dir, sizeof(dir), "%s/tests/ref/data/qwen3-tiny", top ? top : ".");
    if (sdp_hfconfig_load(dir, &cfg) || !mkdtemp(tmp)) {
        printf("cannot load %s/config.json\nFAIL\n", dir);
        return 1;
    }
    cfg.num_layers = NLAYERS;
    rc.ncpus = 2;
    if (sdp_rt_init(&rc) || sdp_tasks_init()) {
        printf("cannot start StarPU\nFAIL\n");
        return 1;
    }
    for (int dry = 1; dry >= 0; dry--) {
        printf("---- %s ----\n", dry ? "dry run: no kernels" : "CPU kernels");
        sdp_cl_dry_run(dry);
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
            if (run_case(&cfg, &cases[i], tmp, loss[i]))
                sdp_test_nfail++;
    }
    /* where activations live changes no bits */
    for (int i = 1; i <= 3; i++)
        for (int k = 0; k < 2; k++)
            CHECK(loss[i][k] == loss[0][k], "case %d: %s %.17g, case 0: %.17g", i,
                  k ? "gradient norm" : "loss", loss[i][k], loss[0][k]);
    check_api(&cfg);
    rmdir(tmp);
    sdp_tasks_shutdown();
    sdp_rt_shutdown();
    return sdp_test_finish(sdp_test_nfail);
}
