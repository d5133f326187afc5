#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Peer baselines on the standard workload of the benchmarks: PyTorch GPU-resident training and PyTorch
FSDP2 with CPU offload (AdamW on the CPU), on a Qwen3-shaped model with random weights and random tokens.
Prints one JSON line per run with the same fields as `slidedp bench` ("system", "model", "batch", "seq",
"tokens_per_s", "model_tflops", "gpu_peak_gib", "host_peak_gib", settings).

  bench/peers.py --system pytorch-gpu --model qwen3-4b --batch 16 --seq 1024 --steps 5
  bench/peers.py --system fsdp2-offload --model qwen3-4b --batch 16 --seq 1024 --steps 5

GPU-resident: fp32 parameters on the GPU, bf16 autocast, activation checkpointing per layer, SDPA
attention, fused AdamW on the GPU.  FSDP2 offload: fully_shard with CPUOffloadPolicy and a bf16
MixedPrecisionPolicy (fp32 gradient reduction), one process, AdamW on the CPU (PyTorch's default
implementation for CPU tensors).  Model FLOPs counted as in BENCH.md: 6 x matmul params + 6 x L x NH x HD x T
per token, recomputation not counted.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

PRESETS = {
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       tie_word_embeddings=True),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                       tie_word_embeddings=True),
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     tie_word_embeddings=True),
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     tie_word_embeddings=False),
    "qwen3-14b": dict(hidden_size=5120, intermediate_size=17408, num_hidden_layers=40, num_attention_heads=40,
                      tie_word_embeddings=False),
}


def flops_per_token(p, seq):
    C, I, L, NH = p["hidden_size"], p["intermediate_size"], p["num_hidden_layers"], p["num_attention_heads"]
    HD, NKV, V = 128, 8, 151936
    per_layer = C * (NH * HD) + 2 * C * (NKV * HD) + (NH * HD) * C + 3 * C * I
    matmul = L * per_layer + V * C  # linear layers + LM head (embedding lookup excluded)
    return 6 * matmul + 6 * L * NH * HD * seq


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", choices=["pytorch-gpu", "fsdp2-offload"], required=True)
    ap.add_argument("--model", choices=sorted(PRESETS), required=True)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()

    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if not torch.cuda.is_available():
        print("peers.py: no CUDA device", file=sys.stderr)
        return 77
    p = PRESETS[args.model]
    cfg = Qwen3Config(vocab_size=151936, head_dim=128, num_key_value_heads=8, rope_theta=1e6,
                      rms_norm_eps=1e-6, max_position_embeddings=40960, attn_implementation="sdpa", **p)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    settings = {}
    if args.system == "pytorch-gpu":
        with torch.device(dev):
            model = Qwen3ForCausalLM(cfg)
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
        settings = {"params": "fp32 on GPU", "autocast": "bf16", "checkpointing": True, "optimizer": "fused AdamW GPU"}
    else:
        import torch.distributed as dist
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29512")
        dist.init_process_group("nccl", rank=0, world_size=1)
        torch.cuda.set_device(0)
        model = Qwen3ForCausalLM(cfg)  # on the CPU: FSDP2 offload keeps parameters there
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, mp_policy=mp, offload_policy=CPUOffloadPolicy())
        fully_shard(model, mp_policy=mp, offload_policy=CPUOffloadPolicy())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1)
        settings = {"params": "fp32 on CPU (FSDP2 CPUOffloadPolicy)", "mixed_precision": "bf16 params, fp32 reduce",
                    "checkpointing": True, "optimizer": "AdamW CPU"}

    gen = torch.Generator(device="cpu").manual_seed(1234)
    times = []
    for s in range(args.warmup + args.steps):
        ids = torch.randint(0, 151936, (args.batch, args.seq), generator=gen).to(dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if args.system == "pytorch-gpu":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
        else:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        print(f"[peers] {args.system} step {s + 1}: {dt:.3f} s loss {loss.item():.4f}", file=sys.stderr)
        if s >= args.warmup:
            times.append(dt)
    med = statistics.median(times)
    tps = args.batch * args.seq / med
    out = {
        "system": args.system, "model": args.model, "batch": args.batch, "seq": args.seq,
        "tokens_per_s": tps, "model_tflops": tps * flops_per_token(p, args.seq) / 1e12,
        "step_s_median": med, "step_s": times,
        "gpu_peak_gib": torch.cuda.max_memory_reserved() / 2**30,
        "host_peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "settings": settings, "torch": torch.__version__,
    }
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
