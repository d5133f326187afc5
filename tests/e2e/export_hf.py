#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Round trip of `slidedp export` through Hugging Face transformers (run by test_e2e_export_hf.sh).

1. The exported weights must be bit-identical, tensor by tensor (names, dtypes, shapes, bytes), to
   the model.safetensors that the training run wrote itself into RUN/final.
2. transformers loads the exported directory (AutoModelForCausalLM, fp32, eager attention) and
   computes the logits of a fixed batch: the first 2 windows of T = 32 tokens of data/kjv/val.tok
   (window i = tokens [i*T, i*T + T), as the data loader cuts them).  Our logits of the same batch
   come from dump_logits (our StarPU forward pass on the same exported directory); they must agree
   to a relative Frobenius error ||ours - hf||_F / ||hf||_F < LOGIT_RTOL.
Exit 0 pass, 1 fail, 77 skip (torch, transformers, safetensors or numpy missing).
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import transformers
    from safetensors import safe_open
except ImportError as e:
    print("SKIP: %s" % e)
    print("SKIP")
    sys.exit(77)

NSEQ, T = 2, 32

# Tolerance on the logits.  Both sides run the same fp32 graph on bit-identical weights (checked in
# part 1), so the only differences are rounding errors from different summation orders and kernels
# (BLAS blocking, exp/rsqrt implementations).  The micro model has C = 32, intermediate 64, 2
# layers, T = 32: each logit depends on a chain of ~20 fp32 operations (norms, projections,
# attention with a softmax over <= 32 keys, SwiGLU, residual adds), the longest reductions k = 64
# terms.  With unit roundoff u = 2^-24 ~ 6e-8, a reduction of k terms has a typical (random-walk)
# relative error sqrt(k) u = 4.8e-7, so the chain gives ~ sqrt(20) * 4.8e-7 ~ 2.1e-6 norm-wise.
# The final norm and the LM head (a dot product of C = 32 terms per logit, V = 151936 logits) do
# not amplify this: the relative Frobenius norm averages over all 2 * 32 * V logits.  Threshold
# 1e-5 ~ 5x the typical estimate; a real error (a wrong weight, a transposed head, a missed norm)
# moves the logits by O(1) relative.  Measured when added: 9.2e-8 (transformers 5.24, torch 2.15).
LOGIT_RTOL = 1e-5


def read_shard(path, n):
    """First n token ids of a token shard (format: formats/shard.h)."""
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) != 64 or head[:8] != b"SDPTOKEN":
            raise ValueError("%s: not a token shard" % path)
        version, width, count = struct.unpack("<IIQ", head[8:24])
        if version != 1 or width != 4 or count < n:
            raise ValueError("%s: version %d, width %d, %d tokens" % (path, version, width, count))
        return np.frombuffer(f.read(4 * n), dtype="<u4").astype(np.int64)


def safetensors_files(path):
    """The safetensors files of a Hugging Face directory (one file or a sharded index)."""
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            names = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(path, n) for n in names]
    return [os.path.join(path, "model.safetensors")]


def load_tensors(path):
    out = {}
    for fn in safetensors_files(path):
        with safe_open(fn, framework="pt") as f:
            for k in f.keys():
                out[k] = f.get_tensor(k)
    return out


def compare_weights(exported, final):
    a, b = load_tensors(exported), load_tensors(final)
    bad = 0
    if set(a) != set(b):
        print("  tensor names differ: only exported %s, only final %s"
              % (sorted(set(a) - set(b)), sorted(set(b) - set(a))))
        bad += 1
    nbytes = 0
    for k in sorted(set(a) & set(b)):
        x, y = a[k], b[k]
        if x.dtype != y.dtype or x.shape != y.shape:
            print("  %s: exported %s %s, final %s %s"
                  % (k, x.dtype, tuple(x.shape), y.dtype, tuple(y.shape)))
            bad += 1
            continue
        bx = x.contiguous().view(torch.uint8)
        by = y.contiguous().view(torch.uint8)
        if not torch.equal(bx, by):
            diff = (x.double() - y.double()).abs().max().item()
            print("  %s: bytes differ (max abs diff %.3e)" % (k, diff))
            bad += 1
        nbytes += bx.numel()
    print("weights: %d exported tensors vs %d in the run's final model, %d bytes compared: %s"
          % (len(a), len(b), nbytes, "bit-identical" if not bad else "%d mismatch(es)" % bad))
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exported", required=True, help="directory written by slidedp export")
    ap.add_argument("--final", required=True, help="RUN/final of the training run")
    ap.add_argument("--dump-logits", required=True, help="the dump_logits helper program")
    ap.add_argument("--tokens", required=True, help="token shard (data/kjv/val.tok)")
    a = ap.parse_args()
    torch.manual_seed(0)
    fails = compare_weights(a.exported, a.final)

    ids = read_shard(a.tokens, NSEQ * T).reshape(NSEQ, T)
    with tempfile.TemporaryDirectory() as tmp:
        ids_path, out_path = os.path.join(tmp, "ids.bin"), os.path.join(tmp, "logits.bin")
        ids.astype(np.int32).tofile(ids_path)
        r = subprocess.run([a.dump_logits, a.exported, ids_path, str(NSEQ), str(T), out_path])
        if r.returncode != 0:
            print("dump_logits exited %d" % r.returncode)
            print("FAIL")
            return 1
        ours = np.fromfile(out_path, dtype=np.float32)

    kw = {"attn_implementation": "eager"}
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(a.exported, dtype=torch.float32,
                                                                  **kw)
    except TypeError:  # transformers < 4.56 names it torch_dtype
        model = transformers.AutoModelForCausalLM.from_pretrained(a.exported,
                                                                  torch_dtype=torch.float32, **kw)
    model.eval()
    with torch.no_grad():
        ref = model(torch.tensor(ids)).logits.double().numpy()
    V = ref.shape[-1]
    if ours.size != ref.size:
        print("logits: ours has %d values, transformers %s" % (ours.size, ref.shape))
        print("FAIL")
        return 1
    ours = ours.astype(np.float64).reshape(ref.shape)
    err = np.linalg.norm(ours - ref) / np.linalg.norm(ref)
    maxabs = np.abs(ours - ref).max()
    same_argmax = (ours.argmax(-1) == ref.argmax(-1)).mean()
    ok = err < LOGIT_RTOL
    print("logits: %s (transformers %s, %s), %d x %d x V=%d, ids %s..."
          % (type(model).__name__, transformers.__version__, torch.__version__, NSEQ, T, V,
             ids[0, :6].tolist()))
    print("  rel Frobenius err %.3e (%.0f%% of %.0e), max abs diff %.3e, |logit| max %.3f, "
          "argmax agreement %.4f: %s"
          % (err, 100 * err / LOGIT_RTOL, LOGIT_RTOL, maxabs, np.abs(ref).max(), same_argmax,
             "ok" if ok else "FAIL"))
    fails += 0 if ok else 1
    print("FAIL" if fails else "PASS")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
