#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Peer of bench/host_adamw: PyTorch's CPU torch.optim.AdamW (fused=True and foreach=True) on the
same number of fp32 parameters, with fp32 gradients (PyTorch keeps gradients in the parameters'
dtype) and no working copy, over --threads intra-op threads (torch.set_num_threads).  Non-zero random
data.  One JSON line per implementation with the fields of bench/host_adamw: the median of --iters
timed optimizer steps after --warmup steps; GB/s at the bytes a step must move (read p, m, v, g;
write p, m, v: 28 B/param), whatever extra passes the implementation makes.

  bench/host_adamw_peer.py --params 268435456 --threads 16 [--impl fused|foreach|both]
                           [--tensors K] [--iters 5] [--warmup 1]
"""
import argparse
import json
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=int, default=268435456)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--impl", choices=["fused", "foreach", "both"], default="both")
    ap.add_argument("--tensors", type=int, default=1,
                    help="split the parameters into this many tensors (a model's parameter list)")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()
    if a.params < 1 or a.threads < 1 or a.iters < 1 or a.warmup < 0 or not 1 <= a.tensors <= a.params:
        ap.error("--params, --threads, --iters, --tensors must be >= 1 (tensors <= params), --warmup >= 0")

    import torch

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    sizes = [a.params // a.tensors + (1 if i < a.params % a.tensors else 0) for i in range(a.tensors)]
    impls = ["fused", "foreach"] if a.impl == "both" else [a.impl]
    for impl in impls:
        params = []
        for n in sizes:
            p = torch.nn.Parameter(torch.empty(n, dtype=torch.float32).uniform_(-1.0, 1.0))
            p.grad = torch.empty(n, dtype=torch.float32).uniform_(-1e-2, 1e-2)
            params.append(p)
        opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1,
                                **{impl: True})
        times = []
        with torch.no_grad():
            for it in range(a.warmup + a.iters):
                t0 = time.perf_counter()
                opt.step()
                dt = time.perf_counter() - t0
                if it >= a.warmup:
                    times.append(dt)
        med = statistics.median(times)
        bpp = 28
        print(json.dumps({
            "system": "pytorch-" + impl, "kernel": "torch-" + torch.__version__, "params": a.params,
            "threads": a.threads, "tensors": a.tensors, "grad": "f32", "copy": "none",
            "bytes_per_param": bpp, "iters": a.iters, "median_s": round(med, 6), "min_s": round(min(times), 6),
            "params_per_s": float("%.4g" % (a.params / med)), "gb_per_s": round(a.params * bpp / med / 1e9, 2),
        }), flush=True)
        del opt, params
    return 0


if __name__ == "__main__":
    sys.exit(main())
