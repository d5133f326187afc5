# SPDX-License-Identifier: MIT
"""One Qwen3-MoE sparse block: our CPU kernels (the moe_block helper) against transformers'
Qwen3MoeSparseMoeBlock and load_balancing_loss_func, fp32.

    moe_hf.py MOE_BLOCK_PROGRAM WORKDIR

First the configuration: a Qwen3MoeConfig saved by transformers (3 layers, layer 1 dense through
mlp_only_layers) is read and written again by formats/hfconfig.c (moe_block --config); the written
config.json must load in transformers with the same MoE fields, and the sparse layers our rule
finds must be those transformers' Qwen3MoeForCausalLM builds.  Then the load-balancing loss of
three layers' router logits (the statistics summed over the layers before the product, as
load_balancing_loss_func does) and its gradient w.r.t. each layer's logits (moe_block --aux), with
the tolerance derived at check_aux_layers.  Then the block:

A tiny config (C 32, 8 experts, top-2, IM 16, norm_topk_prob true), 24 tokens, random weights;
channel 0 of the input is a constant 1 through which the router never picks expert 7, so that one
expert gets no token.  The objective is sum(dout * block(x)) + COEF * aux, aux the load-balancing
loss of the block's router logits.  Compared: the router logits, the experts each token picks, the
routing weights, the block's output, the aux loss, and the gradients of x, the router weight and
both expert tensors (gate_up_proj, down_proj); the idle expert's gradients must be zero on both
sides.  Exit 0 pass, 1 fail.

Tolerances, norm-wise relative (||ours - hf|| / ||hf||), both sides fp32 computing the same sums
in possibly different orders, each off from the exact result by at most the sum over its chain of
(k + 1) u per k-term sum (Higham, Thm 3.1), 16 u per element-wise function (SDP_RTOL_ELEM) and
4 u for the softmax, u = 2^-24:
  forward  (router C, softmax, gate_up C, silu, down IM, combine K):
           (C+1) + 4 + (C+1) + 16 + (IM+1) + (K+1) = 107 u at these sizes;
  backward (forward, plus the combine's C-term dot, down's C, silu', gate_up's 2IM, the weight
           gradients' N, the softmax and top-k's K + E, the router's E and N):
           107 + (C+1) + (C+1) + 16 + (2IM+1) + (N+1) + (K+E) + (E+1) + (N+1) = 291 u;
both sides: twice that.  The gradients that go through the softmax's backward (the router weight's,
and x's router part) lose accuracy to its cancellation, dz = p (dp - sum p dp): their limit is
multiplied by kappa = ||p (|dp| + sum p |dp|)|| / ||dz||, computed here in fp64 (dp rebuilt from
the weights and the routing; the dz it implies is checked against transformers' autograd).  The aux loss is a double sum of fp32 probabilities: 2 * 4 u relative from the softmax.
"""
import os
import subprocess
import sys

import numpy as np
import torch
import transformers
from transformers.models.qwen3_moe import modeling_qwen3_moe as mq

U = 2.0 ** -24
N, C, E, K, IM, COEF, IDLE = 24, 32, 8, 2, 16, 0.02, 7
FWD_RTOL = 2 * ((C + 1) + 4 + (C + 1) + 16 + (IM + 1) + (K + 1)) * U
BWD_RTOL = FWD_RTOL + 2 * ((C + 1) * 2 + 16 + (2 * IM + 1) + 2 * (N + 1) + (K + E) + (E + 1)) * U
AUX_RTOL = 2 * 4 * U


def make_block():
    cfg = transformers.Qwen3MoeConfig(hidden_size=C, num_experts=E, num_experts_per_tok=K,
                                      moe_intermediate_size=IM, norm_topk_prob=True,
                                      router_aux_loss_coef=COEF, output_router_logits=True)
    cfg._experts_implementation = "eager"
    torch.manual_seed(5)
    blk = mq.Qwen3MoeSparseMoeBlock(cfg).float()
    with torch.no_grad():
        blk.gate.weight.normal_(0.0, 0.5)
        blk.gate.weight[IDLE, 0] = -30.0
        blk.experts.gate_up_proj.normal_(0.0, 0.3)
        blk.experts.down_proj.normal_(0.0, 0.3)
    return blk


def run_hf(blk, x0, dout):
    caught = {}
    hook = blk.gate.register_forward_hook(lambda m, i, o: caught.update(out=o))
    x = x0.clone().requires_grad_(True)
    y = blk(x.view(1, N, C)).view(N, C)
    hook.remove()
    logits, scores, ids = caught["out"]
    logits.retain_grad()
    aux = mq.load_balancing_loss_func((logits,), E, K, None)
    ((y * dout).sum() + COEF * aux).backward()
    return dict(logits=logits.detach(), ids=ids, wts=scores.detach(), out=y.detach(),
                aux=float(aux.detach()), dx=x.grad, dwr=blk.gate.weight.grad,
                dwgu=blk.experts.gate_up_proj.grad, dwdn=blk.experts.down_proj.grad,
                dlogits=logits.grad)


