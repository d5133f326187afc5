#!/bin/sh
# SPDX-License-Identifier: MIT
# LoRA adapters in PEFT's format (runtime/peft.c, formats/peftconfig.c) against PEFT itself:
# lora_peft.py makes a tiny Qwen3 (the tiny recipe's shapes, tied), a tiny Llama (untied, llama3
# RoPE scaling) and a tiny Qwen3-MoE (one dense layer; adapters on q, k, v and o, the experts and
# the router frozen, the load-balancing loss's gradient reaching the adapters), fp32, and a PEFT
# adapter of each with a non-zero B; `slidedp export ADAPTER OUT --base BASE` reads it and writes
# it again, and with --merge writes the merged model.  lora_peft.py then checks that the rewritten adapter is PEFT's
# bit for bit and loads with PeftModel.from_pretrained, that every merged weight is PEFT's
# merge_and_unload() within a derived rounding bound, and that the merged model's logits
# (transformers' and our own forward, dump_logits) and our forward of the frozen base with the
# adapter's own tasks (lora_fwd, dump_logits with the adapter) match PEFT's LoRA forward.  Bad adapters are
# refused with exit 2 naming the field or tensor, writing nothing: a DoRA config, a target that
# names no linear, a tensor whose shape disagrees with the base, an extra tensor; and an adapter
# without --base; a recipe whose lora.init_from adapter is not its lora: is refused (exit 2).
# For each model, training too: 10 steps from the PEFT adapter against PEFT's own training of it
# (losses, gradient norms, the final adapter in RUN/final, which PeftModel.from_pretrained loads),
# for the Qwen3 with lora.dropout 0.1 against PEFT whose lora_dropout draws the same masks, and
# for the Qwen3-MoE with routed streaming of its frozen experts (below).  Skips (77) without torch,
# transformers, peft or safetensors.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
dump=$build/tests/e2e/dump_logits
need_python numpy torch transformers peft safetensors
[ -x "$dump" ] || { echo "missing helper $dump (make check builds it)"; echo FAIL; exit 1; }

# train_against_peft W RUN DROPOUT: 10 AdamW steps of W's adapter (B non-zero) on the frozen base,
# fp32, CPU workers, with lora.dropout DROPOUT (seed 7); losses, gradient norms and the final
# adapter (W/RUN/final) against PEFT's own training (lora_peft.py train: its tolerances are derived
# there; with dropout, PEFT's lora_dropout modules draw the run's masks)
train_against_peft() {
    {
        printf 'model: {path: %s}\ndata: {train: %s, seq_len: 32, shuffle: false}\n' "$1/base" "$top/data/kjv/val.tok"
        printf 'batch: {global: 4, micro: 2}\nschedule: {name: constant, warmup_steps: 0}\n'
        printf 'optimizer: {lr: 1.0e-3, beta1: 0.9, beta2: 0.95, eps: 1.0e-8, weight_decay: 0.1, max_grad_norm: 1.0}\n'
        printf 'train: {steps: 10, precision: fp32, seed: 7}\n'
        printf 'lora: {rank: 4, alpha: 8, dropout: %s, targets: %s, layers: %s, init_from: %s}\n' \
            "$3" "$(cat "$1/targets")" "$(cat "$1/layers")" "$1/adapter"
    } > "$1/$2.yaml"
    if ! "$bin" train "$1/$2.yaml" --cpus 2 --output "$1/$2" --metrics "$1/$2.jsonl" -q 2> "$1/$2.err"; then
        echo "LoRA training ($2) failed"; cat "$1/$2.err"; fail=1; return
    fi
    "$py" "$top/tests/e2e/lora_peft.py" train "$1" "$top/data/kjv/val.tok" "$1/$2" "$1/$2.jsonl" 10 "$3" 7 2>&1 |
        grep -v -e 'Loading weights' -e 'Warning' -e 'warnings.warn' | tee "$1/$2.log"
    grep -q '^PASS$' "$1/$2.log" || fail=1
}

