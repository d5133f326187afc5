#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check the committed Hugging Face references in tests/ref/data against a fresh run.

1. Regenerates every reference with gen_hf_ref.py into a temporary folder and compares
   it with the committed files: ids, targets, config.json (less transformers_version)
   and the model weights must be identical; logits, loss, grads, and the first entry of
   losses and grad_norm must agree within 1e-5 relative to the tensor's largest magnitude
   (another torch build or thread count may sum in another order and change the last
   bits); the 10-step trajectories losses and grad_norm within 1e-3 (TRAJ_RTOL).
2. Loads each committed model with transformers (from_pretrained) and recomputes the
   loss and logits of the committed batch: they must match the committed ones.
3. A tied model's model.safetensors must not contain lm_head.weight.
Exit 0 pass, 1 fail, 77 skip (torch, transformers or safetensors missing).
"""

import json
import os
import sys
import tempfile

try:
    import torch
    import transformers
    from safetensors import safe_open
except ImportError as e:
    print("SKIP: %s" % e)
    print("SKIP")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_hf_ref  # noqa: E402

# fp32 has eps 1.2e-7; the reductions here have at most 512 terms, so a different
# summation order moves a result by about sqrt(512)*eps ~ 3e-6 of its scale. 1e-5 leaves
# room for the 10 optimizer steps to carry such differences forward.
RTOL = 1e-5
# After the first AdamW step the trajectory amplifies those last bits: Adam's first update is
# about lr * sign(g) for every element, so an element whose gradient is near zero may move by
# 2 * lr = 0.02 the other way.  The same builds as the committed references (torch
# 2.15.0+cu132, transformers 5.24.0) on another CPU reproduced step 0 exactly and the later
# steps within 6.8e-5 (llama-tiny losses, 1.1e-5 of the scale) and 1.6e-3 (llama-tiny grad_norm,
# 2.4e-4 of the scale).  1e-3 of the scale still fails a changed run: a learning rate 1% higher
# moves llama-tiny's losses by 2.9e-3 and its grad_norm by 5.5e-2 of their scales.
TRAJ_RTOL = 1e-3
TRAJECTORIES = ("losses", "grad_norm")
EXACT = ("ids", "targets", "segs")
IGNORED_META = ("torch", "transformers")

failures = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def load(path):
    with safe_open(path, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, (f.metadata() or {})


def close(a, b, rtol=RTOL):
    """max|a-b| <= rtol * max|b| (scale-relative); returns (ok, err, scale)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False, float("inf"), 0.0
    scale = max(b.abs().max().item(), 1e-30)
    err = (a.double() - b.double()).abs().max().item()
    return err <= rtol * scale, err, scale


def compare_dir(name, ref_dir, new_dir):
    with open(os.path.join(ref_dir, "config.json")) as f:
        c_ref = json.load(f)
    with open(os.path.join(new_dir, "config.json")) as f:
        c_new = json.load(f)
    c_ref.pop("transformers_version", None)
    c_new.pop("transformers_version", None)
    check(c_ref == c_new, "%s config.json identical" % name)

    w_ref, _ = load(os.path.join(ref_dir, "model.safetensors"))
    w_new, _ = load(os.path.join(new_dir, "model.safetensors"))
    check(sorted(w_ref) == sorted(w_new), "%s weight names (%d)" % (name, len(w_ref)))
    same = all(k in w_new and torch.equal(w_ref[k], w_new[k]) for k in w_ref)
    check(same, "%s weights bit-identical" % name)

    r_ref, m_ref = load(os.path.join(ref_dir, "ref.safetensors"))
    r_new, m_new = load(os.path.join(new_dir, "ref.safetensors"))
    check(sorted(r_ref) == sorted(r_new), "%s ref tensor names (%d)" % (name, len(r_ref)))
    for k in IGNORED_META:
        m_ref.pop(k, None)
        m_new.pop(k, None)
    check(m_ref == m_new, "%s ref metadata (hyperparameters)" % name)
    for k in sorted(r_ref):
        if k not in r_new:
            continue
        if k in EXACT:
            check(torch.equal(r_ref[k], r_new[k]), "%s %s identical" % (name, k))
        elif k in TRAJECTORIES:
            ok, err, scale = close(r_new[k][:1], r_ref[k][:1])
            check(ok, "%s %s[0] max|diff| %.3g %s %.0e * %.4g"
                  % (name, k, err, "<=" if ok else ">", RTOL, scale))
            ok, err, scale = close(r_new[k], r_ref[k], TRAJ_RTOL)
            check(ok, "%s %s (%d steps) max|diff| %.3g %s %.0e * %.4g"
                  % (name, k, r_ref[k].numel(), err, "<=" if ok else ">", TRAJ_RTOL, scale))
        else:
            ok, err, scale = close(r_new[k], r_ref[k])
            if not ok or not k.startswith("grad."):
                check(ok, "%s %s max|diff| %.3g %s %.0e * %.4g"
                      % (name, k, err, "<=" if ok else ">", RTOL, scale))
    grads = [k for k in r_ref if k.startswith("grad.") and k in r_new]
    check(all(close(r_new[k], r_ref[k])[0] for k in grads),
          "%s all %d grad.* tensors within %.0e relative" % (name, len(grads), RTOL))


