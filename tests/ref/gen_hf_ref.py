#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Generate Hugging Face reference data for the forward/backward/AdamW parity tests.

For each tiny model ("qwen3-tiny": Qwen3, tied embeddings; "llama-tiny": Llama with
llama3 RoPE scaling, untied head; "qwen3-yarn" and "qwen3-linear": qwen3-tiny with YaRN and
linear RoPE scaling, at twice the original context) this writes into <out>/<name>/:
  config.json, model.safetensors   the initial weights (transformers save_pretrained)
  ref.safetensors                  ids, targets, logits, loss, grad.<param>, losses,
                                   grad_norm, hyperparameters in the metadata
Everything runs in fp32 on the CPU from a fixed seed. The runtime's parity tests load
these files and compare their own forward, backward and optimizer steps against them.
For the models of AUTOCAST it also writes ref.autocast.safetensors: the same AdamW steps with
fp32 master weights under torch.autocast(bfloat16) (loss, losses, grad_norm), once with the
model's attention and once with the other (eager / sdpa: losses_peer), the spread transformers
shows against itself, and once with bf16 norm weights and fp32 logits (losses_wc, as a run on
bf16 working copies computes them); the parity test checks train.residual_dtype fp32 against
it.
See tests/ref/README.md. Usage: gen_hf_ref.py [--out DIR] [--only NAME]
"""

import argparse
import inspect
import json
import math
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

SEED = 1234
B, T = 2, 16
IGNORE = -100
IGNORED_POS = (1, 3)  # labels[1, 3] = IGNORE
HP = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1,
      "max_grad_norm": 1.0, "steps": 10}

COMMON = dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=10000.0,
              rms_norm_eps=1e-6, max_position_embeddings=128, attn_implementation="eager")
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}

# Twice the original context (32 positions, sequences of 64): YaRN keeps index 0's frequency,
# blends index 1 and divides the rest by the factor, and scales cos/sin by 0.1 ln 2 + 1.
YARN_ROPE = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32}
LINEAR_ROPE = {"rope_type": "linear", "factor": 2.0}

MODELS = {
    "qwen3-tiny": (Qwen3Config, Qwen3ForCausalLM, dict(tie_word_embeddings=True)),
    "llama-tiny": (LlamaConfig, LlamaForCausalLM,
                   dict(tie_word_embeddings=False, rope_scaling=LLAMA3_ROPE)),
    "qwen3-yarn": (Qwen3Config, Qwen3ForCausalLM,
                   dict(tie_word_embeddings=True, max_position_embeddings=64,
                        rope_scaling=YARN_ROPE)),
    "qwen3-linear": (Qwen3Config, Qwen3ForCausalLM,
                     dict(tie_word_embeddings=True, max_position_embeddings=32,
                          rope_scaling=LINEAR_ROPE)),
}
# Packed rows of documents (qwen3-tiny's model): transformers runs every document alone, with the
# row's positions ("row") or positions restarting at 0 ("restart").
MODELS["qwen3-docs"] = MODELS["qwen3-tiny"]
MODELS["qwen3-docs-pos"] = MODELS["qwen3-tiny"]
DOCS = {"qwen3-docs": "row", "qwen3-docs-pos": "restart"}
EOD = 1  # the end-of-document id of the packed rows
# A step at length: one sequence of 8192 tokens, two AdamW steps (sdpa: eager attention would hold
# (8192, 8192) probabilities per head); no logits kept (16 MiB).
MODELS["qwen3-8k"] = (Qwen3Config, Qwen3ForCausalLM,
                      dict(tie_word_embeddings=True, max_position_embeddings=8192,
                           attn_implementation="sdpa"))
LONG = {"qwen3-8k": {"B": 1, "steps": 2}}
AUTOCAST = ("qwen3-tiny", "llama-tiny")
SEQ = {"qwen3-yarn": 64, "qwen3-linear": 64, "qwen3-docs": 32, "qwen3-docs-pos": 32,
       "qwen3-8k": 8192}


def log(msg):
    print(msg, flush=True)


def make_config(name):
    cfg_cls, _, extra = MODELS[name]
    kw = dict(COMMON)
    kw.update(extra)
    return cfg_cls(**kw)


def check_rope(name, model, cfg):
    """Print inv_freq before/after scaling; for llama3 check all three regimes occur."""
    hd = cfg.head_dim
    theta = COMMON["rope_theta"]
    base = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    got = model.model.rotary_emb.inv_freq.double()
    log("  %s inv_freq unscaled: %s" % (name, " ".join("%.6g" % v for v in base.tolist())))
    log("  %s inv_freq model   : %s" % (name, " ".join("%.6g" % v for v in got.tolist())))
    if name in ("qwen3-yarn", "qwen3-linear"):
        check_rope_scaled(name, model, cfg, base, got)
        return
    if name != "llama-tiny":
        if not torch.allclose(got, base, rtol=1e-6, atol=0):
            raise SystemExit("%s: unexpected RoPE scaling" % name)
        return
    # Independent llama3 formula (Meta's reference apply_scaling): wavelengths below
    # orig/high_freq_factor keep their frequency, above orig/low_freq_factor are divided by
    # factor, and the band in between is interpolated.
    r = LLAMA3_ROPE
    lo_wl = r["original_max_position_embeddings"] / r["low_freq_factor"]
    hi_wl = r["original_max_position_embeddings"] / r["high_freq_factor"]
    want, kinds = [], []
    for f in base.tolist():
        wl = 2 * math.pi / f
        if wl < hi_wl:
            want.append(f)
            kinds.append("kept")
        elif wl > lo_wl:
            want.append(f / r["factor"])
            kinds.append("/factor")
        else:
            s = (r["original_max_position_embeddings"] / wl - r["low_freq_factor"]) / (
                r["high_freq_factor"] - r["low_freq_factor"])
            want.append((1 - s) * f / r["factor"] + s * f)
            kinds.append("smoothed")
    log("  %s llama3 regimes   : %s" % (name, " ".join(kinds)))
    if not torch.allclose(got, torch.tensor(want, dtype=torch.float64), rtol=1e-6, atol=0):
        raise SystemExit("%s: inv_freq differs from the llama3 formula" % name)
    if len(set(kinds)) != 3:
        raise SystemExit("%s: RoPE scaling does not exercise all three regimes" % name)


def check_rope_scaled(name, model, cfg, base, got):
    """YaRN (the paper's ramp, written out here in double) or linear scaling, and the attention
    scaling of cos/sin, against the model's rotary embedding."""
    hd = cfg.head_dim
    if name == "qwen3-linear":
        want, scale = base / LINEAR_ROPE["factor"], 1.0
    else:
        r = YARN_ROPE
        omp, theta = r["original_max_position_embeddings"], COMMON["rope_theta"]

        def dim_of(rot):  # the dimension that turns rot times over the original context
            return hd * math.log(omp / (rot * 2 * math.pi)) / (2 * math.log(theta))
        lo, hi = max(math.floor(dim_of(32)), 0), min(math.ceil(dim_of(1)), hd - 1)
        want, kinds = [], []
        for i, f in enumerate(base.tolist()):
            keep = 1 - min(max((i - lo) / (hi - lo), 0.0), 1.0)
            want.append(f / r["factor"] * (1 - keep) + f * keep)
            kinds.append("kept" if keep == 1 else "/factor" if keep == 0 else "blended")
        log("  %s yarn regimes     : %s" % (name, " ".join(kinds)))
        if len(set(kinds)) != 3:
            raise SystemExit("%s: YaRN does not exercise all three regimes" % name)
        want, scale = torch.tensor(want, dtype=torch.float64), 0.1 * math.log(r["factor"]) + 1
    if not torch.allclose(got, want, rtol=1e-6, atol=0):
        raise SystemExit("%s: inv_freq differs from the %s formula" % (name, name[6:]))
    att = model.model.rotary_emb.attention_scaling
    log("  %s attention scaling: %.9g" % (name, att))
    if abs(att - scale) > 1e-12:
        raise SystemExit("%s: attention scaling %g, expected %g" % (name, att, scale))


def build(name):
    cfg = make_config(name)
    _, model_cls, _ = MODELS[name]
    torch.manual_seed(SEED)
    model = model_cls(cfg).float()  # _init_weights: normal(0, initializer_range=0.02)
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.ndim == 1:
                if "norm" not in pname:
                    raise SystemExit("%s: unexpected 1-D parameter %s" % (name, pname))
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
    return cfg, model


def make_batch(cfg, T, nb=B):
    gen = torch.Generator().manual_seed(SEED + 2)
    ids = torch.randint(0, cfg.vocab_size, (nb, T), generator=gen, dtype=torch.int64)
    labels = ids.clone()
    labels[IGNORED_POS if nb > 1 else (0, IGNORED_POS[1])] = IGNORE
    targets = torch.full((nb, T), IGNORE, dtype=torch.int64)
    targets[:, :T - 1] = labels[:, 1:]
    return ids, labels, targets


def make_docs_batch(cfg, T):
    """B rows of T+1 tokens cut from a stream of documents, each ended by EOD (lengths 1 to 12):
    ids, targets (the next token; -100 for an EOD, whose next token is another document's, as the
    flattening collator does) and each token's document start in its row."""
    gen = torch.Generator().manual_seed(SEED + 3)
    stream = torch.randint(2, cfg.vocab_size, (B * T + 1,), generator=gen, dtype=torch.int64)
    at = 0
    while True:
        at += int(torch.randint(1, 13, (1,), generator=gen))
        if at >= B * T + 1:
            break
        stream[at - 1] = EOD
    stream[0] = EOD  # a one-token document first
    ids = torch.stack([stream[b * T:b * T + T] for b in range(B)])
    nxt = torch.stack([stream[b * T + 1:b * T + T + 1] for b in range(B)])
    targets = torch.where(ids == EOD, torch.full_like(nxt, IGNORE), nxt)
    segs = torch.zeros((B, T), dtype=torch.int64)
    for b in range(B):
        start = 0
        for t in range(T):
            segs[b, t] = start
            if ids[b, t] == EOD:
                start = t + 1
    return ids, targets, segs


def docs_loss(model, ids, targets, segs, restart):
    """Mean cross-entropy over the valid targets, every document of every row run alone."""
    total, docs = 0.0, 0
    for b in range(ids.shape[0]):
        t0 = 0
        while t0 < ids.shape[1]:
            t1 = t0 + 1
            while t1 < ids.shape[1] and segs[b, t1] == t0:
                t1 += 1
            pos = torch.arange(0, t1 - t0) if restart else torch.arange(t0, t1)
            logits = model(input_ids=ids[b:b + 1, t0:t1], position_ids=pos[None]).logits
            total = total + torch.nn.functional.cross_entropy(
                logits[0].float(), targets[b, t0:t1], ignore_index=IGNORE, reduction="sum")
            docs += 1
            t0 = t1
    return total / (targets != IGNORE).sum(), docs


def save_model(model, outdir):
    kw = {}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kw["safe_serialization"] = True
    model.save_pretrained(outdir, **kw)
    gc = os.path.join(outdir, "generation_config.json")
    if os.path.exists(gc):
        os.unlink(gc)  # not used by the runtime


def generate(name, outroot):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    outdir = os.path.join(outroot, name)
    os.makedirs(outdir, exist_ok=True)
    log("%s:" % name)
    cfg, model = build(name)
    check_rope(name, model, cfg)
    save_model(model, outdir)
    seq, nb = SEQ.get(name, T), LONG.get(name, {}).get("B", B)
    steps = LONG.get(name, {}).get("steps", HP["steps"])
    if name in DOCS:
        ids, targets, segs = make_docs_batch(cfg, seq)
    else:
        ids, labels, targets = make_batch(cfg, seq, nb)

    params = [(n, p) for n, p in model.named_parameters()]  # tied params appear once
    decay = [p for n, p in params if p.ndim >= 2]
    no_decay = [p for n, p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": HP["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=HP["lr"], betas=(HP["beta1"], HP["beta2"]), eps=HP["eps"],
                            foreach=False)
    model.train()
    out = {"ids": ids.to(torch.int32), "targets": targets.to(torch.int32)}
    if name in DOCS:
        out["segs"] = segs.to(torch.int32)
    losses, norms = [], []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        if name in DOCS:
            loss, ndocs = docs_loss(model, ids, targets, segs, DOCS[name] == "restart")
        else:
            res = model(input_ids=ids, labels=labels)
            loss = res.loss
        loss.backward()
        if step == 0:
            if name not in DOCS:  # the runtime's logits are of whole rows
                logits0 = res.logits.detach().float().clone()
            if name not in DOCS and name not in LONG:
                out["logits"] = logits0
            out["loss"] = loss.detach().float().reshape(1).clone()
            for n, p in params:
                out["grad." + n] = p.grad.detach().float().clone()  # before clipping
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in params], HP["max_grad_norm"])
        losses.append(loss.item())
        norms.append(float(norm))
        opt.step()
    out["losses"] = torch.tensor(losses, dtype=torch.float32)
    out["grad_norm"] = torch.tensor(norms, dtype=torch.float32)

    valid = targets != IGNORE
    if name in DOCS:
        log("  %s: %d documents in %d rows, positions %s" % (name, ndocs, B, DOCS[name]))
        if ndocs < 4 * B:
            raise SystemExit("%s: too few documents" % name)
    else:  # independent check of the shifted targets: mean CE over valid targets
        lp = torch.log_softmax(logits0.double(), dim=-1)
        ce = -lp[valid, targets[valid]].mean()
        if abs(ce.item() - out["loss"].item()) > 1e-5 * abs(ce.item()):
            raise SystemExit("%s: loss %.8g != CE over shifted targets %.8g"
                             % (name, out["loss"].item(), ce.item()))

    meta = {k: repr(v) if isinstance(v, float) else str(v) for k, v in HP.items()}
    if name in DOCS:
        meta.update({"positions": DOCS[name], "eod": str(EOD)})
    meta["steps"] = str(steps)
    meta.update({"model": name, "seed": str(SEED), "B": str(nb), "T": str(seq),
                 "ignore_index": str(IGNORE), "valid_targets": str(int(valid.sum())),
                 "torch": torch.__version__, "transformers": transformers.__version__})
    out = {k: v.contiguous() for k, v in out.items()}
    save_file(out, os.path.join(outdir, "ref.safetensors"), metadata=meta)
    for f in os.listdir(outdir):
        os.chmod(os.path.join(outdir, f), 0o644)
    log("  loss %.7f, valid targets %d, last loss %.7f, grad_norm[0] %.7f"
        % (losses[0], int(valid.sum()), losses[-1], norms[0]))
    return outdir


