#!/bin/sh
# bench/peers.py, the PyTorch peers, where no GPU is needed: FSDP2 on CPU processes (gloo) on the
# tiny preset, one and two ranks, 1 timed step after 1 warm-up:
#   - one JSON line each, system fsdp2, the step's sequences counted over the ranks (batch 2 a
#     rank: 2 and 4), tokens_per_s = batch x seq / median step, settings.ranks as asked, a finite
#     host peak;
#   - peft-lora on the CPU (bf16 base, rank-4 adapters on every linear, 1 timed step): system
#     peft-lora, lora_rank 4, the adapters' count PEFT made (settings.adapter_params) and
#     model_tflops = tokens/s x LoRA's FLOPs of a token (4 x matmul params + 6 x L x NH x HD x T
#     + 6 x adapter params, as slidedp bench --lora-rank counts them), both from the tiny preset's
#     shapes written out here, a finite loss; on the tiny-moe preset (a Qwen3-MoE) the adapters on
#     q, k, v and o only and the FLOPs of the experts a token routes to;
#   - --ranks 0, pytorch-gpu with two ranks or on the CPU, an unknown system, peft-lora with two
#     ranks or rank 0 or a rank above the narrowest linear's 64 (k_proj's rows), and --lora-rank for another system are
#     refused with exit code 2;
#   - roundpipe (RoundPipe's own code) on the CPU or with two ranks, 17 micro-batches of a 16-sequence
#     step, --rp-microbatch for another system, and a missing checkout are refused with exit code 2,
#     the last saying how to get the checkout at the pinned commit.
# The GPU runs (pytorch-gpu, fsdp2 and fsdp2-offload on H200s) are bench/run-gpu.sh's.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
need_python torch transformers
port=$((29600 + $$ % 300))

for R in 1 2; do
    if ! timeout 300 "$py" "$top/bench/peers.py" --system fsdp2 --model tiny --device cpu \
        --ranks "$R" --batch 2 --seq 64 --steps 1 --warmup 1 --port "$port" \
        > "$tmp/r$R.json" 2> "$tmp/r$R.err"; then
        echo "fsdp2 on $R CPU rank(s) failed"; cat "$tmp/r$R.err"; fail=1
    fi
done
if ! timeout 300 "$py" "$top/bench/peers.py" --system peft-lora --model tiny --device cpu \
    --batch 2 --seq 64 --steps 1 --warmup 1 --lora-rank 4 > "$tmp/lora.json" 2> "$tmp/lora.err"; then
    echo "peft-lora on the CPU failed"; cat "$tmp/lora.err"; fail=1
fi
# a Qwen3-MoE (the tiny-moe preset): adapters on q, k, v and o only, FLOPs of the routed experts
if timeout 300 "$py" "$top/bench/peers.py" --system peft-lora --model tiny-moe --device cpu \
    --batch 2 --seq 64 --steps 1 --warmup 1 --lora-rank 4 > "$tmp/moe.json" 2> "$tmp/moe.err"; then
    "$py" - "$tmp/moe.json" <<'PYEOF' || fail=1
