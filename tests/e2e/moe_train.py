#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The references of the whole-model Qwen3-MoE parity test (tests/e2e/test_e2e_moe_train.sh).

  moe_train.py gen DIR      a tiny Qwen3MoeForCausalLM (fp32, 3 layers, the middle one dense by
                            mlp_only_layers, 8 experts, top-2, norm_topk_prob, output_router_logits)
                            saved by save_pretrained into DIR, and the references the runtime's
                            parity program (tests/e2e/test_e2e_hf_parity.c) compares against, in
                            the files and format of tests/ref/gen_hf_ref.py: DIR/ref.safetensors
                            (one micro-batch) and DIR/ref.mb2.safetensors (two micro-batches);
                            DIR/fused: the same weights under the modules' fused expert names
  moe_train.py export DIR   the runtime's exports DIR/export0 (the loaded weights) and DIR/export
                            (after the AdamW steps) load in transformers: export0 with the same
                            tensor names, shapes and values as DIR and the same logits, export with
                            the logits of the reference's trained model (ref.safetensors'
                            logits_final)
  moe_train.py cli DIR      a tiny Qwen3-MoE with Qwen3's vocabulary, for `slidedp train`

The loss is the project's (bench/hf_loss_compare.py): per micro-batch the sum of its tokens'
cross-entropy over the valid targets of the whole step, plus router_aux_loss_coef times its own
load-balancing loss divided by the micro-batches.  With one micro-batch that is
Qwen3MoeForCausalLM's loss, checked here.  (transformers' Trainer, under gradient accumulation,
adds every micro-batch's coef * aux undivided: the model takes loss kwargs, so the Trainer does not
scale its loss by the accumulation steps; the step's aux term then grows with their number.)

AdamW: transformers 5 holds a layer's experts as two stacked parameters, whose idle experts get a
zero gradient, hence decay and moment updates.  The runtime skips an expert that received no token
in the step, as torch.optim.AdamW skips a parameter whose .grad is None (transformers 4's
nn.Linear per expert): the reference here gives each expert its own parameters in the optimizer,
with .grad None where the step routed no token to it.  Layer 0's expert 7 is made idle on the
batch at step 0 (its router row pushed down along a direction all of the batch's router inputs
share); as the weights train, other experts fall idle in later steps, each counting its own
steps for AdamW's bias correction as PyTorch counts them per parameter.
"""

import os
import shutil
import sys

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import gen_hf_ref as ref  # noqa: E402  the dense parity test's batch, hyperparameters and save

CFG = dict(ref.COMMON, num_hidden_layers=3, num_experts=8, num_experts_per_tok=2,
           moe_intermediate_size=32, mlp_only_layers=[1], norm_topk_prob=True,
           output_router_logits=True, router_aux_loss_coef=0.02, tie_word_embeddings=False)
IDLE = (0, 7)        # layer 0's expert 7 gets no token
ROUTER_STD = 0.3     # decisive routing: no near-tie at the K-th place for rounding to flip
# Logits of the trained models (after the AdamW steps): relative norm.  The dense parity test's
# derivation (tests/e2e/test_e2e_hf_parity.c): each step moves a weight by at most ~lr times a
# relative gradient error ~6e-6, which AdamW's normalisation does not amplify beyond 1e-4 over 10
# smooth steps; its bound for the trained losses, 1e-4, serves the logits too, raised as the
# losses' below where the routing makes the trajectory rougher.
LOGIT_RTOL = 1e-4
# The AdamW steps' losses (and the trained logits): the dense test's 1e-4 holds while the trajectory is smooth, but routing
# is not: once the model starts to memorise the batch, a perturbation of every initial weight by
# one fp32 rounding (relative 2^-24) moves transformers' own loss at step 9 by 1e-4 to 3e-4 (top-k
# choices flip, AdamW normalises the flipped gradients to full steps).  Each step's bound is the
# larger of 1e-4 and SPREAD_FACTOR times that spread, measured here over PERTURBED runs: our
# kernels round differently from torch's in every reduction of the ~20 chained ops of a step, not
# only once per weight; the dense derivation's sqrt(20) ~ 4.5 for that, rounded up to 8.
PERTURBED, SPREAD_FACTOR, STEPS_RTOL = 3, 8.0, 1e-4


def log(msg):
    print(msg, flush=True)


def build():
    torch.manual_seed(ref.SEED)
    model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**CFG)).float()
    gen = torch.Generator().manual_seed(ref.SEED + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("mlp.gate.weight"):
                p.copy_(ROUTER_STD * torch.randn(p.shape, generator=gen))
    return model


def router_inputs(model, ids, layer):
    """The router's inputs of `layer` on ids, (tokens, C)."""
    seen = []
    hook = model.model.layers[layer].mlp.gate.register_forward_hook(
        lambda mod, inp, out: seen.append(inp[0].detach().reshape(-1, inp[0].shape[-1])))
    with torch.no_grad():
        model(input_ids=ids)
    hook.remove()
    return seen[0].double()


