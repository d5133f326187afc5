#!/usr/bin/env bash
# A benchmark session on a GPU host, from the source tree with a bundle made by tools/gpu-bundle.sh.
# Stages (run in the order given; each under its own time limit, so one slow stage cannot take the
# others' results with it):
#   tests    the CUDA kernel tests, the host-kernel test and the Hugging Face parity test on the GPU
#   gputests every GPU end-to-end test (tests/e2e/*_gpu.sh, tests/e2e/test_e2e_grad_dtype.sh) with
#            the bundle, each under 300 s, its log kept (exit 77: too few GPUs for it)
#   host     host AdamW beside PyTorch's CPU AdamW (bench/host_adamw.sh) on every core
#   bench    slidedp bench on MODEL/BATCH: the default policy (pipelined steps, and with --barrier),
#            dmda, and bounded windows (BENCH_GIBS)
#   window   slidedp bench on MODEL/BATCH with the default backward lookahead (event log kept),
#            without it (--bwd-lookahead -1), and under GPU limits (BENCH_GIBS, default "40 24 16",
#            each with its event log); lane utilisation and timeline of every log (tools/lane_util.py)
#   gradbf16 slidedp bench on MODEL/BATCH with the fp32 and the bf16 gradient return (--grad-dtype),
#            unbounded and under GPU limits (BENCH_GIBS, default "24 16"), and at 16 GiB with the
#            saved layer inputs offloaded (--activations offload), each with its event log and
#            lane utilisation; then tests/e2e/test_e2e_grad_dtype.sh on the GPU
#   headline the workloads of BENCH.md's goals, pipelined, each with both gradient returns where the
#            state fits the host (qwen3-1.7b/16, qwen3-4b/16, qwen3-4b/32; qwen3-8b/16 with the
#            bf16 return only: 14 bytes of host state per parameter instead of 18), each beside
#            PyTorch GPU-resident where it fits the GPU; MODEL/BATCH are ignored
#   targets  the goals of the schedule issue under their GPU limits, most telling first: qwen3-4b/16
#            bf16 unbounded, qwen3-8b/16 with the working copies off the host (--work-home=gpu),
#            qwen3-4b/16 at 15 GiB, qwen3-4b/32 at 23 GiB, qwen3-8b/16 with them on the host,
#            qwen3-4b/16 with the fp32 return; each with its event log; MODEL/BATCH are ignored;
#            each with its memory log (--mem-log);
#            TARGETS="MODEL BATCH GRAD_DTYPE GIB CHUNK_MIB [BENCH_ARGS...]; ..." runs another list;
#            a BENCH_ARGS word STARPU_NAME=VALUE or SDP_NAME=VALUE sets that variable for that run alone;
#            a word BUNDLE=DIR runs that spec with DIR/slidedp (a second bundle, e.g. of the commit
#            before a change, so that before and after are measured in one lease);
#            TARGETS_ROUNDS=N runs the list N times, every other round in reverse order;
#            TARGET_STEPS=N times N steps after the 2 of warm-up (default 4); COMPACT=1 compacts the
#            host's free memory before each bench (as root)
#   predict  slidedp calibrate, then the step-time model's workloads (PREDICT, as TARGETS) benched
#            with the prediction beside the measurement (--machine) and priced by slidedp plan
#   auto     train.policy auto against the fixed default (the recipe's plan), each a short
#            `slidedp train` of a preset on the KJV text, in the order of AUTO="MODEL BATCH GPU_GIB
#            HOST_GIB [SEQ]; ..." (SEQ 1024 unless given; default: qwen3-4b/32 under 24 GiB,
#            qwen3-4b/16 under 16 GiB, qwen3-8b/16 with the host's 90 GiB; the fixed default
#            without the host budget): the selection's log, the chosen plans (the cache's files,
#            auto-plans/), both runs' metrics (step times after the validation) and their
#            sampled peaks of host and GPU memory (peaks-*.txt)
#   peers    PyTorch GPU-resident and FSDP2 with CPU offload (bench/peers.py) on MODEL/BATCH
#   long     training at length (docs/long-sequences.md): each of LONG="MODEL SEQ BATCH GIB
#            [BENCH_ARGS...]; ..." (default qwen3-4b at 8192/4, 16384/2, 32768/1 under 23 GiB,
#            qwen3-1.7b at 65536/1 under 23 GiB, qwen3-8b at 32768/1 with the working copies off
#            the host) beside the same model at seq 1024 with the same tokens a step and the same
#            arguments (once per model and arguments), LONG_STEPS (3) steps after 1 of warm-up,
#            each with its event and memory logs and the attention's route from the log
#   lora     LoRA rank 16 on every linear at seq 1024, batch 16, for each of LORA_MODELS (default
#            "qwen3-14b qwen3-32b"; MODEL/BATCH are ignored): slidedp bench --lora-rank 16 under a
#            GPU limit of LORA_GIB (default 23: StarPU's limit leaves out the CUDA context, so the
#            peak stays within 24 GiB) in micro-batches of LORA_MICRO (default 8: `slidedp plan`
#            puts 16 sequences of qwen3-32b at 31.5 GiB, of qwen3-14b at 24.7), with its event log
#            (lane utilisation) and memory log; LORA_GPU_UPDATE=1 adds a run with the adapters'
#            AdamW on the GPU (--gpu-update); then PEFT LoRA with the whole bf16 model on the GPU
#            (bench/peers.py --system peft-lora, 16 sequences at once)
#   moe      full fine-tuning of MOE_MODEL (default qwen3-30b-a3b-l12, the reduced-depth Qwen3-30B-A3B:
#            `slidedp plan` puts its host state at 106 GiB with the bf16 gradient return, 136 with
#            the fp32 one, so bf16) at seq 1024, batch 16 and batch 2 (one micro-batch each; fewer
#            tokens, more idle experts), MOE_STEPS (3) timed steps after 2 of warm-up, on one GPU,
#            each with routed streaming and without (SDP_MOE_ROUTED=off; MOE_ROUTED="on off",
#            MOE_BATCHES="16 2" choose), each with its event log and memory log; MODEL/BATCH are
#            ignored.  moe.md (and the summary) gives tokens/s and the bytes moved per step
#            (StarPU's bus counters and the copies of the transfer and MoE tasks) beside the "all
#            experts" figure (graph/cost.c's formula, every expert's working copy and gradient
#            crossing PCIe)
#   moe-lora LoRA rank 16 on q, k, v and o (the experts and the router frozen) of the whole
#            MOE_LORA_MODEL (default qwen3-30b-a3b) at seq 1024 under a GPU limit of LORA_GIB
#            (default 23), for each of MOE_LORA_BATCHES (default "16 2"; empty: none) in one
#            micro-batch, with routed streaming, each with its event and memory logs; then PEFT
#            LoRA with the whole bf16 model on the GPU (bench/peers.py --system peft-lora) at
#            batch 16, or 8 where 16 does not fit (MOE_LORA_PEFT_BATCHES, default "16 8"; empty:
#            none); moe-lora.md (and the summary) gives tokens/s, the bytes moved and the peaks
#            beside PEFT's
#   roundpipe sdp-roundpipe against sdp-slidedp on one GPU and with every GPU as a stage worker
#            (RP_MODELS, default qwen3-1.7b and qwen3-4b at 16 sequences of 1024), with event logs;
#            sdp-roundpipe with a stage's uploads longest first and group by group (RP_LPT,
#            default "1 0": SDP_LPT_FETCH), at each of RP_IN_FLIGHT micro-batches in flight
#            (default: the policy's, the stage workers + 1); then RoundPipe's own code on GPU 0 at
#            each of RP_MODELS/16 (bench/peers.py --system roundpipe, its checkout in $ROUNDPIPE_DIR
#            or deps/roundpipe: bench/get-roundpipe.sh)
#   rpcurves RPC_STEPS (200) steps of RPC_RECIPE (recipes/qwen3-0.6b-compare.yaml) at RPC_GLOBAL (16)
#            sequences a step in micro-batches of RPC_MICRO (4): sdp-slidedp, sdp-roundpipe
#            synchronous and asynchronous (train.param_delay 1), each with its metrics; the loss at
#            steps 1, 50, 100, 150, 200, the mean of the last 20 and the largest difference from
#            sdp-slidedp's (bench/curves.py) into results.jsonl and rpcurves.md
#   compare  200 steps of recipes/qwen3-0.6b-compare.yaml against transformers (bench/hf_loss_compare.py)
#            for each train.residual_dtype of COMPARE_RESIDUAL (default "bf16 fp32"); the first
#            run also runs transformers against itself with eager attention (--hf-peer-attn): the
#            largest |dloss| of each, from which the comparison's tolerance is derived, into
#            results.jsonl (compare-<dtype>.json the summaries)
#   ranks    tests/e2e/test_e2e_nccl.sh, then slidedp bench on one GPU and with --ranks over every
#            GPU in every route combination (MODEL/BATCH per GPU), the GPU reduction through NCCL
#            (--collectives nccl) and through StarPU; RANKS="R PARAM GRAD COLL; ..." runs another
#            list (R = all: every GPU); then PyTorch FSDP2 (PEER_SYSTEMS, default GPU-resident and
#            CPU offload) on one GPU and on every GPU, MODEL/BATCH per GPU
#   nodes    tests/e2e/test_e2e_nodes_nccl.sh: two processes on this host (two GPUs or more), one
#            GPU each, standing in for two nodes: the GPU route's gradient between them through
#            NCCL against one process of 2 ranks, and a process with another GPU count refused
#            (OpenMPI on the host and a build with StarPU-MPI as RUN_BUNDLE, e.g. the source
#            tree's own: tools/gpu-bundle.sh builds without it, and the test then says SKIP)
#   correct  100 steps of recipes/qwen3-0.6b-compare.yaml at 16 sequences per step (micro-batches of
#            4) on 1 GPU, on 2 (replicated, CPU reduction) and on every GPU with each of the four
#            route combinations; the largest loss difference of each run against one GPU
#   longtrain slidedp train at length on the KJV text (LONGTRAIN="MODEL SEQ GIB; ...", default
#            qwen3-0.6b at 32768 with no GPU limit), with and without document masking, each with
#            cuDNN's attention and the project's kernels; per-step losses and gradient norms
#   sweep    slidedp sweep on MODEL: one layer's cast+H2D and D2H+update per chunk size, 8-256 MiB
#   finetune recipes/qwen3-0.6b-pretrain.yaml (random init, KJV text), then
#            recipes/qwen3-0.6b-sft.yaml from its result on the Jargon File instructions; metrics
#            and loss plots of both stages
# Writes everything into OUTDIR: machine.txt, logs, results.jsonl (one JSON line per measurement).
#   bench/run-gpu.sh OUTDIR "STAGES" [MODEL] [BATCH]     e.g. bench/run-gpu.sh out "tests bench" qwen3-4b 16
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
out=${1:?usage: bench/run-gpu.sh OUTDIR "STAGES" [MODEL] [BATCH]}
stages=${2:-tests host bench peers}
model=${3:-qwen3-4b}
batch=${4:-16}
mkdir -p "$out"
b=${RUN_BUNDLE:-$top/build-gpu} # RUN_BUNDLE=DIR: DIR/slidedp instead (e.g. the source tree's, on CPUs)
export LD_LIBRARY_PATH=$top/deps/starpu/lib:$b/lib:${LD_LIBRARY_PATH:-}
export STARPU_HOME=${STARPU_HOME:-/tmp/starpu-home}
export STARPU_SILENT=1 OPENBLAS_NUM_THREADS=1
export top_srcdir=$top top_builddir=$b
ncpu=$(nproc)
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
{
    date -u +%FT%TZ
    echo "bundle built from: $(cat "$b/BUILD_INFO" 2>/dev/null || echo unknown)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    lscpu | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-200
    free -g | head -2
} >> "$out/machine.txt" 2>&1
log() { echo "$*" | tee -a "$out/summary.log"; }
bench_env=() # StarPU variables for the next bench alone (the targets stage sets them)
bench_bin=$b/slidedp # the slidedp of the next bench (the targets stage's BUNDLE=DIR)
# peaks FILE COMMAND...: runs COMMAND, sampling each second the peak resident memory of its
# process tree's newest process (VmHWM) and the GPU's used memory; writes both to FILE
peaks() {
    local f=$1 pid hwm=0 gpu=0 v c
    shift
    "$@" &
    pid=$!
    while kill -0 "$pid" 2> /dev/null; do
        c=$(pgrep -n -P "$pid" || echo "$pid")
        v=$(awk '/^VmHWM/ { print $2 }' "/proc/$c/status" 2> /dev/null)
        [ -n "$v" ] && [ "$v" -gt "$hwm" ] && hwm=$v
        v=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2> /dev/null | head -n 1)
        [ -n "$v" ] && [ "$v" -gt "$gpu" ] && gpu=$v
        sleep 1
    done
    wait "$pid"
    v=$?
    awk -v h="$hwm" -v g="$gpu" 'BEGIN { printf "host_peak_gib %.2f gpu_used_peak_gib %.2f\n", h / 1048576, g / 1024 }' > "$f"
    return $v
}
bench() { # NAME TIMEOUT ARGS...
    local name=$1 t=$2; shift 2
    # COMPACT=1: the kernel's free memory compacted first, so that each run finds huge pages as
    # the first run of a fresh host does (runs after a large one were slower by a few percent)
    if [ "${COMPACT:-0}" = 1 ]; then
        sync
        echo 1 > /proc/sys/vm/compact_memory 2> /dev/null || log "  (memory not compacted: not root)"
    fi
    timeout "$t" env ${bench_env[@]+"${bench_env[@]}"} "$bench_bin" bench "$@" \
        >> "$out/results.jsonl" 2> "$out/bench-$name.log"
    log "bench $name ($*): exit $? $(tail -n 1 "$out/results.jsonl" | cut -c1-400)"
}

