#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Loss curves of `slidedp train` and of Hugging Face transformers, step by step, from the same
initial weights on the same token batches with the same optimizer.

  bench/hf_loss_compare.py RECIPE.yaml --steps N --device cpu|cuda --out DIR [--tolerance X]

1. Initial weights: the recipe's `model.path` when it names a Hugging Face directory, else (`arch`
   or `preset`) a model that transformers initialises from the recipe's shapes (torch seed =
   train.seed), saved in fp32 with save_pretrained(safe_serialization=True) to DIR/init.  Both
   sides load that directory.
2. Batches: the sampler of formats/data.c (windows of T+1 tokens at i*T, per-epoch Fisher-Yates
   order from splitmix64(seed, epoch), masked targets -> -100), reimplemented here and, unless
   --check-batches no, checked batch by batch against formats/data.c itself, compiled from this
   source tree and called through ctypes.
3. Ours: `slidedp train` on DIR/recipe.yaml (the recipe with model.path = the initial weights, no
   output directory, so no checkpoint and no resume), --metrics DIR/ours.jsonl.  The learning rate,
   token and valid-target counts it logs are checked against this script's own.
4. transformers: AutoModelForCausalLM, fp32 master weights; bf16 autocast when the precision is
   bf16 (on CPU as on CUDA), plain fp32 otherwise (TF32 off).  Per step: the micro-batches of the
   recipe, each backward of sum-of-token-losses / valid targets of the whole step (our loss
   normalisation); clipping by clip_grad_norm_'s rule with the global norm accumulated in fp64 as
   ours does (--clip-norm torch: clip_grad_norm_ itself, whose fp32 norm is off by ~4e-6 relative
   on the tiny model of the test); torch.optim.AdamW (single-tensor path) with weight decay on
   matrices only (embedding and LM head included, norms excluded: models/qwen3.c), the recipe's
   warmup + cosine/linear/constant schedule (cli/recipe.c, sdp_recipe_lr_at).
5. DIR/compare.jsonl: one line per step (step, ours, hf, abs_diff, rel_diff, grad norms, lr); one
   summary JSON line on stdout (max and mean |dloss|, final losses, wall times).
