#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Peer baselines on the standard workload of the benchmarks: PyTorch GPU-resident training and PyTorch
FSDP2, GPU-resident or with CPU offload (AdamW on the CPU), on a Qwen3-shaped model with random weights
and random tokens.  Prints one JSON line per run with the same fields as `slidedp bench` ("system",
"model", "batch", "seq", "tokens_per_s", "model_tflops", "gpu_peak_gib", "host_peak_gib", settings).

  bench/peers.py --system pytorch-gpu --model qwen3-4b --batch 16 --seq 1024 --steps 5
  bench/peers.py --system fsdp2-offload --model qwen3-4b --batch 16 --seq 1024 --steps 5
  bench/peers.py --system fsdp2 --model qwen3-8b --batch 16 --ranks 4     # 16 sequences per GPU

GPU-resident: fp32 parameters on the GPU, bf16 autocast, activation checkpointing per layer, SDPA
attention, fused AdamW on the GPU (one GPU).  FSDP2: fully_shard per decoder layer and on the whole
model with a bf16 MixedPrecisionPolicy (fp32 gradient reduction), one process per rank (--ranks R,
NCCL), each rank on `--batch` sequences of its own (weak scaling: the step is R x batch sequences);
fsdp2 keeps the shards on the GPUs with AdamW there, fsdp2-offload adds CPUOffloadPolicy (parameters
and AdamW on the CPU, PyTorch's default implementation for CPU tensors).  A step's time is the
slowest rank's.  --device cpu runs FSDP2 on CPU processes (gloo), for the tests on the `tiny`
preset.  Model FLOPs counted as in BENCH.md: 6 x matmul params + 6 x L x NH x HD x T per token,
recomputation not counted.  Exit 77 without a CUDA device (unless --device cpu), 2 for bad
arguments.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

QWEN3 = dict(vocab_size=151936, head_dim=128, num_key_value_heads=8)
PRESETS = {
    "tiny": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                 head_dim=32, num_key_value_heads=2, tie_word_embeddings=True),
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
    "qwen3-32b": dict(hidden_size=5120, intermediate_size=25600, num_hidden_layers=64, num_attention_heads=64,
                      tie_word_embeddings=False),
}


def shape(model):
    return {**QWEN3, **PRESETS[model]}


def flops_per_token(p, seq):
    C, I, L, NH = p["hidden_size"], p["intermediate_size"], p["num_hidden_layers"], p["num_attention_heads"]
    HD, NKV, V = p["head_dim"], p["num_key_value_heads"], p["vocab_size"]
    per_layer = C * (NH * HD) + 2 * C * (NKV * HD) + (NH * HD) * C + 3 * C * I
    matmul = L * per_layer + V * C  # linear layers + LM head (embedding lookup excluded)
    return 6 * matmul + 6 * L * NH * HD * seq


