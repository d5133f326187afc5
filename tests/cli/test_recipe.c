/* SPDX-License-Identifier: MIT */
/* Recipes: a complete recipe parses to the values written in its text (paths resolved against the
 * recipe's directory, model = architecture defaults + the given sizes, preset =
 * sdp_model_preset()); defaults match the documented list; each of ~30 bad recipes fails with
 * -EINVAL and its error message, captured from stderr, names the expected line and key;
 * sdp_recipe_validate's cross-field checks; and sdp_recipe_lr_at against the closed forms of
 * warmup, cosine and linear decay at chosen steps. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/recipe.h"
#include "tests/lib/sdp_test.h"

static char dir[256];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

/* Load path (validate r instead when path is NULL) with stderr redirected into err
 * (NUL-terminated). */
static int load_capture(const char *path, struct sdp_recipe *r, char *err, size_t errlen)
{
    char cap[300];
    int saved, fd, rc;
    ssize_t n;

    snprintf(cap, sizeof(cap), "%s/stderr.txt", dir);
    fflush(stderr);
    saved = dup(2);
    fd = open(cap, O_RDWR | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    rc = path ? sdp_recipe_load(path, r) : sdp_recipe_validate(r);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    lseek(fd, 0, SEEK_SET);
    n = read(fd, err, errlen - 1);
    err[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(cap);
    return rc;
}

struct bad {
    const char *what;
    int line;           /* expected line in the message */
    const char *needle; /* expected text in the message */
    const char *text;
};

/* Line 1 is a comment everywhere so that line numbers are not trivially 1. */
static const struct bad bad_recipes[] = {
    { "duplicate late train key", 5, "duplicate key 'train.bwd_lookahead' (first given on line 4)",
      "# recipe\nmodel: {preset: qwen3-0.6b}\ntrain:\n  bwd_lookahead: 1\n  bwd_lookahead: 2\n" },
    { "unknown key", 4, "unknown key 'model.foo'",
      "# recipe\nmodel:\n  preset: qwen3-0.6b\n  foo: 1\n" },
    { "unknown section", 3, "unknown section 'trian'",
      "# recipe\nmodel: {preset: qwen3-0.6b}\n"
      "trian:\n  steps: 3\n" },
    { "negative lr", 5, "optimizer.lr", "# r\ndata:\n  seq_len: 8\noptimizer:\n  lr: -1\n" },
    { "zero lr", 3, "optimizer.lr", "# r\noptimizer:\n  lr: 0\n" },
    { "quoted number", 4, "quoted string", "# r\n\noptimizer:\n  lr: \"3e-4\"\n" },
    { "word for number", 3, "optimizer.lr", "# r\noptimizer:\n  lr: fast\n" },
    { "fractional steps", 3, "must be an integer", "# r\ntrain:\n  steps: 1.5\n" },
    { "exponent steps", 3, "must be an integer", "# r\ntrain:\n  steps: 1e3\n" },
    { "bad bool", 4, "data.shuffle", "# r\ndata:\n  seq_len: 16\n  shuffle: maybe\n" },
    { "beta2 = 1", 3, "optimizer.beta2", "# r\noptimizer:\n  beta2: 1.0\n" },
    { "beta1 < 0", 3, "optimizer.beta1", "# r\noptimizer:\n  beta1: -0.1\n" },
    { "eps = 0", 3, "optimizer.eps", "# r\noptimizer:\n  eps: 0\n" },
    { "weight decay < 0", 4, "optimizer.weight_decay",
      "# r\noptimizer:\n  lr: 1e-4\n  weight_decay: -0.1\n" },
    { "max_grad_norm < 0", 3, "optimizer.max_grad_norm", "# r\noptimizer:\n  max_grad_norm: -1\n" },
    { "steps = 0", 3, "train.steps", "# r\ntrain:\n  steps: 0\n" },
    { "seq_len = 0", 3, "data.seq_len", "# r\ndata:\n  seq_len: 0\n" },
    { "micro = 0", 4, "batch.micro", "# r\nbatch:\n  global: 8\n  micro: 0\n" },
    { "global % micro", 5, "batch.global=10 is not a multiple of batch.micro=4",
      "# r\nmodel: {preset: qwen3-0.6b}\nbatch:\n  micro: 4\n  global: 10\n" },
    { "chunk_mib = -1", 3, "train.chunk_mib", "# r\ntrain:\n  chunk_mib: -1\n" },
    { "warmup < 0", 3, "schedule.warmup_steps", "# r\nschedule:\n  warmup_steps: -1\n" },
    { "min_lr_ratio > 1", 3, "schedule.min_lr_ratio", "# r\nschedule:\n  min_lr_ratio: 1.5\n" },
    { "precision fp16", 4, "train.precision", "# r\ntrain:\n  steps: 2\n  precision: fp16\n" },
    { "activations swap", 3, "train.activations", "# r\ntrain:\n  activations: swap\n" },
    { "schedule step", 3, "schedule.name", "# r\nschedule:\n  name: step\n" },
    { "optimizer sgd", 3, "optimizer.name", "# r\noptimizer:\n  name: sgd\n" },
    { "negative seed", 3, "train.seed", "# r\ntrain:\n  seed: -1\n" },
    { "path and preset", 4, "model.path and model.preset",
      "# r\nmodel:\n  path: hf/qwen\n  preset: qwen3-0.6b\n" },
    { "path and sizes", 5, "model.path and model.arch",
      "# r\nmodel:\n  path: hf/qwen\n\n  arch: qwen3\n" },
    { "preset and sizes", 4, "model.preset and model.hidden_size",
      "# r\nmodel:\n  preset: qwen3-0.6b\n  hidden_size: 64\n" },
    { "unknown preset", 3, "qwen3-0.6b", "# r\nmodel:\n  preset: qwen9-1b\n" },
    { "sizes without arch", 3, "without model.arch",
      "# r\nmodel:\n  hidden_size: 64\n  num_layers: 2\n" },
    { "unknown arch", 3, "model.arch", "# r\nmodel:\n  arch: gpt2\n" },
    { "unknown rope_type", 4, "model.rope_type",
      "# r\nmodel:\n  preset: qwen3-0.6b\n  rope_type: ntk\n" },
    { "rope_factor alone", 4, "needs model.rope_type and model.rope_factor",
      "# r\nmodel:\n  preset: qwen3-0.6b\n  rope_factor: 4\n" },
    { "path and rope", 4, "model.path and model.rope_type",
      "# r\nmodel:\n  path: hf/qwen\n  rope_type: yarn\n  rope_factor: 2\n" },
    { "llama3 without its band", 4, "low_freq_factor",
      "# r\nmodel:\n  preset: qwen3-0.6b\n  rope_type: llama3\n  rope_factor: 8\n"
      "  rope_original_max_position_embeddings: 8192\n" },
    { "invalid sizes", 3, "not valid",
      "# r\nmodel:\n  arch: llama\n  vocab_size: 100\n  hidden_size: 60\n  intermediate_size: 64\n"
      "  num_layers: 2\n  num_heads: 3\n  num_kv_heads: 2\n  head_dim: 20\n" },
    { "duplicate key", 5, "duplicate key 'data.seq_len' (first given on line 3)",
      "# r\ndata:\n  seq_len: 8\n  shuffle: no\n  seq_len: 16\n" },
    { "duplicate section", 4, "duplicate section 'data'",
      "# r\ndata:\n  seq_len: 8\ndata:\n  shuffle: no\n" },
    { "section not a mapping", 2, "section 'data' must be a mapping", "# r\ndata: 5\n" },
    { "list for a number", 3, "train.steps", "# r\ntrain:\n  steps: [1, 2]\n" },
    { "top level a list", 2, "mapping of sections", "# r\n- model\n- data\n" },
    { "YAML syntax", 4, "YAML syntax error", "# r\ndata:\n  seq_len: 8\n shuffle: no\n" },
    { "integer overflow", 3, "data.seq_len", "# r\ndata:\n  seq_len: 99999999999\n" },
    { "second document", 4, "second YAML document", "# r\ndata: {seq_len: 8}\n---\ndata: {}\n" },
};

/* clang-format off */
static const char good_recipe[] =
    "# a complete recipe\n"
    "model:\n"
    "  arch: llama\n"
    "  vocab_size: 512\n"
    "  hidden_size: 64\n"
    "  intermediate_size: 176\n"
    "  num_layers: 2\n"
    "  num_heads: 4\n"
    "  num_kv_heads: 2\n"
    "  rope_theta: 500000\n"
    "  tie_word_embeddings: yes\n"
    "  max_position_embeddings: 256\n"
    "data:\n"
    "  train: shards/train.tok\n"
    "  seq_len: 128\n"
    "  shuffle: false\n"
    "batch: {global: 12, micro: 3}\n"
    "optimizer:\n"
    "  name: adamw\n"
    "  lr: 2.5e-4\n"
    "  beta1: 0.85\n"
    "  beta2: 0.99\n"
    "  eps: 1e-6\n"
    "  weight_decay: 0\n"
    "  max_grad_norm: 0.5\n"
    "schedule:\n"
    "  name: linear\n"
    "  warmup_steps: 5\n"
    "  min_lr_ratio: 0\n"
    "train:\n"
    "  steps: 40\n"
    "  seed: 18446744073709551615\n"
    "  precision: fp32\n"
    "  chunk_mib: 0.5\n"
    "  activations: keep\n"
    "  sched: 'sdp-slidedp'\n"
    "  cpus: 6\n"
    "  host_memory_gib: 12.5\n"
    "  on_nan: skip\n"
    "  gpus: 0\n"
    "  gpu_memory_gib: 7.5\n"
    "  ranks: 2\n"
    "  grad_route: gpu\n"
    "  param_route: sharded\n"
    "  grad_route_groups: 'cpu:0-1'\n"
    "  window: 3\n"
    "  param_delay: 1\n"
    "  bwd_lookahead: 2\n"
    "  keep_last: 2\n"
    "  grad_dtype: fp32\n"
    "  staging_depth: 3\n"
    "  prefetch_groups: 0\n"
    "  collectives: starpu\n"
    "output:\n"
    "  dir: out\n"
    "  metrics: m.jsonl\n";
/* clang-format on */

static int close_rel(double x, double ref)
{
    /* a few double roundings plus libm's cos (<= 1 ulp): 1e-12 relative is ~4500 ulp of margin */
    return fabs(x - ref) <= 1e-12 * fabs(ref) + 1e-300;
}

static void check_lr(const char *what, const struct sdp_recipe *r, int s, double ref)
{
    double x = sdp_recipe_lr_at(r, s);
    printf("lr %-8s step %3d: %.12e (closed form %.12e)\n", what, s, x, ref);
    CHECK(close_rel(x, ref), "lr %s at step %d", what, s);
}

int main(void)
{
    const char *tmpdir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    struct sdp_recipe r, d;
    struct sdp_model_cfg ref;
    char path[512], want[600], err[8192];
    int rc;

    snprintf(dir, sizeof(dir), "%s/sdp-test-recipe.XXXXXX", tmpdir);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(path, sizeof(path), "%s/recipe.yaml", dir);

    /* defaults: the documented list */
    sdp_recipe_defaults(&d);
    CHECK(d.lr == 3e-4 && d.beta1 == 0.9 && d.beta2 == 0.95 && d.eps == 1e-8 &&
              d.weight_decay == 0.1 && d.max_grad_norm == 1.0 && d.lr_schedule == SDP_LR_COSINE &&
              d.warmup_steps == 0 && d.min_lr_ratio == 0.1 && d.steps == 100 && d.seed == 1234 &&
              d.precision == SDP_PREC_BF16 && d.chunk_mib == 16 && d.recompute == 1 &&
              d.shuffle == 1 && d.global_batch == 8 && d.micro_batch == 8 && d.seq_len == 1024 &&
              d.cpus == 0 && d.host_memory_gib == 0 && d.sched[0] == '\0' &&
              d.data_train[0] == '\0',
          "defaults differ from the documented list");

    /* the complete recipe */
    write_file(path, good_recipe);
    rc = load_capture(path, &r, err, sizeof(err));
    printf("good recipe: load -> %d%s%s\n", rc, rc ? ", stderr: " : "", rc ? err : "");
    CHECK(rc == 0, "good recipe rejected");
    memset(&ref, 0, sizeof(ref));
    sdp_model_defaults(&ref, SDP_ARCH_LLAMA);
    ref.vocab_size = 512;
    ref.hidden_size = 64;
    ref.intermediate_size = 176;
    ref.num_layers = 2;
    ref.num_heads = 4;
    ref.num_kv_heads = 2;
    ref.rope_theta = 500000;
    ref.tie_word_embeddings = 1;
    ref.max_position_embeddings = 256;
    if (ref.head_dim <= 0)
        ref.head_dim = 64 / 4;
    CHECK(memcmp(&r.model, &ref, sizeof(ref)) == 0,
          "model: got C=%d I=%d L=%d NH=%d NKV=%d HD=%d V=%d theta=%g tie=%d maxpos=%d",
          r.model.hidden_size, r.model.intermediate_size, r.model.num_layers, r.model.num_heads,
          r.model.num_kv_heads, r.model.head_dim, r.model.vocab_size, r.model.rope_theta,
          r.model.tie_word_embeddings, r.model.max_position_embeddings);
    printf("model: arch %s C=%d I=%d L=%d NH=%d NKV=%d HD=%d V=%d\n",
           sdp_model_arch_name(r.model.arch), r.model.hidden_size, r.model.intermediate_size,
           r.model.num_layers, r.model.num_heads, r.model.num_kv_heads, r.model.head_dim,
           r.model.vocab_size);
    snprintf(want, sizeof(want), "%s/shards/train.tok", dir);
    printf("data.train: %s\n", r.data_train);
    CHECK(!strcmp(r.data_train, want), "data.train %s, expected %s", r.data_train, want);
    CHECK(r.seq_len == 128 && r.shuffle == 0, "data section");
    CHECK(r.global_batch == 12 && r.micro_batch == 3, "batch section");
    CHECK(r.lr == 2.5e-4 && r.beta1 == 0.85 && r.beta2 == 0.99 && r.eps == 1e-6 &&
              r.weight_decay == 0 && r.max_grad_norm == 0.5,
          "optimizer section");
    CHECK(r.lr_schedule == SDP_LR_LINEAR && r.warmup_steps == 5 && r.min_lr_ratio == 0,
          "schedule section");
    CHECK(r.steps == 40 && r.seed == 18446744073709551615ULL && r.precision == SDP_PREC_FP32 &&
              r.chunk_mib == 0.5 && r.recompute == 0 && !strcmp(r.sched, "sdp-slidedp") &&
              r.cpus == 6 && r.host_memory_gib == 12.5,
          "train section");
    /* every train key, the last ones included (each key's line is recorded per section) */
    CHECK(r.skip_nonfinite == 1 && r.gpus == 0 && r.gpu_memory_gib == 7.5 && r.ranks == 2 &&
              r.grad_route_gpu == 1 && r.param_sharded == 1 &&
              !strcmp(r.grad_route_groups, "cpu:0-1") && r.window == 3 && r.param_delay == 1 &&
              r.bwd_lookahead == 2,
          "train section, routes and window: ranks %d window %d delay %d lookahead %d", r.ranks,
          r.window, r.param_delay, r.bwd_lookahead);
    CHECK(d.bwd_lookahead == 1 && d.window == -1 && d.param_delay == 0 && d.ranks == 1,
          "defaults of the window keys");
    CHECK(r.keep_last == 2 && d.keep_last == 1, "train.keep_last %d, and its default", r.keep_last);
    CHECK(r.grad_bf16 == 0 && d.grad_bf16 == -1, "train.grad_dtype fp32, and its default (auto)");
    CHECK(!sdp_recipe_grad_bf16(&r, 1) && !sdp_recipe_grad_bf16(&d, 0) &&
              sdp_recipe_grad_bf16(&d, 1),
          "fp32 returns fp32; auto returns bf16 for one rank on a GPU only");
    CHECK(r.staging_depth == 3 && r.prefetch_groups == 0 && d.staging_depth == 0 &&
              d.prefetch_groups == -1,
          "train.staging_depth %d, prefetch_groups %d, and their defaults", r.staging_depth,
          r.prefetch_groups);
    CHECK(r.nccl == 0 && d.nccl == 0, "train.collectives starpu, and its default");
    snprintf(want, sizeof(want), "%s/out", dir);
    printf("output.dir: %s, output.metrics: %s\n", r.output_dir, r.metrics);
    CHECK(!strcmp(r.output_dir, want), "output.dir %s, expected %s", r.output_dir, want);
    snprintf(want, sizeof(want), "%s/out/m.jsonl", dir);
    CHECK(!strcmp(r.metrics, want), "output.metrics %s, expected %s", r.metrics, want);
    rc = sdp_recipe_validate(&r);
    CHECK(rc == 0, "validate of the good recipe -> %d", rc);

    /* preset, absolute paths, metrics without output.dir, defaults kept */
    write_file(path, "model:\n  preset: qwen3-0.6b\ndata:\n  train: /data/x.tok\n"
                     "output:\n  metrics: /var/m.jsonl\n");
    rc = load_capture(path, &r, err, sizeof(err));
    CHECK(rc == 0, "preset recipe rejected: %s", err);
    CHECK(sdp_model_preset("qwen3-0.6b", &ref) == 0 && memcmp(&r.model, &ref, sizeof(ref)) == 0,
          "preset model differs from sdp_model_preset()");
    CHECK(!strcmp(r.data_train, "/data/x.tok") && !strcmp(r.metrics, "/var/m.jsonl") &&
              r.output_dir[0] == '\0',
          "absolute paths changed: %s %s", r.data_train, r.metrics);
    sdp_recipe_defaults(&d);
    CHECK(r.lr == d.lr && r.steps == d.steps && r.seq_len == d.seq_len && r.seed == d.seed,
          "defaults not kept");
    write_file(path, "model:\n  path: hf\ndata:\n  train: t.tok\noutput:\n  metrics: m.jsonl\n");
    rc = load_capture(path, &r, err, sizeof(err));
    snprintf(want, sizeof(want), "%s/m.jsonl", dir);
    CHECK(rc == 0 && !strcmp(r.metrics, want), "metrics without output.dir: %s", r.metrics);
    snprintf(want, sizeof(want), "%s/hf", dir);
    CHECK(rc == 0 && !strcmp(r.model_path, want), "model.path: %s", r.model_path);
    printf("model.path: %s, metrics without output.dir: %s\n", r.model_path, r.metrics);
    CHECK(sdp_recipe_validate(&r) == 0, "validate with model.path");

    /* activations: offload is recomputation with the saved inputs offloaded */
    write_file(path, "model:\n  preset: qwen3-0.6b\ndata:\n  train: /d.tok\ntrain:\n"
                     "  activations: offload\n");
    rc = load_capture(path, &r, err, sizeof(err));
    CHECK(rc == 0 && r.recompute == 1 && r.act_offload == 1, "activations offload: %d %s", rc, err);
    CHECK(d.act_offload == 0, "activations offload is not the default");
    /* activations: selective is recomputation with the mid residuals kept */
    write_file(path, "model:\n  preset: qwen3-0.6b\ndata:\n  train: /d.tok\ntrain:\n"
                     "  activations: selective\n");
    rc = load_capture(path, &r, err, sizeof(err));
    CHECK(rc == 0 && r.recompute == SDP_RECOMPUTE_SELECTIVE && r.act_offload == 0,
          "activations selective: %d %s", rc, err);
    { /* the same names on a command line (slidedp bench --activations) */
        int rec = -1, off = -1;
        CHECK(sdp_recipe_activations("selective", &rec, &off) == 0 &&
                  rec == SDP_RECOMPUTE_SELECTIVE && off == 0,
              "selective by name: %d %d", rec, off);
        CHECK(sdp_recipe_activations("offload", &rec, &off) == 0 && rec == SDP_RECOMPUTE_FULL &&
                  off == 1,
              "offload by name: %d %d", rec, off);
        CHECK(sdp_recipe_activations("keep", &rec, &off) == 0 && rec == SDP_RECOMPUTE_NONE,
              "keep by name: %d", rec);
        CHECK(sdp_recipe_activations("bogus", &rec, &off) == -EINVAL, "bogus name accepted");
    }
    /* keep_last: at most the model's layers (qwen3-0.6b has 28), a validation error naming it */
    write_file(path, "model:\n  preset: qwen3-0.6b\ndata:\n  train: /d.tok\ntrain:\n"
                     "  keep_last: 29\n");
    rc = load_capture(path, &r, err, sizeof(err));
    CHECK(rc == 0 && r.keep_last == 29, "keep_last 29 loads: %d %s", rc, err);
    rc = load_capture(NULL, &r, err, sizeof(err));
    printf("keep_last 29 -> %d; %.*s\n", rc, (int)strcspn(err, "\n"), err);
    CHECK(rc == -EINVAL && strstr(err, "train.keep_last=29"), "keep_last 29 -> %d: %s", rc, err);

    /* the bf16 gradient return: one rank only (a validation error naming the key) */
    write_file(path, "model:\n  preset: qwen3-0.6b\ndata:\n  train: /d.tok\nbatch:\n  global: 4\n"
                     "  micro: 2\ntrain:\n  grad_dtype: bf16\n");
    rc = load_capture(path, &r, err, sizeof(err));
    CHECK(rc == 0 && r.grad_bf16 == 1, "grad_dtype bf16: %d %s", rc, err);
    CHECK(sdp_recipe_validate(&r) == 0, "grad_dtype bf16 with one rank");
    CHECK(sdp_recipe_grad_bf16(&r, 0) && sdp_recipe_grad_bf16(&r, 1), "bf16 returns bf16");
    d.ranks = 2;
    CHECK(!sdp_recipe_grad_bf16(&d, 1), "auto with two ranks returns fp32");
    d.ranks = 1;
    r.ranks = 2;
    rc = load_capture(NULL, &r, err, sizeof(err));
    printf("grad_dtype bf16 with 2 ranks -> %d; %.*s\n", rc, (int)strcspn(err, "\n"), err);
    CHECK(rc == -EINVAL && strstr(err, "train.grad_dtype") != NULL,
          "grad_dtype bf16 with 2 ranks -> %d (%s)", rc, err);

    /* bad recipes */
    for (size_t i = 0; i < sizeof(bad_recipes) / sizeof(bad_recipes[0]); i++) {
        const struct bad *b = &bad_recipes[i];
        char line_tag[32];
        write_file(path, b->text);
        rc = load_capture(path, &r, err, sizeof(err));
        snprintf(line_tag, sizeof(line_tag), " line %d: ", b->line);
        int has_line = strstr(err, line_tag) != NULL, has_text = strstr(err, b->needle) != NULL;
        char *nl = strchr(err, '\n');
        if (nl)
            *nl = '\0';
        printf("bad %-22s -> %d; %s\n", b->what, rc, err);
        CHECK(rc == -EINVAL && has_line && has_text, "%s: expected -EINVAL with '%s' and '%s'",
              b->what, line_tag, b->needle);
    }
    rc = load_capture("/nonexistent/recipe.yaml", &r, err, sizeof(err));
    printf("missing recipe -> %d\n", rc);
    CHECK(rc == -ENOENT, "missing recipe -> %d", rc);
    write_file(path, "# nothing\n");
    rc = load_capture(path, &r, err, sizeof(err));
    printf("empty recipe -> %d\n", rc);
    CHECK(rc == -EINVAL, "empty recipe -> %d", rc);

    /* validate: cross-field */
    write_file(path, "model:\n  preset: qwen3-0.6b\n");
    rc = load_capture(path, &r, err, sizeof(err));
    CHECK(rc == 0, "no-data recipe should load");
    CHECK(sdp_recipe_validate(&r) == -EINVAL, "missing data.train accepted");
    write_file(path, "data:\n  train: x.tok\n");
    rc = load_capture(path, &r, err, sizeof(err));
    CHECK(rc == 0 && sdp_recipe_validate(&r) == -EINVAL, "missing model accepted");
    write_file(path, "model:\n  arch: qwen3\n  vocab_size: 100\n  hidden_size: 64\n"
                     "  intermediate_size: 128\n  num_layers: 1\n  num_heads: 4\n  head_dim: 16\n"
                     "  max_position_embeddings: 64\ndata:\n  train: x.tok\n  seq_len: 65\n");
    rc = load_capture(path, &r, err, sizeof(err));
    CHECK(rc == 0, "seq_len recipe should load: %s", err);
    CHECK(sdp_recipe_validate(&r) == -EINVAL, "seq_len 65 > max_position_embeddings 64 accepted");
    r.seq_len = 64;
    CHECK(sdp_recipe_validate(&r) == 0, "seq_len 64 = max_position_embeddings rejected");
    r.micro_batch = 3;
    CHECK(sdp_recipe_validate(&r) == -EINVAL, "global 8 / micro 3 accepted by validate");

    /* rope scaling: beyond max_position_embeddings with it; over a preset */
    write_file(path, "model:\n  arch: qwen3\n  vocab_size: 100\n  hidden_size: 64\n"
                     "  intermediate_size: 128\n  num_layers: 1\n  num_heads: 4\n  head_dim: 16\n"
                     "  max_position_embeddings: 64\n  rope_type: yarn\n  rope_factor: 2\n"
                     "  rope_original_max_position_embeddings: 64\n  rope_beta_fast: 16\n"
                     "data:\n  train: x.tok\n  seq_len: 128\n");
    rc = load_capture(path, &r, err, sizeof(err));
    CHECK(rc == 0, "yarn recipe should load: %s", err);
    CHECK(r.model.rope_type == SDP_ROPE_YARN && r.model.rope_scaling_factor == 2.0 &&
              r.model.rope_original_max_pos == 64 && r.model.rope_beta_fast == 16.0 &&
              r.model.rope_beta_slow == 0.0 && r.model.max_position_embeddings == 64,
          "yarn keys not applied");
    CHECK(sdp_recipe_validate(&r) == 0, "seq_len 128 with yarn from 64 rejected");
    write_file(path, "model:\n  preset: qwen3-0.6b\n  rope_type: linear\n  rope_factor: 4\n");
    rc = load_capture(path, &r, err, sizeof(err));
    CHECK(rc == 0 && r.model.rope_type == SDP_ROPE_LINEAR && r.model.rope_scaling_factor == 4.0 &&
              r.model.hidden_size == 1024,
          "linear scaling over a preset: %s", err);

    /* learning-rate schedule vs closed forms: lr 1e-3, min 1e-4, warmup 10, steps 110 */
    sdp_recipe_defaults(&r);
    r.lr = 1e-3;
    r.min_lr_ratio = 0.1;
    r.warmup_steps = 10;
    r.steps = 110;
    r.lr_schedule = SDP_LR_COSINE;
    check_lr("warmup", &r, 0, 1e-4);
    check_lr("warmup", &r, 4, 5e-4);
    check_lr("warmup", &r, 9, 1e-3);
    check_lr("cosine", &r, 10, 1e-3);
    check_lr("cosine", &r, 35, 1e-4 + 0.45e-3 * (1 + sqrt(0.5))); /* p = 1/4 */
    check_lr("cosine", &r, 60, 5.5e-4);                           /* p = 1/2 */
    check_lr("cosine", &r, 85, 1e-4 + 0.45e-3 * (1 - sqrt(0.5))); /* p = 3/4 */
    check_lr("cosine", &r, 110, 1e-4);
    check_lr("cosine", &r, 500, 1e-4);
    r.lr_schedule = SDP_LR_LINEAR;
    check_lr("linear", &r, 4, 5e-4);
    check_lr("linear", &r, 35, 7.75e-4);
    check_lr("linear", &r, 60, 5.5e-4);
    check_lr("linear", &r, 110, 1e-4);
    r.lr_schedule = SDP_LR_CONSTANT;
    check_lr("constant", &r, 4, 5e-4);
    check_lr("constant", &r, 77, 1e-3);
    r.lr_schedule = SDP_LR_COSINE;
    r.warmup_steps = 0;
    r.steps = 100;
    check_lr("cosine", &r, 0, 1e-3);
    check_lr("cosine", &r, 50, 5.5e-4);

    unlink(path);
    rmdir(dir);
    return sdp_test_finish(sdp_test_nfail);
}
