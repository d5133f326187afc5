#!/bin/sh
# Bad input to `slidedp train` must end before training with a clear message naming the file and exit
# code 1 or 2, and must not change anything on disk: recipes with unknown keys or impossible values,
# missing files, corrupt or mismatched safetensors, data shorter than a sequence, a model that does not
# fit the host memory budget, an unknown policy, an unknown SDP_ATTENTION, a sequence beyond the
# model's context without rope scaling, an unknown rope_type, document masking of a shard without an
# end-of-document id, a Qwen3-MoE config over weights without its tensors, another MoE family.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"


# a recipe from the test recipe with one line replaced (sed expression)
recipe() {
    sed -e "$2" "$top/tests/e2e/data/micro-qwen3.yaml" | sed -e "s|\.\./\.\./\.\./data|$top/data|" > "$tmp/$1.yaml"
}

recipe unknown 's/^  seq_len: 32/  seq_len: 32\n  sequence_length: 64/'
expect 2 "line 1[0-9].*unknown key 'data.sequence_length'" -- "$bin" train "$tmp/unknown.yaml"
recipe chunk0 's/chunk_mib: 1/chunk_mib: -1/'
expect 2 "chunk_mib" -- "$bin" train "$tmp/chunk0.yaml"
recipe batch 's/micro: 2/micro: 3/'
expect 2 "not a multiple" -- "$bin" train "$tmp/batch.yaml"
recipe longseq 's/seq_len: 32/seq_len: 250/; s/max_position_embeddings: 256/max_position_embeddings: 100000/'
sed -i 's/seq_len: 250/seq_len: 90000/' "$tmp/longseq.yaml"
expect 1 "val.tok.*fewer than" -- "$bin" train "$tmp/longseq.yaml"
# a sequence beyond the model's context without rope scaling, and positions restarting per
# document without document masking
recipe ctx 's/seq_len: 32/seq_len: 300/'
expect 2 "data.seq_len=300 exceeds the model's max_position_embeddings=256 and the model has no rope scaling" -- "$bin" train "$tmp/ctx.yaml"
recipe docpos 's/seq_len: 32/seq_len: 32\n  doc_mask: false\n  doc_positions: true/'
expect 2 "data.doc_positions needs data.doc_mask" -- "$bin" train "$tmp/docpos.yaml"
# document masking (on by default) of a shard without an end-of-document id
"$py" -c "import struct, sys; n = 200; sys.stdout.buffer.write(b'SDPTOKEN' + struct.pack('<IIQIiI', 2, 4, n, 151936, -1, 0) + bytes(28) + struct.pack('<%dI' % n, *range(100, 100 + n)))" > "$tmp/noeod.tok"
recipe noeod "s|train: .*|train: $tmp/noeod.tok|"
expect 2 "noeod.tok has no end-of-document id.*data.doc_mask" -- "$bin" train "$tmp/noeod.yaml"
recipe nomem 's/chunk_mib: 1/chunk_mib: 1\n  host_memory_gib: 0.01/'
expect 1 "needs about .* GiB of host memory" -- "$bin" train "$tmp/nomem.yaml"
expect 2 "No such file|cannot open|not found" -- "$bin" train "$tmp/missing.yaml"
recipe ok 's/steps: 4/steps: 1/'
expect 2 "unknown scheduling policy 'fastest'" -- "$bin" train "$tmp/ok.yaml" --sched fastest
expect 2 "expects an integer" -- "$bin" train "$tmp/ok.yaml" --steps two
# an unknown choice of attention kernels in the environment: refused before StarPU starts
expect 1 "SDP_ATTENTION=bogus is neither own nor cudnn" -- env SDP_ATTENTION=bogus "$bin" train "$tmp/ok.yaml"
# NCCL collectives for ranks that are not on GPUs: a usage error with train.gpus 0
recipe nccl 's/chunk_mib: 1/chunk_mib: 1\n  collectives: nccl\n  gpus: 0\n  ranks: 2/'
expect 2 "train.collectives nccl needs the ranks on GPUs" -- "$bin" train "$tmp/nccl.yaml"
expect 2 "collectives takes starpu or nccl" -- "$bin" train "$tmp/ok.yaml" --collectives mpi
# GPUs asked for where there are none (this test runs on machines without a GPU; skip the case on one)
if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L > /dev/null 2>&1; then
    expect 1 "asks for .*GPU|without CUDA" -- "$bin" train "$tmp/ok.yaml" --gpus 1
    # and NCCL for CPU ranks found at run time: no NCCL in the build, or ranks on CPU workers
    expect 1 "has no NCCL|rank 0 is on a CPU worker" -- "$bin" train "$tmp/ok.yaml" --ranks 2 \
        --grad-route gpu --collectives nccl
fi

# a Hugging Face directory: intact, then corrupted in several ways
mk_model() {
    rm -rf "$tmp/model"
    cp -r "$top/tests/ref/data/llama-tiny" "$tmp/model"
    rm -f "$tmp/model/ref.safetensors"
    cat > "$tmp/hf.yaml" <<EOR
model:
  path: model
data:
  train: $top/data/kjv/val.tok
  seq_len: 16
batch:
  global: 2
  micro: 2
train:
  steps: 1
  precision: fp32
EOR
}
mk_model
expect 1 "tokenized with a vocabulary of 151669 ids, the model has 512" -- "$bin" train "$tmp/hf.yaml"
mk_model
size=$(wc -c < "$tmp/model/model.safetensors")
head -c $((size - 1000)) "$tmp/model/model.safetensors" > "$tmp/t" && mv "$tmp/t" "$tmp/model/model.safetensors"
expect 1 "model.safetensors" -- "$bin" train "$tmp/hf.yaml"
mk_model
printf '\377\377\377\377\000\000\000\000' > "$tmp/model/model.safetensors"
expect 1 "model.safetensors.*header" -- "$bin" train "$tmp/hf.yaml"
mk_model
sed -i 's/"intermediate_size": 160/"intermediate_size": 128/' "$tmp/model/config.json"
expect 1 "has shape \[160, 64\], config.json implies \[128, 64\]" -- "$bin" train "$tmp/hf.yaml"
mk_model
sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$tmp/model/config.json"
expect 1 "model.layers.2.* is missing" -- "$bin" train "$tmp/hf.yaml"
mk_model
sed -i 's/"attention_bias": false/"attention_bias": true/' "$tmp/model/config.json"
expect 1 "attention_bias" -- "$bin" train "$tmp/hf.yaml"
mk_model
sed -i 's/"rope_type": "llama3"/"rope_type": "longrope"/' "$tmp/model/config.json"
expect 1 "rope_type\" = \"longrope\" is not supported" -- "$bin" train "$tmp/hf.yaml"
# mixture of experts: a Qwen3-MoE config over weights without its tensors (a sparse layer's router
# or experts, here first the q/k norms of Qwen3) names the missing tensor; another MoE family is
# refused naming the supported one
mk_model
sed -i 's/"model_type": "llama"/"model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2/' \
    "$tmp/model/config.json"
expect 1 "tensor model.layers.0.* is missing" -- "$bin" train "$tmp/hf.yaml"
mk_model
sed -i 's/"model_type": "llama"/"model_type": "mixtral"/' "$tmp/model/config.json"
expect 1 "mixture-of-experts family is not supported" -- "$bin" train "$tmp/hf.yaml"

echo "$n bad inputs tried"
finish