lanes() { # lane utilisation of every event log not yet summarised, then compress it
    local ev
    for ev in "$out"/events-*.jsonl; do
        [ -f "$ev" ] || continue
        python3 tools/lane_util.py "$ev" --timeline --stages > "${ev%.jsonl}.lanes.txt" 2>&1
        log "lanes $(basename "$ev"): exit $?"
        python3 tools/check_invariants.py "$ev" > "${ev%.jsonl}.check.txt" 2>&1
        log "invariants $(basename "$ev"): exit $? $(tail -n 1 "${ev%.jsonl}.check.txt")"
        gzip -f "$ev"
    done
}

declare -A seen=() # names of target runs so far (a name met again gets -2, -3, ...)
target() { # "MODEL BATCH GRAD_DTYPE GIB CHUNK_MIB [WORDS...]" [BENCH_ARGS...]: one bench of a spec
    local spec=$1 hm hb gd gib chunk extra w
    shift
    read -r hm hb gd gib chunk extra <<< "$spec"
    # words of the form STARPU_NAME=VALUE or SDP_NAME=VALUE (StarPU's and the policy's
    # variables) are the environment of this run alone
    bench_env=() args=() bench_bin=$b/slidedp
    for w in ${extra:-}; do
        case $w in
        STARPU_*=* | SDP_*=*) bench_env+=("$w") ;;
        BUNDLE=*) bench_bin=$top/${w#BUNDLE=}/slidedp ;;
        *) args+=("$w") ;;
        esac
    done
    name=$(basename "$hm" .json)-b$hb-grad-$gd-gib$gib-chunk$chunk$(echo "${extra:-}" | sed 's/STARPU_//g;s/SDP_//g' |
        tr -cd 'a-zA-Z0-9 ' | tr -d ' ' | cut -c1-60 | sed 's/^/-/;s/^-$//')
    seen[$name]=$((${seen[$name]:-0} + 1))
    ((${seen[$name]} > 1)) && name=$name-${seen[$name]}
    bench "$name" 300 --model "$hm" --batch "$hb" --seq 1024 --steps "${TARGET_STEPS:-4}" --warmup 2 \
        --grad-dtype "$gd" --gpu-memory-gib "$gib" --chunk-mib "$chunk" \
        --events "$out/events-$name.jsonl" --mem-log "$out/mem-$name.jsonl" \
        ${args[@]+"${args[@]}"} "$@"
    log "  environment: ${bench_env[*]:-none}; binary: $bench_bin ($(head -c 12 "$(dirname "$bench_bin")/BUILD_INFO" 2>/dev/null))"
    bench_env=() bench_bin=$b/slidedp
    target_args=(--model "$hm" --batch "$hb" --seq 1024 --grad-dtype "$gd" --gpu-memory-gib "$gib"
        --chunk-mib "$chunk" ${args[@]+"${args[@]}"} "$@")
}

