#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Peer baselines on the standard workload of the benchmarks: PyTorch GPU-resident training, PyTorch
FSDP2, GPU-resident or with CPU offload (AdamW on the CPU), and PEFT LoRA on a GPU-resident bf16 base,
on a Qwen3-shaped model with random weights and random tokens.  Prints one JSON line per run with the same fields as `slidedp bench` ("system",
"model", "batch", "seq", "tokens_per_s", "model_tflops", "gpu_peak_gib", "host_peak_gib", settings).

  bench/peers.py --system pytorch-gpu --model qwen3-4b --batch 16 --seq 1024 --steps 5
  bench/peers.py --system fsdp2-offload --model qwen3-4b --batch 16 --seq 1024 --steps 5
  bench/peers.py --system fsdp2 --model qwen3-8b --batch 16 --ranks 4     # 16 sequences per GPU
  bench/peers.py --system peft-lora --model qwen3-32b --batch 16 --lora-rank 16

GPU-resident: fp32 parameters on the GPU, bf16 autocast, activation checkpointing per layer, SDPA
attention, fused AdamW on the GPU (one GPU).  FSDP2: fully_shard per decoder layer and on the whole
model with a bf16 MixedPrecisionPolicy (fp32 gradient reduction), one process per rank (--ranks R,
NCCL), each rank on `--batch` sequences of its own (weak scaling: the step is R x batch sequences);
fsdp2 keeps the shards on the GPUs with AdamW there, fsdp2-offload adds CPUOffloadPolicy (parameters
and AdamW on the CPU, PyTorch's default implementation for CPU tensors).  A step's time is the
slowest rank's.  --device cpu runs FSDP2 on CPU processes (gloo), for the tests on the `tiny`
preset.  Model FLOPs counted as in BENCH.md: 6 x matmul params + 6 x L x NH x HD x T per token,
recomputation not counted.

peft-lora: the whole model in bf16 on one GPU (frozen), PEFT LoRA adapters of rank --lora-rank
(scaling --lora-alpha / rank) on every linear of every layer (q, k, v, o, gate, up, down; of
qwen3-30b-a3b, whose layers are sparse, q, k, v and o as slidedp's LoRA on an MoE), kept in
fp32 by PEFT (autocast_adapter_dtype), bf16 autocast, gradient checkpointing per layer (with
enable_input_require_grads, as PEFT needs for a frozen base), AdamW on the adapters (fused on the
GPU); --device cpu runs it on the CPU for the tests.  Its model FLOPs are slidedp bench
--lora-rank's (docs/lora.md): 4 x matmul params + 6 x L x NH x HD x T + 6 x adapter params per
token, the frozen base's forward and backward through the activations and the adapters' forward and
backward.  Exit 77 without a CUDA device (unless --device cpu), 2 for bad
arguments.

roundpipe: RoundPipe's own code (github.com/ITcarrot/RoundPipe, LGPL, not part of this project), imported
from a checkout (--roundpipe-dir, $ROUNDPIPE_DIR, default deps/roundpipe; bench/get-roundpipe.sh
fetches it at the pinned commit with the pure-Python packages it needs), run as its
benchmark/train.py runs it: the model built on meta, materialised module by module on the GPU,
initialised (transformers' own init, the embedding tied again) and moved to the host in fp16 (its
benchmark's dtype, with fp16 accumulation; --rp-dtype bf16), SDPA attention, wrap_model_to_roundpipe
with --rp-microbatch micro-batches (default the GPUs + 1, RoundPipe's) and recompute_grain
--rp-recompute (layer), its C++ Adam on the host over optim_parameters() at lr 1e-5 (fp32 masters),
its chunked LM-head loss compiled before the first step, and its asynchronous step (weights one
update old; --rp-sync waits for each update).  It uses every visible GPU (CUDA_VISIBLE_DEVICES picks
them).  A step is the time between two steps' ends (the optimizer runs behind the next step).
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RP_COMMIT = "e813c67"
RP_GET = ("git clone https://github.com/ITcarrot/RoundPipe deps/roundpipe && "
          "git -C deps/roundpipe checkout " + RP_COMMIT + " (or bench/get-roundpipe.sh)")
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
    "tiny-moe": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                     head_dim=32, num_key_value_heads=2, tie_word_embeddings=False, num_experts=8,
                     num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True),
    # Qwen3-30B-A3B (models/moe.c): every layer sparse, 128 experts, 8 a token
    "qwen3-30b-a3b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=48, num_attention_heads=32,
                          num_key_value_heads=4, tie_word_embeddings=False, num_experts=128,
                          num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True,
                          router_aux_loss_coef=0.001),
}


def shape(model):
    return {**QWEN3, **PRESETS[model]}


def is_moe(p):
    return "num_experts" in p


def matmul_params(p):
    """Linear-layer parameters a token passes through: of a sparse layer, the router and the K
    experts it routes to (models/qwen3.c)."""
    C, I, L, NH = p["hidden_size"], p["intermediate_size"], p["num_hidden_layers"], p["num_attention_heads"]
    HD, NKV, V = p["head_dim"], p["num_key_value_heads"], p["vocab_size"]
    mlp = (p["num_experts"] * C + p["num_experts_per_tok"] * 3 * C * p["moe_intermediate_size"]
           if is_moe(p) else 3 * C * I)
    per_layer = C * (NH * HD) + 2 * C * (NKV * HD) + (NH * HD) * C + mlp
    return L * per_layer + V * C  # linear layers + LM head (embedding lookup excluded)


def attn_flops(p, seq):
    return 6 * p["num_hidden_layers"] * p["num_attention_heads"] * p["head_dim"] * seq


def flops_per_token(p, seq):
    return 6 * matmul_params(p) + attn_flops(p, seq)


LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_targets(p):
    """Every linear of a layer; of a Qwen3-MoE's sparse layers the attention's (slidedp refuses the
    MLP's there, whose stacked experts PEFT would adapt as target_parameters)."""
    return LORA_TARGETS[:4] if is_moe(p) else LORA_TARGETS


def adapter_params(p, rank):
    """Parameters of rank-`rank` adapters on lora_targets(p) of every layer: r x (in + out) each."""
    C, I, L, NH = p["hidden_size"], p["intermediate_size"], p["num_hidden_layers"], p["num_attention_heads"]
    Q, KV = NH * p["head_dim"], p["num_key_value_heads"] * p["head_dim"]
    attn = (C + Q) + 2 * (C + KV) + (Q + C)
    return L * rank * (attn if is_moe(p) else attn + 2 * (C + I) + (I + C))


def lora_flops_per_token(p, seq, rank):
    return 4 * matmul_params(p) + attn_flops(p, seq) + 6 * adapter_params(p, rank)


def qwen3_config(p):
    from transformers import Qwen3Config, Qwen3MoeConfig
    return (Qwen3MoeConfig if is_moe(p) else Qwen3Config)(
        rope_theta=1e6, rms_norm_eps=1e-6, max_position_embeddings=40960, attn_implementation="sdpa", **p)


def model_class(p):
    from transformers import Qwen3ForCausalLM, Qwen3MoeForCausalLM
    return Qwen3MoeForCausalLM if is_moe(p) else Qwen3ForCausalLM


def result(args, R, fpt, times, loss, gpu_peak, host, settings):
    """The JSON object of a run: R ranks of args.batch sequences, fpt model FLOPs a token, the
    timed steps' seconds, the last loss, the GPU and host peaks in GiB."""
    import torch
    med = statistics.median(times)
    tps = R * args.batch * args.seq / med
    return {
        "system": args.system, "model": args.model, "batch": args.batch * R, "seq": args.seq,
        "tokens_per_s": tps, "model_tflops": tps * fpt / 1e12, "loss": loss,
        "lora_rank": args.lora_rank if args.system == "peft-lora" else 0, "step_s_median": med,
        "step_s": times, "gpu_peak_gib": gpu_peak, "host_peak_gib": host,
        "settings": settings, "torch": torch.__version__,
    }


def peft_lora(cfg, dev, args, settings):
    """The frozen bf16 base on dev with PEFT's adapters: (model, optimizer)."""
    import torch
    from peft import LoraConfig, get_peft_model
    p = shape(args.model)
    torch.set_default_dtype(torch.bfloat16)  # the base's weights drawn in bf16 where they live
    try:
        with torch.device(dev):
            model = model_class(p)(cfg)
    finally:
        torch.set_default_dtype(torch.float32)
    model.config.use_cache = False
    model.gradient_checkpointing_enable()
    model.enable_input_require_grads()
    lcfg = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=0.0,
                      target_modules=lora_targets(p), bias="none", task_type="CAUSAL_LM")
    model = get_peft_model(model, lcfg)  # the adapters in fp32 (autocast_adapter_dtype)
    model.train()
    trainable = [q for q in model.parameters() if q.requires_grad]
    n = sum(q.numel() for q in trainable)
    if n != adapter_params(shape(args.model), args.lora_rank):
        raise SystemExit("peers.py: PEFT made %d adapter parameters, %d expected" % (
            n, adapter_params(shape(args.model), args.lora_rank)))
    opt = torch.optim.AdamW(trainable, lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=dev.type == "cuda")
    settings.update({"params": "bf16 base on the %s, frozen" % ("CPU" if dev.type == "cpu" else "GPU"),
                     "adapters": "fp32", "autocast": "bf16", "checkpointing": True,
                     "optimizer": "AdamW on the adapters" + (" (fused)" if dev.type == "cuda" else ""),
                     "lora": {"rank": args.lora_rank, "alpha": args.lora_alpha, "targets": lora_targets(p)},
                     "adapter_params": n})
    return model, opt