def make_idle(model, ids):
    """Layer IDLE[0]'s expert IDLE[1]: its router row minus 40 v, v the least-norm solution of
    H v = 1 over the batch's router inputs H, lowers its logit by 40 for every token."""
    layer, e = IDLE
    h = router_inputs(model, ids, layer)
    v = torch.linalg.lstsq(h, torch.ones(h.shape[0], 1, dtype=torch.float64)).solution[:, 0]
    with torch.no_grad():
        model.model.layers[layer].mlp.gate.weight[e] -= (40.0 * v).float()


def routed(model, ids):
    """Per sparse layer, the experts that received a token on ids (from the router logits)."""
    out = model(input_ids=ids, output_router_logits=True)
    k = CFG["num_experts_per_tok"]
    sparse = [l for l in range(CFG["num_hidden_layers"]) if l not in CFG["mlp_only_layers"]]
    return {l: set(torch.topk(torch.softmax(lg.float(), -1), k, -1).indices.flatten().tolist())
            for l, lg in zip(sparse, out.router_logits)}


def step_loss(model, ids, labels, targets, nmicro):
    """The step's loss (the project's normalisation, module docstring), backward included."""
    valid = int((targets != ref.IGNORE).sum())
    coef, total = CFG["router_aux_loss_coef"], 0.0
    for mb in range(nmicro):
        rows = slice(mb * ids.shape[0] // nmicro, (mb + 1) * ids.shape[0] // nmicro)
        out = model(input_ids=ids[rows], output_router_logits=True)
        ce = torch.nn.functional.cross_entropy(out.logits.float().reshape(-1, out.logits.shape[-1]),
                                               targets[rows].reshape(-1), ignore_index=ref.IGNORE,
                                               reduction="sum")
        loss = ce / valid + coef * out.aux_loss / nmicro
        loss.backward()
        total += loss.item()
        if nmicro == 1:  # Qwen3MoeForCausalLM's own loss
            hf = model(input_ids=ids, labels=labels).loss.item()
            if abs(hf - total) > 1e-6 * abs(hf):
                raise SystemExit("loss %.8g is not Qwen3MoeForCausalLM's %.8g" % (total, hf))
    return total


class ExpertAdamW:
    """torch.optim.AdamW over the model's parameters with each expert's gate_up and down slices
    parameters of their own, whose .grad is None in a step that routed no token to the expert."""

    def __init__(self, model):
        self.model, self.stacks, self.experts = model, [], []
        plain = []
        for name, p in model.named_parameters():
            if ".mlp.experts." in name:
                layer = int(name.split(".")[2])
                parts = [torch.nn.Parameter(p.detach()[e].clone()) for e in range(p.shape[0])]
                self.stacks.append((layer, p, parts))
                self.experts += parts
            else:
                plain.append(p)
        decay = [p for p in plain if p.ndim >= 2] + self.experts
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": ref.HP["weight_decay"]},
             {"params": [p for p in plain if p.ndim < 2], "weight_decay": 0.0}],
            lr=ref.HP["lr"], betas=(ref.HP["beta1"], ref.HP["beta2"]), eps=ref.HP["eps"],
            foreach=False)

    def zero_grad(self):
        self.opt.zero_grad(set_to_none=True)
        self.model.zero_grad(set_to_none=True)

    def step(self, used):
        for layer, stack, parts in self.stacks:
            for e, part in enumerate(parts):
                part.grad = stack.grad[e].clone() if e in used[layer] else None
        params = [p for g in self.opt.param_groups for p in g["params"] if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, ref.HP["max_grad_norm"])
        self.opt.step()
        with torch.no_grad():
            for _, stack, parts in self.stacks:
                for e, part in enumerate(parts):
                    stack[e].copy_(part)
        return float(norm)