--residual-dtype fp32 trains ours with train.residual_dtype fp32 (the residual stream in fp32 under
bf16, autocast's numerics).  --hf-peer-attn ATTN runs transformers a second time with that
attention backend (eager against the default sdpa) and reports the largest |dloss| between its
two runs (hf_self_max_abs_diff): the spread transformers shows against itself, from which a
tolerance for ours can be derived.
Exit status: 0 (within --tolerance when given), 1 over the tolerance or a failed check, 2 usage.
--hf-seq-offset K feeds transformers the sequences K positions later in the sampler's order: a
negative control, which must fail (tests/e2e/test_e2e_loss_compare.sh).
"""

import argparse
import ctypes
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IGNORE = -100
MASK64 = (1 << 64) - 1
GOLDEN_GAMMA = 0x9E3779B97F4A7C15

# models/qwen3.c presets (BENCH.md shapes), with its sdp_model_preset() constants
PRESETS = {
    "qwen3-0.6b": (1024, 3072, 28, 16, True), "qwen3-1.7b": (2048, 6144, 28, 16, True),
    "qwen3-4b": (2560, 9728, 36, 32, True), "qwen3-8b": (4096, 12288, 36, 32, False),
    "qwen3-14b": (5120, 17408, 40, 40, False), "qwen3-32b": (5120, 25600, 64, 64, False),
}


def log(msg):
    print("[hf_loss_compare] " + msg, file=sys.stderr, flush=True)


class Fail(Exception):
    pass


# ---- recipe: the fields and defaults of cli/recipe.c (sdp_recipe_defaults) ----

def load_recipe(path):
    import yaml
    with open(path) as f:
        raw = yaml.safe_load(f) or {}
    base = os.path.dirname(os.path.abspath(path))
    data, batch, opt, sched, train = (dict(raw.get(n) or {}) for n in
                                      ("data", "batch", "optimizer", "schedule", "train"))
    if not data.get("train"):
        raise Fail("%s: data.train is not set" % path)
    if data.get("doc_mask", True):  # cli/recipe.c's default
        raise Fail("%s: data.doc_mask is on (the default): the batches here are whole rows; set "
                   "data.doc_mask: false" % path)
    r = {
        "raw": raw, "model": dict(raw.get("model") or {}), "base": base,
        "data": os.path.normpath(os.path.join(base, str(data["train"]))),
        "seq_len": int(data.get("seq_len", 1024)), "shuffle": bool(data.get("shuffle", True)),
        "global": int(batch.get("global", 8)), "micro": int(batch.get("micro", 8)),
        "lr": float(opt.get("lr", 3e-4)), "beta1": float(opt.get("beta1", 0.9)),
        "beta2": float(opt.get("beta2", 0.95)), "eps": float(opt.get("eps", 1e-8)),
        "weight_decay": float(opt.get("weight_decay", 0.1)),
        "max_grad_norm": float(opt.get("max_grad_norm", 1.0)),
        "schedule": str(sched.get("name", "cosine")), "warmup": int(sched.get("warmup_steps", 0)),
        "min_lr_ratio": float(sched.get("min_lr_ratio", 0.1)),
        "steps": int(train.get("steps", 100)), "seed": int(train.get("seed", 1234)),
        "precision": str(train.get("precision", "bf16")),
    }
    if opt.get("name", "adamw") != "adamw":
        raise Fail("%s: optimizer.name %s: only adamw is compared" % (path, opt.get("name")))
    if r["global"] % r["micro"]:
        raise Fail("%s: batch.global %d is not a multiple of batch.micro %d"
                   % (path, r["global"], r["micro"]))
    return r


def lr_at(r, s):
    """cli/recipe.c sdp_recipe_lr_at, operation for operation (doubles)."""
    lr, lr_min, span = r["lr"], r["lr"] * r["min_lr_ratio"], r["steps"] - r["warmup"]
    if s < r["warmup"]:
        return lr * float(s + 1) / float(r["warmup"])
    if r["schedule"] == "constant":
        return lr
    p = float(s - r["warmup"]) / float(span) if span > 0 else 1.0
    p = min(max(p, 0.0), 1.0)
    if r["schedule"] == "linear":
        return lr_min + (lr - lr_min) * (1 - p)
    return lr_min + 0.5 * (lr - lr_min) * (1 + math.cos(math.pi * p))


# ---- initial weights ----

def hf_config(r):
    """A transformers config from the recipe's model section (models/qwen3.c defaults)."""
    import transformers
    m = r["model"]
    if m.get("preset"):
        if m["preset"] not in PRESETS:
            raise Fail("unknown model.preset %s" % m["preset"])
        C, I, L, NH, tied = PRESETS[m["preset"]]
        kw = dict(vocab_size=151936, hidden_size=C, intermediate_size=I, num_hidden_layers=L,
                  num_attention_heads=NH, num_key_value_heads=8, head_dim=128, rope_theta=1e6,
                  rms_norm_eps=1e-6, max_position_embeddings=40960, tie_word_embeddings=tied,
                  initializer_range=0.02, bos_token_id=151643, eos_token_id=151645)
        return transformers.Qwen3Config(**kw)
    arch = m.get("arch")
    if arch not in ("qwen3", "llama"):
        raise Fail("model: needs path, preset or arch (qwen3, llama), got %r" % (m,))
    nh = int(m["num_heads"])
    kw = dict(vocab_size=int(m["vocab_size"]), hidden_size=int(m["hidden_size"]),
              intermediate_size=int(m["intermediate_size"]),
              num_hidden_layers=int(m["num_layers"]), num_attention_heads=nh,
              num_key_value_heads=int(m.get("num_kv_heads", nh)),
              head_dim=int(m.get("head_dim", int(m["hidden_size"]) // nh)),
              rope_theta=float(m.get("rope_theta", 10000.0)),
              rms_norm_eps=float(m.get("rms_norm_eps", 1e-6)),
              tie_word_embeddings=bool(m.get("tie_word_embeddings", False)),
              max_position_embeddings=int(m.get("max_position_embeddings",
                                                32768 if arch == "qwen3" else 2048)),
              initializer_range=float(m.get("initializer_range", 0.02)), attention_bias=False)
    if arch == "qwen3":
        return transformers.Qwen3Config(**kw)
    return transformers.LlamaConfig(mlp_bias=False, **kw)


def make_init(r, outdir):
    import torch
    from transformers import AutoModelForCausalLM
    cfg = hf_config(r)
    torch.manual_seed(r["seed"])
    model = AutoModelForCausalLM.from_config(cfg).to(torch.float32)  # normal(0, init range)
    model.save_pretrained(outdir, safe_serialization=True)
    gc = os.path.join(outdir, "generation_config.json")
    if os.path.exists(gc):
        os.unlink(gc)
    n = sum(p.numel() for p in model.parameters())
    log("initial weights: %s, %d parameters, fp32, in %s" % (type(model).__name__, n, outdir))


# ---- batches: formats/data.c ----

def read_shard(path):
    """Token ids and the loss mask (None without one) of a token shard (formats/shard.h)."""
    import numpy as np
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) != 64 or head[:8] != b"SDPTOKEN":
            raise Fail("%s: not a token shard" % path)
        version, width, count = struct.unpack("<IIQ", head[8:24])
        flags = struct.unpack("<I", head[32:36])[0] if version >= 2 else 0
        if version not in (1, 2) or width != 4:
            raise Fail("%s: version %d, %d bytes per token" % (path, version, width))
        tokens = np.frombuffer(f.read(4 * count), dtype="<u4").astype(np.int64)
        mask = np.frombuffer(f.read(count), dtype=np.uint8) if flags & 1 else None
    if len(tokens) != count or (mask is not None and len(mask) != count):
        raise Fail("%s: truncated" % path)
    return tokens, mask


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def epoch_order(nseq, seed, epoch, shuffle):
    order = list(range(nseq))
    if not shuffle:
        return order
    state = mix64(mix64(seed & MASK64) ^ epoch)
    for i in range(nseq - 1, 0, -1):
        bound = i + 1
        threshold = ((1 << 64) - bound) % bound
        while True:
            state = (state + GOLDEN_GAMMA) & MASK64
            x = mix64(state)
            if x >= threshold:
                break
        j = x % bound
        order[i], order[j] = order[j], order[i]
    return order


class Sampler:
    """sdp_data_next: sequence positions (epoch, index), order rebuilt per epoch."""

    def __init__(self, tokens, mask, T, seed, shuffle):
        if len(tokens) < T + 1:
            raise Fail("the shard holds %d tokens, fewer than seq_len+1 = %d"
                       % (len(tokens), T + 1))
        self.tokens, self.mask, self.T = tokens, mask, T
        self.nseq = (len(tokens) - 1) // T
        self.seed, self.shuffle, self.orders = seed, shuffle, {}

    def seq(self, k):
        """The k-th sequence the sampler hands out (k = 0, 1, ...): ids and targets (T,)."""
        import numpy as np
        epoch, index = divmod(k, self.nseq)
        if epoch not in self.orders:
            self.orders = {epoch: epoch_order(self.nseq, self.seed, epoch, self.shuffle)}
        start = self.orders[epoch][index] * self.T
        w = self.tokens[start:start + self.T + 1]
        targets = w[1:].copy()
        if self.mask is not None:
            targets[self.mask[start + 1:start + self.T + 1] == 0] = IGNORE
        return np.asarray(w[:-1]), targets

    def batch(self, step, nseq, offset=0):
        import numpy as np
        seqs = [self.seq(step * nseq + b + offset) for b in range(nseq)]
        return np.stack([s[0] for s in seqs]), np.stack([s[1] for s in seqs])


def c_sampler(path, T, seed, shuffle, workdir):
    """formats/data.c of this source tree, compiled into a shared library: (next, close)."""
    import numpy as np
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise Fail("no C compiler (cc) to build formats/data.c for --check-batches")
    inc = tempfile.mkdtemp(dir=workdir)
    open(os.path.join(inc, "config.h"), "w").close()  # the sampler and its helpers need no macros
    so = os.path.join(workdir, "libsdp_data.so")
    src = [os.path.join(SRC, f) for f in ("formats/data.c", "formats/shard.c", "base/log.c",
                                          "base/fsutil.c")]
    cmd = [cc, "-std=gnu11", "-O1", "-shared", "-fPIC", "-I" + inc, "-I" + SRC, "-o", so] + src
    res = subprocess.run(cmd, capture_output=True, text=True)
    shutil.rmtree(inc)
    if res.returncode:
        raise Fail("building formats/data.c failed: %s\n%s" % (" ".join(cmd), res.stderr))
    lib = ctypes.CDLL(so)
    d = ctypes.create_string_buffer(1 << 16)  # struct sdp_data is ~4.2 KB (4 KiB path)
    lib.sdp_data_open.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                  ctypes.c_uint64, ctypes.c_int]
    lib.sdp_data_next.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                  ctypes.c_void_p, ctypes.c_void_p]  # segs: NULL
    if lib.sdp_data_open(d, path.encode(), T, seed & MASK64, 1 if shuffle else 0):
        raise Fail("formats/data.c could not open %s" % path)

    def nxt(n):
        ids = np.empty((n, T), dtype=np.int32)
        tg = np.empty((n, T), dtype=np.int32)
        lib.sdp_data_next(d, n, ids.ctypes.data, tg.ctypes.data, None)
        return ids, tg
    return nxt, lambda: lib.sdp_data_close(d)