def run(rank, args, out_q):
    """One process: the whole run with one rank (pytorch-gpu, or FSDP2 with --ranks 1), or rank
    `rank` of an FSDP2 run.  Rank 0 puts the JSON object on out_q (or prints it)."""
    import torch

    R, cpu = args.ranks, args.device == "cpu"
    p = shape(args.model)
    cls = model_class(p)
    cfg = qwen3_config(p)
    torch.manual_seed(0)
    dev = torch.device("cpu") if cpu else torch.device("cuda", rank)
    if not cpu:
        torch.cuda.set_device(dev)
    settings = {"ranks": R, "device": args.device}
    fsdp = args.system not in ("pytorch-gpu", "peft-lora")
    lora = args.system == "peft-lora"
    if lora:
        model, opt = peft_lora(cfg, dev, args, settings)
    elif not fsdp:
        with torch.device(dev):
            model = cls(cfg)
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
            model = cls(cfg)  # on the CPU: FSDP2 offload keeps parameters there
        else:
            with torch.device(dev):
                model = cls(cfg)
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
            with torch.autocast(dev.type, dtype=torch.bfloat16):
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
    fpt = lora_flops_per_token(p, args.seq, args.lora_rank) if lora else flops_per_token(p, args.seq)
    out = result(args, R, fpt, times, loss.item(), gpu_peak.item(), host.item(), settings)
    out_q.put(out) if out_q is not None else print(json.dumps(out), flush=True)


