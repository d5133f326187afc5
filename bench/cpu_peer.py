#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The CPU peer of the main job: PyTorch with transformers' Qwen3 (SDPA attention) at a recipe's
shapes, trained as `slidedp train RECIPE` trains it: fp32, batch.global / batch.micro micro-batches
of batch.micro x seq_len random token ids with gradients accumulated (loss scaled by 1 / micro-batch
count), gradient clipping at optimizer.max_grad_norm, AdamW with the recipe's lr, betas, eps and
weight decay (a constant lr: the schedule costs nothing measurable), on --threads threads
(torch.set_num_threads; the main job's CPU workers).  Prints one JSON line with the fields of
`slidedp bench` ("system", "model", "batch", "seq", "tokens_per_s", "step_s_median", "step_s", ...).

  bench/cpu_peer.py recipes/tiny-qwen3.yaml --threads 2 --steps 5

bench/cpu_compare.sh runs it beside the main job.  The recipe is read with a small parser of
"section: / key: value" lines (what recipes/ use), not a YAML library.  Exit 2 for bad arguments.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time


def read_recipe(path):
    """{section: {key: value}} from a recipe's two-level "key: value" lines; numbers as numbers."""
    out, sec = {}, None
    with open(path) as f:
        for line in f:
            text = line.split("#", 1)[0].rstrip()
            if not text.strip() or ":" not in text:
                continue
            key, _, val = text.strip().partition(":")
            val = val.strip()
            if not line.startswith((" ", "\t")):
                sec = out.setdefault(key, {})
                continue
            for conv in (int, float):
                try:
                    val = conv(val)
                    break
                except ValueError:
                    pass
            if val in ("true", "false"):
                val = val == "true"
            sec[key] = val
    return out


def qwen3_config(m):
    from transformers import Qwen3Config
    return Qwen3Config(
        vocab_size=m["vocab_size"], hidden_size=m["hidden_size"],
        intermediate_size=m["intermediate_size"], num_hidden_layers=m["num_layers"],
        num_attention_heads=m["num_heads"], num_key_value_heads=m["num_kv_heads"],
        head_dim=m["head_dim"], max_position_embeddings=m.get("max_position_embeddings", 4096),
        rope_theta=float(m.get("rope_theta", 1e6)), tie_word_embeddings=m.get("tie_word_embeddings", True),
        rms_norm_eps=float(m.get("rms_norm_eps", 1e-6)), attn_implementation="sdpa",
        torch_dtype="float32", use_cache=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recipe")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (default: all cores)")
    ap.add_argument("--steps", type=int, default=5, help="timed optimizer steps (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first (default 1)")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    if args.threads < 1 or args.steps < 1 or args.warmup < 0:
        ap.error("--threads and --steps must be at least 1, --warmup at least 0")
    r = read_recipe(args.recipe)
    m, b, opt, data = r["model"], r["batch"], r["optimizer"], r["data"]
    seq, glob, micro = data["seq_len"], b["global"], b.get("micro", b["global"])
    if glob % micro:
        ap.error("batch.global %d is not a multiple of batch.micro %d" % (glob, micro))
    nmicro = glob // micro

    import torch
    from transformers import Qwen3ForCausalLM
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = Qwen3ForCausalLM(qwen3_config(m)).float().train()
    model.config.use_cache = False
    adamw = torch.optim.AdamW(model.parameters(), lr=float(opt["lr"]),
                              betas=(float(opt["beta1"]), float(opt["beta2"])),
                              eps=float(opt["eps"]), weight_decay=float(opt["weight_decay"]))
    clip = float(opt.get("max_grad_norm", 0.0))
    gen = torch.Generator().manual_seed(args.seed)
    times, loss = [], None
    for s in range(args.warmup + args.steps):
        ids = torch.randint(0, m["vocab_size"], (nmicro, micro, seq), generator=gen)
        t0 = time.perf_counter()
        for k in range(nmicro):
            out = model(input_ids=ids[k], labels=ids[k])
            (out.loss / nmicro).backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        adamw.step()
        adamw.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        loss = out.loss.item()
        if s >= args.warmup:
            times.append(dt)
        print("[cpu_peer] step %d: %.3f s loss %.4f" % (s + 1, dt, loss), file=sys.stderr, flush=True)
    med = statistics.median(times)
    print(json.dumps({
        "system": "pytorch-cpu", "model": os.path.basename(args.recipe), "batch": glob, "seq": seq,
        "tokens_per_s": glob * seq / med, "step_s_median": med, "step_s": times, "last_loss": loss,
        "host_peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "settings": {"threads": args.threads, "micro": micro, "attention": "sdpa", "dtype": "float32",
                     "max_grad_norm": clip},
        "torch": torch.__version__,
    }), flush=True)


if __name__ == "__main__":
    main()