# against_peft ARCH: the model and adapter in $tmp/ARCH, the exports, their checks, the training
against_peft() {
    w=$tmp/$1
    mkdir -p "$w"
    echo "== $1"
    "$py" "$top/tests/e2e/lora_peft.py" make "$w" "$1" > "$w/make.log" 2>&1 ||
        { cat "$w/make.log"; fail=1; return; }
    for v in rewritten merged; do
        flag=; [ "$v" = merged ] && flag=--merge
        "$bin" export "$w/adapter" "$w/$v" --base "$w/base" $flag > "$w/$v.out" 2> "$w/$v.err" ||
            { echo "export ($v) failed"; cat "$w/$v.err"; fail=1; return; }
    done
    "$py" "$top/tests/e2e/lora_peft.py" check "$w" "$dump" 2>&1 |
        grep -v -e 'Loading weights' -e 'Warning' -e 'warnings.warn' | tee "$w/check.log"
    grep -q '^PASS$' "$w/check.log" || fail=1
    train_against_peft "$w" run 0
    # PEFT loads what the run wrote
    "$py" -c "import sys, transformers, peft
m = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1])
peft.PeftModel.from_pretrained(m, sys.argv[2]); print('PeftModel.from_pretrained loaded RUN/final')" \
        "$w/base" "$w/run/final" 2>&1 | grep -v -e 'Loading weights' -e arn || fail=1
}
against_peft qwen3
against_peft llama
against_peft qwen3_moe
# the Qwen3-MoE's frozen experts by routed streaming (on CPU workers where the chunk pipeline is
# on), in 8 KiB chunks under a window of 1 (unbounded, the frozen copies stay where the compute
# is): the plan says so for the sparse layers (the dense one, frozen, is fetched
# whole), every compute copy starts as NaN
# (a routed expert left uncopied makes the step non-finite), and the losses are bit for bit those
# of the same run with every expert sent (SDP_MOE_ROUTED=off)
w=$tmp/qwen3_moe
sed -e 's/seed: 7}/seed: 7, chunk_mib: 0.0078125, window: 1}/' "$w/run.yaml" > "$w/chunked.yaml"
SDP_CHUNK_PIPELINE=on "$bin" train "$w/chunked.yaml" --cpus 2 --print-plan > "$w/routed.plan" 2>&1
grep -Eq "^3 .* host/r " "$w/routed.plan" && grep -Eq "^4 .* host/r " "$w/routed.plan" &&
    grep -Eq "^2 +[a-z]+ +off +host " "$w/routed.plan" ||
    { echo "LoRA on the MoE: routed streaming for the sparse layers 3-4 only"; cat "$w/routed.plan"; fail=1; }
for m in on off; do
    SDP_POISON_COMPUTE_COPY=1 SDP_MOE_ROUTED=$m SDP_CHUNK_PIPELINE=on "$bin" train \
        "$w/chunked.yaml" --cpus 2 --output "$w/routed-$m" --metrics "$w/routed-$m.jsonl" -q \
        2> "$w/routed-$m.err" || { echo "LoRA on the MoE, routed $m: failed"; cat "$w/routed-$m.err"; fail=1; }
done
loss_of() { grep -o '"loss": *[^,]*' "$1"; }
[ -s "$w/routed-on.jsonl" ] && [ "$(loss_of "$w/routed-on.jsonl")" = "$(loss_of "$w/routed-off.jsonl")" ] &&
    echo "LoRA on the MoE, routed streaming: the 10 losses of every expert sent, bit for bit" ||
    { echo "routed streaming changed the losses"; fail=1; }