# ---- the two trainers ----

def run_ours(args, recipe_path, metrics):
    cmd = [args.slidedp, "train", recipe_path, "--steps", str(args.steps), "--metrics", metrics,
           "--precision", args.dtype, "--gpus", "1" if args.device == "cuda" else "0",
           "--no-resume", "-q"]
    if args.sched:
        cmd += ["--sched", args.sched]
    log("ours: " + " ".join(cmd))
    t0 = time.time()
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.time() - t0
    if res.returncode:
        sys.stderr.write(res.stderr[-4000:])
        raise Fail("slidedp train exited %d" % res.returncode)
    rows = [json.loads(line) for line in open(metrics) if line.strip()]
    if [x["step"] for x in rows] != list(range(1, args.steps + 1)):
        raise Fail("%s: expected steps 1..%d" % (metrics, args.steps))
    return rows, wall


def run_hf(args, r, init_dir, sampler):
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM
    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    bf16 = args.dtype == "bf16"
    t0 = time.time()
    try:
        model = AutoModelForCausalLM.from_pretrained(init_dir, dtype=torch.float32,
                                                     attn_implementation=args.attn)
    except TypeError:  # transformers 4.x
        model = AutoModelForCausalLM.from_pretrained(init_dir, torch_dtype=torch.float32,
                                                     attn_implementation=args.attn)
    model.to(dev).train()
    params = [p for p in model.parameters() if p.requires_grad]  # tied weights appear once
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": r["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=r["lr"], betas=(r["beta1"], r["beta2"]), eps=r["eps"],
                            foreach=False, fused=False)
    V = model.config.vocab_size
    G, B = r["global"], r["micro"]
    t1 = time.time()
    rows = []
    for s in range(args.steps):
        ids, tg = sampler.batch(s, G, args.hf_seq_offset)
        ids = torch.from_numpy(ids).to(dev)
        tg = torch.from_numpy(tg).to(dev)
        valid = int((tg >= 0).sum())
        loss_sum = 0.0
        for mb in range(G // B):
            x, y = ids[mb * B:(mb + 1) * B], tg[mb * B:(mb + 1) * B]
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=bf16):
                logits = model(input_ids=x, use_cache=False).logits
            # fp32 cross-entropy as transformers' own ForCausalLMLoss (logits.float()), summed
            # over the micro-batch and divided by the valid targets of the whole step
            ce = F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1),
                                 ignore_index=IGNORE, reduction="sum")
            (ce / valid).backward()
            loss_sum += ce.item()
            del logits, ce
        if args.clip_norm == "torch" and r["max_grad_norm"] > 0:
            gnorm = float(torch.nn.utils.clip_grad_norm_(params, r["max_grad_norm"],
                                                         foreach=False))
        else:
            # the global norm accumulated in fp64 as ours (codelets/adamw.c), then
            # clip_grad_norm_'s coefficient max_norm / (norm + 1e-6) clamped to 1
            gnorm = math.sqrt(sum(float(torch.linalg.vector_norm(p.grad, dtype=torch.float64))
                                  ** 2 for p in params))
            if r["max_grad_norm"] > 0:
                coef = min(r["max_grad_norm"] / (gnorm + 1e-6), 1.0)
                for p in params:
                    p.grad.mul_(coef)
        lr = lr_at(r, s)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        opt.zero_grad(set_to_none=True)
        rows.append({"loss": loss_sum / valid, "grad_norm": gnorm, "lr": lr,
                     "valid_targets": valid, "tokens": G * r["seq_len"]})
        if args.verbose or s == 0 or s + 1 == args.steps or (s + 1) % 20 == 0:
            log("hf step %d/%d loss %.6f gnorm %.4f" % (s + 1, args.steps, rows[-1]["loss"],
                                                       rows[-1]["grad_norm"]))
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t2 = time.time()
    return rows, t2 - t0, t2 - t1


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("recipe")
    ap.add_argument("--steps", type=int, help="optimizer steps (default: train.steps)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--dtype", choices=("fp32", "bf16"),
                    help="working precision (default: train.precision)")
    ap.add_argument("--tolerance", type=float,
                    help="exit 1 when max |loss ours - loss hf| exceeds this")
    ap.add_argument("--init", help="use this Hugging Face directory as the initial weights")
    ap.add_argument("--slidedp", help="the slidedp binary (default: $top_builddir/slidedp, "
                    "./slidedp, the source tree's, then PATH)")
    ap.add_argument("--ours-metrics", help="compare against this metrics file of an earlier "
                    "`slidedp train` run of the same recipe and weights instead of training")
    ap.add_argument("--sched", help="StarPU policy for our trainer (default: the recipe's)")
    ap.add_argument("--attn", default="sdpa", help="transformers attention (sdpa, eager)")
    ap.add_argument("--hf-peer-attn", help="also run transformers with this attention and report "
                    "the largest |dloss| between its two runs")
    ap.add_argument("--residual-dtype", choices=("bf16", "fp32"),
                    help="ours: train.residual_dtype (default: the recipe's)")
    ap.add_argument("--clip-norm", choices=("fp64", "torch"), default="fp64",
                    help="transformers' clipping norm: accumulated in fp64 as ours (default), or "
                    "torch.nn.utils.clip_grad_norm_ as is (fp32 accumulation)")
    ap.add_argument("--threads", type=int, help="torch CPU threads")
    ap.add_argument("--check-batches", choices=("auto", "yes", "no"), default="auto",
                    help="check the batches against formats/data.c (auto: when cc exists)")
    ap.add_argument("--hf-seq-offset", type=int, default=0,
                    help="negative control: transformers gets the sequences K places later")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    try:
        return compare(args)
    except Fail as e:
        log("error: %s" % e)
        print("FAIL")
        return 1