def autocast_losses(name, attn, wc=False):
    """The losses and gradient norms of generate()'s AdamW steps under bf16 autocast; wc: with the
    two differences a run on bf16 working copies keeps by design (train.residual_dtype fp32): the
    norms' weights rounded to bf16, and fp32 logits from the bf16 head weight."""
    cfg, model = build(name)
    if attn:
        model.set_attn_implementation(attn)
    if wc:
        head = model.lm_head

        def fp32_logits(x):
            with torch.autocast(device_type="cpu", enabled=False):
                return torch.nn.functional.linear(x.float(), head.weight.to(torch.bfloat16).float())
        head.forward = fp32_logits
    ids, labels, _ = make_batch(cfg, SEQ.get(name, T))
    params = [p for _, p in model.named_parameters()]
    opt = torch.optim.AdamW([{"params": [p for p in params if p.ndim >= 2],
                              "weight_decay": HP["weight_decay"]},
                             {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
                            lr=HP["lr"], betas=(HP["beta1"], HP["beta2"]), eps=HP["eps"],
                            foreach=False)
    model.train()
    losses, norms = [], []
    for _ in range(HP["steps"]):
        opt.zero_grad(set_to_none=True)
        if wc:
            with torch.no_grad():
                for p in params:
                    if p.ndim == 1:
                        p.copy_(p.to(torch.bfloat16).float())
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=labels).loss
        loss.float().backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, HP["max_grad_norm"])))
        losses.append(loss.float().item())
        opt.step()
    return losses, norms