for stage in $stages; do
    log "== $stage $(date -u +%T)"
    case $stage in
    tests)
        for t in "$b"/tests/kernels/test_cuda_* "$b"/tests/kernels/test_kernels_host_simd \
            "$b"/tests/e2e/test_e2e_hf_parity_gpu; do
            [ -x "$t" ] || continue
            timeout 300 "$t" > "$out/$(basename "$t").log" 2>&1
            log "$(basename "$t"): exit $? $(tail -n 1 "$out/$(basename "$t").log")"
        done
        ;;
    gputests)
        for t in tests/e2e/test_e2e_*_gpu.sh tests/e2e/test_e2e_grad_dtype.sh; do
            PYTHON3=python3 timeout 300 "$t" > "$out/$(basename "$t" .sh).log" 2>&1
            log "$(basename "$t"): exit $? $(tail -n 1 "$out/$(basename "$t" .sh).log")"
        done
        ;;
    host)
        HOST_ADAMW=$b/bench/host_adamw PYTHON3=python3 timeout 300 bench/host_adamw.sh "$ncpu" \
            >> "$out/results.jsonl" 2> "$out/host.log"
        log "host adamw: exit $?"
        ;;
    bench)
        bench warm-0.6b 200 --model qwen3-0.6b --batch 16 --seq 1024 --steps 3 --warmup 2
        bench default 300 --model "$model" --batch "$batch" --seq 1024 --steps 5 --warmup 2
        bench default-barrier 300 --model "$model" --batch "$batch" --seq 1024 --steps 3 --warmup 2 \
            --barrier
        bench dmda 300 --model "$model" --batch "$batch" --seq 1024 --steps 3 --warmup 2 --sched dmda
        for gib in ${BENCH_GIBS:-}; do
            bench "window-$gib" 300 --model "$model" --batch "$batch" --seq 1024 --steps 3 --warmup 2 \
                --gpu-memory-gib "$gib"
        done
        ;;
    window)
        common=(--model "$model" --batch "$batch" --seq 1024 --steps 3 --warmup 2)
        bench lookahead1 300 "${common[@]}" --events "$out/events-lookahead1.jsonl"
        bench unbounded 300 "${common[@]}" --bwd-lookahead -1
        for gib in ${BENCH_GIBS:-40 24 16}; do
            bench "window-$gib" 300 "${common[@]}" --gpu-memory-gib "$gib" \
                --events "$out/events-window-$gib.jsonl"
        done
        lanes
        ;;
    gradbf16)
        common=(--model "$model" --batch "$batch" --seq 1024 --steps 5 --warmup 2)
        bench grad-fp32 300 "${common[@]}" --events "$out/events-grad-fp32.jsonl"
        bench grad-bf16 300 "${common[@]}" --grad-dtype bf16 --events "$out/events-grad-bf16.jsonl"
        for gib in ${BENCH_GIBS:-24 16}; do
            bench "grad-bf16-$gib" 300 "${common[@]}" --grad-dtype bf16 --gpu-memory-gib "$gib" \
                --events "$out/events-grad-bf16-$gib.jsonl"
        done
        bench grad-bf16-16-offload 300 "${common[@]}" --grad-dtype bf16 --gpu-memory-gib 16 \
            --activations offload --events "$out/events-grad-bf16-16-offload.jsonl"
        lanes
        PYTHON3=python3 timeout 300 tests/e2e/test_e2e_grad_dtype.sh > "$out/grad_dtype.log" 2>&1
        log "test_e2e_grad_dtype.sh on the GPU: exit $? $(tail -n 1 "$out/grad_dtype.log")"
        ;;
    headline)
        for spec in "qwen3-1.7b 16 fp32 bf16" "qwen3-4b 16 fp32 bf16" "qwen3-4b 32 fp32 bf16" \
            "qwen3-8b 16 bf16"; do
            read -r hm hb gds <<< "$spec"
            for gd in $gds; do
                bench "$hm-b$hb-grad-$gd" 300 --model "$hm" --batch "$hb" --seq 1024 --steps 5 \
                    --warmup 2 --grad-dtype "$gd" --events "$out/events-$hm-b$hb-grad-$gd.jsonl"
            done
            [ "$hm" = qwen3-8b ] && continue # 131 GB of training state: not on one GPU
            timeout 400 python3 bench/peers.py --system pytorch-gpu --model "$hm" --batch "$hb" \
                --seq 1024 --steps 3 --warmup 1 >> "$out/results.jsonl" 2> "$out/bench-$hm-b$hb-pytorch.log"
            log "pytorch-gpu $hm/$hb: exit $? $(tail -n 1 "$out/results.jsonl" | cut -c1-300)"
        done
        lanes
        ;;
    targets)
        # StarPU's limit leaves out the CUDA context and the libraries' own memory (about 0.5
        # GiB on the H200): 15 and 23 GiB keep the peaks within the goals' 16 and 24
        # TARGETS: "MODEL BATCH GRAD_DTYPE GIB CHUNK_MIB [BENCH_ARGS...]; ..." replaces the list
        IFS=';' read -r -a specs <<< "$(tr '\n' ' ' <<< "${TARGETS:-qwen3-4b 16 bf16 0 16; qwen3-8b 16 bf16 0 16 --work-home=gpu;
            qwen3-4b 16 bf16 15 16; qwen3-4b 32 bf16 23 16; qwen3-8b 16 bf16 0 16;
            qwen3-4b 16 fp32 0 16}")"
        # TARGETS_ROUNDS=N runs the list N times, every other round in reverse order, so that a
        # variant's place in the sequence (what the runs before it left in the host's memory and
        # the GPU's state) does not pass for its effect; a name met again gets -2, -3, ...
        rounds=${TARGETS_ROUNDS:-1}
        order=()
        for ((r = 0; r < rounds; r++)); do
            if ((r % 2 == 0)); then
                for ((i = 0; i < ${#specs[@]}; i++)); do order+=("$i"); done
            else
                for ((i = ${#specs[@]} - 1; i >= 0; i--)); do order+=("$i"); done
            fi
        done
        for i in "${order[@]}"; do
            target "${specs[$i]}"
        done
        lanes
        ;;
    predict)
        # the step-time model against measurements: this machine calibrated (slidedp calibrate),
        # then each workload benched with the prediction in its JSON line (--machine) and priced
        # by `slidedp plan --json` (plan-NAME.json); PREDICT="SPEC; ..." (as TARGETS) replaces the
        # list: the model's validation set, and the chunk and gradient-return variants of
        # qwen3-4b/16 whose effects it is to predict
        timeout 300 "$b/slidedp" calibrate -o "$out/machine.json" 2> "$out/calibrate.log"
        log "calibrate: exit $? $(tail -n 1 "$out/calibrate.log")"
        IFS=';' read -r -a specs <<< "$(tr '\n' ' ' <<< "${PREDICT:-qwen3-1.7b 16 bf16 0 16;
            qwen3-4b 16 bf16 0 16; qwen3-4b 16 bf16 0 64; qwen3-4b 16 fp32 0 16;
            qwen3-4b 16 bf16 15 16; qwen3-4b 32 bf16 23 16; qwen3-4b 32 bf16 0 16;
            qwen3-8b 16 bf16 0 16}")"
        for spec in "${specs[@]}"; do
            [ -n "${spec// /}" ] || continue
            target "$spec" --machine "$out/machine.json"
            "$b/slidedp" plan "${target_args[@]}" --json > "$out/plan-$name.json" 2> "$out/plan-$name.log"
            log "  plan $name: exit $? $(cut -c1-200 "$out/plan-$name.json")"
        done
        lanes
        ;;
    auto)
        IFS=';' read -r -a specs <<< "$(tr '\n' ' ' <<< "${AUTO:-qwen3-4b 32 24 0; qwen3-4b 16 16 60;
            qwen3-8b 16 0 90}")"
        for spec in "${specs[@]}"; do
            read -r am ab ag ah aseq <<< "$spec"
            [ -n "$am" ] || continue
            name="$am-b$ab-gib$ag-host$ah$( [ "${aseq:-1024}" = 1024 ] || echo "-s$aseq")"
            printf 'model: {preset: %s}\ndata: {train: %s/data/kjv/train.tok, seq_len: %s}\n' \
                "$am" "$top" "${aseq:-1024}" > "$out/$name.yaml"
            printf 'batch: {global: %s, micro: %s}\noptimizer: {lr: 1.0e-5}\n' "$ab" "$ab" \
                >> "$out/$name.yaml"
            printf 'train: {steps: 20, gpus: 1, gpu_memory_gib: %s, host_memory_gib: %s}\n' \
                "$ag" "$ah" >> "$out/$name.yaml"
            # the fixed default has no host budget (its plan may not meet it: the measured peak
            # says by how much)
            sed -e 's/host_memory_gib: [0-9.]*/host_memory_gib: 0/' "$out/$name.yaml" > "$out/$name-fixed.yaml"
            for pol in fixed auto; do
                yaml=$out/$name.yaml
                [ "$pol" = fixed ] && yaml=$out/$name-fixed.yaml
                SDP_CACHE_DIR=$out/cache peaks "$out/peaks-$name-$pol.txt" timeout 420 "$b/slidedp" \
                    train "$yaml" -q --policy "$pol" --metrics "$out/metrics-$name-$pol.jsonl" \
                    > /dev/null 2> "$out/train-$name-$pol.log"
                log "train $name $pol: exit $? $(cat "$out/peaks-$name-$pol.txt") $(grep -E \
                    'auto: (validation|layers|stage 3|sel)|done:' "$out/train-$name-$pol.log" |
                    tr '\n' ' ' | cut -c1-700)"
            done
        done
        cp -r "$out/cache/plans" "$out/auto-plans" 2> /dev/null
        ;;
    peers)
        for sys in pytorch-gpu fsdp2-offload; do
            timeout 400 python3 bench/peers.py --system "$sys" --model "$model" --batch "$batch" \
                --seq 1024 --steps 3 --warmup 1 >> "$out/results.jsonl" 2> "$out/bench-$sys.log"
            log "$sys: exit $? $(tail -n 1 "$out/results.jsonl" | cut -c1-300)"
        done
        ;;
    long)
        # GIB 0: no GPU limit; 23 keeps the peak within 24 GiB (the targets stage says why)
        IFS=';' read -r -a specs <<< "$(tr '\n' ' ' <<< "${LONG:-qwen3-4b 8192 4 23; qwen3-4b 16384 2 23;
            qwen3-4b 32768 1 23; qwen3-1.7b 65536 1 23; qwen3-8b 32768 1 0 --work-home=gpu}")"
        declare -A long_seen=()
        for spec in "${specs[@]}"; do
            read -r lm ls lb lgib lextra <<< "$spec"
            [ -n "${lm:-}" ] || continue
            for run in "1024 $((ls * lb / 1024))" "$ls $lb"; do
                read -r s nb <<< "$run"
                name=long-$(basename "$lm" .json)-s$s-b$nb-gib$lgib$(tr -cd 'a-zA-Z0-9' <<< "${lextra:-}" | sed 's/^./-&/')
                [ -n "${long_seen[$name]:-}" ] && continue
                long_seen[$name]=1
                # shellcheck disable=SC2086 # $lextra: one bench option per word
                bench "$name" 400 --model "$lm" --batch "$nb" --seq "$s" --steps "${LONG_STEPS:-3}" \
                    --warmup 1 --gpu-memory-gib "$lgib" ${lextra:-} \
                    --events "$out/events-$name.jsonl" --mem-log "$out/mem-$name.jsonl"
                log "  attention: $(grep -m 2 -o 'attention [a-z]* .*' "$out/bench-$name.log" | tr '\n' ' ' | cut -c1-300)"
            done
        done
        lanes
        ;;
    lora)
        for lm in ${LORA_MODELS:-qwen3-14b qwen3-32b}; do
            name=lora-$lm-b16-m${LORA_MICRO:-8}-r16-gib${LORA_GIB:-23}
            lora_args=(--model "$lm" --batch 16 --micro "${LORA_MICRO:-8}" --seq 1024 --steps 4
                --warmup 2 --lora-rank 16 --gpu-memory-gib "${LORA_GIB:-23}")
            bench "$name" 500 "${lora_args[@]}" \
                --events "$out/events-$name.jsonl" --mem-log "$out/mem-$name.jsonl"
            if [ "${LORA_GPU_UPDATE:-0}" = 1 ]; then
                nl=$( [ "$lm" = qwen3-32b ] && echo 64 || echo 40)
                bench "$name-gpu-update" 500 "${lora_args[@]}" --gpu-update "$nl" \
                    --mem-log "$out/mem-$name-gpu-update.jsonl"
            fi
            timeout 500 python3 bench/peers.py --system peft-lora --model "$lm" --batch 16 \
                --seq 1024 --steps 3 --warmup 1 --lora-rank 16 >> "$out/results.jsonl" \
                2> "$out/bench-peft-lora-$lm.log"
            log "peft-lora $lm/16: exit $? $(tail -n 1 "$out/results.jsonl" | cut -c1-300)"
        done
        lanes
        ;;
    moe)
        # each batch with routed streaming (default) and without (SDP_MOE_ROUTED=off: every
        # expert's working copy crosses, the ablation), each run's result line kept by its name
        mm=${MOE_MODEL:-qwen3-30b-a3b-l12}
        for mb in ${MOE_BATCHES:-16 2}; do
            for routed in ${MOE_ROUTED:-on off}; do
                name=moe-$(basename "$mm" .json)-b$mb-routed-$routed
                bench_env=("SDP_MOE_ROUTED=$routed")
                bench "$name" 280 --model "$mm" --batch "$mb" --seq 1024 --steps "${MOE_STEPS:-3}" \
                    --warmup 2 --grad-dtype bf16 --events "$out/events-$name.jsonl" \
                    --mem-log "$out/mem-$name.jsonl"
                bench_env=()
                tail -n 1 "$out/results.jsonl" > "$out/$name.json"
            done
        done
        python3 - "$out" "$mm" <<'PYEOF' > "$out/moe.md" 2>> "$out/moe-summary.log"