import json, math, sys
o = json.loads(open(sys.argv[1]).read())
# tiny-moe: C 128, 2 sparse layers of 8 experts (32 wide), 2 a token, 4 heads of 32, 2 KV heads
C, L, NH, HD, NKV, V, T, r, E, K, IM = 128, 2, 4, 32, 2, 151936, 64, 4, 8, 2, 32
matmul = L * (C * NH * HD + 2 * C * NKV * HD + NH * HD * C + E * C + K * 3 * C * IM) + V * C
adapters = L * r * ((C + NH * HD) + 2 * (C + NKV * HD) + (NH * HD + C))
flops = 4 * matmul + 6 * L * NH * HD * T + 6 * adapters
ok = o["settings"]["adapter_params"] == adapters and math.isfinite(o["loss"])
ok = ok and o["settings"]["lora"]["targets"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
ok = ok and abs(o["model_tflops"] * 1e12 - o["tokens_per_s"] * flops) <= 1e-9 * o["tokens_per_s"] * flops
print("peft-lora, tiny-moe: %s (adapters %d, %d FLOPs/token)" % ("ok" if ok else "FAIL", adapters, flops))
sys.exit(0 if ok else 1)
PYEOF
else
    echo "peft-lora on the tiny Qwen3-MoE failed"; cat "$tmp/moe.err"; fail=1
fi
"$py" - "$tmp" <<'PYEOF' || fail=1
import json, math, os, sys
ok = True
lines = open(os.path.join(sys.argv[1], "lora.json")).read().splitlines()
if len(lines) != 1:
    raise SystemExit("peft-lora: %d lines on stdout, 1 expected" % len(lines))
o = json.loads(lines[0])
print("peft-lora: %s" % lines[0][:200])
# peers.py's tiny preset: C 128, I 384, 2 layers, 4 heads of 32, 2 KV heads, vocab 151936
C, I, L, NH, HD, NKV, V, T, r = 128, 384, 2, 4, 32, 2, 151936, 64, 4
matmul = L * (C * NH * HD + 2 * C * NKV * HD + NH * HD * C + 3 * C * I) + V * C
adapters = L * r * ((C + NH * HD) + 2 * (C + NKV * HD) + (NH * HD + C) + 2 * (C + I) + (I + C))
flops = 4 * matmul + 6 * L * NH * HD * T + 6 * adapters
tps = o["batch"] * o["seq"] / o["step_s_median"]
ok = o["system"] == "peft-lora" and o["lora_rank"] == r and o["settings"]["adapter_params"] == adapters
ok = ok and abs(o["tokens_per_s"] - tps) <= 1e-6 * tps and math.isfinite(o["loss"])
ok = ok and abs(o["model_tflops"] * 1e12 - o["tokens_per_s"] * flops) <= 1e-9 * o["tokens_per_s"] * flops
print("peft-lora: %s (adapters %d, %d FLOPs/token)" % ("ok" if ok else "FAIL", adapters, flops))
for R in (1, 2):
    lines = open(os.path.join(sys.argv[1], "r%d.json" % R)).read().splitlines()
    if len(lines) != 1:
        print("ranks %d: %d lines on stdout, 1 expected" % (R, len(lines)))
        ok = False
        continue
    o = json.loads(lines[0])
    print("ranks %d: %s" % (R, lines[0][:200]))
    tps = o["batch"] * o["seq"] / o["step_s_median"]
    ok = ok and o["system"] == "fsdp2" and o["batch"] == 2 * R and o["settings"]["ranks"] == R
    ok = ok and abs(o["tokens_per_s"] - tps) <= 1e-6 * tps and len(o["step_s"]) == 1
    ok = ok and math.isfinite(o["host_peak_gib"]) and o["host_peak_gib"] > 0
sys.exit(0 if ok else 1)
PYEOF
for args in "--system fsdp2 --ranks 0" "--system pytorch-gpu --ranks 2" \
    "--system pytorch-gpu --device cpu" "--system ddp" "--system peft-lora --ranks 2 --device cpu" \
    "--system peft-lora --lora-rank 0" "--system peft-lora --lora-rank 65" \
    "--system fsdp2 --lora-rank 16" "--system roundpipe --device cpu" "--system roundpipe --ranks 2" \
    "--system roundpipe --rp-microbatch 17" "--system fsdp2 --rp-microbatch 2" \
    "--system roundpipe --roundpipe-dir $tmp/no-roundpipe"; do
    # shellcheck disable=SC2086
    "$py" "$top/bench/peers.py" $args --model tiny > /dev/null 2> "$tmp/bad.err"
    st=$?
    if [ $st -ne 2 ]; then
        echo "peers.py $args: exit $st, not 2"; cat "$tmp/bad.err"; fail=1
    else
        echo "peers.py $args: exit 2, $(tail -n 1 "$tmp/bad.err" | cut -c1-100)"
    fi
done
grep -q "git clone https://github.com/ITcarrot/RoundPipe deps/roundpipe && git -C deps/roundpipe checkout e813c67" \
    "$tmp/bad.err" || { echo "the missing checkout's error does not say how to get it"; fail=1; }

finish
