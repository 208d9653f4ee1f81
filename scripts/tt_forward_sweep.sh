#!/usr/bin/env bash
# tt_embedding_forward's knobs on the GPU machine (the runs behind the numbers in the header's notes on
# versions 8 and 9): checks of versions 7-9 from tests/gpu_cases.txt, versions 3, 8 and 9 at the default,
# Zipf 1.15 and B = 4096, then version 8 built with 3 ring stages and version 9 with TARGET 8 and 32 lookups
# per item beside the defaults (2 and 16), and ncu's duration of version 9's two kernels. Output: $OUT/sweep.txt.
set -u
cd "$(dirname "$0")/../dev/cuda"
OUT=${OUT:-../../build/gpu}
mkdir -p "$OUT"
make -j8 tt_embedding_forward tt_embedding_forward_bf16 > /dev/null 2>&1 || echo BUILD FAILED
nvcc -O3 -std=c++17 -arch=sm_90 -DTT_EMBEDDING_FORWARD_V8_STAGES=3 tt_embedding_forward.cu -o /tmp/ttf_s3 -lcublas &
for T in 8 32; do nvcc -O3 -std=c++17 -arch=sm_90 -DTT_EMBEDDING_FORWARD_V9_TARGET=$T tt_embedding_forward.cu -o /tmp/ttf_t$T -lcublas & done
grep -E "^tt_embedding_forward(_bf16)? [789] " ../../tests/gpu_cases.txt | while read -r l; do
    timeout 120 ./$l > /tmp/sweep_case.txt 2>&1; echo "rc=$? $l"; grep -E "FAIL|NOT" /tmp/sweep_case.txt | head -3
done
for k in 3 8 9; do for a in "" "--alpha 1.15" "--B 4096"; do ./tt_embedding_forward $k $a; done; done | grep -E "^RESULT" | cut -d' ' -f3-4,6-9 > "$OUT/sweep.txt"
wait
for a in "" "--alpha 1.15" "--B 4096"; do
    /tmp/ttf_s3 8 $a | grep RESULT | cut -d' ' -f3-4,6-9 | sed "s/^/STAGES=3 /"
    for T in 8 32; do /tmp/ttf_t$T 9 $a | grep RESULT | cut -d' ' -f3-4,6-9 | sed "s/^/TARGET=$T /"; done
done >> "$OUT/sweep.txt"
ncu --clock-control none -k regex:"kernel9|pool" -s 4 -c 2 --metrics gpu__time_duration.sum,smsp__inst_executed.sum \
    ./tt_embedding_forward 9 --block 128 --no-check --repeat 2 2>&1 | grep -E "kernel|duration|inst_exec" >> "$OUT/sweep.txt"
cat "$OUT/sweep.txt"