import glob, json, os, sys
print("| batch | experts | routed share | tokens/s | H2D GB/step | all experts (formula) GB | D2H GB/step | formula GB | GPU peak GiB | host peak GiB |")
print("|---|---|---|---|---|---|---|---|---|---|")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "moe-*-routed-*.json"))):
    b, routed = f.split("-b")[-1].split("-routed-")
    x = json.loads(open(f).read() or "{}")
    if x.get("model") != sys.argv[2] or "tokens_per_s" not in x:
        print("| %s | %s | | (no result) | | | | | | |" % (b, routed[:-5]))
        continue
    m = x["bytes_per_rank_per_step"][0]
    print("| %s | %s | %.3f | %.0f | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f |" % (
        b, "routed" if routed[:-5] == "on" else "all", x.get("experts_routed_share", -1),
        x["tokens_per_s"], m["h2d_gb"],
        m["param_h2d_gb_pred"], m["d2h_gb"], m["grad_d2h_gb_pred"], x["gpu_peak_gib"],
        x["host_peak_gib"]))
PYEOF
        log "moe summary: exit $?"
        tee -a "$out/summary.log" < "$out/moe.md"
        lanes
        ;;
    moe-lora)
        ml=${MOE_LORA_MODEL:-qwen3-30b-a3b}
        for mb in ${MOE_LORA_BATCHES-16 2}; do
            name=moe-lora-$ml-b$mb-r16-gib${LORA_GIB:-23}
            bench "$name" 500 --model "$ml" --batch "$mb" --seq 1024 --steps "${MOE_STEPS:-3}" \
                --warmup 2 --lora-rank 16 --lora-targets q_proj,k_proj,v_proj,o_proj \
                --gpu-memory-gib "${LORA_GIB:-23}" --events "$out/events-$name.jsonl" \
                --mem-log "$out/mem-$name.jsonl"
            tail -n 1 "$out/results.jsonl" > "$out/$name.json"
        done
        for pb in ${MOE_LORA_PEFT_BATCHES-16 8}; do
            timeout 500 python3 bench/peers.py --system peft-lora --model "$ml" --batch "$pb" \
                --seq 1024 --steps 3 --warmup 1 --lora-rank 16 > "$out/peft-lora-$ml-b$pb.json" \
                2> "$out/bench-peft-lora-$ml-b$pb.log"
            rc=$?
            log "peft-lora $ml/$pb: exit $rc $(cut -c1-300 "$out/peft-lora-$ml-b$pb.json")"
            cat "$out/peft-lora-$ml-b$pb.json" >> "$out/results.jsonl"
            [ $rc = 0 ] && break
        done
        python3 - "$out" "$ml" <<'PYEOF' > "$out/moe-lora.md" 2>> "$out/moe-summary.log"