def find_slidedp(args):
    cands = [args.slidedp] if args.slidedp else [
        os.path.join(os.environ.get("top_builddir", "."), "slidedp"), "./slidedp",
        os.path.join(SRC, "slidedp"), shutil.which("slidedp") or ""]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    raise Fail("slidedp binary not found (tried %s); pass --slidedp"
               % ", ".join(filter(None, cands)))


def compare(args):
    import numpy as np
    import torch
    import transformers
    import yaml
    transformers.utils.logging.disable_progress_bar()
    r = load_recipe(args.recipe)
    args.steps = args.steps or r["steps"]
    r["steps"] = args.steps  # as `slidedp train --steps`: the schedule spans the run
    args.dtype = args.dtype or r["precision"]
    if args.device == "cuda" and not torch.cuda.is_available():
        raise Fail("--device cuda: torch sees no CUDA device")
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.ours_metrics:
        args.slidedp = find_slidedp(args)
    os.makedirs(args.out, exist_ok=True)
    out = os.path.abspath(args.out)

    # 1. initial weights
    if args.init:
        init_dir = os.path.abspath(args.init)
    elif r["model"].get("path"):
        init_dir = os.path.normpath(os.path.join(r["base"], str(r["model"]["path"])))
    else:
        init_dir = os.path.join(out, "init")
        make_init(r, init_dir)

    # 2. batches, checked against formats/data.c
    tokens, mask = read_shard(r["data"])
    sampler = Sampler(tokens, mask, r["seq_len"], r["seed"], r["shuffle"])
    nseq = args.steps * r["global"]
    log("data %s: %d tokens, %d sequences of %d, %d steps x %d sequences = %.2f epochs%s"
        % (r["data"], len(tokens), sampler.nseq, r["seq_len"], args.steps, r["global"],
           nseq / sampler.nseq, ", loss mask" if mask is not None else ""))
    check = args.check_batches
    if check == "auto":
        check = "yes" if (shutil.which("cc") or os.environ.get("CC")) else "no"
        if check == "no":
            log("warning: no C compiler: batches not checked against formats/data.c")
    if check == "yes":
        nxt, close = c_sampler(r["data"], r["seq_len"], r["seed"], r["shuffle"], out)
        for s in range(args.steps):
            ci, ct = nxt(r["global"])
            pi, pt = sampler.batch(s, r["global"])
            if not (np.array_equal(ci, pi) and np.array_equal(ct, pt)):
                close()
                raise Fail("step %d: the batch differs from formats/data.c's" % (s + 1))
        close()
        log("batches of %d steps identical to formats/data.c's" % args.steps)

    # 3. ours
    if args.ours_metrics:
        ours = [json.loads(line) for line in open(args.ours_metrics) if line.strip()]
        ours_wall = float("nan")
        if len(ours) < args.steps:
            raise Fail("%s holds %d steps, fewer than %d" % (args.ours_metrics, len(ours),
                                                             args.steps))
        ours = ours[:args.steps]
    else:
        raw = dict(r["raw"])
        raw["model"] = {"path": init_dir}
        raw["data"] = dict(raw.get("data") or {}, train=r["data"])
        raw["train"] = dict(raw.get("train") or {}, steps=args.steps)
        if args.residual_dtype:
            raw["train"]["residual_dtype"] = args.residual_dtype
        raw.pop("output", None)  # no run directory: nothing to resume from
        recipe_path = os.path.join(out, "recipe.yaml")
        with open(recipe_path, "w") as f:
            f.write("# written by bench/hf_loss_compare.py from %s\n"
                    % os.path.abspath(args.recipe))
            yaml.safe_dump(raw, f, sort_keys=False)
        ours, ours_wall = run_ours(args, recipe_path, os.path.join(out, "ours.jsonl"))
    ours_train = float(ours[-1].get("elapsed_s", float("nan")))

    # 4. transformers
    log("transformers %s, torch %s on %s, %s" % (transformers.__version__, torch.__version__,
                                                 args.device, args.dtype))
    hf, hf_wall, hf_train = run_hf(args, r, init_dir, sampler)
    self_diff = None
    if args.hf_peer_attn:  # transformers against itself: only the attention backend differs
        main_attn, args.attn = args.attn, args.hf_peer_attn
        log("transformers again with attention %s" % args.attn)
        peer, _, _ = run_hf(args, r, init_dir, sampler)
        args.attn = main_attn
        self_diff = max(abs(a["loss"] - b["loss"]) for a, b in zip(hf, peer))
        log("transformers %s against %s: max |dloss| %.3g" % (args.attn, args.hf_peer_attn,
                                                              self_diff))

    # 5. compare
    diffs = []
    with open(os.path.join(out, "compare.jsonl"), "w") as f:
        for s, (o, h) in enumerate(zip(ours, hf)):
            if rel(o["lr"], h["lr"]) > 1e-9:  # metrics carry 10 significant digits
                raise Fail("step %d: our lr %.10g, the schedule here %.10g" % (s + 1, o["lr"],
                                                                               h["lr"]))
            if args.hf_seq_offset == 0 and (o["valid_targets"] != h["valid_targets"] or
                                            o["tokens"] != h["tokens"]):
                raise Fail("step %d: ours %d tokens / %d targets, here %d / %d"
                           % (s + 1, o["tokens"], o["valid_targets"], h["tokens"],
                              h["valid_targets"]))
            lo, lh = o["loss"], h["loss"]
            d = abs(lo - lh) if lo is not None and math.isfinite(lh) else float("inf")
            diffs.append(d)
            row = {"step": s + 1, "ours": lo, "hf": lh, "abs_diff": d,
                   "rel_diff": d / abs(lh) if lh else None, "ours_grad_norm": o["grad_norm"],
                   "hf_grad_norm": h["grad_norm"], "lr": h["lr"]}
            f.write(json.dumps(row) + "\n")
    worst = max(range(len(diffs)), key=lambda i: diffs[i])
    summary = {
        "steps": args.steps, "device": args.device, "dtype": args.dtype,
        "max_abs_diff": diffs[worst], "max_abs_diff_step": worst + 1,
        "max_rel_diff": max(d / abs(h["loss"]) for d, h in zip(diffs, hf)),
        "mean_abs_diff": sum(diffs) / len(diffs),
        "first_loss_ours": ours[0]["loss"], "first_loss_hf": hf[0]["loss"],
        "final_loss_ours": ours[-1]["loss"], "final_loss_hf": hf[-1]["loss"],
        "ours_wall_s": round(ours_wall, 2), "ours_train_s": round(ours_train, 2),
        "hf_wall_s": round(hf_wall, 2), "hf_train_s": round(hf_train, 2),
        "tokens_per_step": r["global"] * r["seq_len"], "recipe": args.recipe,
        "transformers": transformers.__version__, "torch": torch.__version__,
        "clip_norm": args.clip_norm, "attn": args.attn, "tolerance": args.tolerance,
        "hf_seq_offset": args.hf_seq_offset,
        "residual_dtype": (args.residual_dtype or
                           (r["raw"].get("train") or {}).get("residual_dtype", "bf16")),
        "hf_peer_attn": args.hf_peer_attn, "hf_self_max_abs_diff": self_diff,
    }
    ok = args.tolerance is None or diffs[worst] <= args.tolerance
    summary["pass"] = ok
    print(json.dumps(summary), flush=True)
    log("max |dloss| %.3g at step %d, mean %.3g; compare.jsonl in %s"
        % (diffs[worst], worst + 1, summary["mean_abs_diff"], out))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
