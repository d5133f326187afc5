#!/bin/sh
# SPDX-License-Identifier: MIT
# RUN/final is usable as it is: with model.tokenizer naming the bundled Qwen3 tokenizer, a 2-step
# run of the micro recipe leaves in RUN/final the tokenizer's files and a generation_config.json,
# and transformers loads the directory with its tokenizer: the tokenizer encodes a chat turn as the
# source tokenizer does, the generation config's eos includes <|im_end|>, config.json carries bos
# and eos, and generate() stops at <|im_end|> when the model emits it.  A llama recipe without
# bos/eos gets them from the tokenizer.  A model.tokenizer that is not a tokenizer directory, or
# whose ids exceed the model's vocabulary, is refused (exit 2) before the run starts.
# The run prints the memory it holds and needs before step 1, and a closing summary line.
# Skips (77) without torch/transformers.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
need_python torch transformers
tok=$top/data/tokenizers/qwen3

micro_recipe | sed -e "s#^  arch: qwen3#  arch: qwen3\n  tokenizer: $tok#" > "$tmp/r.yaml"
if ! "$bin" train "$tmp/r.yaml" --steps 2 --cpus 2 -q --output "$tmp/run" 2> "$tmp/train.err"; then
    echo "training failed"; tail -n 20 "$tmp/train.err"; echo FAIL; exit 1
fi
echo "final/: $(ls "$tmp/run/final" | tr '\n' ' ')"
# what the run tells: its memory before step 1, and a closing line
grep -q "memory before step 1: host .* held (.* pinned) and about .* of activations in a step" \
    "$tmp/train.err" || { echo "no memory line before step 1"; cat "$tmp/train.err"; fail=1; }
grep -q "done: steps 1-2 in .* tokens/s, last loss .*, peak host memory" "$tmp/train.err" ||
    { echo "no closing summary line"; cat "$tmp/train.err"; fail=1; }
sed -e "s#^  arch: qwen3#  arch: llama#" "$tmp/r.yaml" > "$tmp/llama.yaml"
if ! "$bin" train "$tmp/llama.yaml" --steps 1 --cpus 2 -q --output "$tmp/llama" 2> "$tmp/llama.err"; then
    echo "llama training failed"; tail -n 20 "$tmp/llama.err"; fail=1
fi

"$py" - "$tmp/run/final" "$tok" "$tmp/llama/final" <<'PYEOF' || fail=1
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
final, src, llama = sys.argv[1:4]
ok = True
def check(cond, what):
    global ok
    print(("ok   " if cond else "FAIL ") + what)
    ok = ok and cond
tk, ref = AutoTokenizer.from_pretrained(final), AutoTokenizer.from_pretrained(src)
turn = "<|im_start|>user\nWho wrote the Jargon File?<|im_end|>\n<|im_start|>assistant\n"
check(tk.encode(turn) == ref.encode(turn), "final/'s tokenizer encodes a chat turn as the source")
im_end = ref.convert_tokens_to_ids("<|im_end|>")
gc = GenerationConfig.from_pretrained(final)
eos = gc.eos_token_id if isinstance(gc.eos_token_id, list) else [gc.eos_token_id]
check(im_end in eos, "generation_config eos %s includes <|im_end|> (%d)" % (eos, im_end))
cfg = json.load(open(final + "/config.json"))
check(cfg.get("eos_token_id") is not None and cfg.get("bos_token_id") == ref.bos_token_id,
      "config.json eos %s, bos %s as the tokenizer's" % (cfg.get("eos_token_id"),
                                                        cfg.get("bos_token_id")))
model = AutoModelForCausalLM.from_pretrained(final, dtype=torch.float32)
# make the model emit <|im_end|> after the prompt (its LM head row along the last hidden state):
# generate() must stop there, else it goes on to 8 tokens
ids = torch.tensor([tk.encode(turn)])
seen = []
hook = model.lm_head.register_forward_hook(lambda m, i, o: seen.append(i[0][0, -1].clone()))
with torch.no_grad():
    model(ids)
    hook.remove()
    model.lm_head.weight.zero_()
    model.lm_head.weight[im_end] = 100.0 * seen[0] / seen[0].norm()
out = model.generate(ids, max_new_tokens=8, do_sample=False)
new = out[0, ids.shape[1]:].tolist()
check(new == [im_end], "generate() stops at <|im_end|>: %s" % new)
lcfg = json.load(open(llama + "/config.json"))
check(lcfg.get("eos_token_id") == im_end,
      "llama without eos: config.json eos %s from the tokenizer" % lcfg.get("eos_token_id"))
sys.exit(0 if ok else 1)
PYEOF

# refused up front: not a tokenizer directory, a vocabulary larger than the model's
sed -e "s#^  tokenizer: .*#  tokenizer: $top/data/kjv#" "$tmp/r.yaml" > "$tmp/notok.yaml"
sed -e "s#^  vocab_size: .*#  vocab_size: 50000#" "$tmp/r.yaml" > "$tmp/small.yaml"
for bad in notok small; do
    "$bin" train "$tmp/$bad.yaml" --steps 1 --cpus 2 -q --output "$tmp/$bad" 2> "$tmp/$bad.err"
    st=$?
    if [ $st -ne 2 ] || ! grep -q "model.tokenizer" "$tmp/$bad.err" || [ -e "$tmp/$bad" ]; then
        echo "$bad: exit $st, expected 2 naming model.tokenizer with no run directory made"
        cat "$tmp/$bad.err"; fail=1
    else
        echo "$bad: refused: $(grep -m1 model.tokenizer "$tmp/$bad.err" | cut -c1-150)"
    fi
done
finish
