#!/usr/bin/env bash
# tt_embedding_forward's knobs on the GPU machine: the runs behind the numbers in the header's notes.
#   bash scripts/tt_forward_sweep.sh 7-9     (second session) checks of versions 7-9 from tests/gpu_cases.txt;
#                                            versions 3, 8, 9 at the default, Zipf 1.15 and B = 4096; version 8
#                                            with 3 ring stages and version 9 with TARGET 8 and 32 beside the
#                                            defaults (2 and 16); ncu's duration of version 9's two kernels
#   bash scripts/tt_forward_sweep.sh 10-12   (third session) checks of versions 10-12 from tests/gpu_cases.txt;
#                                            versions 2, 9, 10, 11, 12 at the same three shapes; version 11 built
#                                            without PDL and with V11_TARGET 16 and 32 (default 64), version 12
#                                            with V12_TARGET 32 and 64 (default 48); ncu of version 11's kernels
# Output: $OUT/sweep_<part>.txt (RESULT lines cut to kernel, block, shape, check, times).
set -u
PART=${1:-10-12}
cd "$(dirname "$0")/../dev/cuda"
OUT=${OUT:-../../build/gpu}
mkdir -p "$OUT"
F="$OUT/sweep_$PART.txt"
NVCC="nvcc -O3 -std=c++17 -arch=sm_90"
make -j8 tt_embedding_forward tt_embedding_forward_bf16 > /dev/null 2>&1 || echo BUILD FAILED
cases() {   # the GPU cases of the versions that match the pattern
    grep -E "^tt_embedding_forward(_bf16)? $1 " ../../tests/gpu_cases.txt | while read -r l; do
        timeout 120 ./$l > /tmp/sweep_case.txt 2>&1; echo "rc=$? $l"; grep -E "FAIL|NOT" /tmp/sweep_case.txt | head -3
    done
}
cut_result() { grep -E "^RESULT" | cut -d' ' -f3-4,6-9; }
if [ "$PART" = 7-9 ]; then
    $NVCC -DTT_EMBEDDING_FORWARD_V8_STAGES=3 tt_embedding_forward.cu -o /tmp/ttf_s3 -lcublas &
    for T in 8 32; do $NVCC -DTT_EMBEDDING_FORWARD_V9_TARGET=$T tt_embedding_forward.cu -o /tmp/ttf_t$T -lcublas & done
    cases "[789]"
    for k in 3 8 9; do for a in "" "--alpha 1.15" "--B 4096"; do ./tt_embedding_forward $k $a; done; done | cut_result > "$F"
    wait
    for a in "" "--alpha 1.15" "--B 4096"; do
        /tmp/ttf_s3 8 $a | cut_result | sed "s/^/STAGES=3 /"
        for T in 8 32; do /tmp/ttf_t$T 9 $a | cut_result | sed "s/^/TARGET=$T /"; done
    done >> "$F"
    ncu --clock-control none -k regex:"kernel9|pool" -s 4 -c 2 --metrics gpu__time_duration.sum,smsp__inst_executed.sum \
        ./tt_embedding_forward 9 --block 128 --no-check --repeat 2 2>&1 | grep -E "kernel|duration|inst_exec" >> "$F"
else
    $NVCC -DTT_EMBEDDING_FORWARD_NO_PDL tt_embedding_forward.cu -o /tmp/ttf_nopdl -lcublas &
    for T in 16 32; do $NVCC -DTT_EMBEDDING_FORWARD_V11_TARGET=$T tt_embedding_forward.cu -o /tmp/ttf_v11t$T -lcublas & done
    for T in 32 64; do $NVCC -DTT_EMBEDDING_FORWARD_V12_TARGET=$T tt_embedding_forward.cu -o /tmp/ttf_v12t$T -lcublas & done
    cases "1[0-2]"
    for k in 2 9 10 11 12; do for a in "" "--alpha 1.15" "--B 4096"; do ./tt_embedding_forward $k $a; done; done | cut_result > "$F"
    wait
    for a in "" "--alpha 1.15" "--B 4096"; do
        /tmp/ttf_nopdl 11 $a | cut_result | sed "s/^/NO_PDL /"
        for T in 16 32; do /tmp/ttf_v11t$T 11 $a | cut_result | sed "s/^/V11_TARGET=$T /"; done
        for T in 32 64; do /tmp/ttf_v12t$T 12 $a | cut_result | sed "s/^/V12_TARGET=$T /"; done
    done >> "$F"
    ncu --clock-control none -k regex:"kernel10|digits|pool" -s 6 -c 3 --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__grid_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.per_cycle_active \
        ./tt_embedding_forward 11 --block 256 --no-check --repeat 2 2>&1 | grep -E "^  [a-z]|duration|inst_exec|grid_size|registers|warps_active|issue_active" >> "$F"
    ncu --clock-control none -k regex:"kernel10" -s 2 -c 1 --metrics smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio \
        ./tt_embedding_forward 11 --block 256 --no-check --repeat 2 2>&1 | grep -E "stalled" >> "$F"
fi
cat "$F"
