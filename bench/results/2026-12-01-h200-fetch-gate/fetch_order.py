# The forward's param_fetch tasks of step 3 in the order the CUDA worker ran them, each with
# the GPU task before it and the gap between the two.  Usage: fetch_order.py EVENTS.jsonl.gz
import gzip, json, sys
ev = [json.loads(l) for l in gzip.open(sys.argv[1], "rt")]
gpu = sorted((e for e in ev if e.get("kind") == "CUDA" and e.get("event", "task") != "wait"),
             key=lambda e: e["start_us"])
for prev, e in zip(gpu, gpu[1:]):
    if e["step"] == 3 and e["phase"] == "fwd" and e["name"] == "param_fetch":
        print("fetch of group %2d after %s of group %2d, gap %.1f ms"
              % (e["group"], prev["name"], prev["group"], (e["start_us"] - prev["end_us"]) / 1e3))
