#!/bin/sh
# Crash consistency: runs killed by SIGKILL at random moments (many while a checkpoint file is being
# written, some after the last checkpoint) and restarted, several times in one run directory, leave
# only checkpoints byte-identical to those of an uninterrupted run, resume from the newest one, and
# finish with losses, COMPLETE and final model bit-identical to the uninterrupted run (fp32, CPU).
# A truncated or bit-flipped newest checkpoint is skipped for the previous one, same result.
# SDP_CRASH_SEED, SDP_CRASH_DIRS, SDP_CRASH_KILLS override the seed and the trial counts.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
recipe=$top/tests/e2e/data/micro-qwen3.yaml
steps=8
ndirs=${SDP_CRASH_DIRS:-10}
nkills=${SDP_CRASH_KILLS:-5}
seed=${SDP_CRASH_SEED:-$(date +%s)}
args="--steps $steps --checkpoint-every 1 --cpus 2 -q"
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2> /dev/null; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
echo "seed $seed (rerun with SDP_CRASH_SEED=$seed)"
losses() { sed -e 's/.*"step": *\([0-9]*\),.*"loss": *\([^,]*\),.*/\1 \2/' "$1"; }
ckname() { printf 'step-%08d.sdpckpt' "$1"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# random integers in [0, 1000), read one per draw
awk -v s="$seed" 'BEGIN { srand(s); for (i = 0; i < 5000; i++) print int(rand() * 1000) }' \
    > "$tmp/rand"
exec 3< "$tmp/rand"
rnd() { read -r r <&3; }

# ---- the reference: uninterrupted, every checkpoint kept ----
abs=$(cd "$top" && pwd)
{
    sed -e "s|\.\./\.\./\.\./data|$abs/data|" "$recipe"
    printf 'output:\n  keep_checkpoints: 100\n'
} > "$tmp/keepall.yaml"
t0=$(now_ms)
"$bin" train "$tmp/keepall.yaml" $args --output "$tmp/ref" --metrics "$tmp/ref.jsonl" \
    2> "$tmp/ref.err" || { echo "reference run failed"; cat "$tmp/ref.err"; echo FAIL; exit 1; }
wall=$(($(now_ms) - t0))
losses "$tmp/ref.jsonl" > "$tmp/ref.loss"
[ "$(wc -l < "$tmp/ref.loss")" -eq $steps ] && [ -s "$tmp/ref/COMPLETE" ] ||
    { echo "reference: expected $steps steps and a COMPLETE file"; echo FAIL; exit 1; }
(cd "$tmp/ref/checkpoints" && cksum step-*.sdpckpt) > "$tmp/ref.sums"
[ "$(wc -l < "$tmp/ref.sums")" -eq $steps ] ||
    { echo "reference: expected $steps checkpoints"; echo FAIL; exit 1; }
echo "reference: $steps steps in $wall ms, $(cat "$tmp/ref/COMPLETE")"
# two consecutive checkpoints for the corruption cases, then the rest is not needed
mid=$((steps / 2 + 1))
for c in trunc flip; do
    mkdir -p "$tmp/c-$c/checkpoints"
    cp "$tmp/ref/checkpoints/$(ckname $((mid - 1)))" "$tmp/ref/checkpoints/$(ckname $mid)" \
        "$tmp/c-$c/checkpoints/"
    cp "$tmp/ref.jsonl" "$tmp/c-$c.jsonl"
done
rm -f "$tmp"/ref/checkpoints/step-*

# every checkpoint file of $1 (not *.tmp) is byte-identical to the reference of its step
check_ckpts() {
    bad=$( (cd "$1/checkpoints" 2> /dev/null && for f in step-*.sdpckpt; do
        [ -e "$f" ] && cksum "$f"
    done) | grep -v -x -F -f "$tmp/ref.sums")
    [ -z "$bad" ] && return 0
    echo "$2: checkpoint(s) differ from the uninterrupted run's: $bad"
    fail=1
}

# the newest checkpoint file of $1, or nothing
newest() {
    n=
    for f in "$1"/checkpoints/step-*.sdpckpt; do [ -e "$f" ] && n=${f##*/}; done
    echo "$n"
}

# 0 while the background run $pid is alive (a zombie counts as ended)
alive() {
    if [ -r /proc/$pid/stat ]; then
        read -r pst < /proc/$pid/stat 2> /dev/null || return 1
        case $pst in *") Z "*) return 1 ;; esac
        return 0
    fi
    kill -0 $pid 2> /dev/null
}

# wait until the run $pid writes the file $1 of its checkpoint directory; 1 if the run ended
wait_for() {
    i=0
    while alive && [ $i -lt 6000 ]; do
        if [ "$d/checkpoints/$1" -nt "$tmp/mark" ]; then
            return 0
        fi
        sleep 0.01
        i=$((i + 1))
    done
    return 1
}

# a started run's log: resumed from the newest checkpoint ($2) or started afresh, nothing skipped
check_log() {
    [ -e "$1" ] || return 0 # killed before it started: nothing to check
    if grep -q "skipping checkpoint" "$1"; then
        echo "$3: a checkpoint failed validation:"; grep "skipping" "$1"; fail=1
    fi
    from=$(sed -n 's|.*resuming from .*/\(step-[0-9]*\.sdpckpt\).*|\1|p' "$1")
    if [ -n "$from" ]; then
        resumes=$((resumes + 1))
        [ "$from" = "$2" ] || { echo "$3: resumed from $from, the newest is $2"; fail=1; }
    elif [ -n "$2" ] && grep -q "training qwen3" "$1"; then
        echo "$3: started afresh although $2 exists"; fail=1
    fi
}

# ---- the crash trials ----
last=$(ckname $steps)
trials=0 kills=0 inwrite=0 atend=0 resumes=0 finished=0
for dn in $(seq 1 "$ndirs"); do
    d=$tmp/run$dn
    for k in $(seq 1 "$nkills"); do
        trials=$((trials + 1))
        rnd
        if [ $k -eq "$nkills" ] && [ "$r" -lt 400 ]; then
            mode=end
        elif [ "$r" -lt 550 ]; then
            mode=tmp
        else
            mode=delay
        fi
        expect=$(newest "$d")
        touch "$tmp/mark"
        sleep 0.01
        # a run killed before its shell opened the log must not leave the previous trial's log
        rm -f "$d.err"
        "$bin" train "$recipe" $args --output "$d" --metrics "$d.jsonl" 2> "$d.err" &
        pid=$!
        rnd
        case $mode in
        delay) sleep "$(awk -v r="$r" -v w="$wall" 'BEGIN { printf "%.3f", r * w / 2e6 }')" ;;
        tmp) # during the write of one of the next 3 checkpoints, at its start or later
            n=$(expr "$expect" : 'step-0*\([0-9]*\)')
            n=$((${n:-0} + 1 + r % 3))
            [ $n -le $steps ] || n=$steps
            rnd
            wait_for "$(ckname $n).tmp" && [ "$r" -ge 500 ] &&
                sleep "0.$(printf %03d $((r - 500)))" ;;
        end) wait_for "$last" && sleep "0.$(printf %03d $((r * 3 / 10)))" ;;
        esac
        if alive; then
            kill -9 $pid
            kills=$((kills + 1))
            { wait $pid; } 2> /dev/null
            what=killed
            for f in "$d"/checkpoints/*.tmp; do
                [ "$f" -nt "$tmp/mark" ] && { inwrite=$((inwrite + 1)); break; }
            done
            [ "$mode" = end ] && [ -e "$d/checkpoints/$last" ] && atend=$((atend + 1))
        else
            what="ended before the kill"
            wait $pid || { echo "run$dn trial $k: the run failed"; cat "$d.err"; fail=1; }
        fi
        pid=
        newest_now=$(newest "$d")
        tmps=
        for f in "$d"/checkpoints/*.tmp; do [ -e "$f" ] && tmps="$tmps, ${f##*/} left"; done
        echo "run$dn trial $k ($mode): ${expect:-no checkpoint}, $what;" \
            "$(cat "$d.jsonl" 2> /dev/null | wc -l | tr -d ' ') metrics lines," \
            "newest now ${newest_now:-none}$tmps"
        check_log "$d.err" "$expect" "run$dn trial $k ($mode)"
        check_ckpts "$d" "run$dn trial $k ($mode)"
    done
    # finish the run
    expect=$(newest "$d")
    "$bin" train "$recipe" $args --output "$d" --metrics "$d.jsonl" 2> "$d.err" ||
        { echo "run$dn: the final run failed"; cat "$d.err"; fail=1; }
    check_log "$d.err" "$expect" "run$dn final"
    check_ckpts "$d" "run$dn final"
    if losses "$d.jsonl" | cmp -s "$tmp/ref.loss" - && cmp -s "$tmp/ref/COMPLETE" "$d/COMPLETE" &&
        cmp -s "$tmp/ref/final/model.safetensors" "$d/final/model.safetensors"; then
        finished=$((finished + 1))
    else
        echo "run$dn: differs from the uninterrupted run (resumed from ${expect:-nothing})"
        losses "$d.jsonl" | diff "$tmp/ref.loss" -
        diff "$tmp/ref/COMPLETE" "$d/COMPLETE"
        cmp "$tmp/ref/final/model.safetensors" "$d/final/model.safetensors"
        fail=1
    fi
    rm -rf "$d"