import glob, json, os, sys
print("| system | batch | tokens/s | model TFLOP/s | routed share | H2D GB/step | GPU peak GiB | host peak GiB |")
print("|---|---|---|---|---|---|---|---|")
rows = sorted(glob.glob(os.path.join(sys.argv[1], "moe-lora-*.json")))
rows += sorted(glob.glob(os.path.join(sys.argv[1], "peft-lora-%s-b*.json" % sys.argv[2])))
for f in rows:
    x = json.loads(open(f).read() or "{}")
    if "tokens_per_s" not in x:
        print("| %s | | (no result) | | | | | |" % os.path.basename(f))
        continue
    m = (x.get("bytes_per_rank_per_step") or [{}])[0]
    print("| %s | %d | %.0f | %.1f | %s | %s | %.1f | %.1f |" % (
        x["system"], x["batch"], x["tokens_per_s"], x["model_tflops"],
        "%.3f" % x["experts_routed_share"] if "experts_routed_share" in x else "",
        "%.2f" % m["h2d_gb"] if "h2d_gb" in m else "", x["gpu_peak_gib"], x["host_peak_gib"]))
PYEOF
        log "moe-lora summary: exit $?"
        tee -a "$out/summary.log" < "$out/moe-lora.md"
        lanes
        ;;
    roundpipe)
        # sdp-roundpipe against sdp-slidedp on one GPU and on every GPU (stage workers = GPUs),
        # qwen3-1.7b/16 and qwen3-4b/16 (RP_MODELS), each with its event log; sdp-roundpipe with
        # its stage's uploads longest first and without (RP_LPT, default "1 0": SDP_LPT_FETCH)
        # and with each of RP_IN_FLIGHT's micro-batches in flight (default: the policy's, R + 1)
        for rm in ${RP_MODELS:-qwen3-1.7b qwen3-4b}; do
            Rs=1
            [ "$ngpu" -gt 1 ] && Rs="1 $ngpu" # one GPU: its runs once, not twice under one name
            for R in $Rs; do
                [ "$R" -eq 1 ] && # sdp-slidedp's ranks are data's: one GPU
                    bench "rp-$rm-sdp-slidedp-$R" 300 --model "$rm" --batch 16 --seq 1024 \
                        --steps 4 --warmup 2 --sched sdp-slidedp --ranks 1 --gpus 1 \
                        --events "$out/events-rp-$rm-sdp-slidedp-$R.jsonl"
                for lpt in ${RP_LPT:-1 0}; do
                    for f in ${RP_IN_FLIGHT:-default}; do
                        fl=()
                        [ "$f" != default ] && fl=(--in-flight "$f")
                        name=rp-$rm-sdp-roundpipe-$R-lpt$lpt-inflight$f
                        bench_env=(SDP_LPT_FETCH="$lpt")
                        bench "$name" 300 --model "$rm" --batch 16 --seq 1024 --steps 4 \
                            --warmup 2 --sched sdp-roundpipe --ranks "$R" --gpus "$R" \
                            ${fl[@]+"${fl[@]}"} --events "$out/events-$name.jsonl"
                        bench_env=()
                    done
                done
            done
        done
        lanes
        # RoundPipe's own code on one GPU, the same workloads (bench/peers.py --system roundpipe)
        for rm in ${RP_MODELS:-qwen3-1.7b qwen3-4b}; do
            CUDA_VISIBLE_DEVICES=0 timeout 400 python3 bench/peers.py --system roundpipe --model "$rm" \
                --batch 16 --seq 1024 --steps 4 --warmup 2 >> "$out/results.jsonl" \
                2> "$out/bench-roundpipe-peer-$rm.log"
            log "roundpipe peer $rm/16: exit $? $(tail -n 1 "$out/results.jsonl" | cut -c1-300)"
        done
        ;;
    rpcurves)
        # the synchronous and asynchronous sdp-roundpipe against sdp-slidedp over a training run;
        # several micro-batches a step (RPC_GLOBAL / RPC_MICRO), so that several are in flight
        sed -e "s#^  global: .*#  global: ${RPC_GLOBAL:-16}#" -e "s#^  micro: .*#  micro: ${RPC_MICRO:-4}#" \
            "${RPC_RECIPE:-recipes/qwen3-0.6b-compare.yaml}" > recipes/.rpcurves.yaml
        curves=()
        for spec in "sdp-slidedp 0 sdp-slidedp" "sdp-roundpipe 0 sdp-roundpipe-sync" \
            "sdp-roundpipe 1 sdp-roundpipe-async"; do
            read -r sched delay name <<< "$spec"
            # no run directory: no checkpoint or export to wait for
            timeout 400 "$b/slidedp" train recipes/.rpcurves.yaml -q --steps "${RPC_STEPS:-200}" \
                --sched "$sched" --param-delay "$delay" --metrics "$out/rpcurves-$name.jsonl" \
                > "$out/rpcurves-$name.log" 2>&1
            log "rpcurves $name: exit $? $(tail -n 1 "$out/rpcurves-$name.jsonl" | cut -c1-160)"
            curves+=("$name=$out/rpcurves-$name.jsonl")
        done
        rm -f recipes/.rpcurves.yaml
        python3 bench/curves.py --ref sdp-slidedp --md "$out/rpcurves.md" "${curves[@]}" \
            >> "$out/results.jsonl" 2>> "$out/rpcurves-summary.log"
        log "rpcurves summary: exit $?"
        [ -f "$out/rpcurves.md" ] && tee -a "$out/summary.log" < "$out/rpcurves.md"
        ;;
    compare)
        peer="--hf-peer-attn eager"
        for rd in ${COMPARE_RESIDUAL:-bf16 fp32}; do
            # shellcheck disable=SC2086 # $peer: the option and its value, or nothing
            timeout 900 python3 bench/hf_loss_compare.py recipes/qwen3-0.6b-compare.yaml \
                --steps 200 --device cuda --out "$out/compare-$rd" --slidedp "$b/slidedp" \
                --residual-dtype "$rd" $peer > "$out/compare-$rd.json" 2> "$out/compare-$rd.log"
            log "compare residual $rd: exit $? $(tail -n 2 "$out/compare-$rd.json" | head -n 1)"
            grep '^{' "$out/compare-$rd.json" >> "$out/results.jsonl"
            rm -rf "$out/compare-$rd/init"
            peer=
        done
        ;;
    nodes)
        PYTHON3=python3 timeout 500 tests/e2e/test_e2e_nodes_nccl.sh > "$out/nodes_nccl.log" 2>&1
        log "test_e2e_nodes_nccl.sh: exit $? $(tail -n 1 "$out/nodes_nccl.log")"
        ;;
    ranks)
        PYTHON3=python3 timeout 300 tests/e2e/test_e2e_nccl.sh > "$out/nccl.log" 2>&1
        log "test_e2e_nccl.sh: exit $? $(tail -n 1 "$out/nccl.log")"
        # one GPU, then every GPU: the NCCL runs first (the GPU reduction the design intends),
        # then the host routes, then the GPU reduction through StarPU's own copies
        # RANKS: "R PARAM_ROUTE GRAD_ROUTE COLLECTIVES; ..." replaces the list (R may be "all")
        IFS=';' read -r -a specs <<< "$(tr '\n' ' ' <<< "${RANKS:-1 replicated cpu starpu; all replicated gpu nccl;
            all replicated cpu starpu; all sharded gpu nccl; all sharded cpu starpu;
            all replicated gpu starpu; all sharded gpu starpu}")"
        for spec in "${specs[@]}"; do
            read -r R pr route coll <<< "$spec"
            [ "$R" = all ] && R=$ngpu
            bench "ranks$R-$pr-$route-$coll" 300 --model "$model" --batch $((batch * R)) \
                --seq 1024 --steps 5 --warmup 3 --gpus "$R" --ranks "$R" --param-route "$pr" \
                --grad-route "$route" --collectives "$coll"
        done
        # the PyTorch peers on the same workload: FSDP2 GPU-resident and with CPU offload, one GPU
        # and every GPU (PEER_SYSTEMS="fsdp2 fsdp2-offload" by default)
        for sys in ${PEER_SYSTEMS:-fsdp2 fsdp2-offload}; do
            for R in 1 "$ngpu"; do
                timeout 400 python3 bench/peers.py --system "$sys" --model "$model" --batch "$batch" \
                    --seq 1024 --steps 3 --warmup 1 --ranks "$R" >> "$out/results.jsonl" \
                    2> "$out/bench-$sys-ranks$R.log"
                log "$sys ranks $R: exit $? $(tail -n 1 "$out/results.jsonl" | cut -c1-300)"
            done
        done
        ;;
    correct)
        sed -e 's#^  global: .*#  global: 16#' -e 's#^  micro: .*#  micro: 4#' \
            recipes/qwen3-0.6b-compare.yaml > recipes/.correct.yaml
        runs=("1 replicated cpu")
        [ "$ngpu" -gt 2 ] && runs+=("2 replicated cpu")
        for pr in replicated sharded; do
            for route in cpu gpu; do runs+=("$ngpu $pr $route"); done
        done
        for spec in "${runs[@]}"; do
            read -r R pr route <<< "$spec"
            name=R$R-$pr-$route
            # no run directory: no checkpoint or export (6.8 GiB each) to wait for
            timeout 240 "$b/slidedp" train recipes/.correct.yaml -q --steps 100 --gpus "$R" \
                --ranks "$R" --param-route "$pr" --grad-route "$route" \
                --metrics "$out/correct-$name.jsonl" > "$out/correct-$name.log" 2>&1
            log "correct $name: exit $? $(tail -n 1 "$out/correct-$name.jsonl" | cut -c1-160)"
        done
        rm -f recipes/.correct.yaml
        python3 - "$out"/correct-R1-replicated-cpu.jsonl "$out"/correct-R*.jsonl <<'PYEOF' |
