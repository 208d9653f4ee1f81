#!/usr/bin/env bash
# tt_embedding_backward versions 7 (the default) and 9 on a GPU machine: the checks of versions 7, 9 and `all` from
# tests/gpu_cases.txt (the default's lines across the grid included); versions 6, 7 and 9 at the default (SGD and
# Adagrad), Zipf 1.15 and B = 4096, and versions 7 and 9 at the bench grid's shapes (rank 64, rank 128 at EL-Rec's
# q 2,2,4 and 4,4,4 with B = 4096); ncu of version 7's tensor-core kernels (duration, warp instructions by pipe,
# tensor-pipe activity, issue rate).
#   bash scripts/tt_backward_sweep.sh     -> $OUT/tt_backward_sweep.txt
set -u
cd "$(dirname "$0")/../dev/cuda"
OUT=${OUT:-../../build/gpu}
mkdir -p "$OUT"
F="$OUT/tt_backward_sweep.txt"
make tt_embedding_backward > /dev/null 2>&1 || echo BUILD FAILED
: > "$F"
grep -E "^tt_embedding_backward (7 |9 |all |--)" ../../tests/gpu_cases.txt | while read -r l; do
    timeout 300 ./$l > /tmp/sweep_case.txt 2>&1; echo "rc=$? $l"; grep -E "FAIL|NOT" /tmp/sweep_case.txt | head -3
done >> "$F"
{ for k in 6 7 9; do for a in "" "--optimizer adagrad" "--alpha 1.15" "--B 4096"; do ./tt_embedding_backward $k --no-check $a; done; done
  grep -E "^tt_embedding_backward --" ../../scripts/bench_cases.txt | while read -r l; do ./$l --no-check; done
  grep -E "^tt_embedding_backward --" ../../scripts/bench_cases.txt | sed 's/^tt_embedding_backward /tt_embedding_backward 9 /' |
      while read -r l; do ./$l --no-check --repeat 20; done; } |
    grep -E "^RESULT" | cut -d' ' -f3-4,6-9 >> "$F"
M=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum
M=$M,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed_pipe_tensor.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
timeout 300 ncu --clock-control none -k regex:tt_embedding_backward_tc_ -s 3 -c 3 --metrics $M ./tt_embedding_backward 7 --no-check --repeat 2 2>&1 |
    grep -E "tt_embedding_backward_tc_|gpu__|smsp__|sm__" | sed 's/  */ /g' | cut -c1-120 >> "$F"
cat "$F"
