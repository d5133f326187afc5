#!/bin/sh
# The recipe's `plan:` section and `slidedp train --print-plan`, on the 6-layer micro model (fp32,
# 2 CPU workers):
#   - --print-plan prints the plan's table and exits 0 without training: the default plan
#     recomputes layers 1-5 and keeps layer 6 (keep_last 1); with rows keeping layers 2-3 and
#     making layer 4 selective, the table says so;
#   - training with that plan gives the default run's losses bit for bit (keeping or recomputing
#     a layer changes no sum), and the event log shows the plan: no recomputation of layers 2-3
#     (their groups), and layer 4's recomputation without the attention's output projection;
#   - a plan row with an unknown key, an unknown value, layers beyond the model, or an item
#     without `layers:` is refused with exit code 2, naming the recipe and the line.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"

base() { micro_recipe | sed -e "s#^  num_layers: .*#  num_layers: 6#"; }
base > "$tmp/default.yaml"
{ base; printf 'plan:\n  - {layers: 2-3, activations: keep}\n  - layers: 4\n    activations: selective\n'; } \
    > "$tmp/mixed.yaml"

if ! "$bin" train "$tmp/mixed.yaml" --cpus 2 --print-plan > "$tmp/plan.txt" 2> "$tmp/plan.err"; then
    echo "--print-plan failed"; cat "$tmp/plan.err"; fail=1
fi
cat "$tmp/plan.txt"
[ -e "$tmp/m.jsonl" ] && { echo "--print-plan trained"; fail=1; }
# the rows of layers 2-3 (keep), 4 (selective) and 5 (recompute) as the table prints them
grep -Eq '^ *(layer[s]? )?2-3 .*keep' "$tmp/plan.txt" || { echo "no row keeping layers 2-3"; fail=1; }
grep -Eq '^ *(layer[s]? )?4 .*selective' "$tmp/plan.txt" || { echo "no selective row for 4"; fail=1; }
grep -Eq '^ *(layer[s]? )?5 .*recompute' "$tmp/plan.txt" || { echo "no recompute row for 5"; fail=1; }
"$bin" train "$tmp/default.yaml" --cpus 2 --print-plan > "$tmp/plan0.txt" 2> "$tmp/plan0.err" ||
    { echo "--print-plan (default) failed"; cat "$tmp/plan0.err"; fail=1; }
grep -Eq '^ *(layer[s]? )?1-5 .*recompute' "$tmp/plan0.txt" ||
    { echo "the default plan does not recompute layers 1-5"; cat "$tmp/plan0.txt"; fail=1; }

for v in default mixed; do
    "$bin" train "$tmp/$v.yaml" --cpus 2 -q --metrics "$tmp/m-$v.jsonl" --events "$tmp/e-$v.jsonl" \
        2> "$tmp/err-$v" || { echo "$v: training failed"; cat "$tmp/err-$v"; fail=1; }
done
"$py" - "$tmp/m-default.jsonl" "$tmp/m-mixed.jsonl" "$tmp/e-default.jsonl" "$tmp/e-mixed.jsonl" <<'PY' || fail=1
import json, sys
def losses(p):
    return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
ok = len(a) == 4 and a == b
print("losses default", a, "\nlosses mixed  ", b, "\nsame bits:", ok)
def recomputed(p):
    out = {}
    for l in open(p):
        e = json.loads(l)
        if e.get("phase") == "recompute" and e.get("name") == "matmul_fwd":
            out[e.get("group")] = out.get(e.get("group"), 0) + 1
    return out
d, m = recomputed(sys.argv[3]), recomputed(sys.argv[4])
print("recomputed matmuls per group: default", d, "mixed", m)
# groups 2 and 3 (layers 2-3) are kept: never recomputed; layer 4 (selective) recomputes fewer
# matmuls than by default; layer 5 as by default
if not (d.get(2) and d.get(3) and not m.get(2) and not m.get(3)):
    print("layers 2-3 recomputed under the plan"); ok = False
if not (d.get(4) and 0 < m.get(4, 0) < d[4]):
    print("layer 4 is not selective under the plan"); ok = False
if m.get(5) != d.get(5):
    print("layer 5 changed"); ok = False
sys.exit(0 if ok else 1)
PY

refuse() { # NAME ROWS WORD: a plan that must be refused with exit 2, the message naming WORD
    { base; printf 'plan:\n%b' "$2"; } > "$tmp/$1.yaml"
    "$bin" train "$tmp/$1.yaml" --cpus 2 --print-plan > /dev/null 2> "$tmp/$1.err"
    rc=$?
    if [ $rc -ne 2 ] || ! grep -q "$tmp/$1.yaml line" "$tmp/$1.err" || ! grep -q "$3" "$tmp/$1.err"; then
        echo "$1: exit $rc (expected 2, naming the recipe line and '$3')"; cat "$tmp/$1.err"; fail=1
    else
        echo "$1: refused: $(grep -m1 "$3" "$tmp/$1.err")"
    fi
}
refuse badkey '  - {layers: 1, colour: blue}\n' colour
refuse badvalue '  - {layers: 1, activations: sometimes}\n' sometimes
refuse range '  - {layers: 3-9, activations: keep}\n' 3-9
refuse nolayers '  - {activations: keep}\n' layers
finish