done
echo "crash trials: $trials in $ndirs run directories, $kills kills, $inwrite while a checkpoint" \
    "was being written, $atend after the last checkpoint; $resumes resumes"
echo "finished runs bit-identical to the uninterrupted run (losses, COMPLETE, model):" \
    "$finished of $ndirs"
[ $kills -ge $((trials * 4 / 5)) ] || echo "note: only $kills of $trials trials ended in a kill"

# ---- a truncated or bit-flipped newest checkpoint: the previous one is used ----
for c in trunc flip; do
    d=$tmp/c-$c
    f=$d/checkpoints/$(ckname $mid)
    size=$(wc -c < "$f")
    if [ $c = trunc ]; then
        head -c $((size / 2)) "$f" > "$f.cut" && mv "$f.cut" "$f"
    else
        off=$((size / 2 + 1))
        b=$(od -An -tu1 -j $off -N1 "$f" | tr -d ' ')
        printf "\\$(printf %o $((b ^ 255)))" | dd of="$f" bs=1 seek=$off conv=notrunc 2> /dev/null
    fi
    "$bin" train "$recipe" $args --output "$d" --metrics "$d.jsonl" 2> "$d.err" ||
        { echo "$c: the resumed run failed"; cat "$d.err"; fail=1; }
    from=$(sed -n 's|.*resuming from .*/\(step-[0-9]*\.sdpckpt\).*|\1|p' "$d.err")
    if ! grep -q "skipping checkpoint .*$(ckname $mid)" "$d.err" ||
        [ "$from" != "$(ckname $((mid - 1)))" ]; then
        echo "$c: expected to skip $(ckname $mid) and resume from $(ckname $((mid - 1)))," \
            "resumed from ${from:-nothing}"
        fail=1
    elif losses "$d.jsonl" | cmp -s "$tmp/ref.loss" - &&
        cmp -s "$tmp/ref/COMPLETE" "$d/COMPLETE"; then
        echo "$c: $(ckname $mid) skipped, resumed from $from, $steps losses and COMPLETE" \
            "bit-identical"
    else
        echo "$c: differs from the uninterrupted run"
        losses "$d.jsonl" | diff "$tmp/ref.loss" -
        diff "$tmp/ref/COMPLETE" "$d/COMPLETE"
        fail=1
    fi
    check_ckpts "$d" "$c"
done

finish