def reference(model0, ids, labels, targets, nmicro, verbose=True):
    model = build()
    model.load_state_dict(model0.state_dict())
    model.train()
    opt = ExpertAdamW(model)
    out, losses, norms, idle0 = {}, [], [], None
    for step in range(ref.HP["steps"]):
        opt.zero_grad()
        with torch.no_grad():
            used = routed(model, ids)
        idle = {l: set(range(CFG["num_experts"])) - u for l, u in used.items()}
        idle0 = idle if idle0 is None else idle0
        if verbose:
            log("  %d micro-batch%s, step %d: idle experts %s" % (
                nmicro, "es" if nmicro > 1 else "", step, ", ".join(
                    "layer %d: %s" % (l, sorted(s) or "none") for l, s in sorted(idle.items()))))
        loss = step_loss(model, ids, labels, targets, nmicro)
        if step == 0:
            out["loss"] = torch.tensor([loss], dtype=torch.float32)
            for n, p in model.named_parameters():
                out["grad." + n] = p.grad.detach().float().clone()
            with torch.no_grad():
                out["logits"] = model(input_ids=ids).logits.float()
        norms.append(opt.step(used))
        losses.append(loss)
    if IDLE[1] not in idle0[IDLE[0]]:
        raise SystemExit("layer %d's expert %d received tokens at step 0" % IDLE)
    with torch.no_grad():
        out["logits_final"] = model(input_ids=ids).logits.float()
    out["losses"] = torch.tensor(losses, dtype=torch.float32)
    out["grad_norm"] = torch.tensor(norms, dtype=torch.float32)
    return out, idle0


def spread_tol(model0, ids, labels, targets, nmicro, base):
    """Per step, max(STEPS_RTOL, SPREAD_FACTOR x the losses' relative spread over PERTURBED runs
    from the initial weights each perturbed by one rounding); the same of the trained logits'
    relative norm error, against LOGIT_RTOL."""
    spread = torch.zeros(len(base["losses"]), dtype=torch.float64)
    lspread = 0.0
    for seed in range(PERTURBED):
        model = build()
        model.load_state_dict(model0.state_dict())
        gen = torch.Generator().manual_seed(ref.SEED + 10 + seed)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.0 + 2.0 ** -24 * torch.randn(p.shape, generator=gen))
        out, _ = reference(model, ids, labels, targets, nmicro, verbose=False)
        losses = base["losses"].double()
        spread = torch.maximum(spread, ((out["losses"].double() - losses) / losses).abs())
        lspread = max(lspread, rel_err(out["logits_final"], base["logits_final"]))
    return (torch.clamp(SPREAD_FACTOR * spread, min=STEPS_RTOL).float(),
            torch.tensor([max(LOGIT_RTOL, SPREAD_FACTOR * lspread)], dtype=torch.float32))