def generate_autocast(name, outroot):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    outdir = os.path.join(outroot, name)
    main_attn = COMMON["attn_implementation"]
    peer_attn = "sdpa" if main_attn == "eager" else "eager"
    losses, norms = autocast_losses(name, None)
    peer, _ = autocast_losses(name, peer_attn)
    wc, _ = autocast_losses(name, None, wc=True)
    out = {"loss": torch.tensor([losses[0]], dtype=torch.float32),
           "losses": torch.tensor(losses, dtype=torch.float32),
           "grad_norm": torch.tensor(norms, dtype=torch.float32),
           "losses_peer": torch.tensor(peer, dtype=torch.float32),
           "losses_wc": torch.tensor(wc, dtype=torch.float32)}
    meta = {"model": name, "autocast": "bfloat16", "attn": main_attn, "peer_attn": peer_attn,
            "steps": str(HP["steps"]), "torch": torch.__version__,
            "transformers": transformers.__version__}
    path = os.path.join(outdir, "ref.autocast.safetensors")
    save_file(out, path, metadata=meta)
    os.chmod(path, 0o644)
    log("  %s autocast: loss %.7f, last %.7f; %s against %s: max |dloss| %.3g"
        % (name, losses[0], losses[-1], main_attn, peer_attn,
           max(abs(a - b) for a, b in zip(losses, peer))))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "data"),
                    help="output folder (default tests/ref/data)")
    ap.add_argument("--only", choices=sorted(MODELS), help="generate only this model")
    args = ap.parse_args()
    transformers.utils.logging.disable_progress_bar()
    log("torch %s, transformers %s" % (torch.__version__, transformers.__version__))
    for name in MODELS:
        if args.only in (None, name):
            generate(name, args.out)
            if name in AUTOCAST:
                generate_autocast(name, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