def run_ours(prog, work, blk, x0, dout):
    inp, outp = work + "/moe_in.bin", work + "/moe_out.bin"
    with open(inp, "wb") as f:
        np.array([N, C, E, K, IM, 1], dtype=np.int32).tofile(f)
        np.array([COEF], dtype=np.float32).tofile(f)
        for t in (x0, blk.gate.weight, blk.experts.gate_up_proj, blk.experts.down_proj, dout):
            t.detach().numpy().astype(np.float32).tofile(f)
    r = subprocess.run([prog, inp, outp])
    if r.returncode:
        print("moe_block exited %d" % r.returncode)
        return None
    raw = open(outp, "rb").read()
    aux = float(np.frombuffer(raw[:8], dtype=np.float64)[0])
    v = torch.from_numpy(np.frombuffer(raw[8:], dtype=np.float32).copy())
    shapes = [("logits", (N, E)), ("ids", (N, K)), ("wts", (N, K)), ("counts", (E,)),
              ("out", (N, C)), ("dx", (N, C)), ("dwr", (E, C)), ("dwgu", (E, 2 * IM, C)),
              ("dwdn", (E, C, IM))]
    got, off = dict(aux=aux), 0
    for name, shp in shapes:
        n = int(np.prod(shp))
        got[name] = v[off:off + n].view(shp)
        off += n
    return got if off == v.numel() else None


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300))


def softmax_kappa(blk, x0, dout, hf):
    """kappa of the softmax's backward, from d objective / d probs rebuilt in fp64: through the
    routing weights (dw = dout . y per slot, then the renormalisation's backward) plus the aux
    loss's COEF E count_e / N^2.  Returns kappa and the fp64 d logits it implies."""
    x, d = x0.double(), dout.double()
    wgu, wdn = blk.experts.gate_up_proj.detach().double(), blk.experts.down_proj.detach().double()
    p = torch.softmax(hf["logits"].double(), dim=-1)
    ids = hf["ids"].long()
    dp = torch.zeros(N, E, dtype=torch.float64)
    count = torch.bincount(ids.reshape(-1), minlength=E).double()
    for n in range(N):
        dw = torch.zeros(K, dtype=torch.float64)
        for k in range(K):
            g, u = (wgu[ids[n, k]] @ x[n]).chunk(2)
            dw[k] = d[n] @ (wdn[ids[n, k]] @ (torch.nn.functional.silu(g) * u))
        ps = p[n, ids[n]]
        w = ps / ps.sum()
        dp[n, ids[n]] = (dw - (dw * w).sum()) / ps.sum()
    dp += COEF * E * count / (N * N)
    dz = p * (dp - (p * dp).sum(dim=-1, keepdim=True))
    terms = p * (dp.abs() + (p * dp.abs()).sum(dim=-1, keepdim=True))
    return max(1.0, float(terms.norm() / dz.norm())), dz


MOE_KEYS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
            "decoder_sparse_step", "mlp_only_layers", "router_aux_loss_coef",
            "output_router_logits", "hidden_size", "num_hidden_layers", "num_key_value_heads",
            "head_dim", "rope_parameters", "tie_word_embeddings")


def check_config(prog, work):
    cfg = transformers.Qwen3MoeConfig(vocab_size=64, hidden_size=C, intermediate_size=48,
                                      num_hidden_layers=3, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=8, num_experts=E,
                                      num_experts_per_tok=K, moe_intermediate_size=IM,
                                      norm_topk_prob=True, mlp_only_layers=[1],
                                      router_aux_loss_coef=COEF, output_router_logits=True)
    cfg.save_pretrained(work + "/cfg_in")
    os.makedirs(work + "/cfg_out")
    r = subprocess.run([prog, "--config", work + "/cfg_in", work + "/cfg_out"],
                       stdout=subprocess.PIPE, text=True)
    if r.returncode:
        print("moe_block --config exited %d" % r.returncode)
        return False
    back = transformers.AutoConfig.from_pretrained(work + "/cfg_out")
    diff = [k for k in MOE_KEYS if getattr(back, k, None) != getattr(cfg, k, None)]
    model = transformers.AutoModelForCausalLM.from_config(back)
    built = [i for i, layer in enumerate(model.model.layers)
             if isinstance(layer.mlp, mq.Qwen3MoeSparseMoeBlock)]
    ours = [int(t) for t in r.stdout.split()[1:]]
    print("config.json written back: %s; %s; sparse layers ours %s, transformers %s"
          % (type(back).__name__, "fields equal" if not diff else "DIFFER: %s" % diff, ours,
             built))
    return type(back).__name__ == "Qwen3MoeConfig" and not diff and ours == built == [0, 2]


