#!/bin/sh
# Careless input to `slidedp train`, as a new user gives it: more CPU workers than cores (capped at
# the cores with a warning), weights holding NaN or Inf (refused at load, naming the file, the
# tensor and the first bad element), absurd model shapes and values (refused at once, naming the
# key), and the form of the messages (no function@file:line and no stray errno text unless -v;
# steps counted from 1 as in the progress lines).  Every refusal exits 1 or 2 and changes nothing
# on disk.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
trap 'rm -rf "$tmp" "$tmp.out" "$tmp.err" "$tmp.run"' EXIT

micro_recipe | sed -e 's/steps: 4/steps: 1/' > "$tmp/micro.yaml"

# ---- more CPU workers than cores: capped at the cores, with a warning ----
expect 0 "CPU workers asked for .* may use [0-9]+ CPU core" -- "$bin" train "$tmp/micro.yaml" \
    --cpus 100000 -q
workers=$(sed -n 's/.*StarPU [0-9.]*: \([0-9]*\) CPU workers.*/\1/p' "$tmp.err")
if [ -z "$workers" ] || [ "$workers" -gt "$(nproc)" ]; then
    echo "--cpus 100000 started '$workers' CPU workers on $(nproc) processors"; fail=1
fi
# StarPU's own variable, which overrides --cpus inside StarPU: the same cap
expect 0 "STARPU_NCPU=64 asks for more CPU workers than the [0-9]+ CPU core" \
    -- env STARPU_NCPU=64 "$bin" train "$tmp/micro.yaml" -q

# ---- weights with NaN or Inf: refused before training, naming file, tensor and element ----
# poison FILE TENSOR INDEX VALUE: write one fp32 value into a tensor of a safetensors file
poison() {
    "$py" - "$@" <<'PYEOF'
import json, struct, sys
path, name, index, value = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    t = json.loads(f.read(n))[name]
    assert t["dtype"] == "F32", t["dtype"]
    f.seek(8 + n + t["data_offsets"][0] + 4 * index)
    f.write(struct.pack("<f", value))
PYEOF
}
mk_model() {
    rm -rf "$tmp/model"
    cp -r "$top/tests/ref/data/llama-tiny" "$tmp/model"
    rm -f "$tmp/model/ref.safetensors"
}
# token ids of the model's 512-id vocabulary (the bundled data has Qwen's)
"$py" - "$tmp/v512.tok" <<'PYEOF'
import struct, sys
ids = [(i * 7919) % 512 for i in range(4096)]
hdr = b"SDPTOKEN" + struct.pack("<IIQIi", 1, 4, len(ids), 512, -1) + bytes(32)
open(sys.argv[1], "wb").write(hdr + struct.pack("<%dI" % len(ids), *ids))
PYEOF
cat > "$tmp/hf.yaml" <<EOR
model:
  path: model
data:
  train: v512.tok
  seq_len: 16
  doc_mask: false
batch:
  global: 2
  micro: 2
train:
  steps: 1
  precision: fp32
EOR
cd "$tmp" || exit 1
mk_model
expect 0 "step 1/1|training" -- "$bin" train hf.yaml
mk_model
poison model/model.safetensors model.layers.1.mlp.down_proj.weight 200 nan
expect 1 "model.safetensors: tensor model.layers.1.mlp.down_proj.weight: element 200 \(row 1, column 40\) is nan" \
    -- "$bin" train hf.yaml
mk_model # an Inf in an embedding row the first batches never read
poison model/model.safetensors model.embed_tokens.weight 19201 -inf
expect 1 "tensor model.embed_tokens.weight: element 19201 \(row 300, column 1\) is -inf" \
    -- "$bin" train hf.yaml

# ---- absurd shapes: refused at once, naming the key ----
mk_model
sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 1000000/' model/config.json
expect 1 "config.json: num_hidden_layers = 1000000 must be in \[1, [0-9]+\]" -- "$bin" train hf.yaml
mk_model
sed -i 's/"intermediate_size": 160/"intermediate_size": 16777216/; s/"num_hidden_layers": 2/"num_hidden_layers": 4000/' \
    model/config.json