def roundpipe_env(args):
    """Puts RoundPipe's checkout on sys.path, with the packages beside it (DIR/pydeps, as
    bench/get-roundpipe.sh installs them; pydeps/bin, ninja, on PATH); returns what is missing or
    None.  Nothing of RoundPipe is imported here: its import starts a thread per GPU."""
    import importlib.util
    import shutil
    import sysconfig
    d = os.path.abspath(args.roundpipe_dir)
    if not os.path.isfile(os.path.join(d, "roundpipe", "__init__.py")):
        return ("no RoundPipe checkout at %s (--roundpipe-dir DIR or $ROUNDPIPE_DIR); get it with: %s"
                % (d, RP_GET))
    sys.path.insert(0, d)
    pydeps = os.path.join(d, "pydeps")
    if os.path.isdir(pydeps):  # after the host's own packages: those win
        sys.path.append(pydeps)
        os.environ["PATH"] = os.path.join(pydeps, "bin") + os.pathsep + os.environ.get("PATH", "")
    missing = [m for m in ("beartype", "cpuinfo", "tqdm", "typing_extensions")
               if importlib.util.find_spec(m) is None]
    missing += [t for t in ("ninja", os.environ.get("CXX", "c++")) if shutil.which(t) is None]
    if not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        missing.append("Python.h (the Python headers)")
    if missing:
        return ("RoundPipe at %s needs %s: `pip install --target %s beartype py-cpuinfo ninja tqdm "
                "typing-extensions` where a package index is reachable (bench/get-roundpipe.sh does), a "
                "C++ compiler and the Python headers (its Adam is built at import)"
                % (d, ", ".join(missing), pydeps))
    return None


