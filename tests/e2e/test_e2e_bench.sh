#!/bin/sh
# slidedp bench on the tiny Qwen3 of tests/ref (a Hugging Face config.json given as --model), on
# 2 CPU workers:
#   - pipelined (the default): one JSON line with the documented fields, one time per timed step,
#     tokens_per_s over the timed span and tokens_per_s_steady, settings.timing "pipelined",
#     grad_dtype auto resolved to fp32 without a GPU, bytes per rank, start-up times that add up,
#     an event log the invariant checker passes, and a memory log (--mem-log) of JSON lines with
#     the documented fields, times in order and the RSS within its peak;
#   - --barrier --grad-dtype bf16: timing "barrier", grad_dtype "bf16", no steady figure;
#   - --ranks 2: two ranks' bytes;
#   - --grad-dtype bf16 --embed-lookup host: bench tells the graph each next step's ids, so every
#     step but the last defers the embedding's late rows (settings.deferred_steps 3 of 4 steps,
#     0 in the other runs), and the checker passes its event log;
#   - refusals with exit code 2: an unknown model, a malformed config, a bad --grad-dtype, a batch
#     that is not a multiple of the micro-batch; a memory log that cannot be written exits 1
#     naming its path.
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
run pipe --events "$tmp/pipe.events" --mem-log "$tmp/pipe.mem"
run barrier --barrier --grad-dtype bf16
run ranks --ranks 2
run lookup --grad-dtype bf16 --embed-lookup host --events "$tmp/lookup.events"

"$py" - "$tmp" "$model" <<'PYEOF' || fail=1
import json, sys
tmp, model = sys.argv[1:]
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
p, b, r, lk = load("pipe"), load("barrier"), load("ranks"), load("lookup")
for k in ("system", "model", "batch", "seq", "tokens_per_s", "model_tflops", "step_s_median",
          "gpu_peak_gib", "host_peak_gib", "step_s", "settings", "bytes_per_rank_per_step",
          "startup_s"):
    want(k in p, "field %s" % k)
s = p["settings"]
want(p["system"] == "slidedp" and p["model"] == model and p["batch"] == 4 and p["seq"] == 32,
     "system, model, batch, seq")
want(len(p["step_s"]) == 3 and all(t > 0 for t in p["step_s"]), "3 timed steps: %s" % p["step_s"])
want(p["tokens_per_s"] > 0 and p.get("tokens_per_s_steady", 0) > 0,
     "tokens_per_s %.1f, steady %.1f" % (p["tokens_per_s"], p.get("tokens_per_s_steady", 0)))
# pipelined: the span covers the 3 steps and the drain, so it is at least their sum
want(p["tokens_per_s"] <= 4 * 32 * 3 / sum(p["step_s"]) * 1.0001,
     "tokens_per_s counts the whole span (at most the steps' own rate)")
want(s["timing"] == "pipelined" and s["grad_dtype"] == "fp32" and s["gpus"] == 0 and
     s["cpu_workers"] == 2 and s["micro_batch"] == 2 and s["ranks"] == 1,
     "settings: %s" % {k: s[k] for k in ("timing", "grad_dtype", "gpus", "cpu_workers")})
st = p["startup_s"]
parts = st["starpu"] + st["state"] + st["init_graph"]
want(all(v >= 0 for v in st.values()) and abs(parts - st["total"]) < 1e-3,
     "start-up parts %.4f add up to the total %.4f" % (parts, st["total"]))
want(len(p["bytes_per_rank_per_step"]) == 1 and p["bytes_per_rank_per_step"][0]["rank"] == 0,
     "bytes of one rank")
want(b["settings"]["timing"] == "barrier" and b["settings"]["grad_dtype"] == "bf16" and
     "tokens_per_s_steady" not in b, "--barrier --grad-dtype bf16")
want(r["settings"]["ranks"] == 2 and [x["rank"] for x in r["bytes_per_rank_per_step"]] == [0, 1],
     "--ranks 2: the bytes of ranks 0 and 1")
want(lk["settings"]["embed_lookup"] == "host" and lk["settings"]["deferred_steps"] == 3 and
     p["settings"]["deferred_steps"] == 0 and b["settings"]["deferred_steps"] == 0,
     "deferred steps: %d of 4 with the host lookup, %d and %d without" % (
         lk["settings"]["deferred_steps"], p["settings"]["deferred_steps"],
         b["settings"]["deferred_steps"]))
mem = [json.loads(l) for l in open("%s/pipe.mem" % tmp)]
keys = {"t_s", "rss_gib", "rss_peak_gib", "host_available_gib", "starpu_host_used_gib",
        "starpu_host_total_gib", "gpu_used_gib"}
want(len(mem) >= 2 and all(set(m) == keys for m in mem),
     "memory log: %d samples with the documented fields" % len(mem))
want(all(a["t_s"] <= b["t_s"] for a, b in zip(mem, mem[1:])) and mem[0]["t_s"] >= 0,
     "memory log: times in order, %.2f to %.2f s" % (mem[0]["t_s"], mem[-1]["t_s"]))
want(all(0 < m["rss_gib"] <= m["rss_peak_gib"] + 1e-3 and m["gpu_used_gib"] == [] and
         m["starpu_host_total_gib"] > 0 and m["starpu_host_used_gib"] >= 0 for m in mem),
     "memory log: RSS within its peak, StarPU's host size, no GPU")
want(mem[-1]["rss_peak_gib"] <= p["host_peak_gib"] + 1e-3,
     "memory log: the last peak %.3f GiB within the bench's %.3f GiB" % (
         mem[-1]["rss_peak_gib"], p["host_peak_gib"]))
sys.exit(0 if ok else 1)
PYEOF

for ev in pipe lookup; do
    "$py" "$top/tools/check_invariants.py" "$tmp/$ev.events" > "$tmp/check" 2>&1 ||
        { echo "the checker fails the bench's event log ($ev)"; tail -n 5 "$tmp/check"; fail=1; }
    echo "event log ($ev): $(tail -n 1 "$tmp/check")"
done

refused() { # WHAT WORD ARGS...: exit code 2 and WORD in the message
    what=$1 word=$2
    shift 2
    "$bin" bench "$@" > "$tmp/bad.out" 2>&1
    rc=$?
    if [ $rc -ne 2 ] || ! grep -q -- "$word" "$tmp/bad.out"; then
        echo "$what: exit $rc, want 2 and '$word' named"; cat "$tmp/bad.out"; fail=1
    else
        echo "  ok: $what refused: $(grep -m 1 -- "$word" "$tmp/bad.out")"
    fi
}
refused "unknown model" "nosuch-model" --model nosuch-model --gpus 0
printf '{"model_type": "qwen3", "hidden_size": "wide"}\n' > "$tmp/config.json"
refused "malformed config.json" "config.json" --model "$tmp/config.json" --gpus 0
refused "--grad-dtype fp16" "grad-dtype" --model "$model" --grad-dtype fp16 --gpus 0
refused "batch 3, micro 2" "micro-batches" --model "$model" --batch 3 --micro 2 --gpus 0
# shellcheck disable=SC2086
"$bin" bench $common --mem-log "$tmp/no/such/dir/m.jsonl" > "$tmp/bad.out" 2>&1
rc=$?
if [ $rc -ne 1 ] || ! grep -q "no/such/dir/m.jsonl" "$tmp/bad.out"; then
    echo "unwritable memory log: exit $rc, want 1 and its path named"; cat "$tmp/bad.out"; fail=1
else
    echo "  ok: unwritable memory log: $(grep -m 1 "no/such/dir" "$tmp/bad.out")"
fi

finish