def reload_check(name, ref_dir):
    _, model_cls, extra = gen_hf_ref.MODELS[name]
    model = model_cls.from_pretrained(ref_dir,  # sdpa at length, as generated
                                      attn_implementation=extra.get("attn_implementation", "eager"),
                                      dtype=torch.float32)
    model.eval()
    r, _ = load(os.path.join(ref_dir, "ref.safetensors"))
    ids = r["ids"].long()
    tg = r["targets"].long()
    if name in gen_hf_ref.DOCS:  # packed documents: the loss of every document run alone
        with torch.no_grad():
            lo, _ = gen_hf_ref.docs_loss(model, ids, tg, r["segs"].long(),
                                         gen_hf_ref.DOCS[name] == "restart")
        lo = lo.float().reshape(1)
        check(close(lo, r["loss"])[0],
              "%s reloaded loss %.8f vs committed %.8f" % (name, lo.item(), r["loss"].item()))
        return
    labels = ids.clone()
    # Rebuild HF's unshifted labels from the shifted targets: labels[:, t+1] = targets[:, t].
    labels[:, 1:] = tg[:, :-1]
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels)
    if "logits" in r:  # not kept at length
        ok, err, scale = close(out.logits.float(), r["logits"])
        check(ok, "%s reloaded logits max|diff| %.3g" % (name, err))
    lo = out.loss.float().reshape(1)
    check(close(lo, r["loss"])[0],
          "%s reloaded loss %.8f vs committed %.8f" % (name, lo.item(), r["loss"].item()))
    w, _ = load(os.path.join(ref_dir, "model.safetensors"))
    if extra.get("tie_word_embeddings"):
        check("lm_head.weight" not in w, "%s tied: no lm_head.weight in model.safetensors" % name)
    else:
        check("lm_head.weight" in w, "%s untied: lm_head.weight present" % name)


def main():
    transformers.utils.logging.disable_progress_bar()
    top = os.environ.get("top_srcdir")
    data = os.path.join(top, "tests", "ref", "data") if top else os.path.join(HERE, "data")
    print("torch %s, transformers %s; committed references in %s"
          % (torch.__version__, transformers.__version__, data))
    with tempfile.TemporaryDirectory(prefix="sdp-hfref-") as tmp:
        for name in gen_hf_ref.MODELS:
            ref_dir = os.path.join(data, name)
            if not os.path.isdir(ref_dir):
                check(False, "%s: %s missing" % (name, ref_dir))
                continue
            new_dir = gen_hf_ref.generate(name, tmp)
            compare_dir(name, ref_dir, new_dir)
            reload_check(name, ref_dir)
    print("FAIL (%d checks)" % len(failures) if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