def rp_model(p, dtype):
    """The preset's model as RoundPipe's benchmark builds it: on meta, then module by module on the
    GPU, initialised there (transformers' init, as the other systems get it) and moved to pinned host
    memory; the embedding tied again (materialising module by module unties it)."""
    import torch
    from transformers import Qwen3ForCausalLM
    cfg = qwen3_config(p)
    cfg.use_cache = False
    torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            model = Qwen3ForCausalLM(cfg)
    finally:
        torch.set_default_dtype(torch.float32)
    for m in model.modules():
        m.to_empty(device="cuda", recurse=False)
        model._init_weights(m)
        m._apply(lambda t: t.to(device="cpu", non_blocking=True), recurse=False)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    fresh = type(model.model.rotary_emb)(config=cfg)  # its buffers as built, whatever the init covers
    for name, buf in fresh.named_buffers():
        model.model.rotary_emb.get_buffer(name).copy_(buf)
    if p["tie_word_embeddings"]:
        model.tie_weights()
    return model


def rp_warm_loss(p, args, nmb, dtype):
    """RoundPipe's benchmark's warm-up of its compiled chunked LM-head loss, on every GPU, for the
    micro-batch sizes a step of args.batch sequences in nmb micro-batches has."""
    import torch
    from roundpipe.device import device_list
    from roundpipe.models.function import ChunkedCompileLinearForCausalLMLoss
    for dev in device_list:
        head = torch.nn.Linear(p["hidden_size"], p["vocab_size"], bias=False, device=dev.device, dtype=dtype)
        for mb in sorted({args.batch // nmb, -(-args.batch // nmb)}):
            h = torch.rand((mb, args.seq, p["hidden_size"]), dtype=dtype, device=dev.device,
                           requires_grad=True)
            labels = torch.randint(0, p["vocab_size"], (mb, args.seq), device=dev.device)
            with torch.autocast("cpu", enabled=False), torch.autocast("cuda", enabled=False):
                ChunkedCompileLinearForCausalLMLoss(h, head, labels)
        del head


def fit_mask_call(fn):
    """transformers' mask builder fn, taking the keywords RoundPipe's models pass (written for
    another transformers: input_embeds, past_key_values, cache_position) under the names the
    installed one has (5.17: inputs_embeds, past_key_values; later: cache), and dropping those it
    lacks."""
    import functools
    import inspect
    names = set(inspect.signature(fn).parameters)
    alias = {"input_embeds": "inputs_embeds", "inputs_embeds": "input_embeds",
             "past_key_values": "cache", "cache": "past_key_values"}

    @functools.wraps(fn)
    def call(*a, **kw):
        out = {}
        for k, v in kw.items():
            if k not in names and alias.get(k) in names:
                k = alias[k]
            if k in names:
                out[k] = v
        return fn(*a, **out)
    return call


def rp_fit_masks():
    """Every RoundPipe model module's mask builders made to fit the installed transformers."""
    import importlib
    import pkgutil
    import roundpipe.models as rm
    for info in pkgutil.iter_modules(rm.__path__):
        mod = importlib.import_module("roundpipe.models." + info.name)
        for name in ("create_causal_mask", "create_sliding_window_causal_mask"):
            if callable(getattr(mod, name, None)):
                setattr(mod, name, fit_mask_call(getattr(mod, name)))


def roundpipe(args):
    """RoundPipe's own code on the visible GPUs (module docstring); prints the JSON line."""
    import subprocess
    import torch
    from roundpipe import RoundPipeRunConfig, wrap_model_to_roundpipe
    from roundpipe.device import device_list
    from roundpipe.optim import Adam
    rp_fit_masks()
    p = shape(args.model)
    dtype = torch.float16 if args.rp_dtype == "fp16" else torch.bfloat16
    if dtype is torch.float16:
        torch.backends.cuda.matmul.allow_fp16_accumulation = True  # as its benchmark
    nmb = args.rp_microbatch or len(device_list) + 1
    torch.manual_seed(0)
    model = rp_model(p, dtype)
    tied = p["tie_word_embeddings"] and model.lm_head.weight is model.model.embed_tokens.weight
    model = wrap_model_to_roundpipe(model, optim_dtype=torch.float32, use_sequential_preset=True,
                                    model_run_config=RoundPipeRunConfig(num_microbatch=nmb,
                                                                        recompute_grain=args.rp_recompute))
    opt = Adam(model.optim_parameters(), lr=1e-5)
    rp_warm_loss(p, args, nmb, dtype)
    gen = torch.Generator(device="cpu").manual_seed(1234)
    batches = [torch.randint(0, p["vocab_size"], (args.batch, args.seq), generator=gen)
               for _ in range(args.warmup + args.steps)]
    mask = torch.ones_like(batches[0])
    times, t_prev = [], time.perf_counter()
    for s, ids in enumerate(batches):
        loss = model.forward_backward(
            input_kwargs={"input_ids": ids, "attention_mask": mask, "labels": ids, "return_logits": False},
            loss_fn=lambda out, _: out.loss / nmb)
        model.step(lambda: (opt.step(), opt.zero_grad(), None)[-1], is_async=not args.rp_sync)
        t = time.perf_counter()
        print(f"[peers] roundpipe step {s + 1}: {t - t_prev:.3f} s loss {loss.item():.4f}", file=sys.stderr)
        if s >= args.warmup:
            times.append(t - t_prev)
        t_prev = t
    model.synchronize()  # the last update, untimed
    gpu_peak = max(torch.cuda.max_memory_reserved(d.device) for d in device_list) / 2**30
    host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    try:
        rev = subprocess.run(["git", "-C", args.roundpipe_dir, "rev-parse", "--short=7", "HEAD"],
                             capture_output=True, text=True).stdout.strip() or "unknown"
    except OSError:  # no git on the host
        rev = "unknown"
    settings = {"ranks": 1, "device": "cuda", "gpus": len(device_list), "roundpipe_commit": rev,
                "params": "%s on the host (RoundPipe), fp32 masters" % args.rp_dtype,
                "dtype": args.rp_dtype, "fp16_accumulation": dtype is torch.float16, "attention": "sdpa",
                "num_microbatch": nmb, "recompute_grain": args.rp_recompute, "tied_embeddings": tied,
                "optimizer": "RoundPipe Adam on the host (C++), lr 1e-5, %s step" % (
                    "synchronous" if args.rp_sync else "asynchronous"),
                "loss": "RoundPipe's chunked compiled LM-head loss"}
    out = result(args, 1, flops_per_token(p, args.seq), times, loss.item(), gpu_peak, host, settings)
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", choices=["pytorch-gpu", "fsdp2", "fsdp2-offload", "peft-lora", "roundpipe"],
                    required=True)
    ap.add_argument("--model", choices=sorted(PRESETS), required=True)
    ap.add_argument("--batch", type=int, default=16, help="sequences per step and rank (16)")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=1, help="FSDP2 processes, one per GPU (1)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: FSDP2 on CPU processes (gloo), for tests")
    ap.add_argument("--port", type=int, default=29512, help="the rendezvous port of FSDP2's processes")
    ap.add_argument("--lora-rank", type=int, help="peft-lora: the adapters' rank (16)")
    ap.add_argument("--lora-alpha", type=float,
                    help="peft-lora: the scaling is alpha / rank (8, PEFT's default as slidedp bench's)")
    ap.add_argument("--roundpipe-dir",
                    default=os.environ.get("ROUNDPIPE_DIR", os.path.join(TOP, "deps", "roundpipe")),
                    help="roundpipe: RoundPipe's checkout ($ROUNDPIPE_DIR, default deps/roundpipe)")
    ap.add_argument("--rp-microbatch", type=int,
                    help="roundpipe: micro-batches a step (default the GPUs + 1, RoundPipe's default)")
    ap.add_argument("--rp-recompute", choices=["layer", "stage"], help="roundpipe: recompute_grain (layer)")
    ap.add_argument("--rp-dtype", choices=["fp16", "bf16"],
                    help="roundpipe: the model's dtype (fp16, its benchmark's)")
    ap.add_argument("--rp-sync", action="store_true", help="roundpipe: wait for each update (is_async=False)")
    args = ap.parse_args()
    if min(args.ranks, args.batch, args.seq, args.steps) < 1 or args.warmup < 0:
        ap.error("--ranks, --batch, --seq and --steps must be positive, --warmup not negative")
    if args.system == "pytorch-gpu" and (args.ranks > 1 or args.device == "cpu"):
        ap.error("pytorch-gpu is one GPU; use --system fsdp2 for several GPUs or the CPU")
    if args.system != "peft-lora" and (args.lora_rank is not None or args.lora_alpha is not None):
        ap.error("--lora-rank and --lora-alpha are for --system peft-lora")
    if args.system == "peft-lora" and args.ranks > 1:
        ap.error("peft-lora is one GPU (or the CPU with --device cpu): --ranks 1")
    rp_opts = (args.rp_microbatch, args.rp_recompute, args.rp_dtype, args.rp_sync or None)
    if args.system != "roundpipe" and any(o is not None for o in rp_opts):
        ap.error("--rp-microbatch, --rp-recompute, --rp-dtype and --rp-sync are for --system roundpipe")
    if args.system == "roundpipe" and (args.ranks > 1 or args.device == "cpu"):
        ap.error("roundpipe runs on the visible GPUs (CUDA_VISIBLE_DEVICES picks them): "
                 "--ranks 1, --device cuda")
    if args.rp_microbatch is not None and not 1 <= args.rp_microbatch <= args.batch:
        ap.error("--rp-microbatch must be in 1..--batch (%d)" % args.batch)
    args.rp_recompute = args.rp_recompute or "layer"
    args.rp_dtype = args.rp_dtype or "fp16"
    args.lora_rank = 16 if args.lora_rank is None else args.lora_rank
    args.lora_alpha = 8.0 if args.lora_alpha is None else args.lora_alpha
    p = shape(args.model)
    widths = [p["hidden_size"], p["num_key_value_heads"] * p["head_dim"]]
    if not 1 <= args.lora_rank <= min(widths) or not args.lora_alpha > 0:
        ap.error("--lora-rank must be in 1..%d (the narrowest linear's width) and --lora-alpha above 0"
                 % min(widths))

    if args.system == "roundpipe":
        err = roundpipe_env(args)
        if err:
            print("peers.py: " + err, file=sys.stderr)
            return 2
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("peers.py: no CUDA device", file=sys.stderr)
        return 77
    if args.device == "cuda" and torch.cuda.device_count() < args.ranks:
        print("peers.py: --ranks %d needs %d GPUs, %d found" % (args.ranks, args.ranks,
                                                                torch.cuda.device_count()), file=sys.stderr)
        return 2
    if args.system == "roundpipe":
        roundpipe(args)
        return 0
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
