#!/bin/sh
# slidedp bench --lora-rank on the tiny Qwen3 of tests/ref (a Hugging Face config.json given as
# --model), on 2 CPU workers, 3 timed steps:
#   - rank 4 on every linear (the default all-linear), the same at 2 data-parallel ranks (--ranks 2,
#     one micro-batch a rank), and rank 2 on q_proj,v_proj with alpha 4: one JSON line with lora_rank, the settings' lora object (rank, alpha, targets in PEFT's
#     order), a finite loss, and model_tflops = tokens_per_s times LoRA's FLOPs of a token,
#     4 * matmul params + 6 * L * NH * HD * T + 6 * adapter params, computed here from the
#     config's shapes (docs/lora.md); the JSON's 6 significant digits bound the ratio's error by
#     2 * 5e-6;
#   - refusals with exit code 2 naming the option: rank 0, a rank above k_proj's 32 rows, a target
#     that names no linear, a target named twice, --lora-alpha without --lora-rank.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
model=$top/tests/ref/data/qwen3-tiny
common="--model $model --batch 4 --micro 2 --seq 32 --steps 3 --warmup 1 --gpus 0 --cpus 2"

run() { # NAME ARGS...: the JSON line into NAME.json
    name=$1
    shift
    # shellcheck disable=SC2086
    if ! "$bin" bench $common "$@" > "$tmp/$name.json" 2> "$tmp/$name.err"; then
        echo "$name: bench failed"; cat "$tmp/$name.err"; fail=1
    fi
}
run all --lora-rank 4
run all2 --lora-rank 4 --ranks 2
run qv --lora-rank 2 --lora-alpha 4 --lora-targets q_proj,v_proj

"$py" - "$tmp" "$model/config.json" <<'PYEOF' || fail=1
import json, math, sys
tmp, config = sys.argv[1:]
c = json.load(open(config))
ok = True
def load(name):
    lines = open("%s/%s.json" % (tmp, name)).read().splitlines()
    if len(lines) != 1:
        raise SystemExit("%s: %d lines on stdout, want one JSON line" % (name, len(lines)))
    return json.loads(lines[0])
def want(cond, what):
    global ok
    print("  %s: %s" % ("ok" if cond else "FAIL", what))
    ok = ok and cond
C, I, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
NH, NKV, HD, T = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], 32
# (in, out) of each linear of a layer, PEFT's names
dims = {"q_proj": (C, NH * HD), "k_proj": (C, NKV * HD), "v_proj": (C, NKV * HD),
        "o_proj": (NH * HD, C), "gate_proj": (C, I), "up_proj": (C, I), "down_proj": (I, C)}
matmul = L * sum(i * o for i, o in dims.values()) + V * C  # the LM head, tied or not
def flops(rank, targets):
    adapters = L * sum(rank * (dims[t][0] + dims[t][1]) for t in targets)
    return 4 * matmul + 6 * L * NH * HD * T + 6 * adapters
for name, rank, alpha, targets in (("all", 4, 8.0, list(dims)), ("all2", 4, 8.0, list(dims)),
                                   ("qv", 2, 4.0, ["q_proj", "v_proj"])):
    p = load(name)
    lo = p["settings"].get("lora", {})
    want(p["lora_rank"] == rank and lo == {"rank": rank, "alpha": alpha, "targets": targets},
         "%s: lora_rank %s, settings.lora %s" % (name, p["lora_rank"], lo))
    want(len(p["step_s"]) == 3 and p["tokens_per_s"] > 0 and math.isfinite(p["loss"]),
         "%s: 3 timed steps, %.0f tokens/s, loss %.4f" % (name, p["tokens_per_s"], p["loss"]))
    f = flops(rank, targets)
    ratio = p["model_tflops"] * 1e12 / (p["tokens_per_s"] * f)
    want(abs(ratio - 1) <= 1e-5, "%s: model_tflops %.6g = tokens/s x %.6g FLOPs/token (ratio %.7f)"
         % (name, p["model_tflops"], f, ratio))
    want(p["gpu_peak_gib"] == 0 and p["host_peak_gib"] > 0, "%s: GPU and host peaks" % name)
sys.exit(0 if ok else 1)
PYEOF

refused() { # WHAT WORD ARGS...: exit code 2 and WORD in the message
    what=$1 word=$2
    shift 2
    "$bin" bench --model "$model" --gpus 0 "$@" > "$tmp/bad.out" 2>&1
    rc=$?
    if [ $rc -ne 2 ] || ! grep -q -- "$word" "$tmp/bad.out"; then
        echo "$what: exit $rc, want 2 and '$word' named"; cat "$tmp/bad.out"; fail=1
    else
        echo "  ok: $what refused: $(grep -m 1 -- "$word" "$tmp/bad.out")"
    fi
}
refused "rank 0" "--lora-rank" --lora-rank 0
refused "rank 33 (k_proj is 32 x 64)" "--lora-rank: .*k_proj" --lora-rank 33
refused "target lm_head" "--lora-targets q_proj,lm_head: 'lm_head'" --lora-rank 4 \
    --lora-targets q_proj,lm_head
refused "q_proj twice" "--lora-targets" --lora-rank 4 --lora-targets q_proj,q_proj
refused "alpha without rank" "--lora-alpha" --lora-alpha 16

finish