expect 1 "num_hidden_layers = 4000 layers of .* parameters make .*, more than" -- "$bin" train hf.yaml
# zero or negative optional dimensions are not "absent"; a norm epsilon of 1 or more flattens
# every activation (both trained silently before)
mk_model
sed -i 's/"head_dim": 16/"head_dim": 0/' model/config.json
expect 1 "\"head_dim\" = 0 must be positive" -- "$bin" train hf.yaml
mk_model
sed -i 's/"num_key_value_heads": 2/"num_key_value_heads": -2/' model/config.json
expect 1 "\"num_key_value_heads\" = -2 must be positive" -- "$bin" train hf.yaml
mk_model
sed -i 's/"rms_norm_eps": 1e-06/"rms_norm_eps": 1e300/' model/config.json
expect 1 "rms_norm_eps = 1e\+300 must be in \(0, 1\)" -- "$bin" train hf.yaml
sed -e 's/vocab_size: 151936/vocab_size: 16000000/; s/hidden_size: 32/hidden_size: 160000/' \
    micro.yaml > wide.yaml
expect 2 "vocab_size = 16000000 by hidden_size = 160000 make .* embedding parameters" \
    -- "$bin" train wide.yaml
mk_model

# ---- messages: the location and a validation error's errno text only under -v ----
sed -e 's/  seq_len: 32/  seq_lne: 32/' micro.yaml > typo.yaml
expect 2 "^\[sdp\]\[error\] recipe typo.yaml line [0-9]+: unknown key 'data.seq_lne'" \
    -- "$bin" train typo.yaml && lacks "@|Invalid argument"
expect 2 "^\[sdp\]\[error\] unknown scheduling policy 'fastest'$" \
    -- "$bin" train micro.yaml --sched fastest && lacks "No such file"
expect 2 "^\[sdp\]\[hint\] did you mean 'eager'\?" -- "$bin" train micro.yaml --sched EAGER
expect 2 "^\[sdp\]\[error\]\[[a-z_]+@recipe.c:[0-9]+\] recipe typo.yaml .*: Invalid argument$" \
    -- "$bin" train typo.yaml -v
# where the errno text tells something (a file that cannot be opened), it stays
expect 2 "^\[sdp\]\[error\] recipe missing.yaml: cannot open: No such file or directory$" \
    -- "$bin" train missing.yaml
# steps are counted from 1 in errors as in the progress lines: an id outside the vocabulary in
# the first batch (a shard whose header gives no vocabulary) is found at step 1 or up front
"$py" - "$tmp/badid.tok" <<'PYEOF'
import struct, sys
ids = [999999 if i % 10 == 5 else i % 1000 for i in range(4096)]
hdr = b"SDPTOKEN" + struct.pack("<IIQIi", 1, 4, len(ids), 0, -1) + bytes(32)
open(sys.argv[1], "wb").write(hdr + struct.pack("<%dI" % len(ids), *ids))
PYEOF
sed -e "s#^  train: .*#  train: badid.tok#" micro.yaml > badid.yaml
expect 1 "step 1: (token|target) id 999999|token .* is 999999, outside the (model's )?vocabulary" \
    -- "$bin" train badid.yaml && lacks "step 0"

# a full disk while checkpointing (the checkpoint's temporary is a link to /dev/full): the hint
# names the recipe key to lower, output.keep_checkpoints
mkdir -p "$tmp.run/checkpoints"
ln -s /dev/full "$tmp.run/checkpoints/step-00000001.sdpckpt.tmp"
expect 1 "write failed: no space left on the device$" -- "$bin" train micro.yaml -q --output "$tmp.run"
grep -q "hint.*output.keep_checkpoints" "$tmp.err" || { echo "the hint lacks output.keep_checkpoints"; fail=1; }
lacks "keep_last"

echo "$n careless inputs tried"
finish