def run(rank, args, out_q):
    """One process: the whole run with one rank (pytorch-gpu, or FSDP2 with --ranks 1), or rank
    `rank` of an FSDP2 run.  Rank 0 puts the JSON object on out_q (or prints it)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    R, cpu = args.ranks, args.device == "cpu"
    p = shape(args.model)
    cfg = Qwen3Config(rope_theta=1e6, rms_norm_eps=1e-6, max_position_embeddings=40960,
                      attn_implementation="sdpa", **p)
    torch.manual_seed(0)
    dev = torch.device("cpu") if cpu else torch.device("cuda", rank)
    if not cpu:
        torch.cuda.set_device(dev)
    settings = {"ranks": R, "device": args.device}
    fsdp = args.system != "pytorch-gpu"
    if not fsdp:
        with torch.device(dev):
            model = Qwen3ForCausalLM(cfg)
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
        settings.update({"params": "fp32 on GPU", "autocast": "bf16", "checkpointing": True,
                         "optimizer": "fused AdamW GPU"})
    else:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(args.port))
        dist.init_process_group("gloo" if cpu else "nccl", rank=rank, world_size=R)
        mesh = init_device_mesh(args.device, (R,))
        offload = args.system == "fsdp2-offload"
        if offload or cpu:
            model = Qwen3ForCausalLM(cfg)  # on the CPU: FSDP2 offload keeps parameters there
        else:
            with torch.device(dev):
                model = Qwen3ForCausalLM(cfg)
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        kw = {"mesh": mesh, "mp_policy": mp}
        if offload:
            kw["offload_policy"] = CPUOffloadPolicy()
        for layer in model.model.layers:
            fully_shard(layer, **kw)
        fully_shard(model, **kw)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1)
        settings.update({"params": "fp32 on CPU (FSDP2 CPUOffloadPolicy)" if offload else
                         "fp32 shards on the %s" % ("CPUs" if cpu else "GPUs"),
                         "mixed_precision": "bf16 params, fp32 reduce", "checkpointing": True,
                         "optimizer": "AdamW CPU" if offload else "AdamW on the shards"})

    def sync():
        if not cpu:
            torch.cuda.synchronize()

    gen = torch.Generator(device="cpu").manual_seed(1234 + rank)
    times = []
    for s in range(args.warmup + args.steps):
        ids = torch.randint(0, p["vocab_size"], (args.batch, args.seq), generator=gen).to(dev)
        sync()
        t0 = time.perf_counter()
        if not fsdp:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
        else:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        if fsdp and R > 1:  # the step ends when the slowest rank's does
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(f"[peers] {args.system} step {s + 1}: {dt.item():.3f} s loss {loss.item():.4f}",
                  file=sys.stderr)
        if s >= args.warmup:
            times.append(dt.item())
    gpu_peak = torch.tensor([0.0 if cpu else torch.cuda.max_memory_reserved() / 2**30], dtype=torch.float64)
    host = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20], dtype=torch.float64)
    if fsdp and R > 1:
        dist.all_reduce(gpu_peak, op=dist.ReduceOp.MAX)  # per GPU
        dist.all_reduce(host, op=dist.ReduceOp.SUM)  # the host's, over every process
    if fsdp:
        dist.destroy_process_group()
    if rank != 0:
        return
    med = statistics.median(times)
    tps = R * args.batch * args.seq / med
    out = {
        "system": args.system, "model": args.model, "batch": args.batch * R, "seq": args.seq,
        "tokens_per_s": tps, "model_tflops": tps * flops_per_token(p, args.seq) / 1e12,
        "step_s_median": med, "step_s": times,
        "gpu_peak_gib": gpu_peak.item(), "host_peak_gib": host.item(),
        "settings": settings, "torch": torch.__version__,
    }
    out_q.put(out) if out_q is not None else print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", choices=["pytorch-gpu", "fsdp2", "fsdp2-offload"], required=True)
    ap.add_argument("--model", choices=sorted(PRESETS), required=True)
    ap.add_argument("--batch", type=int, default=16, help="sequences per step and rank (16)")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=1, help="FSDP2 processes, one per GPU (1)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: FSDP2 on CPU processes (gloo), for tests")
    ap.add_argument("--port", type=int, default=29512, help="the rendezvous port of FSDP2's processes")
    args = ap.parse_args()
    if min(args.ranks, args.batch, args.seq, args.steps) < 1 or args.warmup < 0:
        ap.error("--ranks, --batch, --seq and --steps must be positive, --warmup not negative")
    if args.system == "pytorch-gpu" and (args.ranks > 1 or args.device == "cpu"):
        ap.error("pytorch-gpu is one GPU; use --system fsdp2 for several GPUs or the CPU")

    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("peers.py: no CUDA device", file=sys.stderr)
        return 77
    if args.device == "cuda" and torch.cuda.device_count() < args.ranks:
        print("peers.py: --ranks %d needs %d GPUs, %d found" % (args.ranks, args.ranks,
                                                                torch.cuda.device_count()), file=sys.stderr)
        return 2
    if args.ranks == 1:
        run(0, args, None)
        return 0
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    out_q = ctx.SimpleQueue()
    mp.spawn(run, args=(args, out_q), nprocs=args.ranks, join=True)
    print(json.dumps(out_q.get()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