def generate(outdir):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    model = build()
    ids, labels, targets = ref.make_batch(model.config, ref.T)
    make_idle(model, ids)
    os.makedirs(outdir, exist_ok=True)
    ref.save_model(model, outdir)
    # the same weights under transformers 5's fused names (the modules' own), which the runtime
    # reads too
    os.makedirs(os.path.join(outdir, "fused"), exist_ok=True)
    shutil.copy(os.path.join(outdir, "config.json"), os.path.join(outdir, "fused"))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(outdir, "fused", "model.safetensors"), metadata={"format": "pt"})
    meta = {k: repr(v) if isinstance(v, float) else str(v) for k, v in ref.HP.items()}
    meta.update({"torch": torch.__version__, "transformers": transformers.__version__})
    for nmicro, name in ((1, "ref.safetensors"), (2, "ref.mb2.safetensors")):
        out, idle0 = reference(model, ids, labels, targets, nmicro)
        out.update({"ids": ids.to(torch.int32), "targets": targets.to(torch.int32)})
        out["losses_tol"], out["logits_final_tol"] = spread_tol(model, ids, labels, targets,
                                                                nmicro, out)
        log("  losses' bounds: %s; trained logits' bound %.1e" % (
            " ".join("%.1e" % v for v in out["losses_tol"].tolist()), out["logits_final_tol"][0]))
        # the experts without token at step 0 (layer:expert): the runtime's get no gradient
        meta["idle_step0"] = ",".join("%d:%d" % (l, e) for l, s in sorted(idle0.items())
                                      for e in sorted(s))
        meta["micro_batches"] = str(nmicro)
        save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(outdir, name),
                  metadata=meta)
        log("  %s: loss %.7f, last %.7f, idle at step 0 (layer:expert): %s" % (
            name, out["losses"][0], out["losses"][-1], meta["idle_step0"]))
    return 0


def rel_err(x, y):
    return float((x.double() - y.double()).norm() / y.double().norm())


def check_export(outdir):
    ids = None
    with safe_open(os.path.join(outdir, "ref.safetensors"), "pt") as f:
        ids, final = f.get_tensor("ids").long(), f.get_tensor("logits_final")
        final_tol = float(f.get_tensor("logits_final_tol")[0])
    with safe_open(os.path.join(outdir, "model.safetensors"), "pt") as f:
        orig = {k: f.get_tensor(k) for k in f.keys()}
    with safe_open(os.path.join(outdir, "export0", "model.safetensors"), "pt") as f:
        back = {k: f.get_tensor(k) for k in f.keys()}
    if set(orig) != set(back):
        raise SystemExit("export0: tensors %s missing, %s extra" % (
            sorted(set(orig) - set(back))[:4], sorted(set(back) - set(orig))[:4]))
    for k, v in orig.items():
        if back[k].shape != v.shape or not torch.equal(back[k], v):
            raise SystemExit("export0: %s differs from the model it was loaded from" % k)
    log("export0: the %d tensors of save_pretrained, same names, shapes and values" % len(orig))
    bad = 0
    for sub, want, tol in (("export0", None, 0.0), ("export", final, final_tol)):
        model = Qwen3MoeForCausalLM.from_pretrained(os.path.join(outdir, sub)).float()
        with torch.no_grad():
            got = model(input_ids=ids).logits.float()
        if want is None:
            model0 = Qwen3MoeForCausalLM.from_pretrained(outdir).float()
            with torch.no_grad():
                want = model0(input_ids=ids).logits.float()
        e = rel_err(got, want)
        ok = e <= tol  # export0: the very weights, the very logits
        bad |= not ok
        log("%s loads in transformers: logits rel-norm err %.2e (bound %.1e) %s"
            % (sub, e, tol, "ok" if ok else "FAIL"))
    return 1 if bad else 0


def cli_model(outdir):
    """A tiny Qwen3-MoE with Qwen3's vocabulary, for `slidedp train` on the bundled text."""
    torch.manual_seed(ref.SEED)
    cfg = dict(CFG, vocab_size=151936, hidden_size=32, intermediate_size=64,
               moe_intermediate_size=16, num_attention_heads=2, num_key_value_heads=1,
               max_position_embeddings=256)
    ref.save_model(Qwen3MoeForCausalLM(Qwen3MoeConfig(**cfg)).float(), outdir)
    return 0


def main():
    cmds = {"gen": generate, "export": check_export, "cli": cli_model}
    if len(sys.argv) != 3 or sys.argv[1] not in cmds:
        raise SystemExit("usage: moe_train.py gen|export|cli DIR")
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    return cmds[sys.argv[1]](sys.argv[2])


if __name__ == "__main__":
    sys.exit(main())