def check_aux_layers(prog, work):
    """Both sides compute the probabilities in fp32 (4 u relative each, the softmax's bound above)
    and the loss's sums in higher precision or exactly (counts), so the loss differs by at most
    2 * 4 u relative, plus a rounding of each side's result: AUX_RTOL + 2 u.  The gradient
    p (g - sum p g), g_e = E count_e / rows^2, adds two roundings a side (g, the product) and the
    cancellation of g - sum p g: 2 * 6 u times kappa = ||p (|g| + sum p |g|)|| / ||dz||, fp64."""
    L, n = 3, 20
    gen = torch.Generator().manual_seed(13)
    logits = [(1.5 * torch.randn(n, E, generator=gen)).requires_grad_(True) for _ in range(L)]
    aux = mq.load_balancing_loss_func(tuple(logits), E, K, None)
    aux.backward()
    aux = float(aux.detach())
    inp, outp = work + "/aux_in.bin", work + "/aux_out.bin"
    with open(inp, "wb") as f:
        np.array([L, n, E, K], dtype=np.int32).tofile(f)
        for t in logits:
            t.detach().numpy().astype(np.float32).tofile(f)
    if subprocess.run([prog, "--aux", inp, outp]).returncode:
        print("moe_block --aux failed")
        return False
    raw = open(outp, "rb").read()
    got = float(np.frombuffer(raw[:8], dtype=np.float64)[0])
    dz = torch.from_numpy(np.frombuffer(raw[8:], dtype=np.float32).copy()).view(L, n, E)
    ref = torch.stack([t.grad for t in logits])
    p = torch.softmax(torch.stack([t.detach() for t in logits]).double(), dim=-1)
    count = torch.bincount(torch.topk(p, K, dim=-1).indices.reshape(-1), minlength=E).double()
    g = (E * count / (L * n) ** 2).expand_as(p)
    dz64 = p * (g - (p * g).sum(dim=-1, keepdim=True))
    kappa = float((p * (g.abs() + (p * g.abs()).sum(dim=-1, keepdim=True))).norm() / dz64.norm())
    e_loss, e_grad = abs(got - aux) / abs(aux), rel(dz, ref)
    lim_loss, lim_grad = AUX_RTOL + 2 * U, 2 * 6 * U * kappa
    print("aux loss of %d layers: %.9g, transformers %.9g: relative %.2e (limit %.2e); its "
          "gradient %.2e (limit %.2e, kappa %.1f)"
          % (L, got, aux, e_loss, lim_loss, e_grad, lim_grad, kappa))
    return e_loss <= lim_loss and e_grad <= lim_grad


def main():
    prog, work = sys.argv[1], sys.argv[2]
    if not check_config(prog, work) or not check_aux_layers(prog, work):
        return 1
    blk = make_block()
    gen = torch.Generator().manual_seed(9)
    x0 = torch.randn(N, C, generator=gen)
    x0[:, 0] = 1.0
    dout = torch.randn(N, C, generator=gen)
    hf = run_hf(blk, x0, dout)
    got = run_ours(prog, work, blk, x0, dout)
    if got is None:
        return 1
    ok = True
    kappa, dz = softmax_kappa(blk, x0, dout, hf)
    e = rel(hf["dlogits"], dz)  # the fp64 chain of the kappa against transformers' autograd
    print("transformers' d router logits vs the fp64 chain: %.2e (limit %.2e)"
          % (e, BWD_RTOL * kappa))
    ok &= e <= BWD_RTOL * kappa
    same_ids = torch.equal(got["ids"].long(), hf["ids"].long())
    idle_hf = int((hf["ids"] == IDLE).sum())
    print("experts picked: %s; expert %d gets %d tokens (ours %d)"
          % ("the same" if same_ids else "DIFFERENT", IDLE, idle_hf, int(got["counts"][IDLE])))
    ok &= same_ids and idle_hf == 0 and int(got["counts"][IDLE]) == 0
    checks = [("router logits", "logits", FWD_RTOL), ("routing weights", "wts", FWD_RTOL),
              ("block output", "out", FWD_RTOL), ("d gate_up_proj", "dwgu", BWD_RTOL),
              ("d down_proj", "dwdn", BWD_RTOL), ("dx", "dx", BWD_RTOL * kappa),
              ("d router weight", "dwr", BWD_RTOL * kappa)]
    for what, key, lim in checks:
        e = rel(got[key], hf[key])
        print("%-16s ||ours - transformers|| / ||transformers|| %.2e (limit %.2e)" % (what, e, lim))
        ok &= e <= lim
    e = abs(got["aux"] - hf["aux"]) / abs(hf["aux"])
    print("aux loss %.9g, transformers %.9g: relative %.2e (limit %.2e)"
          % (got["aux"], hf["aux"], e, AUX_RTOL))
    ok &= e <= AUX_RTOL
    zero = all(float(t[IDLE].abs().max()) == 0 for t in (got["dwgu"], got["dwdn"], hf["dwgu"],
                                                         hf["dwdn"]))
    print("idle expert's gradients: %s on both sides" % ("zero" if zero else "NOT zero"))
    ok &= zero
    print("softmax backward's kappa %.2f" % kappa)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