w=$tmp/qwen3
# lora.dropout 0.1: the same 10 steps with the adapters' inputs dropped; a run without the masks
# (dropout 0) differs from it by more than 10x the comparison's loss tolerance (1e-5), so the
# comparison tells a run with the masks from one without
echo "== qwen3, lora.dropout 0.1"
train_against_peft "$w" drop 0.1
"$py" - "$w/run.jsonl" "$w/drop.jsonl" <<'PYEOF' || fail=1
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f)] for f in sys.argv[1:3])
d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("dropout 0.1 against none: losses differ by up to %.1e relative" % d)
sys.exit(0 if d > 1e-4 else 1)
PYEOF

# bad adapters: each a copy with one flaw, refused naming it; nothing written
bad() { # NAME PYTHON: copy the adapter into $tmp/bad-NAME, then run PYTHON there (d: the dir)
    mkdir -p "$tmp/bad-$1" && cp "$w/adapter/adapter_config.json" "$w/adapter/adapter_model.safetensors" "$tmp/bad-$1/"
    "$py" -c "import json, sys, torch; from safetensors.torch import load_file, save_file
d = sys.argv[1]; c = json.load(open(d + '/adapter_config.json')); t = load_file(d + '/adapter_model.safetensors')
$2
json.dump(c, open(d + '/adapter_config.json', 'w')); save_file(t, d + '/adapter_model.safetensors', metadata={'format': 'pt'})" "$tmp/bad-$1"
}
q=base_model.model.model.layers.1.self_attn.q_proj
bad dora "c['use_dora'] = True"
bad target "c['target_modules'] = ['q_proj', 'embed_tokens']"
bad shape "t['$q.lora_A.weight'] = torch.zeros(4, 96)"
bad extra "t['base_model.model.model.embed_tokens.lora_embedding_A'] = torch.zeros(4, 8)"
bad missing "del t['$q.lora_B.weight']"
expect_dir=$w
expect 2 "use_dora: set, which is not supported" -- "$bin" export "$tmp/bad-dora" "$tmp/o1" --base "$w/base"
expect 2 "target_modules: 'embed_tokens' names no linear" -- "$bin" export "$tmp/bad-target" "$tmp/o2" --base "$w/base"
expect 1 "$q.lora_A.weight has shape \[4, 96\], the base implies \[4, 128\]" -- \
    "$bin" export "$tmp/bad-shape" "$tmp/o3" --base "$w/base" --merge
expect 1 "lora_embedding_A is not a LoRA adapter" -- "$bin" export "$tmp/bad-extra" "$tmp/o4" --base "$w/base"
expect 1 "$q.lora_B.weight is missing" -- "$bin" export "$tmp/bad-missing" "$tmp/o5" --base "$w/base"
expect 2 "is a PEFT adapter" -- "$bin" export "$w/adapter" "$tmp/o6"
# lora.init_from: the adapter must be the recipe's LoRA (checked before the run starts)
recipe() { # RANK: a LoRA recipe on the base, starting from the adapter
    printf 'model: {path: %s}\ndata: {train: %s, seq_len: 32}\nbatch: {global: 2, micro: 2}\n' \
        "$w/base" "$top/data/kjv/val.tok"
    printf 'train: {steps: 1, precision: fp32}\n'
    printf 'lora: {rank: %s, alpha: 8, targets: all-linear, layers: 2-4, init_from: %s}\n' "$1" "$w/adapter"
}
recipe 4 > "$tmp/r4.yaml"
recipe 8 > "$tmp/r8.yaml"
expect 0 "state: " -- "$bin" train "$tmp/r4.yaml" --cpus 2 --print-plan
expect 2 "adapter .*: r differs from the run's LoRA \(r 4, lora_alpha 8 here; rank 8" -- \
    "$bin" train "$tmp/r8.yaml" --cpus 2 --print-plan
for o in o1 o2 o3 o4 o5 o6; do
    [ -e "$tmp/$o/model.safetensors" ] || [ -e "$tmp/$o/adapter_model.safetensors" ] &&
        { echo "$o: a refused export wrote its output"; fail=1; }
done
finish