import json, sys
ref = [json.loads(l)["loss"] for l in open(sys.argv[1])]
for p in sys.argv[2:]:
    run = [json.loads(l)["loss"] for l in open(p)]
    n = min(len(ref), len(run))
    d = [abs(a - b) for a, b in zip(ref[:n], run[:n])]
    print("%s: %d steps, final %.5f (one GPU %.5f), max |dloss| %.2e at step %d, mean %.2e" % (
        p.rsplit("/", 1)[1], n, run[n - 1], ref[n - 1], max(d), d.index(max(d)) + 1, sum(d) / n))
PYEOF
            tee -a "$out/summary.log"
        ;;
    longtrain)
        # slidedp train at length on the KJV text (its 9 documents make rows with boundaries):
        # LONGTRAIN="MODEL SEQ GIB; ..." (default qwen3-0.6b at 32768, no limit), LONGTRAIN_STEPS
        # (6) steps each with cuDNN's masked attention, the project's kernels (SDP_ATTENTION=own),
        # and without document masking (data.doc_mask: false) on both; the losses and gradient
        # norms of every step into longtrain-*.jsonl (a non-finite norm stops a run, exit 1)
        IFS=';' read -r -a specs <<< "${LONGTRAIN:-qwen3-0.6b 32768 0}"
        for spec in "${specs[@]}"; do
            read -r tm ts tg <<< "$spec"
            [ -n "${tm:-}" ] || continue
            for mask in true false; do
                name=$tm-s$ts-gib$tg-mask$mask
                printf 'model: {preset: %s}\ndata: {train: %s/data/kjv/train.tok, seq_len: %s, doc_mask: %s}\n' \
                    "$tm" "$top" "$ts" "$mask" > "$out/longtrain-$name.yaml"
                printf 'batch: {global: 1, micro: 1}\noptimizer: {lr: 1.0e-5}\ntrain: {steps: %s, gpus: 1, gpu_memory_gib: %s}\n' \
                    "${LONGTRAIN_STEPS:-6}" "$tg" >> "$out/longtrain-$name.yaml"
                for att in cudnn own; do
                    SDP_ATTENTION=$att timeout 300 "$b/slidedp" train "$out/longtrain-$name.yaml" -q \
                        --metrics "$out/longtrain-$name-$att.jsonl" > /dev/null \
                        2> "$out/longtrain-$name-$att.log"
                    log "longtrain $name $att: exit $? $(grep -h -m 1 'error' "$out/longtrain-$name-$att.log" | cut -c1-200)"
                done
            done
        done
        ;;
    sweep)
        timeout 400 "$b/slidedp" sweep --model "$model" >> "$out/results.jsonl" 2> "$out/sweep.log"
        log "sweep: exit $?"
        ;;
    finetune)
        rm -rf "$top/runs/qwen3-0.6b-kjv" "$top/runs/qwen3-0.6b-sft"
        timeout 400 "$b/slidedp" train recipes/qwen3-0.6b-pretrain.yaml -q \
            --metrics "$out/pretrain.jsonl" > "$out/pretrain.log" 2>&1
        log "pretrain: exit $? $(tail -n 1 "$out/pretrain.jsonl" | cut -c1-200)"
        # the instruction stage from the pretrained directory (a recipe beside the others, so that
        # its relative paths still hold)
        sed 's#^  path: .*#  path: ../runs/qwen3-0.6b-kjv/final#' recipes/qwen3-0.6b-sft.yaml \
            > recipes/.sft-from-kjv.yaml
        timeout 300 "$b/slidedp" train recipes/.sft-from-kjv.yaml -q --metrics "$out/sft.jsonl" \
            > "$out/sft.log" 2>&1
        log "sft: exit $? $(tail -n 1 "$out/sft.jsonl" | cut -c1-200)"
        rm -f recipes/.sft-from-kjv.yaml
        for m in pretrain sft; do
            "$b/slidedp" plot "$out/$m.jsonl" -o "$out/$m.png" 2>> "$out/plot.log" ||
                log "plot $m: failed (gnuplot missing?)"
        done
        ;;
    *) log "unknown stage $stage" ;;
    esac
done
log "== done $(date -u +%T)"
