# share of the recomputed attention core in a step's GPU time, from an event log
import gzip, json, sys
d = {}
for l in gzip.open(sys.argv[1], "rt"):
    try:
        e = json.loads(l)
    except ValueError:
        continue
    if e.get("kind") == "CUDA" and e.get("step") == 1:
        k = (e["name"], e["phase"])
        d[k] = d.get(k, 0.0) + e["end_us"] - e["start_us"]
busy = sum(d.values())
rec = d.get(("attention_fwd", "recompute"), 0.0)
print("GPU busy %.0f ms, recomputed attention_fwd %.0f ms: %.1f%%" % (busy / 1e3, rec / 1e3, 100 * rec / busy))
