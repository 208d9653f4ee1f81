#!/usr/bin/env bash
# tt_embedding_forward's knobs on the GPU machine (the runs behind results/notes/tt_embedding_forward.md).
#   bash scripts/tt_forward_sweep.sh grouped   checks of versions 4-6 from tests/gpu_cases.txt; versions 2-6 at FBTT's
#                                              default, Zipf 1.15 and B = 4096; version 6 built without PDL and with
#                                              TARGET6 16 and 32 (default 64), version 4 with TARGET4 8 and 32 (default
#                                              16); ncu of version 6's kernels
#   bash scripts/tt_forward_sweep.sh grid      version 6 (the default) against version 3 at every bench shape, block
#                                              by block (version 6 runs version 3's kernel where its own is not compiled)
# Output: $OUT/sweep_<part>.txt (RESULT lines cut to kernel, block, shape, check, times).
set -u
PART=${1:-grouped}
cd "$(dirname "$0")/../dev/cuda"
OUT=${OUT:-../../build/gpu}
mkdir -p "$OUT"
F="$OUT/sweep_$PART.txt"
NVCC="nvcc -O3 -std=c++17 -arch=sm_90"
make -j8 tt_embedding_forward tt_embedding_forward_bf16 > /dev/null 2>&1 || echo BUILD FAILED
cut_result() { grep -E "^RESULT" | cut -d' ' -f3-4,6-9; }
if [ "$PART" = grouped ]; then
    $NVCC -DNO_PDL tt_embedding_forward.cu -o /tmp/ttf_nopdl -lcublas &
    for T in 16 32; do $NVCC -DTT_EMBEDDING_FORWARD_TARGET6=$T tt_embedding_forward.cu -o /tmp/ttf_t6_$T -lcublas & done
    for T in 8 32; do $NVCC -DTT_EMBEDDING_FORWARD_TARGET4=$T tt_embedding_forward.cu -o /tmp/ttf_t4_$T -lcublas & done
    grep -E "^tt_embedding_forward(_bf16)? [456] " ../../tests/gpu_cases.txt | while read -r l; do
        timeout 120 ./$l > /tmp/sweep_case.txt 2>&1; echo "rc=$? $l"; grep -E "FAIL|NOT" /tmp/sweep_case.txt | head -3
    done
    for k in 2 3 4 5 6; do for a in "" "--alpha 1.15" "--B 4096"; do ./tt_embedding_forward $k $a; done; done | cut_result > "$F"
    wait
    for a in "" "--alpha 1.15" "--B 4096"; do
        /tmp/ttf_nopdl 6 $a | cut_result | sed "s/^/NO_PDL /"
        for T in 16 32; do /tmp/ttf_t6_$T 6 $a | cut_result | sed "s/^/TARGET6=$T /"; done
        for T in 8 32; do /tmp/ttf_t4_$T 4 $a | cut_result | sed "s/^/TARGET4=$T /"; done
    done >> "$F"
    ncu --clock-control none -k regex:"kernel5|digits|pool" -s 6 -c 3 --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__grid_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.per_cycle_active \
        ./tt_embedding_forward 6 --block 256 --no-check --repeat 2 2>&1 | grep -E "^  [a-z]|duration|inst_exec|grid_size|registers|warps_active|issue_active" >> "$F"
else
    grep -E "^tt_embedding_forward --" ../../scripts/bench_cases.txt | while read -r l; do
        args=${l#tt_embedding_forward }
        ./tt_embedding_forward 3 $args | cut_result
        ./tt_embedding_forward 6 $args | cut_result
    done > "$F"
fi
cat "$F"
