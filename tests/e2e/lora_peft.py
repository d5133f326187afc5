#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""LoRA adapters between slidedp and PEFT (run by test_e2e_lora_peft.sh).

  lora_peft.py make OUT ARCH  ARCH qwen3: a tiny Qwen3 (the tiny recipe's shapes, tied), llama:
                             a tiny Llama (untied, llama3 RoPE scaling, 3 layers), or qwen3_moe:
                             a tiny Qwen3-MoE (the Qwen3's shapes, layer 1 of 0-3 dense by
                             mlp_only_layers, 8 experts of 32, top-2, the load-balancing loss on,
                             adapters on q, k, v and o: PEFT would adapt a sparse layer's stacked
                             experts for the MLP's targets, which we refuse), fp32, seed 0,
                             in OUT/base, and a PEFT LoRA adapter of it in OUT/adapter: r 4,
                             alpha 8, the seven projections of the layers after the first, B drawn
                             non-zero so that the adapter changes the model; OUT/layers holds
                             their range in the recipe's numbering (2-4, 2-3), OUT/targets the
                             recipe's lora.targets
  lora_peft.py check OUT     after `slidedp export` wrote OUT/rewritten (the adapter read and
                             written again) and OUT/merged (--merge):
    1. OUT/rewritten holds PEFT's tensors bit for bit, and PeftModel.from_pretrained loads it;
    2. every merged weight against PEFT's merge_and_unload(), within the rounding bound below;
    3. transformers' logits of the merged model against PEFT's LoRA forward (unmerged) of the
       adapter, our own logits of the merged model (dump_logits), and our LoRA forward of the
       base and the adapter (dump_logits with the adapter: the lora_fwd tasks beside the frozen
       base), within LOGIT_RTOL.
  lora_peft.py train OUT DATA RUN METRICS STEPS [DROPOUT SEED]
                             PEFT trains OUT/adapter on OUT/base for STEPS AdamW steps on the
                             batches `slidedp train` took from DATA (the recipe of
                             test_e2e_lora_peft.sh: T 32, 4 sequences a step in 2 micro-batches, in
                             order, lr 1e-3 constant, betas 0.9 0.95, eps 1e-8, weight decay 0.1,
                             clipping at 1 as ours); its losses and gradient norms must match
                             METRICS and its final adapter RUN/final, within the bounds below.
                             With DROPOUT, PEFT's lora_dropout modules draw slidedp's masks
                             (MaskDropout: the mask is a definition, the adapters' math PEFT's).
Exit 0 pass, 1 fail, 77 skip (torch, transformers, peft or safetensors missing).
"""

import os
import subprocess
import sys

try:
    import numpy as np
    import torch
    import transformers
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors.torch import load_file
except ImportError as e:
    print("SKIP: %s" % e)
    sys.exit(77)

R, ALPHA = 4, 8
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
NSEQ, T = 2, 32
U32 = 2.0 ** -24

# Logits: both sides compute an fp32 forward of weights that agree to a few roundings (part 2), so
# the differences are the rounding errors of different summation orders.  The argument of
# tests/e2e/export_hf.py (chains of ~20 fp32 operations, reductions of k terms, a typical relative
# error sqrt(k) u per reduction) gives ~3e-6 for these models' longest reductions (k <= 384): the
# threshold 1e-5 is ~3x that; a wrong scale, a transposed A or B or a missed target moves the
# logits by more than 1e-3 relative here (B ~ 0.05).
LOGIT_RTOL = 1e-5


def tiny_model(arch):
    if arch == "qwen3_moe":
        m = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
            vocab_size=151936, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            max_position_embeddings=1024, rope_theta=1000000.0, tie_word_embeddings=False,
            rms_norm_eps=1e-6, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            mlp_only_layers=[1], norm_topk_prob=True, output_router_logits=True,
            router_aux_loss_coef=0.02))
        with torch.no_grad():  # decisive routing (moe_train.py's ROUTER_STD): no near-tie to flip
            for layer in m.model.layers:
                if hasattr(layer.mlp, "gate"):
                    layer.mlp.gate.weight.normal_(0.0, 0.3)
        return m
    if arch == "qwen3":
        return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(
            vocab_size=151936, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            max_position_embeddings=1024, rope_theta=1000000.0, tie_word_embeddings=True,
            rms_norm_eps=1e-6))
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=151936, hidden_size=64, intermediate_size=176, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        rope_theta=500000.0, tie_word_embeddings=False, rms_norm_eps=1e-5,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32}))


def make(out, arch):
    torch.manual_seed(0)
    model = tiny_model(arch).float()
    model.save_pretrained(os.path.join(out, "base"))
    layers = list(range(1, model.config.num_hidden_layers))
    targets = TARGETS[:4] if arch == "qwen3_moe" else TARGETS
    with open(os.path.join(out, "layers"), "w") as f:
        f.write("%d-%d\n" % (layers[0] + 1, layers[-1] + 1))
    with open(os.path.join(out, "targets"), "w") as f:
        f.write("[%s]\n" % ", ".join(targets) if arch == "qwen3_moe" else "all-linear\n")
    cfg = LoraConfig(r=R, lora_alpha=ALPHA, target_modules=targets, layers_to_transform=layers,
                     lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, cfg)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.05)
    peft_model.save_pretrained(os.path.join(out, "adapter"))
    print("made %s/base and %s/adapter" % (out, out))


def base_model(out):
    return transformers.AutoModelForCausalLM.from_pretrained(
        os.path.join(out, "base"), dtype=torch.float32, attn_implementation="eager").eval()


def ids():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 151669, (NSEQ, T), generator=g)


def rel(a, b):
    return float(torch.linalg.vector_norm((a - b).double()) / torch.linalg.vector_norm(b.double()))


def check_rewritten(out):
    ok = True
    a = load_file(os.path.join(out, "adapter", "adapter_model.safetensors"))
    b = load_file(os.path.join(out, "rewritten", "adapter_model.safetensors"))
    if sorted(a) != sorted(b):
        print("rewritten adapter: names differ: %s" % sorted(set(a) ^ set(b)))
        return False
    same = all(torch.equal(a[k].float(), b[k]) for k in a)
    print("rewritten adapter: %d tensors, bit-identical: %s" % (len(a), same))
    m = PeftModel.from_pretrained(base_model(out), os.path.join(out, "rewritten"))
    n = sum(1 for k, _ in m.named_parameters() if "lora_" in k)
    print("PeftModel.from_pretrained loaded it: %d adapter tensors" % n)
    return same and n == len(a) and ok


def check_weights(out):
    """ours: W + s (B A) summed in fp64, rounded once; PEFT: fp32 B @ A (r products, error at most
    r u sum|b||a|), times s = 2 (exact), added to W (one rounding).  Per element
    |ours - peft| <= 2 u |W'| + (r + 1) u s sum_k |b_ik| |a_kj|, a bound from Higham's Thm 3.1."""
    peft = PeftModel.from_pretrained(base_model(out), os.path.join(out, "adapter"))
    adapters = {k: v.detach() for k, v in peft.named_parameters() if "lora_" in k}
    merged_ref = peft.merge_and_unload().state_dict()
    # our export's tensors as transformers names them in memory (a Qwen3-MoE's stacked experts)
    ours = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.join(out, "merged"), dtype=torch.float32).state_dict()
    worst, ok, s = 0.0, True, ALPHA / R
    for k, w in merged_ref.items():
        if k not in ours:
            if k == "lm_head.weight":
                continue  # tied
            print("merged: %s missing" % k)
            return False
        o = ours[k]
        stem = "base_model.model." + k[: -len(".weight")]
        an = [n for n in adapters if n.startswith(stem + ".lora_A")]
        bound = 2 * U32 * w.abs()
        if an:
            A = adapters[an[0]]
            B = adapters[[n for n in adapters if n.startswith(stem + ".lora_B")][0]]
            bound = bound + (R + 1) * U32 * s * (B.abs() @ A.abs())
        elif not torch.equal(o, w):
            print("merged: %s is not adapted but changed" % k)
            ok = False
        err = (o.double() - w.double()).abs()
        if bool((err > bound.double()).any()):
            print("merged: %s exceeds the bound (%.3g > %.3g)" % (k, float(err.max()),
                                                                 float(bound.max())))
            ok = False
        worst = max(worst, float((err / bound.double().clamp_min(1e-30)).max()))
    print("merged weights: %d tensors, worst error %.2f of its bound" % (len(merged_ref), worst))
    return ok


def check_logits(out, dump):
    x = ids()
    with torch.no_grad():
        peft = PeftModel.from_pretrained(base_model(out), os.path.join(out, "adapter")).eval()
        ref = peft(input_ids=x).logits
        base = base_model(out)(input_ids=x).logits
        merged = transformers.AutoModelForCausalLM.from_pretrained(
            os.path.join(out, "merged"), dtype=torch.float32,
            attn_implementation="eager").eval()(input_ids=x).logits
    idp, lp = os.path.join(out, "ids.bin"), os.path.join(out, "logits.bin")
    x.to(torch.int32).numpy().tofile(idp)
    got = []
    for extra in ([os.path.join(out, "merged")], [os.path.join(out, "base"),
                                                  os.path.join(out, "adapter")]):
        r = subprocess.run([dump, extra[0], idp, str(NSEQ), str(T), lp] + extra[1:])
        if r.returncode:
            print("dump_logits exited %d" % r.returncode)
            return False
        got.append(torch.from_numpy(np.fromfile(lp, dtype=np.float32).reshape(ref.shape)))
    e_hf, e_ours, e_lora, e_base = rel(merged, ref), rel(got[0], ref), rel(got[1], ref), rel(base, ref)
    print("logits vs PEFT's LoRA forward: transformers on the merged model %.2e, ours on it %.2e, "
          "our LoRA forward %.2e (limit %.0e); the base alone %.2e"
          % (e_hf, e_ours, e_lora, LOGIT_RTOL, e_base))
    return max(e_hf, e_ours, e_lora) < LOGIT_RTOL and e_base > 100 * LOGIT_RTOL


# Training.  Per step, both sides start from the same adapter and base (fp32) and differ only by
# rounding: the loss by about log2(V) u = 1e-6 relative (the argument of test_e2e_loss_compare.sh),
# the gradients by a few 1e-6 relative; AdamW's update m / sqrt(v) does not depend on the
# gradient's scale, so each step moves the adapters' relative error by about as much, and the loss
# error grows at most linearly: LOSS_RTOL = 1e-5 over 10 steps, the fp32 rule of
# test_e2e_hf_parity.c, with the gradient norm under the same bound.  The adapters' change over the
# run, (final - initial), carries the updates' relative error (a few 1e-6 a step, more for elements
# whose gradient is near zero, where m / sqrt(v) is a ratio of small numbers): ADAPTER_RTOL = 1e-3
# norm-wise leaves two orders of magnitude; a wrong scale, decay, bias correction or clipping
# changes it by O(1).
LOSS_RTOL, ADAPTER_RTOL = 1e-5, 1e-3
T_TRAIN, GLOBAL, MICRO, LR, BETAS, EPS, WD, CLIP = 32, 4, 2, 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0


# LoRA's dropout mask as graph/lora.c and base/splitmix.h define it: element i of the input of
# layer l's adapter on target t (TARGETS' index) at step s, micro-batch mb is dropped when the top
# 24 bits of splitmix64(key + i gamma) fall below round(p 2^24), key = splitmix64 folded over
# (seed, s, mb, l, t); the kept elements are scaled by fp32(1 / (1 - p)).
M64, GAMMA = (1 << 64) - 1, 0x9e3779b97f4a7c15


def splitmix64(x):
    x = (x + GAMMA) & M64
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M64
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M64
    return x ^ (x >> 31)


def splitmix64_np(x):
    x = x + np.uint64(GAMMA)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
    return x ^ (x >> np.uint64(31))


class MaskDropout(torch.nn.Module):
    at = (0, 0)  # (step, micro-batch) of the forward under way, set by train()

    def __init__(self, p, seed, layer, target):
        super().__init__()
        self.thr, self.scale = int(p * 16777216.0 + 0.5), np.float32(1.0 / (1.0 - p))
        self.seed, self.layer, self.target = seed, layer, target

    def forward(self, x):
        if not self.training:
            return x
        k = splitmix64(self.seed)
        for v in (MaskDropout.at[0], MaskDropout.at[1], self.layer, self.target):
            k = splitmix64(k ^ v)
        with np.errstate(over="ignore"):
            i = np.arange(x.numel(), dtype=np.uint64)
            keep = (splitmix64_np(np.uint64(k) + i * np.uint64(GAMMA)) >> np.uint64(40)) >= self.thr
        f = torch.from_numpy(np.where(keep, self.scale, np.float32(0)).astype(np.float32))
        return x * f.reshape(x.shape)


def mask_dropouts(model, p, seed):
    """Every adapter's lora_dropout becomes a MaskDropout of its layer (the recipe's numbering,
    1..L) and target; returns how many."""
    n = 0
    for name, mod in model.named_modules():
        if hasattr(mod, "lora_dropout") and "default" in mod.lora_dropout:
            parts = name.split(".")
            layer = int(parts[parts.index("layers") + 1]) + 1
            mod.lora_dropout["default"] = MaskDropout(p, seed, layer, TARGETS.index(parts[-1]))
            n += 1
    return n


def batches(data, steps):
    with open(data, "rb") as f:
        head = f.read(64)
        count = int.from_bytes(head[16:24], "little")
        tok = np.frombuffer(f.read(4 * count), dtype="<u4").astype(np.int64)
    for s in range(steps):
        seqs = [tok[k * T_TRAIN:k * T_TRAIN + T_TRAIN + 1]
                for k in range(s * GLOBAL, (s + 1) * GLOBAL)]
        yield torch.tensor(np.stack([q[:-1] for q in seqs])), torch.tensor(
            np.stack([q[1:] for q in seqs]))


def train(out, data, run, metrics, steps, dropout=0.0, seed=0):
    import json
    import math
    model = PeftModel.from_pretrained(base_model(out), os.path.join(out, "adapter"),
                                      is_trainable=True).train()
    if dropout > 0:
        print("dropout %g: %d adapters draw slidedp's masks" % (dropout,
                                                               mask_dropouts(model, dropout, seed)))
    params = [p for p in model.parameters() if p.requires_grad]
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    init = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, foreach=False,
                            fused=False)
    V = model.config.vocab_size
    # a Qwen3-MoE adds router_aux_loss_coef times each micro-batch's load-balancing loss divided by
    # the micro-batches (moe_train.py's step_loss); its gradient reaches the adapters through x
    aux_coef = getattr(model.config, "router_aux_loss_coef", 0.0)
    aux_on = bool(getattr(model.config, "output_router_logits", False)) and aux_coef > 0
    ours = [json.loads(l) for l in open(metrics) if '"loss"' in l]
    ok, worst = len(ours) == steps, 0.0
    for s, (ids, tg) in enumerate(batches(data, steps)):
        loss_sum = aux_sum = 0.0
        nmicro = GLOBAL // MICRO
        for mb in range(nmicro):
            x, y = ids[mb * MICRO:(mb + 1) * MICRO], tg[mb * MICRO:(mb + 1) * MICRO]
            MaskDropout.at = (s, mb)
            o = model(input_ids=x, use_cache=False, **({"output_router_logits": True}
                                                        if aux_on else {}))
            ce = torch.nn.functional.cross_entropy(o.logits.float().reshape(-1, V), y.reshape(-1),
                                                   reduction="sum")
            aux = aux_coef * o.aux_loss / nmicro if aux_on else torch.zeros(())
            (ce / tg.numel() + aux).backward()
            loss_sum += ce.item()
            aux_sum += aux.item()
        # the global norm in fp64 and clip_grad_norm_'s coefficient, as ours (codelets/adamw.c)
        gnorm = math.sqrt(sum(float(torch.linalg.vector_norm(p.grad, dtype=torch.float64)) ** 2
                              for p in params))
        coef = min(CLIP / (gnorm + 1e-6), 1.0)
        for p in params:
            p.grad.mul_(coef)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = loss_sum / tg.numel() + aux_sum
        if s < len(ours):
            el = abs(ours[s]["loss"] - loss) / abs(loss)
            eg = abs(ours[s]["grad_norm"] - gnorm) / gnorm
            worst = max(worst, el, eg)
            print("step %2d  loss ours %.8f peft %.8f (%.1e)  grad norm ours %.6f peft %.6f (%.1e)"
                  % (s + 1, ours[s]["loss"], loss, el, ours[s]["grad_norm"], gnorm, eg))
            ok = ok and el < LOSS_RTOL and eg < LOSS_RTOL
    final = load_file(os.path.join(run, "final", "adapter_model.safetensors"))
    num = den = moved = 0.0
    for n, p, p0 in zip(names, params, init):
        key = n.replace(".default", "")
        if key not in final:
            print("final adapter: %s missing" % key)
            return False
        d_ref, d_ours = (p.detach() - p0).double(), (final[key] - p0).double()
        num += float(((d_ours - d_ref) ** 2).sum())
        den += float((d_ref ** 2).sum())
        moved += float((p0.double() ** 2).sum())
    e = math.sqrt(num / den)
    print("losses and gradient norms: worst %.1e (limit %.0e); final adapter: its change over the "
          "run differs by %.2e relative (limit %.0e; the change is %.2e of the adapter's norm)"
          % (worst, LOSS_RTOL, e, ADAPTER_RTOL, math.sqrt(den / moved)))
    return ok and e < ADAPTER_RTOL and len(final) == len(names)


def main():
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
        return 0
    if sys.argv[1] == "train":
        extra = (float(sys.argv[7]), int(sys.argv[8])) if len(sys.argv) > 8 else ()
        ok = train(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]), *extra)
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    out, dump = sys.argv[2], sys.argv[3]
    ok = check_rewritten(out)
    ok = check_weights(out) and ok
    ok = check_logits(out, dump) and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
